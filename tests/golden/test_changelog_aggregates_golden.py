"""Golden rule for aggregates over a changelog: an unbounded GROUP BY (or a global
aggregate) over the result of another unbounded GROUP BY, of an unbounded top-N, two
levels deep, and a top-N over an unbounded GROUP BY, streamed with random batch sizes (so each inner update reaches the outer
aggregate as a retraction and an insertion), equals DuckDB running the same nested query
as a batch.

Rows: a key ``k`` with few values and NULL, a small int ``j``, an int ``v`` and a float
``x`` (multiples of 1/4) with NULLs, and ``seq``, the arrival position (DuckDB breaks a
top-N's ties by it, as the streaming top-N does by arrival). Inner groups vanish from the
changelog when an inner ``HAVING`` stops holding, and outer groups vanish when the inner
values they group by move on (GROUP BY an inner count or max): a vanished group must be
gone from the result, as in batch SQL.
"""

from __future__ import annotations

import math
import random
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from oracle import assert_restore_matches, cut, duckdb_result

import datum_sql as ds

SCHEMA = pa.schema(
    [("k", pa.string()), ("j", pa.int64()), ("v", pa.int64()), ("x", pa.float64()),
     ("seq", pa.int64())]
)  # fmt: skip
SETTINGS = settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])

#: Outer aggregates over an inner GROUP BY k, j (columns m, n, sx, k): (ours, DuckDB's);
#: an ORDER BY inside one is total (k, j is unique).
OUTER = {
    "c": ("count(*)", "count(*)"),
    "cm": ("count(m)", "count(m)"),
    "sm": ("sum(m)", "CAST(sum(m) AS BIGINT)"),
    "am": ("avg(m)", "avg(m)"),
    "lo": ("min(m)", "min(m)"),
    "hi": ("max(sx)", "max(sx)"),
    "dm": ("count(DISTINCT m)", "count(DISTINCT m)"),
    "sdm": ("sum(DISTINCT n)", "CAST(sum(DISTINCT n) AS BIGINT)"),
    "adx": ("avg(DISTINCT sx)", "avg(DISTINCT sx)"),
    "hdm": ("max(DISTINCT m)", "max(DISTINCT m)"),
    "ssx": ("sum(sx)", "sum(sx)"),
    "vm": ("var_pop(m)", "var_pop(m)"),
    "sdn": ("stddev(n)", "stddev(n)"),
    "md": ("median(m)", "median(m)"),
    "ba": ("bool_and(m > 0)", "bool_and(m > 0)"),
    "bo": ("bool_or(sx < 0)", "bool_or(sx < 0)"),
    "arr": ("array_agg(m ORDER BY k NULLS FIRST, j)", "array_agg(m ORDER BY k NULLS FIRST, j)"),
    "str": ("string_agg(k, ',' ORDER BY k DESC)", "string_agg(k, ',' ORDER BY k DESC)"),
    "fc": ("count(*) FILTER (WHERE m > 0)", "count(*) FILTER (WHERE m > 0)"),
}
NAMES = sorted(OUTER)
#: Outer GROUP BY: the inner key j (groups stay), the inner count n or max m (groups move
#: and vanish as the inner values change; m has a NULL group), or none (one global row).
OUTER_KEYS = ("j", "n", "m", "")


def inner(having: bool) -> str:
    cond = " HAVING count(*) <= 2" if having else ""
    return "SELECT k, j, max(v) AS m, count(*) AS n, sum(x) AS sx FROM t GROUP BY k, j" + cond


def over_group_by(names: list[str], key: str, having: bool) -> tuple[str, str]:
    def q(side: int) -> str:
        aggs = ", ".join(f"{OUTER[n][side]} AS {n}" for n in names)
        if not key:
            return f"SELECT {aggs} FROM ({inner(having)}) q"
        return f"SELECT {key}, {aggs} FROM ({inner(having)}) q GROUP BY {key}"

    return q(0), q(1)


