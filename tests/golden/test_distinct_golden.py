"""Golden rule for aggregates with DISTINCT, as a matrix: every aggregate of the function
list called with DISTINCT either works, and then the streamed final result equals
``ctx.sql``'s (and DuckDB's, where DuckDB has the function) in an unbounded GROUP BY, in
tumble windows (both emit modes), in hop and session windows and over a changelog (an
aggregate of an aggregate, whose rows retract), through any batch sizes and disorder and
through a checkpoint and a restore; or it is refused, by ``ctx.sql`` and by a streaming query with one message.

Rows: a key with few values (and NULL), an int, a float (multiples of 1/4), a text and a
bool column, each with many repeated values and NULLs, event times on a half-second grid.
Floats are compared to a relative 1e-9.
"""

from __future__ import annotations

import datetime as dt
import functools
import random
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from oracle import assert_restore_matches, ctx_sql_result, cut, duckdb_result
from test_aggregates_golden import BASE_US, HALF_S, arrival, assert_close_rows

import datum_sql as ds
from datum_sql.plan.function_list import function_list, without_distinct

TS = pa.timestamp("us")
SCHEMA = pa.schema([("id", pa.int64()), ("k", pa.string()), ("v", pa.int64()),
                    ("x", pa.float64()), ("s", pa.string()), ("b", pa.bool_()), ("ts", TS)])  # fmt: skip
EVENT_TIME = {"t": "ts"}

#: name -> (the call, DuckDB's spelling of it or None where DuckDB has no such function):
#: the calls that work in both paths.
WORKS: dict[str, tuple[str, str | None]] = {
    "count": ("count(DISTINCT v)", "count(DISTINCT v)"),
    "sum": ("sum(DISTINCT v)", "CAST(sum(DISTINCT v) AS BIGINT)"),
    "avg": ("avg(DISTINCT x)", "avg(DISTINCT x)"),
    "mean": ("mean(DISTINCT v)", "avg(DISTINCT v)"),
    "min": ("min(DISTINCT x)", "min(DISTINCT x)"),
    "max": ("max(DISTINCT s)", "max(DISTINCT s)"),
    "any_value": ("any_value(DISTINCT v)", "min(DISTINCT v)"),  # exact: min in both paths
    "var": ("var(DISTINCT x)", "var_samp(DISTINCT x)"),
    "var_samp": ("var_samp(DISTINCT v)", "var_samp(DISTINCT v)"),
    "var_sample": ("var_sample(DISTINCT x)", "var_samp(DISTINCT x)"),
    "variance": ("variance(DISTINCT v)", "variance(DISTINCT v)"),
    "var_pop": ("var_pop(DISTINCT x)", "var_pop(DISTINCT x)"),
    "var_population": ("var_population(DISTINCT v)", "var_pop(DISTINCT v)"),
    "stddev": ("stddev(DISTINCT x)", "stddev(DISTINCT x)"),
    "stddev_samp": ("stddev_samp(DISTINCT v)", "stddev_samp(DISTINCT v)"),
    "stddev_pop": ("stddev_pop(DISTINCT x)", "stddev_pop(DISTINCT x)"),
    "median": ("median(DISTINCT x)", "median(DISTINCT x)"),
    "approx_median": ("approx_median(DISTINCT v)", "median(DISTINCT v)"),
    "percentile_cont": ("percentile_cont(DISTINCT x, 0.25)", "quantile_cont(DISTINCT x, 0.25)"),
    "quantile_cont": ("quantile_cont(DISTINCT v, 0.75)", "quantile_cont(DISTINCT v, 0.75)"),
    "approx_percentile": ("approx_percentile(DISTINCT x, 0.9)", "quantile_cont(DISTINCT x, 0.9)"),
    "approx_percentile_cont": (
        "approx_percentile_cont(DISTINCT v, 0.5)",
        "quantile_cont(DISTINCT v, 0.5)",
    ),
    "approx_distinct": ("approx_distinct(DISTINCT v)", "count(DISTINCT v)"),
    "bit_and": ("bit_and(DISTINCT v)", "bit_and(DISTINCT v)"),
    "bit_or": ("bit_or(DISTINCT v)", "bit_or(DISTINCT v)"),
    "bit_xor": ("bit_xor(DISTINCT v)", "bit_xor(DISTINCT v)"),
    "bool_and": ("bool_and(DISTINCT b)", "bool_and(DISTINCT b)"),
    "bool_or": ("bool_or(DISTINCT b)", "bool_or(DISTINCT b)"),
    # without ORDER BY: the values in ascending order, NULL last, in both paths
    "array_agg": ("array_agg(DISTINCT v)", "array_agg(DISTINCT v ORDER BY v NULLS LAST)"),
    "array_agg_desc": (
        "array_agg(DISTINCT x ORDER BY x DESC)",
        "array_agg(DISTINCT x ORDER BY x DESC NULLS FIRST)",
    ),
    "array_agg_nulls_first": (
        "array_agg(DISTINCT v ORDER BY v NULLS FIRST)",
        "array_agg(DISTINCT v ORDER BY v NULLS FIRST)",
    ),
    "string_agg": ("string_agg(DISTINCT s, ',')", "string_agg(DISTINCT s, ',' ORDER BY s)"),
    "string_agg_desc": (
        "string_agg(DISTINCT s, '|' ORDER BY s DESC)",
        "string_agg(DISTINCT s, '|' ORDER BY s DESC)",
    ),
    "var_pop_filter": (
        "var_pop(DISTINCT x) FILTER (WHERE v > 0)",
        "var_pop(DISTINCT x) FILTER (WHERE v > 0)",
    ),
    "median_filter": ("median(DISTINCT v) FILTER (WHERE b)", "median(DISTINCT v) FILTER (WHERE b)"),
    # a row the FILTER skips is not a NULL value: array_agg keeps those only
    "array_agg_filter": (
        "array_agg(DISTINCT v) FILTER (WHERE x > 0)",
        "array_agg(DISTINCT v ORDER BY v NULLS LAST) FILTER (WHERE x > 0)",
    ),
    "string_agg_filter": (
        "string_agg(DISTINCT s, ',') FILTER (WHERE v < 2)",
        "string_agg(DISTINCT s, ',' ORDER BY s) FILTER (WHERE v < 2)",
    ),
}

