"""A sweep's results on disk: nothing a finished point computed is lost.

Each finished point is appended at once to a journal beside the results
(``RESULTS.journal.jsonl``, one JSON row a line, flushed and synced), and
the results table itself (Parquet or CSV, by its suffix) is rewritten from
time to time and when the sweep ends, through a temporary file so it is
never half written. Reading merges the table and the journal, so a sweep
killed at any moment resumes with every point it had finished.
"""
from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pandas as pd

FORMATS = (".parquet", ".csv")


class ResultsStore:
    """The rows of one results file, keyed by point id."""

    def __init__(self, path: str | Path, rewrite_every_s: float = 2.0):
        self.path = Path(path)
        if self.path.suffix not in FORMATS:
            raise ValueError(f"results file {self.path}: expected a .parquet or .csv file")
        self.journal = self.path.with_name(self.path.name + ".journal.jsonl")
        self.rewrite_every_s = rewrite_every_s
        self._rows: dict[str, dict] = {}
        self._written = time.monotonic()
        self._unwritten = 0
        self._load()
        self._file = None

    def _load(self) -> None:
        if self.path.exists():
            table = (pd.read_parquet(self.path) if self.path.suffix == ".parquet"
                     else pd.read_csv(self.path))
            for row in table.to_dict("records"):
                self._rows[row["point_id"]] = {key: _plain(value) for key, value in row.items()}
        if self.journal.exists():
            for line in self.journal.read_text().splitlines():
                try:
                    row = json.loads(line)
                except json.JSONDecodeError:  # the line being written when it was killed
                    continue
                self._rows.setdefault(row["point_id"], row)

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
            return
        temporary = self.path.with_name(self.path.name + ".tmp")
        table = self.table()
        if self.path.suffix == ".parquet":
            table.to_parquet(temporary, index=False)
        else:
            table.to_csv(temporary, index=False)
        os.replace(temporary, self.path)
        if self._file is not None:
            self._file.close()
            self._file = None
        self.journal.unlink(missing_ok=True)
        self._written, self._unwritten = time.monotonic(), 0

    def close(self) -> None:
        """Write what is not yet in the table."""
        if self._unwritten or self.journal.exists():
            self.write()
        if self._file is not None:
            self._file.close()
            self._file = None


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


def read(path: str | Path) -> pd.DataFrame:
    """A results file (Parquet or CSV) as a table."""
    path = Path(path)
    table = pd.read_parquet(path) if path.suffix == ".parquet" else pd.read_csv(path)
    return normalised(table)


def _plain(value):
    """A table cell as the journal holds it (NaN as None, numpy scalars as Python)."""
    if value is pd.NA or isinstance(value, float) and value != value:
        return None
    return value.item() if hasattr(value, "item") else value
