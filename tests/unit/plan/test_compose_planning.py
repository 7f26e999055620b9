"""Planning nested queries: which windowed aggregates emit final rows, how CTEs are scoped,
and what EXPLAIN shows of a composed plan."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pyarrow as pa
import pytest

import datum_sql as ds

TS = pa.timestamp("us")
BASE = dt.datetime(2024, 1, 1)
WINDOWED = (
    "SELECT k, window_end AS we, count(*) AS n FROM tumble(t, ts, INTERVAL '10 seconds') "
    "GROUP BY window_start, window_end, k"
)


@pytest.fixture
def ctx() -> Any:
    c = ds.Context(state_dir=None)
    data = pa.table(
        {
            "k": ["a", "b", "a", "a"],
            "ts": pa.array([BASE + dt.timedelta(seconds=s) for s in (1, 2, 3, 12)], TS),
        }
    )
    batches = [data.slice(0, 2), data.slice(2, 1), data.slice(3, 1)]
    c.register_arrow("t", [b.to_batches()[0] for b in batches], event_time="ts",
                     watermark=ds.BoundedOutOfOrderness())  # fmt: skip
    yield c
    c.close()


def test_a_windowed_aggregate_read_by_no_stateful_step_stays_a_changelog(ctx: Any) -> None:
    """Only a windowed aggregate that feeds an aggregate, a window or a join emits final
    rows; the outermost one (and one under stateless SELECTs only) keeps its changelog."""
    for sql in (WINDOWED, f"SELECT k, n FROM ({WINDOWED}) AS w WHERE n > 0"):
        ops = [r.get("_op") for b in ctx.execute_streaming(sql) for r in b.to_pylist()]
        assert ops == ["+I", "+I", "-U", "+U", "+I"]
        assert "emit=on window close" not in ctx.explain(sql)


def test_a_windowed_aggregate_read_by_an_aggregate_emits_final_rows(ctx: Any) -> None:
    sql = f"SELECT k, count(*) AS windows, sum(n) AS n FROM ({WINDOWED}) AS w GROUP BY k"
    plan = ctx.explain(sql).split("== job graph ==")[0]
    # the inner one emits final rows; the outer, unbounded, a changelog
    assert plan.count("emit=on window close") == 1
    assert "GroupAggregate(keys=[__k0]" in plan
    got = ctx.execute_streaming(sql).to_arrow(timeout=30)
    assert sorted(got.to_pylist(), key=str) == [
        {"k": "a", "windows": 2, "n": 3},
        {"k": "b", "windows": 1, "n": 1},
    ]


def test_ctes_read_earlier_ctes_and_inner_with_clauses_shadow_outer_ones(ctx: Any) -> None:
    sql = (
        "WITH a AS (SELECT k, ts FROM t WHERE k = 'a'), b AS (SELECT k FROM a) "
        "SELECT k FROM (WITH a AS (SELECT k FROM t WHERE k = 'b') SELECT k FROM a) AS inner_a "
        "UNION ALL SELECT k FROM b"
    )
    got = ctx.execute_streaming(sql).to_arrow(timeout=30).column("k").to_pylist()
    assert sorted(got) == ["a", "a", "a", "b"]
    assert sorted(ctx.sql(sql).column("k").to_pylist()) == ["a", "a", "a", "b"]


def test_explain_names_the_watermarks_that_close_a_window_over_a_union(ctx: Any) -> None:
    ctx.register_arrow("u", ctx.sql("SELECT * FROM t"), event_time="ts",
                       watermark=ds.BoundedOutOfOrderness(seconds=2))  # fmt: skip
    plan = ctx.explain(
        "SELECT window_start, count(*) AS n FROM tumble((SELECT ts FROM t UNION ALL "
        "SELECT ts FROM u) AS both_, ts, INTERVAL '10 seconds') GROUP BY window_start, window_end"
    )
    assert "UnionAll" in plan
    assert "closed by min(watermark max t.ts / +inf at the end of t, watermark max u.ts - " in plan
