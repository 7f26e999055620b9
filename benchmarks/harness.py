"""Measuring one benchmark: events/s of datum-sql and of DuckDB on the same rows, peak RSS.

Each benchmark runs in a child process so its peak RSS is its own.
"""

from __future__ import annotations

import json
import resource
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

import duckdb
import pyarrow as pa


@dataclass
class Result:
    name: str
    events: int
    datum_s: float
    duckdb_s: float | None
    peak_rss_mb: float
    rows_out: int
    note: str = ""

    @property
    def datum_eps(self) -> float:
        return self.events / self.datum_s

    @property
    def duckdb_eps(self) -> float | None:
        return None if self.duckdb_s is None else self.events / self.duckdb_s

    def line(self) -> str:
        ddb = self.duckdb_eps
        ratio = f"{self.datum_eps / ddb:6.2f}" if ddb else "     -"
        ddb_text = f"{ddb / 1e6:9.2f}M" if ddb else "        -"
        return (
            f"{self.name:<28} {self.events:>10,} {self.datum_eps / 1e6:9.2f}M {ddb_text} "
            f"{ratio} {self.peak_rss_mb:9.0f} {self.note}"
        )


HEADER = (
    f"{'benchmark':<28} {'events':>10} {'datum ev/s':>10} {'duckdb ev/s':>10} {'ratio':>6} "
    f"{'peak RSS MB':>9}"
)


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def duckdb_seconds(sql: str, tables: dict[str, pa.Table], repeat: int = 3) -> tuple[float, int]:
    """Best of ``repeat`` single-threaded DuckDB runs materialising the result as Arrow."""
    con = duckdb.connect()
    con.execute("SET threads = 1")
    for name, table in tables.items():
        con.register(name, table)
    best = float("inf")
    rows = 0
    for _ in range(repeat):
        t0 = time.perf_counter()
        rows = con.sql(sql).to_arrow_table().num_rows
        best = min(best, time.perf_counter() - t0)
    return best, rows


def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out


def run_isolated(module: str, name: str, args: dict[str, Any]) -> Result:
    """Run ``module.run_<name>(**args)`` in a child process; it prints a JSON Result."""
    code = (
        "import json, sys; from dataclasses import asdict; "
        f"import {module} as m; r = m.run_{name}(**json.loads(sys.argv[1])); "
        "print('RESULT ' + json.dumps(asdict(r)))"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code, json.dumps(args)], capture_output=True, text=True, check=False
    )
    for line in proc.stdout.splitlines():
        if line.startswith("RESULT "):
            return Result(**json.loads(line[7:]))
    raise RuntimeError(f"benchmark {name} failed:\n{proc.stdout}\n{proc.stderr}")


__all__ = ["HEADER", "Result", "asdict", "duckdb_seconds", "peak_rss_mb", "run_isolated", "timed"]