def top_n(where: str, key: bool) -> tuple[str, str]:
    """An aggregate over an unbounded top-N of ``t`` by ``v`` per ``k``."""

    def q(order: str) -> str:
        ranked = (
            f"SELECT k, v, x, seq FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY k ORDER BY "
            f"{order}) AS rn FROM t) r WHERE {where}"
        )
        aggs = (
            "count(*) AS n, count(v) AS nv, min(x) AS lo, max(seq) AS last, "
            "count(DISTINCT v) AS d, array_agg(seq ORDER BY seq) AS seqs"
        )
        if key:
            return f"SELECT k, {aggs} FROM ({ranked}) q GROUP BY k"
        return f"SELECT {aggs}, sum(seq) AS total FROM ({ranked}) q"

    return q("v DESC NULLS LAST"), q("v DESC NULLS LAST, seq")


def two_levels(having: bool) -> tuple[str, str]:
    """An aggregate over an aggregate over an aggregate."""
    mid = f"SELECT j, count(*) AS c, sum(m) AS s FROM ({inner(having)}) a GROUP BY j"
    ours = (
        f"SELECT c, count(*) AS groups, max(s) AS top, min(j) AS first_j FROM ({mid}) b GROUP BY c"
    )
    duck = ours.replace("sum(m) AS s", "CAST(sum(m) AS BIGINT) AS s")
    return ours, duck


def _ranked(inner_sql: str, rank: str, where: str, cols: str = "*") -> str:
    return (
        f"SELECT {cols} FROM (SELECT k, j, m, n, sx, {rank} FROM ({inner_sql}) a) r WHERE {where}"
    )


def top_n_of_changelog(shape: str, having: bool) -> tuple[str, str]:
    """A top-N over an aggregate's changelog (every ORDER BY is total within a partition:
    the inner rows are unique by k, j), or an aggregate over that top-N."""
    g = inner(having)
    shapes = {
        "top2-per-j": _ranked(
            g, "ROW_NUMBER() OVER (PARTITION BY j ORDER BY m DESC NULLS LAST, k NULLS LAST) AS rn",
            "rn <= 2"),
        "dedup-per-j": _ranked(
            g, "ROW_NUMBER() OVER (PARTITION BY j ORDER BY n DESC, k NULLS FIRST) AS rn",
            "rn = 1", "j, k, m, n"),
        "global-2-3": _ranked(
            g, "ROW_NUMBER() OVER (ORDER BY sx DESC NULLS LAST, k NULLS LAST, j) AS rn",
            "rn BETWEEN 2 AND 3"),
        "rank-per-k": _ranked(
            g, "RANK() OVER (PARTITION BY k ORDER BY n DESC) AS r", "r <= 2", "k, j, n, r"),
        "aggregate-of-top": "SELECT j, count(*) AS c, sum(m) AS s, max(k) AS last_k FROM ("
        + _ranked(g, "ROW_NUMBER() OVER (PARTITION BY j ORDER BY n DESC, k NULLS LAST) AS rn",
                  "rn <= 2") + ") t GROUP BY j",
    }  # fmt: skip
    ours = shapes[shape]
    return ours, ours.replace("sum(m) AS s", "CAST(sum(m) AS BIGINT) AS s")


TOP_SHAPES = ("top2-per-j", "dedup-per-j", "global-2-3", "rank-per-k", "aggregate-of-top")


# -- data -----------------------------------------------------------------------------------

row_st = st.tuples(
    st.sampled_from(["a", "b", "b", "c", "d", None]),
    st.integers(0, 2),
    st.one_of(st.none(), st.integers(-5, 5)),
    st.one_of(st.none(), st.integers(-12, 12).map(lambda i: i / 4)),
)


def to_table(rows: list[tuple]) -> pa.Table:
    return pa.table(
        {
            "k": pa.array([r[0] for r in rows], pa.string()),
            "j": pa.array([r[1] for r in rows], pa.int64()),
            "v": pa.array([r[2] for r in rows], pa.int64()),
            "x": pa.array([r[3] for r in rows], pa.float64()),
            "seq": pa.array(range(len(rows)), pa.int64()),
        },
        schema=SCHEMA,
    )


def _close(a: Any, b: Any) -> bool:
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_close(x, y) for x, y in zip(a, b))
    if isinstance(a, float) and isinstance(b, float):
        if math.isnan(a) or math.isnan(b):
            return math.isnan(a) and math.isnan(b)
        return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-9)
    return a == b


def _order(row: dict[str, Any]) -> str:
    return repr(sorted((k, repr(v)) for k, v in row.items() if not isinstance(v, float)))


