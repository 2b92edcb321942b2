"""``poptorch._impl``: the two helpers of PopTorch's private module that
libraries over PopTorch call (optimum-graphcore's seq2seq trainer does,
around ``generate``).

PopTorch changes the class of the model it wraps, and of its parameters and
buffers, to subclasses of its own, and these undo and redo that. The shim
never changes any of those classes (the model runs as the user built it), so
both only check they were given a model and leave it as it is.
"""
from __future__ import annotations

import torch


def _require_module(function: str, model: object) -> None:
    if not isinstance(model, torch.nn.Module):
        raise TypeError(f"poptorch._impl.{function} takes a torch.nn.Module, got "
                        f"{type(model).__name__}")


def unwrapModelIfNecessary(model: torch.nn.Module) -> None:
    """Give ``model``, its parameters and its buffers back their own classes:
    the shim never changed them, so they already have them."""
    _require_module("unwrapModelIfNecessary", model)


def rewrapModelIfNecessary(model: torch.nn.Module) -> None:
    """Give back the classes :func:`unwrapModelIfNecessary` took away: it took
    none away."""
    _require_module("rewrapModelIfNecessary", model)
