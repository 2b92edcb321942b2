"""A sweep point as ipusim sees it: PopTorch options over a measurement, to a design point.

This is where a point's settings meet PopTorch's checks, worded as PopTorch
words them; a point that fails them is recorded with the error, and the rest
become :class:`ipusim.explore.design_point.DesignPoint` values that any worker can
simulate without torch.
"""
from __future__ import annotations

from typing import Any

from ipusim.explore.design_point import DesignPoint
from poptorch_shim._execution.engine_config import (
    check_inference_options,
    checked_run_config,
    cost_model,
    instance_system,
)
from poptorch_shim._execution.step_shape import StepShape
from poptorch_shim.options import Options
from poptorch_shim.sweep import settings as sweep_settings
from poptorch_shim.sweep.measure import Measured


def point_options(base: Options, point_settings: dict[str, Any]) -> Options:
    """The base options with the point's settings, frozen (checked) as a model freezes them."""
    options = sweep_settings.apply(base.clone(), point_settings)
    options._freeze()
    return options


def design_point(measured: Measured, options: Options, steps: int) -> DesignPoint:
    """The point's work, run configuration, system and cost model, after
    PopTorch's checks of the options against the measured stages."""
    training, work = measured.training, measured.work
    if not training:
        check_inference_options(options)
    shape = StepShape.of(options, training)
    shape.check_output_period()
    run = checked_run_config(options, shape, training, work, measured.strategy,
                             measured.overlap, measured.optimizer)
    return DesignPoint(work, run, instance_system(options, run, work), cost_model(options), steps)
