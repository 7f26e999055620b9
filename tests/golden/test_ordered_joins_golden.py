"""Golden rule for ASOF and interval joins over any ordered column: integers, dates,
decimals and timestamps, the source's event-time column (final by its watermark) or
another column (final at the end of input); residual ON conditions, strict and inclusive
bounds, empty ranges. Streaming through SQL equals DuckDB running the same SQL.

Rows arrive with bounded disorder: sorted by ``seq + jitter`` with ``jitter <= D`` and a
watermark ``max seq - D``, so no row is late. NULL keys everywhere; NULL times only in
columns that carry no watermark (a NULL event time is a late row by definition).
"""

from __future__ import annotations

import datetime as dt
import random
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from oracle import assert_restore_matches, assert_same_rows, duckdb_result

import datum_sql as ds

SETTINGS = settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
DISORDER = 3

key = st.sampled_from(["a", "a", "b", "x", None])
rows_ = st.lists(st.tuples(key, st.integers(0, 25), st.integers(0, 5)), max_size=40)
#: The ordering column's type, the SQL of an offset of n units, and n units as a value.
TYPES: dict[str, tuple[pa.DataType, Any]] = {
    "int32": (pa.int32(), lambda n: f"{n}"),
    "int64": (pa.int64(), lambda n: f"{n}"),
    "decimal": (pa.decimal128(9, 2), lambda n: f"{Decimal(n) / 2}"),
    "date": (pa.date32(), lambda n: f"INTERVAL '{n} days'"),
    "timestamp": (pa.timestamp("us"), lambda n: f"INTERVAL '{n} seconds'"),
}


def ordinal(kind: str, v: int | None) -> Any:
    if v is None:
        return None
    if kind == "decimal":
        return Decimal(v) / 2
    if kind == "date":
        return dt.date(2024, 1, 1) + dt.timedelta(days=v)
    if kind == "timestamp":
        return dt.datetime(2024, 1, 1) + dt.timedelta(seconds=v)
    return v


def make_table(
    rows: list[tuple[Any, int, int]], kind: str, value: str, rng: random.Random, nulls: bool
) -> pa.Table:
    """Rows in a bounded-disorder arrival order; ``o`` is the ordering column (NULL now and
    then when ``nulls``), ``seq`` an int64 event-time column, ``value`` numbers the rows."""
    order = sorted(range(len(rows)), key=lambda i: rows[i][1] + rng.randint(0, DISORDER))
    picked = [rows[i] for i in order]
    t, _ = TYPES[kind]
    return pa.table(
        {
            "k": pa.array([r[0] for r in picked], pa.string()),
            "o": pa.array(
                [ordinal(kind, None if nulls and r[2] == 0 else r[1]) for r in picked], t
            ),
            "seq": pa.array([r[1] for r in picked], pa.int64()),
            "a": pa.array([r[2] for r in picked], pa.int64()),
            value: pa.array(range(len(picked)), pa.int64()),
        }
    )


def streamed(sql: str, tables: dict[str, pa.Table], time: str, sizes: tuple[int, int]) -> pa.Table:
    ctx = ds.Context(state_dir=None)
    for (name, table), size in zip(tables.items(), sizes):
        watermark = DISORDER if time == "seq" else None
        ctx.register_arrow(name, table, event_time=time, watermark=watermark, batch_size=size)
    with ctx.execute_streaming(sql) as q:
        out = q.to_arrow(timeout=60)
        assert q.status()["late_rows"] == 0
    return out


def interval_sql(
    kind: str, outer: bool, lo: int, hi: int, strict: tuple[bool, bool], residual: str
) -> str:
    off = TYPES[kind][1]
    join = "LEFT JOIN" if outer else "JOIN"
    lop, hop = (">" if strict[0] else ">="), ("<" if strict[1] else "<=")

    def plus(n: int) -> str:
        return f"r.o + {off(n)}" if n >= 0 else f"r.o - {off(-n)}"

    return (
        f"SELECT l.k, l.o, l.lid, r.rid FROM l {join} r ON l.k = r.k "
        f"AND l.o {lop} {plus(lo)} AND l.o {hop} {plus(hi)}{residual}"
    )


RESIDUALS = ["", " AND l.k <> 'x'", " AND l.a > r.a", " AND ((l.a + r.a) * 2 <> 6 OR l.a IS NULL)"]


@SETTINGS
@given(
    left=rows_,
    right=rows_,
    kind=st.sampled_from(list(TYPES)),
    outer=st.booleans(),
    lo=st.integers(-6, 6),
    width=st.integers(-3, 8),
    strict=st.tuples(st.booleans(), st.booleans()),
    residual=st.sampled_from(RESIDUALS),
    sizes=st.tuples(st.integers(1, 9), st.integers(1, 9)),
    seed=st.integers(0, 2**16),
)
def test_interval_join_on_any_ordered_column_equals_duckdb(
    left: list, right: list, kind: str, outer: bool, lo: int, width: int,
    strict: tuple[bool, bool], residual: str, sizes: tuple[int, int], seed: int,
) -> None:  # fmt: skip
    """The ordering column ``o`` is not the event-time column (``seq``, watermarked):
    results are final at the end of input. Empty ranges (width < 0, or a strict bound
    closing a zero-width one) match nothing."""
    rng = random.Random(seed)
    tables = {
        "l": make_table(left, kind, "lid", rng, nulls=True),
        "r": make_table(right, kind, "rid", rng, nulls=True),
    }
    sql = interval_sql(kind, outer, lo, lo + width, strict, residual)
    got = streamed(sql, tables, "seq", sizes)
    assert_same_rows(got, duckdb_result(sql, tables))


