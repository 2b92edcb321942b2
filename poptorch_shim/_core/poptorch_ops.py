"""The PopTorch operation the model is running, when it is one of PopTorch's own.

PopTorch's own operations (``identity_loss``) are one operation of PopTorch's graph,
whatever aten operators compute them here; the debug contexts name their aten
operators by it (``Identityloss``). The operation marks itself with :func:`poptorch_op`
and the recorder of debug contexts reads :func:`running_op`. It lives in ``_core`` so
that the public operation and the execution machinery both reach it.
"""
from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

#: The type of the operation ``poptorch.identity_loss`` is.
IDENTITY_LOSS = "Identityloss"
_running: list[str] = []  # the PopTorch operations running, innermost last


@contextmanager
def poptorch_op(op_type: str) -> Iterator[None]:
    """Run the block as one PopTorch operation of type ``op_type``."""
    _running.append(op_type)
    try:
        yield
    finally:
        _running.pop()


def running_op() -> str | None:
    """The type of the innermost PopTorch operation running, or None."""
    return _running[-1] if _running else None
