"""A model's progress bar on the terminal: the shim's work inside one of its calls.

A call can keep the shim busy for a while: the first one measures the model
(every operator of a micro-batch; seconds for BERT-Large on fake tensors), and
every call of a full run computes each of its micro-batches for real. The bar
shows that work as it happens, one line per model: the operators measured so
far, then the call's micro-batches computed out of its total.

It lives only while the shim works and is cleared before the call returns, so
what the script prints between calls, and a tqdm bar of its own, never share a
line with it. It stays quiet where the script has a tqdm bar open (that bar
shows the progress; two would fight over the cursor), where stderr is not a
terminal (a log file gets no bar), where the run asked for none
(``ipusim run --no-progress``), and for work shorter than :data:`DELAY_S`.
"""
from __future__ import annotations

import sys
import weakref
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from contextvars import ContextVar

from tqdm import tqdm

from poptorch_shim._core import run_settings

# Seconds of work before a bar appears: quicker calls show none, and do not flicker.
DELAY_S = 0.5
# Seconds between two redraws of a bar.
MININTERVAL_S = 0.1

# The bar counting the operators of the model being measured, if it shows.
_measuring: ContextVar[tqdm | None] = ContextVar("measuring", default=None)
# The bars this module opened: any other open tqdm bar is the script's.
_ours: weakref.WeakSet = weakref.WeakSet()


def _is_terminal(stream) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):  # no isatty, or a closed stream
        return False


def script_bar_open() -> bool:
    """Whether a tqdm bar not of this module is open (tqdm keeps every open,
    enabled bar in ``tqdm._instances``)."""
    return any(bar not in _ours for bar in list(getattr(tqdm, "_instances", ())))


class ModelProgress:
    """The bar of one model, shown only inside its calls (see the module's docstring).

    ``measuring``: whether the measurement gets a bar (PopTorch's
    ``Options.showCompilationProgressBar``).
    """

    def __init__(self, name: str, measuring: bool = True):
        self.name = name
        self.show_measuring = measuring

    @staticmethod
    def _shows(shown: bool) -> bool:
        """Whether a bar asked to be ``shown`` draws: the run asks for progress, stderr
        is a terminal and no bar of the script's is open. The terminal is asked before
        the run's settings, which outside the runner means reading the environment."""
        return shown and _is_terminal(sys.stderr) and run_settings.current().progress \
            and not script_bar_open()

    @staticmethod
    def _bar(shown: bool, **kwargs) -> tqdm:
        """A bar on stderr, drawn if ``shown`` (what :meth:`_shows` decided)."""
        stream = sys.stderr
        # miniters=0: redraw on time alone (every MININTERVAL_S), whatever the count.
        bar = tqdm(file=stream, leave=False, delay=DELAY_S, mininterval=MININTERVAL_S,
                   miniters=0, dynamic_ncols=True, disable=not shown, **kwargs)
        if shown:
            _ours.add(bar)
        return bar

    @contextmanager
    def measuring(self) -> Iterator[None]:
        """While the model is measured: the count of operators measured so far, which
        :func:`operator_measured` advances."""
        bar = self._bar(self._shows(self.show_measuring), desc=f"measuring {self.name}",
                        unit=" operators")
        token = _measuring.set(None if bar.disable else bar)
        try:
            yield
        finally:
            _measuring.reset(token)
            bar.close()

    def computing(self, micro_batches: int,
                  call: int) -> AbstractContextManager[Callable[[], None]]:
        """While call number ``call`` computes its ``micro_batches``: a bar to their total;
        the function it gives counts one micro-batch computed. Where no bar would draw,
        none is built: building a disabled tqdm bar would cost a quick call more than
        anything else the shim does around its compute."""
        if not self._shows(True):
            return nullcontext(_count_nothing)
        return self._computing(micro_batches, call)

    @contextmanager
    def _computing(self, micro_batches: int, call: int) -> Iterator[Callable[[], None]]:
        bar = self._bar(True, desc=f"{self.name}, call {call}", total=micro_batches,
                        unit=" micro-batches")
        try:
            yield bar.update
        finally:
            bar.close()


def _count_nothing() -> None:
    """A micro-batch computed where no bar shows: nothing to count."""


def operator_measured() -> None:
    """Count one operator of the model being measured on its bar (if one shows)."""
    bar = _measuring.get()
    if bar is not None:
        bar.update()
