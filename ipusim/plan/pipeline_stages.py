"""The pipeline's stages: how PopART's pipeline orders a model's forward and backward.

Read by the run configuration (its checks), the engine plan and the schedule, so
it sits below all three.
"""
from __future__ import annotations

from typing import NamedTuple


class PipelineStage(NamedTuple):
    """One of the P pipeline stages: which model stage, and in which direction(s)."""

    stage: int
    forward: bool
    backward: bool


def pipeline_depth(forward_stages: int, training: bool) -> int:
    """P, the pipeline stages of a model of F forward stages (see :func:`pipeline_stages`)."""
    return len(pipeline_stages(forward_stages, training))


def pipeline_stages(forward_stages: int, training: bool) -> list[PipelineStage]:
    """The P pipeline stages of a model of ``forward_stages`` (F) forward stages, in order:
    in training the F - 1 backward stages follow the forward ones, the last forward
    stage fused with the first backward one (P = 2F - 1); in inference P = F."""
    last = forward_stages - 1
    if not training:
        return [PipelineStage(k, True, False) for k in range(forward_stages)]
    forward = [PipelineStage(k, True, False) for k in range(last)]
    fused = [PipelineStage(last, True, True)]
    backward = [PipelineStage(k, False, True) for k in range(last - 1, -1, -1)]
    return forward + fused + backward
