"""State limits: exceeding one fails the query clearly, never evicts silently."""

from __future__ import annotations

import datetime as dt
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pytest

import datum_sql as ds


def _table(n: int) -> pa.Table:
    ts = pa.array(
        [dt.datetime(2026, 1, 1) + dt.timedelta(seconds=i) for i in range(n)], pa.timestamp("us")
    )
    return pa.table({"k": list(range(n)), "ts": ts})


def test_python_limit_fails_the_query_naming_the_operator() -> None:
    ctx = ds.Context(state_dir=None)
    ctx.register_arrow("t", _table(1000), batch_size=100)
    q = ctx.execute_streaming("SELECT k, count(*) AS n FROM t GROUP BY k", state_limit_rows=300)
    with pytest.raises(ds.QueryFailed) as info:
        q.wait(30)
    assert "state limit of 300" in str(info.value) and "group_agg" in str(info.value)


def test_sql_setting_applies_to_later_queries_and_joins() -> None:
    ctx = ds.Context(state_dir=None)
    ctx.execute("SET state_limit_rows = 50")
    ts = pa.array([dt.datetime(2026, 1, 1)] * 200, pa.timestamp("us"))
    ctx.register_arrow("l", pa.table({"k": [1] * 200, "ts": ts}), event_time="ts", batch_size=20)
    ctx.register_arrow("r", pa.table({"k": [1] * 200, "ts": ts}), event_time="ts", batch_size=20)
    q = ctx.execute_streaming("SELECT l.k FROM l ASOF JOIN r ON l.k = r.k AND l.ts >= r.ts")
    with pytest.raises(ds.QueryFailed, match="state limit"):
        q.wait(30)
    ctx.execute("SET state_limit_rows = 0")  # off again
    ok = ctx.execute_streaming("SELECT l.k FROM l ASOF JOIN r ON l.k = r.k AND l.ts >= r.ts")
    assert ok.to_arrow(timeout=30).num_rows == 200


def test_within_the_limit_nothing_changes() -> None:
    ctx = ds.Context(state_dir=None)
    ctx.register_arrow("t", _table(100), batch_size=10)
    q = ctx.execute_streaming(
        "SELECT k % 10 AS b, count(*) AS n FROM t GROUP BY k % 10", state_limit_rows=10
    )
    assert sorted(q.to_arrow(timeout=30).column("n").to_pylist()) == [10] * 10
    ops = q.status()["operators"]
    assert any(o["state_rows"] > 0 for o in ops.values())


def test_bad_setting_is_a_plan_error() -> None:
    with pytest.raises(ds.PlanError, match="whole number"):
        ds.Context(state_dir=None).execute("SET state_limit_rows = 'lots'")


def test_cli_fresh_starts_a_changed_query_over(tmp_path: Path) -> None:
    src = tmp_path / "in.csv"
    src.write_text("id\n" + "\n".join(str(i) for i in range(10)) + "\n")
    script = tmp_path / "job.sql"

    def run(where: str, *extra: str) -> subprocess.CompletedProcess[str]:
        script.write_text(
            f"CREATE SOURCE s (id BIGINT) WITH (connector = 'csv', path = '{src}');\n"
            f"CREATE SINK o WITH (connector = 'parquet', path = '{tmp_path / 'out'}');\n"
            f"INSERT INTO o SELECT id FROM s WHERE {where};\n"
        )
        return subprocess.run(
            [sys.executable, "-m", "datum_sql.cli", "run", str(script), "--state-dir", str(tmp_path / "st"), *extra],
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip

    assert run("id < 5").returncode == 0
    changed = run("id < 3")
    assert changed.returncode != 0 and "--fresh" in (changed.stdout + changed.stderr)
    assert run("id < 3", "--fresh").returncode == 0


def test_global_aggregate_over_no_rows_has_its_one_row() -> None:
    ctx = ds.Context(state_dir=None)
    ctx.register_arrow("empty", pa.table({"v": pa.array([], pa.int64())}))
    sql = "SELECT count(*) AS n, sum(v) AS s FROM empty"
    assert ctx.execute_streaming(sql).to_arrow(timeout=30).to_pylist() == ctx.sql(sql).to_pylist()


def test_count_star_reads_no_column_yet_counts_every_row() -> None:
    ctx = ds.Context(state_dir=None)
    ctx.register_arrow("t", pa.table({"v": list(range(250))}), batch_size=64)
    sql = "SELECT count(*) AS n FROM t"
    assert ctx.execute_streaming(sql).to_arrow(timeout=30).to_pylist() == [{"n": 250}]