def assert_close_rows(got: pa.Table, want: pa.Table) -> None:
    """The same rows (floats within 1e-9), matched after sorting on the exact columns."""
    assert got.column_names == want.column_names, (got.column_names, want.column_names)
    g = sorted(got.to_pylist(), key=_order)
    w = sorted(want.to_pylist(), key=_order)
    assert len(g) == len(w), (g, w)
    for a, b in zip(g, w, strict=True):
        assert all(_close(a[c], b[c]) for c in b), (a, b)


def stream(sql: str, batches: list[pa.RecordBatch]) -> pa.Table:
    ctx = ds.Context(state_dir=None)
    ctx.register_arrow("t", batches, schema=SCHEMA)
    try:
        return ctx.execute_streaming(sql).to_arrow(timeout=120)
    finally:
        ctx.close()


# -- the golden rule ------------------------------------------------------------------------


@SETTINGS
@given(
    rows=st.lists(row_st, max_size=60),
    names=st.lists(st.sampled_from(NAMES), min_size=1, max_size=7, unique=True),
    key=st.sampled_from(OUTER_KEYS),
    having=st.booleans(),
    max_batch=st.integers(1, 8),
    rnd=st.randoms(use_true_random=False),
)
def test_aggregate_over_group_by_equals_duckdb(
    rows: list, names: list[str], key: str, having: bool, max_batch: int, rnd: Any
) -> None:
    ours, duck = over_group_by(names, key, having)
    table = to_table(rows)
    assert_close_rows(stream(ours, cut(table, rnd, max_batch)), duckdb_result(duck, {"t": table}))


@SETTINGS
@given(
    rows=st.lists(row_st, max_size=60),
    where=st.sampled_from(["rn <= 2", "rn = 1", "rn BETWEEN 2 AND 3"]),
    key=st.booleans(),
    max_batch=st.integers(1, 8),
    rnd=st.randoms(use_true_random=False),
)
def test_aggregate_over_top_n_equals_duckdb(
    rows: list, where: str, key: bool, max_batch: int, rnd: Any
) -> None:
    ours, duck = top_n(where, key)
    table = to_table(rows)
    assert_close_rows(stream(ours, cut(table, rnd, max_batch)), duckdb_result(duck, {"t": table}))


@SETTINGS
@given(
    rows=st.lists(row_st, max_size=60),
    having=st.booleans(),
    max_batch=st.integers(1, 8),
    rnd=st.randoms(use_true_random=False),
)
def test_two_levels_of_aggregates_over_changelogs_equal_duckdb(
    rows: list, having: bool, max_batch: int, rnd: Any
) -> None:
    ours, duck = two_levels(having)
    table = to_table(rows)
    assert_close_rows(stream(ours, cut(table, rnd, max_batch)), duckdb_result(duck, {"t": table}))


@SETTINGS
@given(
    rows=st.lists(row_st, max_size=60),
    shape=st.sampled_from(TOP_SHAPES),
    having=st.booleans(),
    max_batch=st.integers(1, 8),
    rnd=st.randoms(use_true_random=False),
)
def test_top_n_of_a_changelog_equals_duckdb(
    rows: list, shape: str, having: bool, max_batch: int, rnd: Any
) -> None:
    """A top-N over an unbounded GROUP BY: rows that fall out of the changelog leave the
    top N and let the next ones in."""
    ours, duck = top_n_of_changelog(shape, having)
    table = to_table(rows)
    assert_close_rows(stream(ours, cut(table, rnd, max_batch)), duckdb_result(duck, {"t": table}))


def test_groups_whose_rows_all_leave_are_deleted() -> None:
    """GROUP BY an inner count: each group of the outer result lives while some inner group
    has that count; the changelog deletes it (-D, old values) when the last one moves on."""
    table = to_table([("a", 0, 1, None), ("a", 0, 2, None), ("b", 0, 3, None)])
    ctx = ds.Context(state_dir=None)
    ctx.register_arrow("t", table, batch_size=1)
    sql = "SELECT n, count(*) AS c FROM (SELECT k, count(*) AS n FROM t GROUP BY k) q GROUP BY n"
    with ctx.execute_streaming(sql) as q:
        changes = [row for b in q for row in b.to_pylist()]
    assert changes == [
        {"n": 1, "c": 1, "_op": "+I"},  # a has 1 row
        {"n": 2, "c": 1, "_op": "+I"},  # a has 2 rows: n=1 has no group left
        {"n": 1, "c": 1, "_op": "-D"},
        {"n": 1, "c": 1, "_op": "+I"},  # b has 1 row
    ]
    final = ctx.execute_streaming(sql).to_arrow(timeout=60).to_pylist()
    assert sorted(final, key=lambda r: r["n"]) == [{"n": 1, "c": 1}, {"n": 2, "c": 1}]