_TWO = "is not supported: DISTINCT goes with aggregates of one argument"
#: (the call, the error both paths raise, what its message says): the calls refused alike.
REFUSED: list[tuple[str, type[Exception], str]] = [
    ("first_value(DISTINCT v)", ds.PlanError, "first_value(DISTINCT ...) is not supported: "
     "the value of the first row is one of the distinct values"),
    ("last_value(DISTINCT v)", ds.PlanError, "last_value(DISTINCT ...) is not supported: "
     "the value of the last row is one of the distinct values"),
    ("grouping(DISTINCT k)", ds.PlanError,
     "grouping(DISTINCT ...) is not supported: grouping() takes GROUP BY keys"),
    ("corr(DISTINCT v, x)", ds.PlanError, f"corr(DISTINCT y, x) {_TWO}"),
    ("covar(DISTINCT v, x)", ds.PlanError, f"covar_samp(DISTINCT y, x) {_TWO}"),
    ("covar_samp(DISTINCT v, x)", ds.PlanError, f"covar_samp(DISTINCT y, x) {_TWO}"),
    ("covar_pop(DISTINCT x, v)", ds.PlanError, f"covar_pop(DISTINCT y, x) {_TWO}"),
    *((f"{f}(DISTINCT v, x)", ds.PlanError, f"{f}(DISTINCT y, x) {_TWO}")
      for f in ("regr_slope", "regr_intercept", "regr_count", "regr_r2", "regr_avgx",
                "regr_avgy", "regr_sxx", "regr_syy", "regr_sxy")),
    ("count(DISTINCT v, x)", ds.PlanError,
     "count(DISTINCT a, b, ...) is not supported: DISTINCT aggregates take one argument"),
    ("array_agg(DISTINCT v ORDER BY ts)", ds.PlanError,
     "array_agg(DISTINCT ... ORDER BY ...) orders by the distinct values only"),
    ("string_agg(DISTINCT s, ',' ORDER BY id)", ds.PlanError,
     "string_agg(DISTINCT ... ORDER BY ...) orders by the distinct values only"),
    ("percentile_cont(0.5) WITHIN GROUP (ORDER BY DISTINCT x)", ds.SqlError, "Syntax error"),
]  # fmt: skip

