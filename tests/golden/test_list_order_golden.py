"""Golden rule for ``array_agg``/``string_agg`` without ORDER BY: refused by ``ctx.sql`` and
by a streaming query with one message, in every shape of query (the order of a group's
rows is defined in neither path: plan/list_order.py), and the two calls the message
proposes instead give equal lists in both paths and in DuckDB: ``ORDER BY`` the event time
(with ``id``, the row's place in the table, breaking ties: the rows as they happened) and
DISTINCT (the distinct values, ascending), in an unbounded GROUP BY, tumble (both emit
modes), hop and session windows and over a changelog, through any batch sizes and
disorder and through a checkpoint and a restore.

Rows and helpers are the DISTINCT matrix's (test_distinct_golden.py).
"""

from __future__ import annotations

import datetime as dt
import functools
import random
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from oracle import assert_restore_matches, ctx_sql_result, cut, duckdb_result
from test_aggregates_golden import HALF_S, arrival, assert_close_rows
from test_distinct_golden import (
    EVENT_TIME,
    ROWS,
    batch_result,
    duckdb_query,
    query,
    random_rows,
    row_st,
    stream,
    to_table,
)

import datum_sql as ds

#: the calls refused, each with the call its message proposes
UNORDERED = {
    "array_agg(v)": "array_agg(x ORDER BY col)",
    "string_agg(s, ',')": "string_agg(x, ',' ORDER BY col)",
    "array_agg(x) FILTER (WHERE v > 0)": "array_agg(DISTINCT x)",
    "string_agg(s, '|') FILTER (WHERE b)": "string_agg(DISTINCT x, ',')",
}
KINDS = ["group_by", "tumble", "tumble_emit", "hop", "session", "changelog"]
#: queries of other shapes, whose rows have no order either
OTHER_SHAPES = {
    "join": "SELECT a.k, {call} FROM t AS a JOIN (SELECT id AS bid, ts AS bts FROM t) AS b "
    "ON a.id = b.bid AND a.ts = b.bts "
    "GROUP BY a.k",
    "union": "SELECT k, {call} FROM (SELECT k, v, x, s, b FROM t WHERE v > 0 UNION ALL "
    "SELECT k, v, x, s, b FROM t WHERE v <= 0) AS u GROUP BY k",
    "derived": "SELECT k, {call} FROM (SELECT * FROM t WHERE id % 2 = 0) AS d GROUP BY k",
    "no_group": "SELECT {call} FROM t",
    "having": "SELECT k FROM t GROUP BY k HAVING cardinality({call}) > 1",
}


def _refusals(sql: str) -> list[str]:
    texts = []
    with ds.Context(state_dir=None, checkpoint_interval=None) as ctx:
        ctx.register_arrow("t", to_table(ROWS[:5]), event_time="ts")
        for run in (lambda: ctx.sql(sql), lambda: ctx.execute_streaming(sql)):
            with pytest.raises(ds.PlanError) as caught:
                run()
            texts.append(str(caught.value))
    return texts


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("call", list(UNORDERED))
def test_unordered_list_refused_alike(call: str, kind: str) -> None:
    """Every kind of GROUP BY: both paths raise the one message, which names the call and
    proposes its ORDER BY and DISTINCT forms."""
    batch, streaming = _refusals(query(kind, f"{call} AS a"))
    assert batch == streaming
    name = call[: call.index("(")]
    assert batch.startswith(f"{name}() needs ORDER BY: the rows of a group come in no defined")
    assert UNORDERED[call] in batch


@pytest.mark.parametrize("shape", list(OTHER_SHAPES))
def test_unordered_list_refused_alike_in_every_shape(shape: str) -> None:
    batch, streaming = _refusals(OTHER_SHAPES[shape].format(call="array_agg(v)"))
    assert batch == streaming
    assert "write array_agg(x ORDER BY col)" in batch


# -- what the message proposes works alike ----------------------------------------------------

