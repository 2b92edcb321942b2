"""The settings of one run of a PopTorch script on the simulator.

``ipusim run`` hands them to the runner as a :class:`RunSettings`; the
``IPUSIM_*`` environment variables are the way to give them to a plain
``python -m poptorch_shim SCRIPT.py`` and the way poprun passes them on to its
instances, which are child processes. This module is the one place that reads
those variables, and it checks all of them, ipusim's own
(``IPUSIM_TRACE_DETAIL``, ``IPUSIM_FOLD_REPLICAS``) included, when a run
starts: a bad value is refused naming the variable and the values it takes,
before the script runs rather than when its report is written; an
``IPUSIM_*`` variable nobody reads is named on stderr.
"""
from __future__ import annotations

import os
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass

from ipusim.plan.folding import FOLD_ENV
from ipusim.report.detail import DETAIL_ENV

REPORT_DIR_ENV = "IPUSIM_REPORT_DIR"
PROGRESS_ENV = "IPUSIM_PROGRESS"
TIMING_ONLY_ENV = "IPUSIM_TIMING_ONLY"
SIMULATED_CLOCK_ENV = "IPUSIM_SIMULATED_CLOCK"
NUM_IPUS_ENV = "IPUSIM_NUM_IPUS"
JOB_ID_ENV = "IPUSIM_JOB_ID"  # set by poprun: one id for all the instances of a run

DEFAULT_NUM_IPUS = 16  # an IPU-POD16
# The largest machine simulated: an IPU-POD1024, the most IPUs Graphcore's
# IPU-Fabric joins into one system. The simulated system builds every IPU's
# resources whether the model uses them or not, so ten million IPUs took
# gigabytes and minutes before a single call.
MAX_NUM_IPUS = 1024
# The values ipusim's own variables take ("" is unset).
_CHOICES = {DETAIL_ENV: ("", "full", "edges"), FOLD_ENV: ("", "0", "1")}


@dataclass(frozen=True)
class RunSettings:
    """What a run asks of the simulator, beyond each model's own Options.

    ``report_dir``: write an autoReport directory per model under it;
    ``progress``: a progress bar of the simulated calls on stderr;
    ``timing_only``: every model is timing-only (``Options.simulation.timingOnly``);
    ``simulated_clock``: the script's own clock follows the simulated one;
    ``num_ipus``: the IPUs of the simulated machine; ``job_id``: the poprun
    job an instance belongs to ("" outside poprun).
    """

    report_dir: str | None = None
    progress: bool = False
    timing_only: bool = False
    simulated_clock: bool = False
    num_ipus: int = DEFAULT_NUM_IPUS
    job_id: str = ""

    def __post_init__(self):
        if not isinstance(self.num_ipus, int) or isinstance(self.num_ipus, bool) \
                or not 1 <= self.num_ipus <= MAX_NUM_IPUS:
            raise ValueError(f"The simulated machine needs 1 to {MAX_NUM_IPUS} IPUs (an "
                             f"IPU-POD1024 at most; {NUM_IPUS_ENV}), got {self.num_ipus!r}")

    @classmethod
    def from_environment(cls, environ: Mapping[str, str] | None = None) -> RunSettings:
        """The settings the ``IPUSIM_*`` variables of ``environ`` (default: this
        process's environment) give; unset ones keep their defaults."""
        environ = os.environ if environ is None else environ
        check_environment(environ)
        text = environ.get(NUM_IPUS_ENV, str(DEFAULT_NUM_IPUS))
        try:
            num_ipus = int(text)
        except ValueError:
            num_ipus = 0
        if num_ipus < 1:
            raise ValueError(f"{NUM_IPUS_ENV} must be a positive integer, got {text!r}")
        if num_ipus > MAX_NUM_IPUS:
            raise ValueError(f"{NUM_IPUS_ENV} must be at most {MAX_NUM_IPUS} (an IPU-POD1024, "
                             f"the largest machine simulated), got {text!r}")
        return cls(report_dir=environ.get(REPORT_DIR_ENV) or None,
                   progress=_flag(environ, PROGRESS_ENV),
                   timing_only=_flag(environ, TIMING_ONLY_ENV),
                   simulated_clock=_flag(environ, SIMULATED_CLOCK_ENV),
                   num_ipus=num_ipus, job_id=environ.get(JOB_ID_ENV, ""))


_KNOWN = (REPORT_DIR_ENV, PROGRESS_ENV, TIMING_ONLY_ENV, SIMULATED_CLOCK_ENV, NUM_IPUS_ENV,
          JOB_ID_ENV, DETAIL_ENV, FOLD_ENV)
_named_unknown: set[str] = set()  # the unknown variables said once already


def check_environment(environ: Mapping[str, str] | None = None) -> None:
    """Refuse a bad value of ipusim's own ``IPUSIM_*`` variables (those of the
    reports and of the simulation, which are read only later), naming the
    variable and the values it takes; name once on stderr an ``IPUSIM_*``
    variable nobody reads (a misspelt one, say)."""
    environ = os.environ if environ is None else environ
    for name, choices in _CHOICES.items():
        value = environ.get(name, "")
        if value not in choices:
            allowed = ", ".join(repr(choice) for choice in choices if choice)
            raise ValueError(f"{name}={value!r}: expected {allowed}, or unset")
    unknown = sorted(name for name in environ
                     if name.startswith("IPUSIM_") and name not in _KNOWN
                     and name not in _named_unknown)
    if unknown:
        _named_unknown.update(unknown)
        print(f"ipusim: ignoring {', '.join(unknown)}: not a setting of ipusim's (they are "
              f"{', '.join(_KNOWN)})", file=sys.stderr)


_ON = ("1", "true", "yes", "on")
_OFF = ("", "0", "false", "no", "off")


def _flag(environ: Mapping[str, str], name: str) -> bool:
    """A switch: 1, true, yes or on turn it on; unset, empty, 0, false, no or off
    leave it off (any case); anything else is an error that names the variable."""
    value = environ.get(name, "").strip().lower()
    if value in _ON:
        return True
    if value in _OFF:
        return False
    raise ValueError(f"{name}={environ[name]!r}: expected 1, true, yes or on to turn it on, "
                     "or 0, false, no, off or nothing to leave it off")


_given: RunSettings | None = None  # the settings the runner was handed, while it runs


def current() -> RunSettings:
    """The settings of the run in progress: those the runner was given, else
    the environment's (a script run by plain python, or a poprun instance)."""
    return _given if _given is not None else RunSettings.from_environment()


@contextmanager
def given(settings: RunSettings) -> Iterator[RunSettings]:
    """Make ``settings`` the current ones for the duration of the block."""
    global _given
    saved, _given = _given, settings
    try:
        yield settings
    finally:
        _given = saved


def available_ipus() -> int:
    """IPUs of the simulated machine: ``IPUSIM_NUM_IPUS`` or an IPU-POD16."""
    return current().num_ipus
