"""Scans narrowed to the columns a query reads (``plan/prune.py``), as the sources see them."""

from __future__ import annotations

import pytest

import datum_sql as ds

SOURCES = [
    "CREATE SOURCE bids (WATERMARK FOR date_time AS date_time - INTERVAL '1' SECOND) "
    "WITH (connector = 'nexmark', stream = 'bid', rows = '1000')",
    "CREATE SOURCE auctions (WATERMARK FOR date_time AS date_time - INTERVAL '1' SECOND) "
    "WITH (connector = 'nexmark', stream = 'auction', rows = '1000')",
    "CREATE SOURCE plain WITH (connector = 'nexmark', stream = 'bid', rows = '1000')",
]


@pytest.fixture
def ctx() -> ds.Context:
    c = ds.Context(state_dir=None)
    for s in SOURCES:
        c.execute(s)
    return c


def read(ctx: ds.Context, sql: str) -> dict[str, list[str]]:
    graph = ctx.prepare(sql).graph
    return {n.kind: n.schema.names for n in graph.sources}


ALL_BID = ["auction", "bidder", "price", "channel", "url", "date_time", "extra"]


@pytest.mark.parametrize(
    ("sql", "columns"),
    [
        (
            "SELECT auction, price FROM bids WHERE bidder > 3",
            ["auction", "bidder", "price", "date_time"],
        ),
        ("SELECT auction FROM plain", ["auction"]),
        ("SELECT price * 2 AS p FROM plain WHERE url LIKE '%x%'", ["price", "url"]),
        ("SELECT * FROM bids", ALL_BID),
        ("SELECT *, price * 2 AS p FROM plain", ALL_BID),
        (
            "SELECT window_start, auction, count(*) AS n FROM TUMBLE(bids, date_time, "
            "INTERVAL '10' SECOND) GROUP BY window_start, window_end, auction",
            ["auction", "date_time"],
        ),
        ("SELECT bidder, max(price) AS m FROM plain GROUP BY bidder", ["bidder", "price"]),
        (
            "SELECT auction FROM plain WHERE price > 10 UNION ALL SELECT bidder FROM plain",
            ["auction", "bidder", "price"],
        ),
    ],
)
def test_sources_read_what_the_query_reads(ctx: ds.Context, sql: str, columns: list[str]) -> None:
    (got,) = read(ctx, sql).values()
    assert got == columns


def test_a_join_reads_what_it_and_the_query_after_it_read(ctx: ds.Context) -> None:
    got = read(
        ctx,
        "SELECT b.auction, b.price, a.item_name FROM bids b JOIN auctions a ON b.auction = a.id "
        "AND b.date_time BETWEEN a.date_time AND a.expires",
    )
    assert got == {
        "bids": ["auction", "price", "date_time"],
        "auctions": ["id", "item_name", "date_time", "expires"],
    }


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT count(*) AS n FROM plain",
        "SELECT count(*) AS n FROM plain WHERE true",
        "SELECT count(*) AS n FROM (SELECT price * 2 AS p FROM plain) AS x",
    ],
)
def test_a_query_reading_no_column_still_counts_every_row(ctx: ds.Context, sql: str) -> None:
    (columns,) = read(ctx, sql).values()
    assert len(columns) == 1  # one column carries the row count
    assert ctx.execute_streaming(sql).to_arrow(timeout=60).column("n").to_pylist() == [1000]


def test_a_source_with_a_late_output_sink_reads_every_column(
    ctx: ds.Context, tmp_path: object
) -> None:
    ctx.execute(f"CREATE SINK late WITH (connector = 'parquet', path = '{tmp_path}/late')")
    graph = ctx.prepare("SELECT auction FROM bids", late_output="late").graph
    assert [n.schema.names for n in graph.sources] == [ALL_BID]
