"""Golden rule for comma joins and for interval joins bounded by a column of one side
(``q.ts BETWEEN p.ts AND p.e``, Nexmark's auction/bid join): streaming equals DuckDB
running the same SQL.

``p`` rows are ranges (``ts``, their event time, to ``e``, any column: NULL now and then,
sometimes below ``ts``, an empty range), ``q`` rows points (``ts``); both arrive with bounded
disorder (sorted by ``ts + jitter``, ``jitter <= D`` seconds, watermark ``max ts - D``), so
no row is late. The bounds are written as BETWEEN or two comparisons (either column first,
strict or not, with constants), ``p`` on either side, inner and LEFT, with ``ON`` or as a
comma join (``FROM p, q WHERE ...``).
"""

from __future__ import annotations

import datetime as dt
import random
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from oracle import assert_restore_matches, assert_same_rows, duckdb_result

import datum_sql as ds

SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
DISORDER = 3
T0 = dt.datetime(2024, 1, 1)
TS = pa.timestamp("us")

key = st.sampled_from([1, 1, 2, 3, None])
#: (key, ts seconds, e - ts seconds or NULL)
ranges = st.lists(
    st.tuples(key, st.integers(0, 30), st.one_of(st.none(), st.integers(-4, 12))), max_size=30
)
points = st.lists(st.tuples(key, st.integers(0, 30)), max_size=40)


def at(seconds: int | None) -> dt.datetime | None:
    return None if seconds is None else T0 + dt.timedelta(seconds=seconds)


def arrival(rows: list[tuple], rng: random.Random) -> list[tuple]:
    """``rows`` in a bounded-disorder arrival order (by ts + jitter)."""
    return sorted(rows, key=lambda r: r[1] + rng.randint(0, DISORDER))


def p_table(rows: list[tuple[Any, int, int | None]], rng: random.Random) -> pa.Table:
    rows = arrival(rows, rng)
    return pa.table(
        {
            "pid": pa.array(range(len(rows)), pa.int64()),
            "k": pa.array([r[0] for r in rows], pa.int64()),
            "ts": pa.array([at(r[1]) for r in rows], TS),
            "e": pa.array([at(None if r[2] is None else r[1] + r[2]) for r in rows], TS),
        }
    )


def q_table(rows: list[tuple[Any, int]], rng: random.Random) -> pa.Table:
    rows = arrival(rows, rng)
    return pa.table(
        {
            "qid": pa.array(range(len(rows)), pa.int64()),
            "k": pa.array([r[0] for r in rows], pa.int64()),
            "ts": pa.array([at(r[1]) for r in rows], TS),
        }
    )


def streamed(
    sql: str, tables: dict[str, pa.Table], sizes: dict[str, int], live: pa.Schema | None = None
) -> pa.Table:
    """``sql`` streamed; with ``live`` (the result's schema) the streams are iterators
    (unbounded: no lookup join stands in) and the result goes to a sink."""
    ctx = ds.Context(state_dir=None)
    for name, table in tables.items():
        timed = "ts" in table.column_names
        size = sizes.get(name, 5)
        data = iter(table.to_batches(max_chunksize=size)) if live is not None and timed else table
        ctx.register_arrow(
            name,
            data,
            schema=table.schema,
            event_time="ts" if timed else None,
            watermark=ds.BoundedOutOfOrderness(seconds=DISORDER) if timed else None,
            batch_size=size,
        )
    if live is not None:  # into a sink until the streams end
        batches: list[pa.RecordBatch] = []
        ctx.register_append_sink("out", batches.append)
        q = ctx.execute_streaming(f"INSERT INTO out {sql}")
        q.wait(60)
        assert q.status()["late_rows"] == 0
        return pa.Table.from_batches(batches, schema=live)
    with ctx.execute_streaming(sql) as q:
        out = q.to_arrow(timeout=60)
        assert q.status()["late_rows"] == 0
    return out


def plus(col: str, n: int) -> str:
    if n == 0:
        return col
    return f"{col} + INTERVAL '{n} seconds'" if n > 0 else f"{col} - INTERVAL '{-n} seconds'"


def bounds(form: str, c1: int, c2: int, strict: tuple[bool, bool]) -> str:
    """``q.ts`` from ``p.ts + c1`` to ``p.e + c2``, in one of the ways it can be written."""
    start, end = plus("p.ts", c1), plus("p.e", c2)
    if form == "between":
        return f"q.ts BETWEEN {start} AND {end}"
    lo, hi = (">" if strict[0] else ">="), ("<" if strict[1] else "<=")
    if form == "flipped":  # the p column first, the end bound first
        rlo, rhi = {">": "<", ">=": "<="}[lo], {"<": ">", "<=": ">="}[hi]
        return f"{end} {rhi} q.ts AND {start} {rlo} q.ts"
    return f"q.ts {lo} {start} AND q.ts {hi} {end}"