def test_global_aggregate_keeps_its_row_when_every_row_leaves() -> None:
    """Without GROUP BY the result is one row even over no rows (count 0, the rest NULL):
    when an inner HAVING drops every inner group, the global row updates, it is not deleted."""
    table = to_table([("a", 0, 4, 1.0), ("a", 0, 5, 2.0)])
    ctx = ds.Context(state_dir=None)
    ctx.register_arrow("t", table, batch_size=1)
    sql = (
        "SELECT count(*) AS c, sum(m) AS s, max(m) AS hi FROM (SELECT k, max(v) AS m FROM t "
        "GROUP BY k HAVING count(*) < 2) q"
    )
    got = ctx.execute_streaming(sql).to_arrow(timeout=60).to_pylist()
    want = duckdb_result(sql, {"t": table}).to_pylist()
    assert got == want == [{"c": 0, "s": None, "hi": None}]


# -- through a checkpoint and a restore -------------------------------------------------------

RESTORE = {
    "over-group-by": (*over_group_by(NAMES, "j", True), "j"),
    "over-group-by-vanishing": (*over_group_by(["c", "sm", "lo", "dm", "md", "arr"], "n", False), "n"),
    "over-top-n": (*top_n("rn <= 2", True), "k"),
    "two-levels": (*two_levels(True), "c"),
    "top-n-of-changelog": (*top_n_of_changelog("top2-per-j", True), "j, rn"),
    "aggregate-of-top-n-of-changelog": (*top_n_of_changelog("aggregate-of-top", False), "j"),
}  # fmt: skip


@pytest.mark.parametrize("case", list(RESTORE))
def test_through_checkpoint_and_restore(case: str, tmp_path: Path) -> None:
    """400 rows in random batches, checkpointed half-way, crashed at three quarters and
    resumed in a new context: the DuckDB upsert sink ends holding DuckDB's batch result."""
    ours, duck, key = RESTORE[case]
    rnd = random.Random(case)
    rows = [
        (rnd.choice(["a", "b", "c", "d", "e"] if key == "k" else ["a", "b", "c", None]),
         rnd.randint(0, 3), rnd.choice([None, *range(-5, 6)]),
         rnd.randint(-12, 12) / 4 if rnd.random() > 0.1 else None)
        for _ in range(400)
    ]  # fmt: skip
    assert_restore_matches(
        ours,
        duck,
        {"t": cut(to_table(rows), rnd, 12)},
        tmp_path / "state",
        primary_key=key,
        same=assert_close_rows,
    )


def test_stddev_of_equal_values_left_after_retractions_is_zero() -> None:
    """Inner counts that change many times (each a retraction and an insertion into the
    outer stddev) and end equal within a group: the outer stddev is 0, as DuckDB's is, not
    the rounding left by subtracting the retracted values (it was 2.6e-08 here)."""
    rnd = random.Random(118)
    rows = [(rnd.choice("abc"), rnd.randint(0, 6)) for _ in range(rnd.randint(5, 80))]
    batch_size = rnd.randint(1, 7)
    table = pa.table({"k": [r[0] for r in rows], "j": [r[1] for r in rows]})
    sql = (
        "SELECT k, stddev(n) AS s FROM (SELECT k, j, count(*) AS n FROM t GROUP BY k, j) GROUP BY k"
    )
    ctx = ds.Context(state_dir=None)
    try:
        ctx.register_arrow("t", table, batch_size=batch_size)
        got = {r["k"]: r["s"] for r in ctx.execute_streaming(sql).to_arrow(timeout=60).to_pylist()}
    finally:
        ctx.close()
    want = {r["k"]: r["s"] for r in duckdb_result(sql, {"t": table}).to_pylist()}
    assert 0.0 in want.values()
    assert got.keys() == want.keys()
    for k, s in want.items():
        assert got[k] == s if s in (None, 0.0) else math.isclose(got[k], s, rel_tol=1e-12), k