@SETTINGS
@given(
    left=rows_,
    right=rows_,
    outer=st.booleans(),
    lo=st.integers(-6, 6),
    width=st.integers(-3, 8),
    strict=st.tuples(st.booleans(), st.booleans()),
    residual=st.sampled_from(RESIDUALS),
    sizes=st.tuples(st.integers(1, 9), st.integers(1, 9)),
    seed=st.integers(0, 2**16),
)
def test_interval_join_on_an_integer_event_time_equals_duckdb(
    left: list, right: list, outer: bool, lo: int, width: int,
    strict: tuple[bool, bool], residual: str, sizes: tuple[int, int], seed: int,
) -> None:  # fmt: skip
    """``seq`` is the event-time column with ``watermark = max seq - 3``: the join closes
    rows by that watermark, and still equals the batch join."""
    rng = random.Random(seed)
    tables = {
        "l": make_table(left, "int64", "lid", rng, nulls=False),
        "r": make_table(right, "int64", "rid", rng, nulls=False),
    }
    sql = interval_sql("int64", outer, lo, lo + width, strict, residual).replace(".o", ".seq")
    got = streamed(sql, tables, "seq", sizes)
    assert_same_rows(got, duckdb_result(sql, tables))


@SETTINGS
@given(
    left=rows_,
    right=st.lists(
        st.tuples(key, st.integers(0, 25), st.integers(0, 5)),
        max_size=40,
        unique_by=lambda r: (r[0], r[1]),
    ),
    kind=st.sampled_from(list(TYPES)),
    op=st.sampled_from([">=", ">", "<=", "<"]),
    outer=st.booleans(),
    event_time=st.booleans(),
    sizes=st.tuples(st.integers(1, 9), st.integers(1, 9)),
    seed=st.integers(0, 2**16),
)
def test_asof_join_on_any_ordered_column_equals_duckdb(
    left: list, right: list, kind: str, op: str, outer: bool, event_time: bool,
    sizes: tuple[int, int], seed: int,
) -> None:  # fmt: skip
    """ASOF over ``o`` of every type, streamed and in ``ctx.sql``; with ``event_time`` the
    join orders by ``seq``, the watermarked event-time column. Right times are distinct per
    key (DuckDB breaks ties arbitrarily)."""
    rng = random.Random(seed)
    tables = {
        "l": make_table(left, kind, "lid", rng, nulls=not event_time),
        "r": make_table(right, kind, "rid", rng, nulls=False),
    }
    col = "seq" if event_time else "o"
    join = "ASOF LEFT JOIN" if outer else "ASOF JOIN"
    sql = f"SELECT l.k, l.o, l.lid, r.rid FROM l {join} r ON l.k = r.k AND l.{col} {op} r.{col}"
    got = streamed(sql, tables, "seq", sizes)
    want = duckdb_result(sql, tables)
    assert_same_rows(got, want)
    # ctx.sql runs the same ASOF operator over the bounded tables: DuckDB's answer too
    batch = ds.Context(state_dir=None)
    for name, data in tables.items():
        batch.register_arrow(name, data, event_time="seq", watermark=DISORDER)
    assert_same_rows(batch.sql(sql), want)


@pytest.mark.parametrize("case", ["interval", "interval_empty", "asof"])
def test_integer_event_time_joins_through_checkpoint_and_restore(case: str, tmp_path: Path) -> None:
    """Joins ordered by an integer event-time column (watermark ``seq - 3``) through a
    checkpoint half-way, a crash at three quarters and a restore: DuckDB's batch join."""
    rng = random.Random(case)
    gen = [
        (rng.choice(["a", "b", "x", None]), rng.randint(0, 200), rng.randint(0, 5))
        for _ in range(150)
    ]
    l_rows, r_rows = gen[:80], list({(r[0], r[1]): r for r in gen[80:]}.values())
    tables = {
        "l": make_table(l_rows, "int64", "lid", rng, nulls=False),
        "r": make_table(r_rows, "int64", "rid", rng, nulls=False),
    }
    if case == "asof":
        sql = "SELECT l.k, l.seq, l.lid, r.rid FROM l ASOF LEFT JOIN r ON l.k = r.k AND l.seq >= r.seq"
    else:
        lo, hi = (-4, 6) if case == "interval" else (2, 1)
        sql = (
            f"SELECT l.k, l.seq, l.lid, r.rid FROM l LEFT JOIN r ON l.k = r.k "
            f"AND l.seq BETWEEN r.seq + {lo} AND r.seq + {hi} AND l.a >= r.a"
        )
    inputs = {name: t.to_batches(max_chunksize=rng.randint(3, 9)) for name, t in tables.items()}
    assert_restore_matches(
        sql,
        sql,
        inputs,
        tmp_path / "state",
        event_time={"l": "seq", "r": "seq"},
        watermark={"l": DISORDER, "r": DISORDER},  # type: ignore[dict-item]
        sink="parquet",
    )
