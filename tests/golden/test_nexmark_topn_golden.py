"""Nexmark q18 (the last bid per bidder and auction) and q19 (the top 10 bids per auction),
as RisingWave's suite writes them, streamed over the built-in ``nexmark`` generator equal
DuckDB's batch result over the same bids; once more through a checkpoint and a restore.

q19 ranks by price, and a few bids of one auction share a price: which of them gets which
row number is the arrival order's choice, so q19 is compared on (auction, price,
rank_number), which ties do not change. q18's date_time has no ties per bidder and auction.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest
from oracle import assert_restore_matches, assert_same_rows, duckdb_result

import datum_sql as ds

Q18 = (
    "SELECT auction, bidder, price, channel, url, date_time, extra FROM (SELECT *, ROW_NUMBER() "
    "OVER (PARTITION BY bidder, auction ORDER BY date_time DESC) AS rank_number FROM bid) "
    "WHERE rank_number <= 1"
)
Q19 = (
    "SELECT * FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY auction ORDER BY price DESC) "
    "AS rank_number FROM bid) WHERE rank_number <= 10"
)
Q19_RANKS = Q19.replace("SELECT * FROM", "SELECT auction, price, rank_number FROM", 1)
EVENTS = 20_000


@pytest.fixture(scope="module")
def nexmark() -> Iterator[tuple[ds.Context, pa.Table]]:
    ctx = ds.Context(state_dir=None)
    ctx.execute(
        "CREATE SOURCE bid (WATERMARK FOR date_time AS date_time - INTERVAL '4 seconds') "
        f"WITH (connector = 'nexmark', stream = 'bid', rows = '{EVENTS}')"
    )
    yield ctx, ctx.sql("SELECT * FROM bid")
    ctx.close()


@pytest.mark.parametrize(
    ("sql", "columns"), [(Q18, None), (Q19, ["auction", "price", "rank_number"])]
)
def test_q18_q19_equal_duckdb(
    nexmark: tuple[ds.Context, pa.Table], sql: str, columns: list | None
) -> None:
    ctx, bids = nexmark
    q = ctx.execute_streaming(sql)
    got = q.to_arrow(timeout=120)
    assert q.status()["late_rows"] == 0
    want = duckdb_result(sql, {"bid": bids})
    assert want.num_rows > 1000
    assert_same_rows(
        got.select(columns or got.column_names), want.select(columns or want.column_names)
    )


@pytest.mark.parametrize(
    ("sql", "key"), [(Q18, "bidder, auction"), (Q19_RANKS, "auction, rank_number")]
)
def test_q18_q19_through_checkpoint_and_restore(
    nexmark: tuple[ds.Context, pa.Table], sql: str, key: str, tmp_path: Path
) -> None:
    """The generator's bids in event-time order, in batches of 500, into a DuckDB upsert."""
    _, bids = nexmark
    ordered = bids.sort_by("date_time")
    assert_restore_matches(
        sql,
        sql,
        {"bid": ordered.to_batches(max_chunksize=500)},
        tmp_path / "state",
        event_time={"bid": "date_time"},
        primary_key=key,
    )
