"""ctx.verify(sql): batch and streaming agree on stateless and grouped queries; when they
honestly do not (a late row the streaming query drops, the batch query counts), the
differing rows and the late row are reported."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest
from nbtest_support import events

import datum_sql as ds


@pytest.fixture
def ctx() -> Any:
    with ds.Context(state_dir=None, checkpoint_interval=None) as c:
        yield c


def test_stateless_query_agrees(ctx: Any) -> None:
    ctx.register_arrow("orders", pa.table({"id": [1, 2, 3, 4], "amount": [5.0, 50.0, 7.5, 80.25]}))
    result = ctx.verify("SELECT id, amount * 2 AS doubled FROM orders WHERE amount > 6")
    assert result.ok and bool(result)
    assert result.batch.num_rows == 3 and result.differences.num_rows == 0
    assert result.late_rows == 0 and "agree: 3 rows" in str(result)
    assert ctx.queries == []  # nothing left running in the user's context


def test_grouped_and_windowed_queries_agree(ctx: Any) -> None:
    ctx.execute("""
        CREATE SOURCE bids (WATERMARK FOR date_time AS date_time - INTERVAL '1 second')
        WITH (connector = 'nexmark', stream = 'bid', rows = '20000', seed = '3')
    """)
    grouped = ctx.verify(
        "SELECT channel, count(*) AS n, sum(price) AS total FROM bids GROUP BY channel"
    )
    assert grouped.ok, grouped
    assert grouped.batch.num_rows > 4
    windowed = ctx.verify(
        "SELECT window_start, count(*) AS n, max(price) AS top FROM "
        "tumble(bids, date_time, INTERVAL '500 milliseconds') GROUP BY window_start, window_end "
        "EMIT ON WINDOW CLOSE"
    )
    assert windowed.ok, windowed
    assert windowed.batch.num_rows > 1


def test_late_rows_make_an_honest_difference(ctx: Any) -> None:
    # 00:00:03 arrives after 00:00:12 with a 2 s watermark delay: late for streaming only.
    ctx.register_arrow(
        "ev", events([0, 1, 12, 3, 25], keys=["a", "b", "a", "b", "a"]),
        event_time="ts", watermark=ds.BoundedOutOfOrderness(seconds=2), batch_size=1,
    )  # fmt: skip
    sql = (
        "SELECT window_start, k, count(*) AS n FROM tumble(ev, ts, INTERVAL '10 seconds') "
        "GROUP BY window_start, window_end, k EMIT ON WINDOW CLOSE"
    )
    result = ctx.verify(sql)
    assert not result.ok and not result
    assert result.late_rows == 1 and result.late.column("v").to_pylist() == [4]
    assert result.late.column("_late_reason").to_pylist() == ["late"]
    only_batch = result.only_in_batch.to_pylist()
    only_stream = result.only_in_stream.to_pylist()
    assert [(r["k"], r["n"]) for r in only_batch] == [("b", 2)]
    assert [(r["k"], r["n"]) for r in only_stream] == [("b", 1)]
    diff = result.differences
    assert diff.column("_in").to_pylist() == ["batch only", "stream only"]
    assert any("late" in note for note in result.notes)
    # with enough allowed lateness the same query agrees
    assert ctx.verify(sql, allowed_lateness="10 seconds").ok


def test_unbounded_generator_is_compared_over_a_snapshot(ctx: Any) -> None:
    ctx.execute(
        "CREATE SOURCE live WITH (connector = 'nexmark', stream = 'bid', events_per_second = '10')"
    )
    result = ctx.verify("SELECT auction, price FROM live WHERE price > 1000", snapshot_rows=500)
    assert result.ok
    assert any("first 500 rows" in note for note in result.notes)


def test_verify_needs_a_select(ctx: Any) -> None:
    ctx.register_arrow("t", pa.table({"a": [1]}))
    ctx.execute("CREATE SINK out WITH (connector = 'parquet', path = 'unused')")
    with pytest.raises(ds.PlanError, match="SELECT"):
        ctx.verify("INSERT INTO out SELECT a FROM t")
