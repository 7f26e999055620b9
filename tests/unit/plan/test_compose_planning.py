"""Planning nested queries: which windowed aggregates emit final rows, how CTEs are scoped,
how far each time column trails the watermark, and what EXPLAIN shows of a composed plan."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pyarrow as pa
import pytest

import datum_sql as ds
from datum_sql.plan import logical as lp

TS = pa.timestamp("us")
S = 1_000_000
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
    assert "GroupAggregate(keys=[k]" in plan
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


def _lags(ctx: Any, sql: str) -> dict[str, int]:
    """The time columns (and their lags) of the plan of ``sql`` read by a stateful step
    (which reads every one of them: a column nobody reads is cut from the plan)."""
    plan = ctx.prepare(
        f"SELECT count(*) AS c, min(ws) AS a, min(we) AS b, min(w4) AS d FROM ({sql}) AS inner_q"
    ).plan
    agg = next(n for n in plan.walk() if isinstance(n, lp.Aggregate))
    calc = agg.input
    while not isinstance(calc, lp.Calc) or "inner_q" in calc.sql:
        calc = calc.children[0]
    return calc.time_lags


@pytest.mark.parametrize(
    ("window", "lags"),
    [
        ("tumble(t, ts, INTERVAL '10 seconds')", {"ws": 10 * S, "we": 0}),
        (
            "hop(t, ts, INTERVAL '3 seconds', INTERVAL '10 seconds', INTERVAL '1 second')",
            {"ws": 10 * S, "we": 0},
        ),
        ("cumulate(t, ts, INTERVAL '5 seconds', INTERVAL '20 seconds')", {"ws": 20 * S, "we": 0}),
        ("session(t, ts, INTERVAL '5 seconds')", {"we": 0}),  # a session may start any time
    ],
)
def test_window_start_trails_the_watermark_by_the_window_size(
    ctx: Any, window: str, lags: dict[str, int]
) -> None:
    sql = (
        "SELECT window_start AS ws, window_end AS we, window_start + INTERVAL '4 seconds' AS w4, "
        f"count(*) AS n FROM {window} GROUP BY window_start, window_end"
    )
    got = _lags(ctx, sql)
    if "ws" in lags:
        lags = {**lags, "w4": lags["ws"] - 4 * S}
    assert got == lags


def test_group_by_window_start_closes_behind_the_window_size(ctx: Any) -> None:
    """GROUP BY a windowed aggregate's window_start: its groups close once the watermark
    less the window's size passes them; a join on window_start reads each side behind the
    lag of its column and filters pairs by the rest of ON."""
    per_window = (
        "SELECT k, window_start AS ws, count(*) AS n FROM hop(t, ts, INTERVAL '2 seconds', "
        "INTERVAL '10 seconds') GROUP BY window_start, window_end, k"
    )
    top = f"SELECT ws, max(n) AS mx FROM ({per_window}) AS w GROUP BY ws"
    sql = (
        f"SELECT a.k, a.n FROM ({per_window}) AS a JOIN ({top}) AS m ON a.ws = m.ws AND a.n >= m.mx"
    )
    plan = ctx.explain(sql).split("== job graph ==")[0]
    assert (
        "IntervalJoin(keys=[], ws = ws, filter (a.n >= m.mx), sparse right: held as arrived)"
        in plan
    )
    assert plan.count("WatermarkLag(10000000us)") == 2  # the left side, the per-ws max's input
    assert "WatermarkLag(1us)" in plan  # the max's ws: a window of one microsecond
    # __agg0 and __ts name different columns in the two subqueries: EXPLAIN keeps them
    assert "tumble(__ts, size=1us), keys=[], __agg0=max(n), emit=on window close" in plan
    assert "less 10 seconds" in plan
    got = ctx.execute_streaming(sql).to_arrow(timeout=30)
    assert sorted(got.to_pylist(), key=str) == sorted(ctx.sql(sql).to_pylist(), key=str)
    assert got.num_rows > 0


def test_an_outermost_group_by_window_start_is_a_changelog_that_forgets_closed_groups(
    ctx: Any,
) -> None:
    sql = (
        "SELECT ws, count(*) AS keys FROM (SELECT k, window_start AS ws FROM tumble(t, ts, "
        "INTERVAL '10 seconds') GROUP BY window_start, window_end, k) AS w GROUP BY ws"
    )
    plan = ctx.explain(sql).split("== job graph ==")[0]
    assert "WindowAggregate(tumble(__ts, size=1us)" in plan and "[changelog]" in plan
    final = ctx.execute_streaming(sql + " EMIT ON WINDOW CLOSE").to_arrow(timeout=30)
    assert sorted(final.to_pylist(), key=str) == [
        {"ws": BASE, "keys": 2},
        {"ws": BASE + dt.timedelta(seconds=10), "keys": 1},
    ]


def test_a_join_of_an_unbounded_aggregate_says_what_to_group_by(ctx: Any) -> None:
    sql = (
        f"SELECT a.k FROM ({WINDOWED}) AS a JOIN (SELECT n, max(we) AS we FROM ({WINDOWED}) "
        "AS w GROUP BY n) AS b ON a.n = b.n AND a.we = b.we"
    )
    with pytest.raises(ds.PlanError, match="grouped by a column that carries event time"):
        ctx.prepare(sql)


def test_a_final_group_by_event_time_needs_a_watermark_that_moves() -> None:
    """GROUP BY a source's event time read by a join emits a group once the watermark
    passes it: over a source that never ends and has no watermark policy it is refused."""
    c = ds.Context(state_dir=None)
    c.register_kafka_topic("k", topic="k", bootstrap_servers="127.0.0.1:1",
                           schema=pa.schema([("v", pa.int64()), ("ts", TS)]), event_time="ts")  # fmt: skip
    sql = (
        "SELECT r.v, g.n FROM k AS r JOIN (SELECT ts, count(*) AS n FROM k GROUP BY ts) AS g "
        "ON r.ts = g.ts"
    )
    with pytest.raises(ds.PlanError, match="no watermark policy for 'ts'"):
        c.prepare(sql)
    c.close()


def test_windowed_results_joined_without_their_bounds_are_told_to_join_on_them(ctx: Any) -> None:
    sql = f"SELECT a.k FROM ({WINDOWED}) AS a JOIN ({WINDOWED}) AS b ON a.k = b.k"
    with pytest.raises(ds.PlanError, match=r"AND a\.window_start = b\.window_start"):
        ctx.prepare(sql)


def test_rows_joined_back_to_their_keyless_window_hold_beside_a_sparse_side() -> None:
    """A keyless windowed aggregate has one row per window: joined back to the rows over
    a range a few windows wide on integer keys, the interval join holds rows as they
    arrived (EXPLAIN says so); not over a range of many windows, nor beside an aggregate
    with keys, nor on string keys."""
    c = ds.Context(state_dir=None)
    data = pa.table(
        {
            "k": ["a", "b"],
            "v": pa.array([1, 2], pa.int64()),
            "ts": pa.array([BASE, BASE + dt.timedelta(seconds=1)], TS),
        }
    )
    c.register_arrow("t", data, event_time="ts", watermark=ds.BoundedOutOfOrderness())

    def plan(by_key: bool, reach: int, on: str = "v") -> str:
        agg = f"max({on}) AS top" if not by_key else f"k, max({on}) AS top"
        group = "window_end, k" if by_key else "window_end"
        return c.explain(
            f"SELECT r.k, r.ts FROM t AS r JOIN (SELECT {agg}, window_end AS we FROM "
            f"tumble(t, ts, INTERVAL '10 seconds') GROUP BY {group}) AS m ON r.{on} = m.top "
            f"WHERE r.ts BETWEEN m.we - INTERVAL '{reach}' SECOND AND m.we"
        )

    try:
        assert "sparse right: held as arrived" in plan(False, 10)
        assert "sparse_side=right" in plan(False, 10)  # the job graph's config
        assert "] sparse_interval_join(" in plan(False, 10)  # the job graph's operator
        assert "] interval_join(" in plan(False, 1000)
        assert "sparse" not in plan(False, 1000)  # up to 101 windows per row
        assert "sparse" not in plan(True, 10)  # one row per key and window
        assert "sparse" not in plan(False, 10, on="k")  # string keys
    finally:
        c.close()


def _window(size: int, kind: str = "tumble") -> str:
    over = (f"hop(t, ts, INTERVAL '5 seconds', INTERVAL '{size} seconds')" if kind == "hop"
            else f"{kind}(t, ts, INTERVAL '{size} seconds')")  # fmt: skip
    return (f"SELECT k, window_start AS ws, window_end AS we, count(*) AS n FROM {over} "
            "GROUP BY window_start, window_end, k")  # fmt: skip


@pytest.mark.parametrize(
    ("left", "right", "on", "keys"),
    [
        # both bounds of windows of one size: the end equality is implied by the start's
        (_window(10), _window(10), "a.ws = b.ws AND a.we = b.we", "keys=[k=k], ws = ws"),
        (_window(10), _window(10), "a.we = b.we AND a.ws = b.ws", "keys=[k=k], ws = ws"),
        (_window(10, "hop"), _window(10, "hop"), "a.ws = b.ws AND a.we = b.we", "keys=[k=k], ws = ws"),
        # windows of two sizes: both equalities hold for no pair, neither is dropped
        (_window(10), _window(20), "a.ws = b.ws AND a.we = b.we", "keys=[k=k, we=we], ws = ws"),
        # a session's end is not its start plus a size (its start carries no watermark lag,
        # so it stays a key and the end bounds the join)
        (_window(10, "session"), _window(10, "session"), "a.ws = b.ws AND a.we = b.we",
         "keys=[k=k, ws=ws], we = we"),
        # one bound only: nothing implied
        (_window(10), _window(10), "a.we = b.we", "keys=[k=k], we = we"),
    ],
)  # fmt: skip
def test_a_join_on_both_window_bounds_keys_on_one_of_them(
    ctx: Any, left: str, right: str, on: str, keys: str
) -> None:
    """Joined on both bounds of two tumble or hop windows of one size, the join keys on
    one of them (the other follows from it); results equal the batch query's."""
    sql = f"SELECT a.k, a.ws, b.n FROM ({left}) AS a JOIN ({right}) AS b ON a.k = b.k AND {on}"
    assert f"IntervalJoin({keys}" in ctx.explain(sql)
    streamed = ctx.execute_streaming(sql).to_arrow(timeout=30)
    batch = ctx.sql(sql)
    assert sorted(streamed.to_pylist(), key=str) == sorted(batch.to_pylist(), key=str)
    assert batch.num_rows > 0 or "20 seconds" in right
