"""Where a training model's loss is among its outputs, found once and then reused.

PopTorch fixes the loss when it compiles; the executor does the same: the
first call finds the loss by the operator that made it (:func:`find_loss`),
later calls take the output at the same place.
"""
from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from typing import Any

import torch
from torch.utils._pytree import TreeSpec

from poptorch_shim._execution.step_shape import flatten
from poptorch_shim.losses import LossRecorder, find_loss

_NOT_WATCHING = nullcontext()  # stateless: one serves every call


class LossFinder:
    """Finds a training model's loss in its outputs: on the first call by the
    operator that made it (:func:`find_loss`), afterwards at the same place in
    the outputs, as PopTorch fixes the loss when it compiles. Watching the loss
    functions costs every torch call a little, so only the first call does."""

    def __init__(self) -> None:
        self._where: tuple[TreeSpec, int] | None = None  # output structure, leaf index

    def watching(self) -> AbstractContextManager[LossRecorder | None]:
        """Record the loss functions' results while the forward runs (``with
        finder.watching() as losses``), until the loss has been found once."""
        return _NOT_WATCHING if self._where is not None else LossRecorder()

    def forward(self, model: Callable[..., Any], args: tuple,
                kwargs: dict) -> tuple[Any, torch.Tensor]:
        """``model(*args, **kwargs)`` and the loss among its output, watched for
        only until it has been found (what :meth:`watching` and :meth:`find` do, in
        one call for the executor's every micro-batch)."""
        if self._where is None:
            with LossRecorder() as losses:
                output = model(*args, **kwargs)
            return output, self.find(output, losses)
        output = model(*args, **kwargs)
        leaves, spec = flatten(output)
        where = self._where
        if where[0] is spec or where[0] == spec:  # (see find)
            return output, leaves[where[1]]
        return output, self._found(output, None, leaves, spec)

    def find(self, output: Any, losses: LossRecorder | None) -> torch.Tensor:
        """The loss among ``output``; ``losses`` is what :meth:`watching` recorded."""
        leaves, spec = flatten(output)
        where = self._where
        # The structures of most outputs are shared specs: identical, no need to compare.
        if where is not None and (where[0] is spec or where[0] == spec):
            return leaves[where[1]]
        return self._found(output, losses, leaves, spec)

    def _found(self, output: Any, losses: LossRecorder | None, leaves: list,
               spec: TreeSpec) -> torch.Tensor:
        """The loss among ``output`` (flattened: ``leaves``, ``spec``) found by the
        operator that made it, and kept where it was found."""
        loss = find_loss(output, losses)
        self._where = (spec, next(i for i, leaf in enumerate(leaves) if leaf is loss))
        return loss