WINDOWS = {
    "tumble": "tumble(t, ts, INTERVAL '10 seconds')",
    "tumble_emit": "tumble(t, ts, INTERVAL '10 seconds')",
    "hop": "hop(t, ts, INTERVAL '5 seconds', INTERVAL '15 seconds')",
    "session": "session(t, ts, INTERVAL '4 seconds')",
}
#: The inner aggregate of the changelog case: its rows change, so the outer one retracts.
INNER = (
    "SELECT k, id % 5 AS j, max(v) AS v, min(x) AS x, max(s) AS s, bool_or(b) AS b "
    "FROM t GROUP BY k, id % 5"
)


def query(kind: str, calls: str) -> str:
    if kind == "group_by":
        return f"SELECT k, {calls} FROM t GROUP BY k"
    if kind == "changelog":
        return f"SELECT k, {calls} FROM ({INNER}) GROUP BY k"
    emit = " EMIT ON WINDOW CLOSE" if kind == "tumble_emit" else ""
    return (
        f"SELECT k, window_start, window_end, {calls} FROM {WINDOWS[kind]} "
        f"GROUP BY window_start, window_end, k{emit}"
    )


def duckdb_query(kind: str, calls: str) -> str:
    if kind == "group_by":
        return f"SELECT k, {calls} FROM t GROUP BY k"
    w = "epoch_us(ts) // 10000000 * 10000000"
    return (
        f"SELECT k, make_timestamp({w}) AS window_start, make_timestamp({w} + 10000000) AS "
        f"window_end, {calls} FROM t GROUP BY {w}, k"
    )


def calls(names: list[str], side: int = 0) -> str:
    return ", ".join(f"{WORKS[n][side]} AS {n}" for n in names)


# -- data -----------------------------------------------------------------------------------

row_st = st.tuples(
    st.sampled_from(["a", "a", "b", "c", None]),
    st.one_of(st.none(), st.integers(-3, 3)),
    st.one_of(st.none(), st.integers(-8, 8).map(lambda i: i / 4)),
    st.sampled_from(["p", "q", "q", "r", None]),
    st.sampled_from([True, False, None]),
    st.integers(0, 120),
)


def to_table(rows: list[tuple]) -> pa.Table:
    return pa.table(
        {
            "id": pa.array(range(len(rows)), pa.int64()),
            "k": pa.array([r[0] for r in rows], pa.string()),
            "v": pa.array([r[1] for r in rows], pa.int64()),
            "x": pa.array([r[2] for r in rows], pa.float64()),
            "s": pa.array([r[3] for r in rows], pa.string()),
            "b": pa.array([r[4] for r in rows], pa.bool_()),
            "ts": pa.array([BASE_US + r[5] * HALF_S for r in rows], pa.int64()).cast(TS),
        },
        schema=SCHEMA,
    )


def random_rows(rnd: random.Random, n: int, keys: list[str | None]) -> list[tuple]:
    return [
        (rnd.choice(keys), rnd.choice([None, *range(-3, 4)]),
         rnd.choice([None, *(i / 4 for i in range(-8, 9))]), rnd.choice(["p", "q", "r", None]),
         rnd.choice([True, False, None]), rnd.randint(0, 120))
        for _ in range(n)
    ]  # fmt: skip


