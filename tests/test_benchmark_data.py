"""The benchmarks' data is in the repository, each table with its sources: a clone
alone runs them."""
import re
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parent.parent
BENCHMARKS = ROOT / "benchmarks"


def test_the_operator_benchmark_reads_only_tables_beside_it():
    script = (BENCHMARKS / "bench_operators.py").read_text()
    assert ".parents[" not in script and "shared" not in re.sub(r"#.*", "", script)
    for table in sorted(BENCHMARKS.glob("*.csv")):
        lines = table.read_text().splitlines()
        assert lines[0].startswith("#"), f"{table.name} names no source in its header"
        rows = pd.read_csv(table, comment="#")
        assert len(rows) and {"source", "hardware", "dtype"} <= set(rows.columns)
        assert set(rows["source"]) <= set(re.findall(r"^# ?([\w-]+):", "\n".join(lines), re.M))


def test_the_operator_table_holds_the_19_published_timings():
    rows = pd.read_csv(BENCHMARKS / "operator_benchmarks.csv", comment="#")
    assert len(rows) == 19 and set(rows["hardware"]) == {"bow"}
    assert rows["published_tflops"].between(1, 350).all()
