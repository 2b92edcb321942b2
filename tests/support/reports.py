"""What the report tests share: a runner's report bookkeeping started afresh."""
from poptorch_shim._run import profiling


def fresh_report_registry(monkeypatch) -> None:
    """No pending reports, no report directories given out, no directories locked."""
    monkeypatch.setattr(profiling, "_pending", [])
    monkeypatch.setattr(profiling, "_taken", set())
    monkeypatch.setattr(profiling, "_given", profiling.weakref.WeakKeyDictionary())
    monkeypatch.setattr(profiling, "_locks", {}, raising=False)
