"""A sweep's results on disk: nothing a finished point computed is lost.

Each finished point is appended at once to a journal beside the results
(``RESULTS.journal.jsonl``, one JSON row a line, flushed and synced), and
the results table itself (Parquet or CSV, by its suffix) is rewritten from
time to time and when the sweep ends, through a temporary file so it is
never half written. Reading merges the table and the journal, so a sweep
killed at any moment resumes with every point it had finished.

A results file holds the rows of one sweep spec (each row names it in its
``spec`` column): a sweep of another spec is refused, naming both. A sweep
holds an exclusive lock (``fcntl.flock`` on ``RESULTS.lock`` beside the
results) from opening the store to closing it, so two runs of the same spec
take turns: the second resumes from what the first recorded.

Parquet needs pyarrow, which fails to import beside a numpy older than the
one it was built for (libraries over PopTorch pin numpy 1.23): a ``.parquet``
results file then becomes the ``.csv`` file beside it, said on stderr.
"""
from __future__ import annotations

import fcntl
import functools
import json
import os
import sys
import time
from pathlib import Path

import pandas as pd

FORMATS = (".parquet", ".csv")


@functools.cache
def _parquet_unavailable() -> str | None:
    """Why pandas cannot read or write Parquet here (pyarrow failed to import), or None."""
    try:
        import pyarrow  # noqa: F401
    except Exception as error:  # an ImportError, or a numpy too old for its build
        return f"{type(error).__name__}: {error}"
    return None


def results_path(path: str | Path) -> Path:
    """Where the results of ``path`` are kept: ``path``, or for a ``.parquet``
    file where pyarrow cannot be imported, the ``.csv`` file beside it."""
    path = Path(path)
    return path.with_suffix(".csv") if path.suffix == ".parquet" and \
        _parquet_unavailable() is not None else path