#: name -> (the call, DuckDB's spelling of it): ORDER BY the event time, and DISTINCT
FIXED = {
    "as_happened": ("array_agg(v ORDER BY ts, id)", "array_agg(v ORDER BY ts, id)"),
    "text_as_happened": (
        "string_agg(s, ',' ORDER BY ts, id)",
        "string_agg(s, ',' ORDER BY ts, id)",
    ),
    "filtered": (
        "array_agg(x ORDER BY ts, id) FILTER (WHERE v > 0)",
        "array_agg(x ORDER BY ts, id) FILTER (WHERE v > 0)",
    ),
    "distinct": ("array_agg(DISTINCT v)", "array_agg(DISTINCT v ORDER BY v NULLS LAST)"),
    "text_distinct": ("string_agg(DISTINCT s, '|')", "string_agg(DISTINCT s, '|' ORDER BY s)"),
}
#: over a changelog the inner rows have no event time: the inner key orders them
FIXED_OVER_CHANGELOG = {
    "as_happened": "array_agg(v ORDER BY j)",
    "text_as_happened": "string_agg(s, ',' ORDER BY j)",
    "filtered": "array_agg(x ORDER BY j) FILTER (WHERE v > 0)",
    "distinct": "array_agg(DISTINCT v)",
    "text_distinct": "string_agg(DISTINCT s, '|')",
}


def fixed_calls(kind: str, side: int = 0) -> str:
    if kind == "changelog" and side == 0:
        return ", ".join(f"{c} AS {n}" for n, c in FIXED_OVER_CHANGELOG.items())
    return ", ".join(f"{c[side]} AS {n}" for n, c in FIXED.items())


@pytest.mark.parametrize("kind", KINDS)
def test_proposed_calls_work_alike(kind: str) -> None:
    """Disordered rows in batches of 1 to 9: the streamed lists equal ctx.sql's, and
    DuckDB's where the test spells the query for it."""
    table = to_table(ROWS)
    rnd = random.Random(f"lists-{kind}")
    sql = query(kind, fixed_calls(kind))
    got = stream(sql, cut(arrival(table, 4, rnd), rnd, 9), 4)
    want = batch_result(sql, table)
    assert want.num_rows > 3
    assert_close_rows(got, want)
    assert any(len(a or []) > 2 for a in want.column("as_happened").to_pylist())
    if kind in ("group_by", "tumble", "tumble_emit"):
        duck = duckdb_query("group_by" if kind == "group_by" else "tumble", fixed_calls(kind, 1))
        assert_close_rows(got, duckdb_result(duck, {"t": table}))


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    rows=st.lists(row_st, max_size=60),
    kind=st.sampled_from(KINDS),
    disorder=st.integers(0, 6),
    max_batch=st.integers(1, 10),
    rnd=st.randoms(use_true_random=False),
)
def test_proposed_calls_equal_batch(
    rows: list, kind: str, disorder: int, max_batch: int, rnd: Any
) -> None:
    table = to_table(rows)
    sql = query(kind, fixed_calls(kind))
    got = stream(sql, cut(arrival(table, disorder, rnd), rnd, max_batch), disorder)
    assert_close_rows(got, batch_result(sql, table))


@pytest.mark.parametrize("kind", ["group_by", "session", "changelog"])
def test_proposed_calls_through_checkpoint_and_restore(kind: str, tmp_path: Path) -> None:
    rnd = random.Random(f"lists-{kind}")
    table = to_table(random_rows(rnd, 300, ["a", "b", "c"]))
    sql = query(kind, fixed_calls(kind))
    assert_restore_matches(
        sql,
        sql,
        {"t": cut(arrival(table, 4, rnd), rnd, 12)},
        tmp_path / "state",
        event_time=EVENT_TIME,
        watermark={"t": ds.BoundedOutOfOrderness(milliseconds=4 * HALF_S // 1000)},
        allowed_lateness=dt.timedelta(milliseconds=4 * HALF_S // 1000),
        sink="duckdb",
        primary_key="k" if kind != "session" else "k, window_start",
        same=assert_close_rows,
        oracle=functools.partial(ctx_sql_result, event_time=EVENT_TIME),
    )
