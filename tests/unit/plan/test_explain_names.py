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


#: String literals that read like the planner's names or like a redundant alias.
LITERALS = ("'x AS x'", "'__ts'", '\'"__agg"."__k0"\'', "'count_star(*)'")


def test_string_literals_are_shown_as_written(ctx: ds.Context) -> None:
    shown = ", ".join(f"{lit} AS l{i}" for i, lit in enumerate(LITERALS))
    sql = WINDOWED.replace("SELECT window_start,", f"SELECT window_start, {shown},")
    text = ctx.explain(sql)
    plan, graph = text.split("== job graph ==")
    calc = next(line for line in plan.splitlines() if "AS l0" in line)
    assert f"SELECT window_start, {shown}, auction, n, max(price) + 1 AS top" in calc
    assert "__" not in calc.replace("'__ts'", "").replace('"__agg"."__k0"', "")
    # the job graph's Calc SQL, the query as the user wrote it and the program keep them too
    node = next(line for line in graph.splitlines() if line.startswith("calc_3 "))
    assert f"sql=SELECT window_start, {shown}, auction, n, max(price) + 1 AS top" in node
    assert f"query=SELECT window_start, {shown}, auction, COUNT(*) AS n" in node
    assert f"program=[$window_start AS window_start, {shown}, $auction AS auction" in node


def test_a_literal_in_a_join_filter_is_shown_as_written() -> None:
    ctx = ds.Context(state_dir=None)
    for stream in ("person", "auction"):
        ctx.execute(f"CREATE SOURCE {stream}s WITH (connector = 'nexmark', stream = '{stream}')")
    text = ctx.explain(
        "SELECT p.name, a.item_name FROM persons p JOIN auctions a ON p.id = a.seller "
        "AND a.date_time BETWEEN p.date_time AND p.date_time + INTERVAL '10' SECOND "
        "AND a.item_name <> 'x AS x' AND p.city <> '__ts'"
    )
    # the filter is a pyarrow expression: its literals are double-quoted
    join = next(line for line in text.splitlines() if line.strip().startswith("IntervalJoin("))
    assert 'filter ((a.item_name != "x AS x") and (p.city != "__ts")))' in join, join
    graph = text.split("== job graph ==")[1]
    assert 'residual=((a.item_name != "x AS x") and (p.city != "__ts"))' in graph, graph


def test_a_literal_holding_a_quote_in_a_compiled_program_is_shown_as_written(
    ctx: ds.Context,
) -> None:
    # the program shows it as Python does, "it's __ts"; neither it nor the LIKE pattern
    # reads as a name
    text = ctx.explain(
        "SELECT auction, 'it''s __ts AS __ts' AS s FROM bids WHERE CAST(bidder AS VARCHAR) LIKE '%__a1%'"
    )
    graph = text.split("== job graph ==")[1]
    program = graph.split("program=", 1)[1]
    assert '"it\'s __ts AS __ts" AS s' in program and "'%__a1%'" in program, program