class ResultsStore:
    """The rows of one results file, keyed by point id, for the sweep ``spec``
    (its name; None: not checked). Opening it takes the file's lock, waiting
    for another sweep of the same spec to end; :meth:`close` releases it
    (``lock=False``: a look at the rows recorded so far, never written)."""

    def __init__(self, path: str | Path, spec: str | None = None,
                 rewrite_every_s: float = 2.0, lock: bool = True):
        self.path = Path(path)
        if self.path.suffix not in FORMATS:
            raise ValueError(f"results file {self.path}: expected a .parquet or .csv file")
        if results_path(self.path) != self.path:
            print(f"ipusim sweep: Parquet needs pyarrow, which cannot be imported here "
                  f"({_parquet_unavailable()}): the results go to {results_path(path)} "
                  f"instead of {self.path}", file=sys.stderr)
            self.path = results_path(path)
        if self.path.is_dir():
            raise ValueError(f"results file {self.path}: is a folder")
        self.spec = spec
        self.journal = self.path.with_name(self.path.name + ".journal.jsonl")
        self.lock_path = self.path.with_name(self.path.name + ".lock")
        self.rewrite_every_s = rewrite_every_s
        self._rows: dict[str, dict] = {}
        self._written = time.monotonic()
        self._unwritten = 0
        self._file = None
        self._lock = self._take_lock() if lock else None  # None: only to read it
        try:
            self._load()
        except BaseException:
            self._release()
            raise

    def _take_lock(self):
        """The results file's lock, held until :meth:`close`: taken at once if
        free, refused if a sweep of another spec holds it, else waited for."""
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            lock = open(self.lock_path, "a+")
        except OSError as error:
            raise ValueError(f"results file {self.path}: cannot create its lock "
                             f"{self.lock_path.name} ({error.strerror or error})") from None
        try:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                lock.seek(0)
                holder = lock.read().strip()
                self._check_spec(holder or None, "a running sweep")
                print(f"ipusim sweep: {self.path} is in use by another sweep of the same spec; "
                      "waiting for it to end", file=sys.stderr)
                fcntl.flock(lock, fcntl.LOCK_EX)
            lock.seek(0)
            lock.truncate()
            lock.write(self.spec or "")
            lock.flush()
        except BaseException:
            lock.close()
            raise
        return lock

    def _release(self) -> None:
        if self._lock is not None:
            self._lock.close()  # closing the file releases its flock
            self._lock = None

    def _check_spec(self, other: str | None, whose: str) -> None:
        if self.spec is not None and other is not None and other != self.spec:
            raise ValueError(f"results file {self.path} holds {whose} of the spec {other}, not "
                             f"of {self.spec}: give this sweep another results file (--output) "
                             "or delete that one")

    def _load(self) -> None:
        if self.path.exists():
            try:
                table = _read_table(self.path)
            except Exception as error:  # not a results table: say so, never overwrite it
                raise ValueError(f"results file {self.path}: cannot read it as a sweep's "
                                 f"results ({type(error).__name__}: {error})") from None
            if "point_id" not in table:
                raise ValueError(f"results file {self.path}: not a sweep's results (no "
                                 "point_id column)")
            for row in table.to_dict("records"):
                self._rows[row["point_id"]] = {key: _plain(value) for key, value in row.items()}
        if self.journal.exists():
            for line in self.journal.read_text().splitlines():
                try:
                    row = json.loads(line)
                except json.JSONDecodeError:  # the line being written when it was killed
                    continue
                self._rows.setdefault(row["point_id"], row)
        for row in self._rows.values():
            self._check_spec(row.get("spec"), "the results")

    def rows(self) -> list[dict]:
        """Every recorded row."""
        return list(self._rows.values())

    def drop(self, point_id: str) -> None:
        """Forget a row (stale): the table is rewritten without it when the store closes."""
        if self._rows.pop(point_id, None) is not None:
            self._unwritten += 1

    @property
    def done(self) -> set[str]:
        """Ids of the points already in the results."""
        return set(self._rows)

    def row(self, point_id: str) -> dict:
        """The recorded row of a point."""
        return self._rows[point_id]

    def add(self, row: dict) -> None:
        """Record a finished point now (journal), and the table when it is due."""
        if self._file is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._file = self.journal.open("a")
        self._file.write(json.dumps(row) + "\n")
        self._file.flush()
        os.fsync(self._file.fileno())
        self._rows[row["point_id"]] = row
        self._unwritten += 1
        if time.monotonic() - self._written >= self.rewrite_every_s:
            self.write()

    def table(self) -> pd.DataFrame:
        """Every row, in the order of the points of the sweep."""
        return normalised(pd.DataFrame(list(self._rows.values())))

    def write(self) -> None:
        """Rewrite the results table with every row, then empty the journal."""
        if not self._rows:
            if self._file is not None:
                self._file.close()
                self._file = None
            if self.path.exists():  # every row dropped: the file holds none
                self.path.unlink()
            self.journal.unlink(missing_ok=True)
            self._written, self._unwritten = time.monotonic(), 0
            return
        temporary = self.path.with_name(f"{self.path.name}.{os.getpid()}.tmp")
        table = self.table()
        try:
            with open(temporary, "wb") as file:
                if self.path.suffix == ".parquet":
                    table.to_parquet(file, index=False)
                else:
                    table.to_csv(file, index=False)
                file.flush()
                os.fsync(file.fileno())
            os.replace(temporary, self.path)  # atomic: the old table or the new, never half
        finally:
            temporary.unlink(missing_ok=True)
        if self._file is not None:
            self._file.close()
            self._file = None
        self.journal.unlink(missing_ok=True)
        self._written, self._unwritten = time.monotonic(), 0

    def close(self) -> None:
        """Write what is not yet in the table, and release the lock."""
        try:
            if self._unwritten or self.journal.exists():
                self.write()
        finally:
            if self._file is not None:
                self._file.close()
                self._file = None
            self._release()


def normalised(table: pd.DataFrame) -> pd.DataFrame:
    """The table with one type per column whatever the order its rows came
    in or the file it was read from: ``fits`` a nullable boolean, ``ipus`` a
    nullable integer (both empty for invalid points), rows in the order of
    the sweep's points."""
    if "fits" in table:
        table = table.assign(fits=table["fits"].astype("boolean"))
    if "ipus" in table:
        table = table.assign(ipus=table["ipus"].astype("Int64"))
    if "point" in table:
        table = table.sort_values("point", kind="stable", ignore_index=True)
    return table


# Columns of hashes: text, even when a CSV's hash happens to read as a number.
_TEXT_COLUMNS = {name: str for name in ("point_id", "spec", "model", "work")}


def _read_table(path: Path) -> pd.DataFrame:
    return (pd.read_parquet(path) if path.suffix == ".parquet"
            else pd.read_csv(path, dtype=_TEXT_COLUMNS))


def read(path: str | Path) -> pd.DataFrame:
    """A results file (Parquet or CSV) as a table; a ``.parquet`` one where
    pyarrow cannot be imported, from the ``.csv`` file beside it."""
    return normalised(_read_table(results_path(path)))


def _plain(value):
    """A table cell as the journal holds it (NaN as None, numpy scalars as Python)."""
    if value is pd.NA or isinstance(value, float) and value != value:
        return None
    return value.item() if hasattr(value, "item") else value
