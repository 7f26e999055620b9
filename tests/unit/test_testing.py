"""datum_sql.testing.run_with_restore: the checkpoint pass of the golden tests."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

import datum_sql as ds
from datum_sql.testing import run_with_restore, sorted_rows

TS = pa.timestamp("us")


def _batches(n: int, size: int) -> list[pa.RecordBatch]:
    table = pa.table(
        {
            "k": pa.array([f"k{i % 3}" for i in range(n)], pa.string()),
            "v": pa.array(range(n), pa.int64()),
            "ts": pa.array([i * 1_000_000 for i in range(n)], pa.int64()).cast(TS),
        }
    )
    return table.to_batches(max_chunksize=size)


def test_resumes_from_the_checkpoint_taken_half_way(tmp_path: Path) -> None:
    batches = _batches(100, 10)
    run = run_with_restore(
        "SELECT k, count(*) AS n, sum(v) AS total FROM t GROUP BY k",
        {"t": batches},
        tmp_path / "state",
        event_time={"t": "ts"},
        primary_key="k",
    )
    assert run.checkpoint_items == {"t": 5} and run.crash_items == {"t": 7}
    assert run.status["recovered_from"]["checkpoint"] == run.checkpoint_id
    # the first run processed past the checkpoint before it crashed
    assert run.first_status["rows_in"] == 70
    assert run.status["rows_in"] == 50  # the resumed run read only what the checkpoint lacked
    totals = {k: sum(v for v in range(100) if f"k{v % 3}" == k) for k in ("k0", "k1", "k2")}
    assert sorted_rows(run.result) == sorted(
        (k, len([v for v in range(100) if f"k{v % 3}" == k]), t) for k, t in totals.items()
    )


def test_append_only_output_has_no_row_twice(tmp_path: Path) -> None:
    """Rows written after the checkpoint by the crashed run are not committed: the
    Parquet sink ends with every row once."""
    run = run_with_restore(
        "SELECT v, k FROM t WHERE v % 2 = 0", {"t": _batches(60, 7)}, tmp_path / "s",
        sink="parquet",
    )  # fmt: skip
    assert sorted(run.result.column("v").to_pylist()) == list(range(0, 60, 2))


def test_a_real_failure_of_the_first_run_is_raised(tmp_path: Path) -> None:
    """Not mistaken for the simulated crash: the query's own error comes out."""
    bad = pa.table({"s": pa.array(["1", "2", "x", "4"] * 5, pa.string())})
    with pytest.raises(ds.QueryFailed, match="x"):
        run_with_restore(
            "SELECT CAST(s AS BIGINT) AS n FROM t", {"t": bad}, tmp_path / "s", batch_size=2
        )


def test_needs_an_empty_state_dir(tmp_path: Path) -> None:
    (tmp_path / "leftover").write_text("")
    with pytest.raises(ds.CheckpointError, match="empty state_dir"):
        run_with_restore("SELECT v FROM t", {"t": _batches(4, 2)}, tmp_path)