def stream(sql: str, batches: list[pa.RecordBatch], delay_ticks: int) -> pa.Table:
    with ds.Context(state_dir=None, checkpoint_interval=None) as ctx:
        ctx.register_arrow(
            "t",
            batches,
            schema=SCHEMA,
            event_time="ts",
            watermark=ds.BoundedOutOfOrderness(milliseconds=delay_ticks * HALF_S // 1000),
        )
        q = ctx.execute_streaming(sql)
        result = q.to_arrow(timeout=120)
        assert q.status()["late_rows"] == 0
        return result


def batch_result(sql: str, table: pa.Table) -> pa.Table:
    return ctx_sql_result(sql, {"t": table}, EVENT_TIME)


# -- the matrix -----------------------------------------------------------------------------


def _name(call: str) -> str:
    return call[: call.index("(")]


def test_the_matrix_holds_every_aggregate_of_the_function_list() -> None:
    """A new aggregate must say whether it takes DISTINCT, and docs/functions-list.md
    (:func:`without_distinct`) says what the matrix finds."""
    listed = set(function_list()["aggregate"])
    works = {_name(c) for c, _ in WORKS.values()}
    refused = {_name(c) for c, _, _ in REFUSED} - works
    assert listed == works | refused, listed ^ (works | refused)
    assert set(without_distinct()) == refused


ROWS = random_rows(random.Random(14), 160, ["a", "b", "c", None])


@pytest.mark.parametrize("kind", ["group_by", "tumble"])
@pytest.mark.parametrize("name", list(WORKS))
def test_distinct_aggregate_works_alike(name: str, kind: str) -> None:
    """One call, disordered rows in batches of 1 to 9: the streamed final result equals
    ctx.sql's and DuckDB's."""
    table = to_table(ROWS)
    rnd = random.Random(f"{name}-{kind}")
    sql = query(kind, calls([name]))
    got = stream(sql, cut(arrival(table, 4, rnd), rnd, 9), 4)
    want = batch_result(sql, table)
    assert want.num_rows > 3
    assert_close_rows(got, want)
    duck = WORKS[name][1]
    if duck is not None:
        assert_close_rows(got, duckdb_result(duckdb_query(kind, f"{duck} AS {name}"), {"t": table}))


@pytest.mark.parametrize("kind", ["group_by", "tumble"])
@pytest.mark.parametrize(("call", "error", "message"), REFUSED, ids=[c for c, _, _ in REFUSED])
def test_distinct_aggregate_refused_alike(
    call: str, error: type[Exception], message: str, kind: str
) -> None:
    sql = query(kind, f"{call} AS a")
    texts = []
    with ds.Context(state_dir=None, checkpoint_interval=None) as ctx:
        ctx.register_arrow("t", to_table(ROWS[:5]), event_time="ts")
        for run in (lambda: ctx.sql(sql), lambda: ctx.execute_streaming(sql)):
            with pytest.raises(error) as caught:
                run()
            texts.append(str(caught.value))
    assert texts[0] == texts[1]
    assert message in texts[0]


# -- all at once ----------------------------------------------------------------------------

NAMES = list(WORKS)
KINDS = ["group_by", "tumble", "tumble_emit", "changelog"]


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    rows=st.lists(row_st, max_size=60),
    kind=st.sampled_from([*KINDS, "hop", "session"]),
    disorder=st.integers(0, 6),
    max_batch=st.integers(1, 10),
    rnd=st.randoms(use_true_random=False),
)
def test_distinct_aggregates_equal_batch(
    rows: list, kind: str, disorder: int, max_batch: int, rnd: Any
) -> None:
    """Every working call in one query, any rows, batch sizes and disorder, over a
    changelog and in hop and session windows too: the final streamed rows equal ctx.sql's."""
    table = to_table(rows)
    sql = query(kind, calls(NAMES))
    got = stream(sql, cut(arrival(table, disorder, rnd), rnd, max_batch), disorder)
    assert_close_rows(got, batch_result(sql, table))


@pytest.mark.parametrize("kind", KINDS)
def test_distinct_aggregates_through_checkpoint_and_restore(kind: str, tmp_path: Path) -> None:
    """300 disordered rows, checkpointed half-way, crashed at three quarters and resumed
    in a new context: the sink ends holding ctx.sql's result."""
    rnd = random.Random(kind)
    emit = kind == "tumble_emit"
    table = to_table(random_rows(rnd, 300, ["a", "b", None] if emit else ["a", "b", "c"]))
    sql = query(kind, calls(NAMES))
    assert_restore_matches(
        sql,
        sql,
        {"t": cut(arrival(table, 4, rnd), rnd, 12)},
        tmp_path / "state",
        event_time=EVENT_TIME,
        watermark={"t": ds.BoundedOutOfOrderness(milliseconds=4 * HALF_S // 1000)},
        allowed_lateness=dt.timedelta(milliseconds=4 * HALF_S // 1000),
        sink="parquet" if emit else "duckdb",
        primary_key=None
        if emit
        else ("k" if kind in ("group_by", "changelog") else "k, window_start"),
        same=assert_close_rows,
        oracle=functools.partial(ctx_sql_result, event_time=EVENT_TIME),
    )
