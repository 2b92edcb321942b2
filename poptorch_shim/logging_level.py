"""``poptorch.setLogLevel``: how much the shim's loggers print.

PopTorch names its levels TRACE, DEBUG, INFO, WARN, ERR and OFF, or, as the
older integer form, 0 to 4 and 6; ``POPTORCH_LOG_LEVEL`` sets the level at
import (default WARN). The lines PopTorch itself logs (each option the compiler
is given, "poptorch.Options set replication_factor to value 2", and the
defaults it chooses, "enablePipelining set to value 1") go to the ``poptorch``
logger in PopTorch's words; the shim's own messages go to ``poptorch_shim``.
"""
import logging
import os
import sys

LOG_LEVEL_ENV = "POPTORCH_LOG_LEVEL"

# name -> (PopTorch's integer, Python's logging level)
_LEVELS = {"TRACE": (0, logging.DEBUG), "DEBUG": (1, logging.DEBUG),
           "INFO": (2, logging.INFO), "WARN": (3, logging.WARNING),
           "ERR": (4, logging.ERROR), "OFF": (6, logging.CRITICAL + 1)}

logger = logging.getLogger("poptorch_shim")
#: The logger of PopTorch's own log lines, in PopTorch's words.
poptorch_logger = logging.getLogger("poptorch")


class _Console(logging.StreamHandler):
    """Writes to whatever ``sys.stderr`` is when a message is logged, so that
    a redirected stderr (pytest, a notebook) gets the messages."""

    @property
    def stream(self):
        return sys.stderr

    @stream.setter
    def stream(self, value) -> None:
        pass


class _Formatter(logging.Formatter):
    """PopTorch's console format: "[12:00:01.123] [poptorch:python] [debug] ...",
    the level in lower case (scripts and PopTorch's tests filter on "[debug]")."""

    default_time_format, default_msec_format = "%H:%M:%S", "%s.%03d"

    def __init__(self):
        super().__init__("[%(asctime)s] [poptorch:python] [%(levelname)s] %(message)s")

    def format(self, record) -> str:
        # A copy: other handlers (pytest's caplog) keep the level's own name.
        record = logging.makeLogRecord(record.__dict__)
        record.levelname = record.levelname.lower()
        return super().format(record)


def setLogLevel(level) -> None:
    """Set the log level by name ("TRACE", "DEBUG", "INFO", "WARN", "ERR",
    "OFF") or by PopTorch's integer (0 TRACE ... 4 ERR, 6 OFF)."""
    if isinstance(level, int) and not isinstance(level, bool):
        names = [name for name, (number, _) in _LEVELS.items() if number == level]
        if not names:
            raise ValueError(f"Invalid log level integer: {level}; use 0 (TRACE), 1 (DEBUG), "
                             "2 (INFO), 3 (WARN), 4 (ERR) or 6 (OFF).")
        level = names[0]
    if level not in _LEVELS:
        valid = sorted(_LEVELS)
        raise ValueError(f"Unknown log level: {level}. Valid values are "
                         f"{', '.join(valid[:-1])} and {valid[-1]}")
    for each in (logger, poptorch_logger):
        each.setLevel(_LEVELS[level][1])
        if not each.handlers:
            # PopTorch logs to the console; Python alone would print WARNING and up only.
            console = _Console()
            console.setFormatter(_Formatter())
            each.addHandler(console)


def level_from_environment() -> None:
    """Apply ``POPTORCH_LOG_LEVEL``, as PopTorch does when imported; an unset
    variable leaves Python's logging configuration alone."""
    text = os.environ.get(LOG_LEVEL_ENV)
    if text:
        try:
            setLogLevel(text)
        except ValueError as error:
            raise ValueError(f"{LOG_LEVEL_ENV}: {error}") from None
