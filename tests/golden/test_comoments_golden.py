"""Golden rule for the two-input aggregates (corr, covar_*, regr_*): the streamed final
result equals ``ctx.sql`` (DataFusion) running the same SQL over the same rows, in an
unbounded GROUP BY (both through a changelog of its own and over another aggregate's
changelog, whose retractions take rows back out) and in tumble windows, through any batch
sizes and disorder, and through a checkpoint and a restore.

Rows: keys with few values, y an int and x a float (multiples of 1/4, so that a batch's
sums are exact and DataFusion's grouped corr, which works from raw sums, agrees on a
constant column), each sometimes NULL; plus a key with one row, one whose x is constant
and one whose x is always NULL. Floats are compared to a relative 1e-9 (partials merge in
another order than the batch's running update).
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
from oracle import assert_restore_matches, ctx_sql_result, cut
from test_aggregates_golden import BASE_US, HALF_S, SCHEMA, arrival, assert_close_rows, stream

import datum_sql as ds

EVENT_TIME = {"t": "ts"}
CALLS = {
    "c": "corr(v, x)",
    "cx": "corr(x, v)",
    "cv": "covar(v, x)",
    "cs": "covar_samp(x, v)",
    "cp": "covar_pop(v, x)",
    "sl": "regr_slope(v, x)",
    "ic": "regr_intercept(v, x)",
    "n": "regr_count(v, x)",
    "r2": "regr_r2(v, x)",
    "r2x": "regr_r2(x, v)",
    "ax": "regr_avgx(v, x)",
    "ay": "regr_avgy(v, x)",
    "sxx": "regr_sxx(v, x)",
    "syy": "regr_syy(v, x)",
    "sxy": "regr_sxy(v, x)",
    "fc": "corr(v, x) FILTER (WHERE id % 3 <> 0)",
    "fs": "regr_slope(v * 2 + 1, x - v) FILTER (WHERE x > -2)",
}
AGGS = ", ".join(f"{e} AS {n}" for n, e in CALLS.items())
QUERIES = {
    "group_by": f"SELECT k, {AGGS} FROM t GROUP BY k",
    "tumble": (
        f"SELECT k, window_start, window_end, {AGGS} FROM tumble(t, ts, INTERVAL '10 seconds') "
        "GROUP BY window_start, window_end, k"
    ),
    "tumble_emit": (
        f"SELECT k, window_start, window_end, {AGGS} FROM tumble(t, ts, INTERVAL '10 seconds') "
        "GROUP BY window_start, window_end, k EMIT ON WINDOW CLOSE"
    ),
    # over a changelog: each (k, j) group's sums change, so rows are retracted and re-added
    "changelog": (
        "SELECT k, corr(s, m) AS c, covar_samp(s, m) AS cs, covar_pop(m, s) AS cp, "
        "regr_slope(s, m) AS sl, regr_intercept(s, m) AS ic, regr_count(s, m) AS n, "
        "regr_r2(s, m) AS r2, regr_avgx(s, m) AS ax, regr_avgy(s, m) AS ay, "
        "regr_sxx(s, m) AS sxx, regr_syy(s, m) AS syy, regr_sxy(s, m) AS sxy "
        "FROM (SELECT k, id % 4 AS j, sum(v) AS s, max(x) AS m FROM t GROUP BY k, id % 4) "
        "GROUP BY k"
    ),
}

row_st = st.tuples(
    st.sampled_from(["a", "a", "b", "c"]),
    st.one_of(st.none(), st.integers(-6, 6)),
    st.one_of(st.none(), st.integers(-20, 20).map(lambda i: i / 4)),
    st.integers(0, 120),
)
#: A key with one row, one whose x is constant, one whose x is always NULL.
SPECIAL = [
    ("one", 3, 1.5, 7),
    *(("flat", v, 2.75, t) for v, t in ((1, 2), (4, 30), (-2, 31), (None, 50), (5, 90))),
    *(("nox", v, None, t) for v, t in ((1, 5), (2, 44))),
]


def to_table(rows: list[tuple]) -> pa.Table:
    return pa.table(
        {
            "id": pa.array(range(len(rows)), pa.int64()),
            "k": pa.array([r[0] for r in rows], pa.string()),
            "v": pa.array([r[1] for r in rows], pa.int64()),
            "x": pa.array([r[2] for r in rows], pa.float64()),
            "ts": pa.array([BASE_US + r[3] * HALF_S for r in rows], pa.int64()).cast(
                SCHEMA[4].type
            ),
        },
        schema=SCHEMA,
    )


def batch_result(sql: str, table: pa.Table) -> pa.Table:
    return ctx_sql_result(sql, {"t": table}, EVENT_TIME)


SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(
    rows=st.lists(row_st, max_size=50),
    kind=st.sampled_from(sorted(QUERIES)),
    disorder=st.integers(0, 8),
    max_batch=st.integers(1, 10),
    rnd=st.randoms(use_true_random=False),
)
def test_co_moments_equal_batch(
    rows: list, kind: str, disorder: int, max_batch: int, rnd: Any
) -> None:
    """Any rows, batch sizes and disorder: the final streamed rows equal ctx.sql's."""
    table = to_table(rows + SPECIAL)
    got = stream(QUERIES[kind], cut(arrival(table, disorder, rnd), rnd, max_batch), disorder)
    want = batch_result(QUERIES[kind], table)
    assert want.num_rows > 0
    assert_close_rows(got, want)


