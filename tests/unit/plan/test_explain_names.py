"""EXPLAIN shows the user's names and expressions, not the planner's made-up columns."""

from __future__ import annotations

import datetime as dt

import pyarrow as pa
import pytest

import datum_sql as ds
from datum_sql.notebook.display import graph_from_explain

WINDOWED = (
    "SELECT window_start, auction, count(*) AS n, max(price) + 1 AS top, "
    "count(DISTINCT bidder) AS bidders FROM tumble(bids, date_time, INTERVAL '10' SECOND) "
    "WHERE price > 10 GROUP BY window_start, window_end, auction EMIT ON WINDOW CLOSE"
)


@pytest.fixture
def ctx() -> ds.Context:
    c = ds.Context(state_dir=None)
    c.execute(
        "CREATE SOURCE bids (auction BIGINT, bidder BIGINT, price BIGINT, date_time TIMESTAMP, "
        "WATERMARK FOR date_time AS date_time - INTERVAL '1' SECOND) "
        "WITH (connector = 'nexmark', stream = 'bid', rows = '10')"
    )
    return c


def test_a_windowed_aggregate_reads_in_the_users_words(ctx: ds.Context) -> None:
    text = ctx.explain(WINDOWED)
    assert "__" not in text, text
    assert "{'" not in text and "[[" not in text, text  # no Python reprs
    assert text.startswith("settings: emit_on_window_close = true\n")
    plan = text.split("== job graph ==")[0]
    assert "tumble(date_time, size=10000000us), keys=[auction], n=count(*), max(price)" in plan
    assert "bidders=count(DISTINCT bidder)" in plan
    assert "SELECT window_start, auction, n, max(price) + 1 AS top, bidders FROM input" in plan
    graph = text.split("== job graph ==")[1]
    assert "aggregates=[n=count(*), max(price), bidders=count(DISTINCT bidder)]" in graph
    assert "window=(kind=tumble, time_column=date_time" in graph
    # the notebook still draws the job graph from the text
    drawn = graph_from_explain(text)
    assert drawn is not None and len(drawn.nodes) == len(ctx.prepare(WINDOWED).graph.nodes)


def test_a_name_reused_in_two_subqueries_is_not_given_one_meaning(ctx: ds.Context) -> None:
    ctx.register_arrow(
        "t",
        pa.table(
            {"k": ["a", "b"], "ts": [dt.datetime(2024, 1, 1), dt.datetime(2024, 1, 1, 0, 0, 5)]}
        ),
        event_time="ts",
    )
    per_window = (
        "SELECT k, window_start AS ws, count(*) AS n FROM tumble(t, ts, INTERVAL '10 seconds') "
        "GROUP BY window_start, window_end, k"
    )
    sql = f"SELECT ws, max(n) AS mx FROM ({per_window}) AS w GROUP BY ws"
    plan = ctx.explain(sql).split("== job graph ==")[0]
    # __agg0 is count(*) in the inner query and max(n) in the outer one: neither is called n
    assert "n=max(n)" not in plan and "mx=count(*)" not in plan
    assert "=max(n)" in plan and "=count(*)" in plan
