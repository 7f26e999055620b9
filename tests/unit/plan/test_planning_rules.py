"""Planning rules that need more than a fixture line: what EXPLAIN says closes a window,
the hop() windows-per-row limit and its setting, errors while a query runs."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pyarrow as pa
import pytest

import datum_sql as ds

TS = pa.timestamp("us")
BASE = dt.datetime(2024, 1, 1)


def table(n: int = 3) -> pa.Table:
    return pa.table(
        {
            "id": pa.array(range(n), pa.int64()),
            "note": pa.array(["7", "x", "9"][:n], pa.string()),
            "ts": pa.array([BASE + dt.timedelta(seconds=i) for i in range(n)], TS),
        }
    )


@pytest.fixture
def ctx() -> Any:
    c = ds.Context(state_dir=None)
    yield c
    c.close()


WINDOWED = (
    "SELECT window_start, count(*) AS n FROM tumble({t}, ts, INTERVAL '1 second') "
    "GROUP BY window_start, window_end EMIT ON WINDOW CLOSE"
)


def test_explain_names_the_watermark_that_closes_the_windows(ctx: Any) -> None:
    ctx.register_arrow(
        "delayed", table(), event_time="ts", watermark=ds.BoundedOutOfOrderness(seconds=5)
    )
    ctx.register_arrow("ending", table(), event_time="ts")
    ctx.execute(
        "CREATE SOURCE live (WATERMARK FOR date_time AS date_time - INTERVAL '250' MILLISECOND) "
        "WITH (connector = 'nexmark', stream = 'bid')"
    )
    plans = {
        name: ctx.execute("EXPLAIN " + WINDOWED.format(t=name)) for name in ("delayed", "ending")
    }
    plans["live"] = ctx.execute(
        "EXPLAIN SELECT window_start, count(*) AS n FROM tumble(live, date_time, INTERVAL '1 second') "
        "GROUP BY window_start, window_end"
    )
    assert (
        "closed by watermark max delayed.ts - 5 seconds / +inf at the end of delayed"
        in plans["delayed"]
    )
    assert (
        "closed by watermark ds.Watermark markers of ending / +inf at the end of ending"
        in plans["ending"]
    )
    assert "closed by watermark max live.date_time - 250 milliseconds)" in plans["live"]


def test_a_bounded_source_without_a_watermark_policy_closes_its_windows_at_its_end(
    ctx: Any,
) -> None:
    ctx.register_arrow("ending", table(), event_time="ts")
    result = ctx.execute_streaming(WINDOWED.format(t="ending")).to_arrow(timeout=60)
    assert result.column("n").to_pylist() == [1, 1, 1]


def test_max_windows_per_row_can_be_raised_with_set(ctx: Any) -> None:
    ctx.register_arrow("t", table(), event_time="ts", watermark=ds.BoundedOutOfOrderness())
    inner = (
        "SELECT window_start, count(*) AS n FROM hop(t, ts, INTERVAL '1 second', "
        "INTERVAL '2000 seconds') GROUP BY window_start, window_end"
    )
    sql = f"SELECT count(*) AS windows, sum(n) AS memberships FROM ({inner}) AS w"
    with pytest.raises(ds.PlanError, match=r"puts a row in up to 2000 windows .* limit of 1000"):
        ctx.prepare(inner)
    with pytest.raises(ds.PlanError, match="limit of 1000"):
        ctx.sql(sql)
    ctx.execute("SET max_windows_per_row = 2000")
    assert ctx.sql(sql).to_pylist() == [{"windows": 2002, "memberships": 6000}]
    streamed = ctx.execute_streaming(inner + " EMIT ON WINDOW CLOSE").to_arrow(timeout=60)
    assert (streamed.num_rows, sum(streamed.column("n").to_pylist())) == (2002, 6000)
    ctx.execute("SET max_windows_per_row = 1999")
    with pytest.raises(ds.PlanError, match="limit of 1999"):
        ctx.prepare(inner)


def test_a_value_that_cannot_be_evaluated_fails_the_query_naming_it(ctx: Any) -> None:
    ctx.register_arrow("t", table())
    sql = "SELECT id, CAST(note AS BIGINT) AS n FROM t"
    q = ctx.execute_streaming(sql)
    with pytest.raises(ds.QueryFailed) as info:
        q.wait(60)
    message = str(info.value)
    assert (
        f"cannot evaluate {sql}: Cast error: Cannot cast string 'x' to value of BIGINT type"
        in message
    )
    assert "DataFusion error" not in message and "Int64" not in message
    cause = info.value.__cause__
    assert isinstance(cause, ds.SchemaError) and "DataFusion" not in str(cause)
    with pytest.raises(ds.PlanError) as batch:
        ctx.sql(sql)
    assert "Cannot cast string 'x' to value of BIGINT type" in str(batch.value)
    assert "DataFusion error" not in str(batch.value)


def test_unnamed_aggregates_are_named_after_their_function(ctx: Any) -> None:
    ctx.register_arrow("t", table())
    sql = (
        "SELECT count(*) FILTER (WHERE id > 0), approx_percentile(id, 0.5), "
        "percentile_cont(0.5) WITHIN GROUP (ORDER BY id) FROM t"
    )
    names = ["count", "approx_percentile", "percentile_cont"]
    assert ctx.sql(sql).column_names == names
    assert ctx.execute_streaming(sql).to_arrow(timeout=60).column_names == names