def band_sql(
    p_left: bool, outer: bool, comma: bool, condition: str, residual: str, where: bool = False
) -> str:
    first, second = ("p", "q") if p_left else ("q", "p")
    cols = "SELECT p.pid, q.qid, p.k, q.ts AS q_ts, p.e"
    if comma:
        return f"{cols} FROM {first}, {second} WHERE p.k = q.k AND {condition}{residual}"
    if where:  # an inner join's bounds may be written in WHERE
        return f"{cols} FROM {first} JOIN {second} ON p.k = q.k WHERE {condition}{residual}"
    join = "LEFT JOIN" if outer else "JOIN"
    return f"{cols} FROM {first} {join} {second} ON p.k = q.k AND {condition}{residual}"


#: Residual conditions; the last one the join cannot compile (``/``): written in WHERE it
#: filters the joined rows after the join. Its division is of a DOUBLE: ``/`` of two
#: integers truncates in datum-sql (as in PostgreSQL) where DuckDB's gives a fraction.
RESIDUALS = [
    "",
    " AND p.pid <> 2",
    " AND p.pid > q.qid",
    " AND CAST(p.pid AS DOUBLE) / 2 <> q.qid",
]


@SETTINGS
@given(
    p_rows=ranges,
    q_rows=points,
    p_left=st.booleans(),
    join=st.sampled_from(["inner", "left", "comma", "where"]),
    form=st.sampled_from(["between", "comparisons", "flipped"]),
    offsets=st.tuples(st.integers(-3, 3), st.integers(-3, 3)),
    strict=st.tuples(st.booleans(), st.booleans()),
    residual=st.sampled_from(RESIDUALS),
    sizes=st.tuples(st.integers(1, 9), st.integers(1, 9)),
    live=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_join_bounded_by_a_column_of_one_side_equals_duckdb(
    p_rows: list, q_rows: list, p_left: bool, join: str, form: str, offsets: tuple[int, int],
    strict: tuple[bool, bool], residual: str, sizes: tuple[int, int], live: bool, seed: int,
) -> None:  # fmt: skip
    """Over bounded tables and over live streams (iterators: a lookup join cannot stand in)."""
    rng = random.Random(seed)
    tables = {"p": p_table(p_rows, rng), "q": q_table(q_rows, rng)}
    condition = bounds(form, *offsets, strict)
    if join in ("inner", "left") and residual == RESIDUALS[-1]:
        residual = ""  # not compiled in ON: refused there (write it in WHERE)
    sql = band_sql(p_left, join == "left", join == "comma", condition, residual, join == "where")
    want = duckdb_result(sql, tables)
    got = streamed(sql, tables, {"p": sizes[0], "q": sizes[1]}, want.schema if live else None)
    assert_same_rows(got, want)


COMMA_QUERIES = [
    # a stream and a stream with constant bounds, a filter on one side
    "SELECT q.qid, p.pid FROM q, p WHERE q.k = p.k "
    "AND q.ts BETWEEN p.ts - INTERVAL '2 seconds' AND p.ts + INTERVAL '3 seconds' AND p.pid % 2 = 0",
    # three tables: two streams bounded by p.e, and a bounded dimension table by key
    "SELECT q.qid, p.pid, d.name FROM p, q, d WHERE p.k = q.k AND d.k = p.k "
    "AND q.ts >= p.ts AND q.ts <= p.e AND d.name <> 'c'",
    # the dimension table first, a condition of another shape left to a filter after
    "SELECT q.qid, d.name FROM d, q WHERE d.k = q.k AND (q.qid < 5 OR d.name = 'b')",
    # a comparison with a bounded table that is no time condition: filtered after the lookup
    "SELECT q.qid, d.name FROM q, d WHERE q.k = d.k AND q.qid > d.k",
]


@SETTINGS
@given(
    p_rows=ranges,
    q_rows=points,
    query=st.sampled_from(COMMA_QUERIES),
    sizes=st.tuples(st.integers(1, 9), st.integers(1, 9)),
    seed=st.integers(0, 2**16),
)
def test_comma_joins_equal_duckdb(
    p_rows: list, q_rows: list, query: str, sizes: tuple[int, int], seed: int
) -> None:
    rng = random.Random(seed)
    tables = {
        "p": p_table(p_rows, rng),
        "q": q_table(q_rows, rng),
        "d": pa.table({"k": pa.array([1, 2, 3, None], pa.int64()), "name": ["a", "b", "c", "n"]}),
    }
    got = streamed(query, tables, {"p": sizes[0], "q": sizes[1]})
    assert_same_rows(got, duckdb_result(query, tables))


def test_a_bounded_table_is_looked_up_unless_both_bounds_follow_watermarks() -> None:
    """Comparisons with a bounded table that follow no watermark (here ``q.qid``, ``d.k``)
    filter a lookup join, which holds only the table, not an interval join holding every
    stream row until the end; bounds on both sides' event times make an interval join."""
    ctx = ds.Context(state_dir=None)
    rng = random.Random(0)
    q = q_table([(1, 1), (2, 5)], rng)
    ctx.register_arrow(
        "q", iter(q.to_batches()), schema=q.schema, event_time="ts",
        watermark=ds.BoundedOutOfOrderness(),
    )  # fmt: skip
    ctx.register_arrow("d", pa.table({"k": pa.array([1, 2], pa.int64())}))
    ctx.register_arrow("p", p_table([(1, 0, 3)], rng), event_time="ts")
    looked_up = "SELECT q.qid, d.k FROM q, d WHERE q.k = d.k AND q.qid BETWEEN d.k - 1 AND d.k"
    assert "LookupJoin" in ctx.explain(looked_up)
    assert "LookupJoin" in ctx.explain(looked_up.replace(", d WHERE", " JOIN d ON q.k = d.k WHERE"))
    banded = "SELECT q.qid, p.pid FROM q, p WHERE q.k = p.k AND q.ts BETWEEN p.ts AND p.e"
    assert "IntervalJoin" in ctx.explain(banded)


@pytest.mark.parametrize(
    ("p_left", "join"),
    [(True, "inner"), (True, "left"), (False, "left"), (False, "comma")],
)
def test_band_join_through_checkpoint_and_restore(p_left: bool, join: str, tmp_path: Path) -> None:
    """A checkpoint half-way, a crash at three quarters, a restore: the batch join."""
    rng = random.Random(f"{p_left}{join}")
    p_rows = [
        (rng.choice([1, 2, 3, None]), rng.randint(0, 200), rng.choice([None, -2, *range(0, 30)]))
        for _ in range(80)
    ]
    q_rows = [(rng.choice([1, 2, 3, None]), rng.randint(0, 200)) for _ in range(120)]
    tables = {"p": p_table(p_rows, rng), "q": q_table(q_rows, rng)}
    sql = band_sql(p_left, join == "left", join == "comma", bounds("between", 0, 1, (0, 0)), "")
    inputs = {name: t.to_batches(max_chunksize=rng.randint(3, 9)) for name, t in tables.items()}
    assert_restore_matches(
        sql,
        sql,
        inputs,
        tmp_path / "state",
        event_time={"p": "ts", "q": "ts"},
        watermark={n: ds.BoundedOutOfOrderness(seconds=DISORDER) for n in tables},
        sink="parquet",
    )


@pytest.mark.parametrize(
    ("sql", "words"),
    [
        (
            "SELECT p.pid FROM p, q WHERE p.ts <= q.ts",
            "FROM p, q: q is joined by a comma without an equality",
        ),
        (
            "SELECT p.pid FROM p, q, d WHERE p.k = q.k AND q.ts BETWEEN p.ts AND p.e",
            "FROM p, q, d: d is joined by a comma without an equality",
        ),
        (
            "SELECT p.pid FROM p JOIN q ON p.k = q.k AND q.ts >= p.ts",
            "AND l.ts BETWEEN r.ts AND r.end_column",
        ),
        (
            "SELECT p.pid FROM p, q WHERE p.k = q.k AND q.ts <= p.e",
            "needs a lower and an upper bound",
        ),
    ],
)
def test_unbounded_joins_are_refused_saying_what_to_write(sql: str, words: str) -> None:
    ctx = ds.Context(state_dir=None)
    rng = random.Random(0)
    for name, table in {"p": p_table([], rng), "q": q_table([], rng)}.items():
        ctx.register_arrow(  # an iterator: an unbounded stream
            name,
            iter(table.to_batches()),
            schema=table.schema,
            event_time="ts",
            watermark=ds.BoundedOutOfOrderness(seconds=1),
        )
    ctx.register_arrow("d", pa.table({"k": pa.array([1], pa.int64())}))
    with pytest.raises(ds.PlanError, match=words.replace("(", r"\(").replace(")", r"\)")):
        ctx.execute_streaming(sql)