def test_edge_groups_have_the_batch_values() -> None:
    """The special keys, one row per batch: NULL where DataFusion's are NULL (one row; a
    constant x for corr, slope, intercept, r2), 0 counts and NULLs with no complete pair."""
    table = to_table(SPECIAL)
    got = stream(QUERIES["group_by"], cut(table.sort_by("ts"), random.Random(1), 1), 0)
    assert_close_rows(got, batch_result(QUERIES["group_by"], table))
    by_key = {r["k"]: r for r in got.to_pylist()}
    one, flat, nox = by_key["one"], by_key["flat"], by_key["nox"]
    assert (one["n"], one["c"], one["cs"], one["cp"], one["sxx"]) == (1, None, None, 0.0, 0.0)
    assert (flat["n"], flat["sl"], flat["ic"], flat["r2"], flat["c"]) == (4, None, None, None, None)
    assert (flat["sxx"], flat["sxy"], flat["ax"]) == (0.0, 0.0, 2.75)
    assert nox["n"] == 0 and all(nox[c] is None for c in CALLS if c not in ("n", "fc", "fs"))


RESTORE_CASES = ["group_by", "tumble", "tumble_emit", "changelog"]


@pytest.mark.parametrize("case", RESTORE_CASES)
def test_co_moments_through_checkpoint_and_restore(case: str, tmp_path: Path) -> None:
    """300 disordered rows, checkpointed half-way, crashed at three quarters and resumed
    in a new context: the sink ends holding ctx.sql's result."""
    rnd = random.Random(case)
    rows = [
        (rnd.choice(["a", "b", "c"]),
         rnd.choice([None, *range(-6, 7)]),
         rnd.randint(-20, 20) / 4 if rnd.random() > 0.1 else None,
         rnd.randint(0, 120))
        for _ in range(300)
    ]  # fmt: skip
    table = to_table(rows + SPECIAL)
    batches = cut(arrival(table, 6, rnd), rnd, 12)
    emit = case == "tumble_emit"
    keys = "k" if case in ("group_by", "changelog") else "k, window_start"
    assert_restore_matches(
        QUERIES[case],
        QUERIES[case],
        {"t": batches},
        tmp_path / "state",
        event_time=EVENT_TIME,
        watermark={"t": ds.BoundedOutOfOrderness(milliseconds=3 * HALF_S // 1000)},
        allowed_lateness=dt.timedelta(milliseconds=3 * HALF_S // 1000),
        sink="parquet" if emit else "duckdb",
        primary_key=None if emit else keys,
        same=assert_close_rows,
        oracle=functools.partial(ctx_sql_result, event_time=EVENT_TIME),
    )
