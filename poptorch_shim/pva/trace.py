"""libpva's trace: ``pva.openTrace(pvti)`` over the host-side trace ipusim writes.

The PopVision System Analyser shows a program's host side: the calls into the
device and the tracepoints of ``poptorch.profiling`` channels. ipusim writes them
beside each model's report (``host.pvti``, see
:func:`poptorch_shim.profiling.write_pvti`); this reads it as libpva does:
``trace.processes[i].threads[j].events``, each event with ``label``, ``duration``
(µs), ``start`` (µs from the trace's first event) and ``children()``.
"""
from __future__ import annotations

import json
from pathlib import Path

from poptorch_shim.profiling import PVTI_FORMAT, PVTI_VERSION


class Event:
    """One traced span: ``label``, ``start`` and ``duration`` in µs, and its
    ``children()``, the spans it holds."""

    def __init__(self, record: dict):
        self.label = record["label"]
        self.start = record["start_us"]
        self.duration = record["duration_us"]
        self._children = [Event(child) for child in record["children"]]

    def children(self) -> list[Event]:
        return list(self._children)


class Thread:
    """A thread of the trace: ``tid``, ``name`` and its top-level ``events``."""

    def __init__(self, record: dict):
        self.tid = record["tid"]
        self.name = record["name"]
        self.events = [Event(event) for event in record["events"]]


class Process:
    """A process of the trace: ``pid`` and its ``threads``."""

    def __init__(self, record: dict):
        self.pid = record["pid"]
        self.threads = [Thread(thread) for thread in record["threads"]]


class Trace:
    """A host-side trace: its ``processes``."""

    def __init__(self, document: dict):
        self.processes = [Process(process) for process in document["processes"]]


def openTrace(pvti: str | Path) -> Trace:
    """Open a ``.pvti`` written by ipusim. Raises FileNotFoundError for a missing file,
    ValueError for one that is not ipusim's."""
    try:
        document = json.loads(Path(pvti).read_text(encoding="utf-8"))
    except (UnicodeDecodeError, ValueError) as error:
        raise ValueError(f"{pvti} is not an ipusim trace: {error}") from None
    found = document.get("format") if isinstance(document, dict) else None
    if found != PVTI_FORMAT or document.get("version") != PVTI_VERSION:
        raise ValueError(f"{pvti} is not version {PVTI_VERSION} of ipusim's trace format "
                         f"(format {found!r}, version {document.get('version')!r}); pva here "
                         "reads the traces ipusim writes, not libpvti's")
    return Trace(document)
