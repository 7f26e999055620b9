"""The file-ingestion benchmarks at a tiny size, through the real path (``python -m
benchmarks``: each engine in a child process of its own, a child comparing the results):
datum-sql's streaming query over 1,000 small CSV and Parquet files must equal DuckDB's
``read_csv`` / ``read_parquet`` of them, and the no-change rerun must read nothing and be
recorded as datum-sql alone, in seconds. The run is a subprocess of its own: a child's
ru_maxrss starts from its parent's RSS, and the pytest process may be large.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks import inputs, report  # noqa: E402
from benchmarks.file_ingest import RERUN  # noqa: E402
from benchmarks.registry import in_group  # noqa: E402

#: two rows per file of the 1,000
EVENTS = 2_000


@pytest.fixture(scope="module")
def ran(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, list[dict]]:
    path = tmp_path_factory.mktemp("bench") / "results.jsonl"
    cmd = [sys.executable, "-m", "benchmarks", "files_csv_1000", "files_parquet_1000",
           "file_rerun", "--events", str(EVENTS), "--runs", "1", "--results", str(path)]  # fmt: skip
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout, [json.loads(line) for line in path.read_text().splitlines()]


def test_each_engine_reads_the_files_and_the_results_are_equal(
    ran: tuple[str, list[dict]],
) -> None:
    out, records = ran
    compared = [r for r in records if r["group"] == "files"]
    assert [(r["benchmark"], r["engine"]) for r in compared] == [
        ("files_csv_1000", "datum-sql"), ("files_csv_1000", "duckdb"),
        ("files_parquet_1000", "datum-sql"), ("files_parquet_1000", "duckdb"),
    ]  # fmt: skip
    assert "DIFFERENT" not in out and "FAILED" not in out
    for r in compared:
        assert r["error"] is None, r["error"]
        assert r["equal"] is True and r["events"] == EVENTS
        assert 0 < r["rows_out"] < EVENTS
        assert r["peak_rss_mb"] > 0 and r["median_s"] > 0
    for datum, duck in (compared[:2], compared[2:]):
        assert datum["rows_out"] == duck["rows_out"]
        assert datum["ratio"] == pytest.approx(duck["median_s"] / datum["median_s"])
        (note,) = datum["notes"]
        assert re.fullmatch(r"1,000 files, \d+ MB on disk", note), note


def test_the_no_change_rerun_reads_nothing_and_is_reported_in_seconds(
    ran: tuple[str, list[dict]],
) -> None:
    out, records = ran
    (rerun,) = [r for r in records if r["group"] == "file_rerun"]
    assert rerun["benchmark"] == RERUN and rerun["engine"] == "datum-sql"
    assert rerun["events"] == EVENTS and rerun["events_per_s"] is None
    assert rerun["equal"] is None and rerun["metrics"]["rows_in"] == 0
    assert 0 < rerun["median_s"] < rerun["metrics"]["first_run_s"]
    assert f"({EVENTS:,} rows in, " in out and "s, 0 rows in, " in out
    text = report.render(records)
    assert f"| `{RERUN}` | datum-sql | 2,000 | - | {rerun['median_s']:.3f} (" in text
    assert "| `files_csv_1000` | 2,000 | - |" in text  # the compared table, with ratios


def test_every_file_benchmark_reads_a_file_set_of_its_name() -> None:
    names = {b.name: b.inputs(10)["bids"].dataset for b in in_group("files")}
    assert names == {f"files_{f}_{n}": f"bid_{f}_{n}" for f in ("csv", "parquet")
                     for n in (1000, 10)}  # fmt: skip
    for dataset in names.values():
        spec = inputs.FILE_SETS[dataset]
        assert dataset == f"{spec.dataset}_{spec.format}_{spec.files}"
