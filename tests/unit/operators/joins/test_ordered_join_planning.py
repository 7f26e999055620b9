"""Planning joins over ordered columns: units of the bounds, which watermark a join may
use, mixed types of one domain (DATE with TIMESTAMP, DECIMALs of two scales) against
DuckDB, and the residual filter compiled once."""

from __future__ import annotations

import datetime as dt
import random
from decimal import Decimal
from typing import Any

import duckdb
import pyarrow as pa
import pytest

import datum_sql as ds


def _graph_join(ctx: ds.Context, sql: str) -> dict[str, Any]:
    plan = ctx.prepare(sql)
    (node,) = [n for n in plan.graph.nodes if n.kind.endswith("_join")]
    return node.config


def _duckdb(sql: str, tables: dict[str, pa.Table]) -> list[tuple[Any, ...]]:
    con = duckdb.connect()
    for name, t in tables.items():
        con.register(name, t)
    return sorted(con.sql(sql).fetchall(), key=repr)


def _rows(table: pa.Table) -> list[tuple[Any, ...]]:
    return sorted((tuple(r.values()) for r in table.to_pylist()), key=repr)


def test_bounds_are_counted_in_the_ordering_columns_unit() -> None:
    ctx = ds.Context(state_dir=None)
    schema = {"k": pa.array([1]), "seq": pa.array([1], pa.int64())}
    ctx.register_arrow("l", pa.table(schema), event_time="seq", watermark=0)
    ctx.register_arrow("r", pa.table(schema))
    cfg = _graph_join(
        ctx, "SELECT l.k FROM l JOIN r ON l.k = r.k AND l.seq > r.seq - 3 AND l.seq <= r.seq + 2.5"
    )
    # l - r > -3 is l - r >= -2 on integers; l - r <= 2.5 is l - r <= 2
    assert (cfg["lower_us"], cfg["upper_us"]) == (-2, 2)
    # the left time is its source's watermarked event time; the right one has none
    assert (cfg["left_watermark"], cfg["right_watermark"]) == (True, False)
    assert "residual" not in cfg


def test_a_residual_is_compiled_once_into_the_operator_config() -> None:
    ctx = ds.Context(state_dir=None)
    t = pa.table({"k": [1], "ts": pa.array([dt.datetime(2024, 1, 1)], pa.timestamp("us"))})
    ctx.register_arrow("l", t, event_time="ts", watermark=ds.BoundedOutOfOrderness())
    ctx.register_arrow("r", t, event_time="ts", watermark=ds.BoundedOutOfOrderness())
    sql = (
        "SELECT l.k FROM l JOIN r ON l.k = r.k AND l.ts BETWEEN r.ts AND r.ts + INTERVAL '1' "
        "SECOND AND l.k + 1 > r.k AND l.ts <> r.ts + INTERVAL '1' SECOND"
    )
    cfg = _graph_join(ctx, sql)
    assert (cfg["lower_us"], cfg["upper_us"]) == (0, 1_000_000)
    assert str(cfg["residual"]).count("l.k") == 1
    assert "IntervalJoin" in ctx.explain(sql) and "filter" in ctx.explain(sql)


@pytest.mark.parametrize("outer", [False, True])
def test_date_against_timestamp_and_decimals_of_two_scales_equal_duckdb(outer: bool) -> None:
    base = dt.datetime(2024, 1, 1)
    left = pa.table(
        {
            "k": pa.array([1, 1, 2, None, 1], pa.int64()),
            "d": pa.array([(base + dt.timedelta(days=i)).date() for i in (0, 1, 2, 3, 5)]),
            "x": pa.array(
                [None if v is None else Decimal(v) for v in ("1.10", "2.00", "3.50", "1.00", None)],
                pa.decimal128(9, 2),
            ),
            "lid": pa.array(range(5), pa.int64()),
        }
    )
    right = pa.table(
        {
            "k": pa.array([1, 1, 2, 1], pa.int64()),
            "ts": pa.array(
                [base + dt.timedelta(hours=h) for h in (12, 30, 47, 130)], pa.timestamp("us")
            ),
            "x": pa.array(
                [Decimal(v) for v in ("0.500", "1.125", "1.999", "3.001")], pa.decimal128(9, 3)
            ),
            "rid": pa.array(range(4), pa.int64()),
        }
    )
    ctx = ds.Context(state_dir=None)
    ctx.register_arrow(
        "l", left, event_time="d", watermark=ds.BoundedOutOfOrderness(), batch_size=2
    )
    ctx.register_arrow("r", right, event_time="x", watermark=0, batch_size=1)
    join = "LEFT JOIN" if outer else "JOIN"
    tables = {"l": left, "r": right}
    by_time = (
        f"SELECT l.lid, r.rid FROM l {join} r ON l.k = r.k "
        "AND l.d BETWEEN r.ts - INTERVAL '1 day' AND r.ts + INTERVAL '12 hours'"
    )
    by_decimal = (
        f"SELECT l.lid, r.rid FROM l {join} r ON l.k = r.k "
        "AND l.x >= r.x - 0.1 AND l.x < r.x + 0.0015"
    )
    for sql in (by_time, by_decimal):
        with ctx.execute_streaming(sql) as q:
            got = q.to_arrow(timeout=60)
            assert q.status()["late_rows"] == 0
        assert _rows(got) == _duckdb(sql, tables), sql
    cfg = _graph_join(ctx, by_decimal)
    # decimals compare at the wider scale; the 2-decimal side's watermark is not in it
    assert cfg["time_scale"] == 3
    assert (cfg["left_watermark"], cfg["right_watermark"]) == (False, True)
    assert (cfg["lower_us"], cfg["upper_us"]) == (-100, 1)


def test_asof_on_an_integer_event_time_orders_by_its_watermark() -> None:
    ctx = ds.Context(state_dir=None)
    trades = pa.table({"k": [1, 1, 2, 1], "seq": pa.array([3, 7, 8, 12], pa.int32())})
    quotes = pa.table(
        {"k": [1, 2, 1, 1], "seq": pa.array([1, 2, 6, 11], pa.int32()), "q": [10, 20, 60, 110]}
    )
    ctx.register_arrow("t", trades, event_time="seq", watermark=2, batch_size=1)
    ctx.register_arrow("qs", quotes, event_time="seq", watermark=2, batch_size=1)
    sql = (
        "SELECT t.seq, qs.q FROM t ASOF LEFT JOIN qs ON t.k = qs.k AND t.seq >= qs.seq "
        "AND t.seq - qs.seq <= 4"
    )
    got = ctx.execute_streaming(sql).to_arrow(timeout=60)
    assert _rows(got) == sorted([(3, 10), (7, 60), (8, None), (12, 110)], key=repr)
    cfg = _graph_join(ctx, sql)
    assert cfg["tolerance_us"] == 4 and cfg["left_watermark"] and cfg["right_watermark"]


@pytest.mark.parametrize(("op", "gap"), [(">=", "l.x - r.x"), ("<", "r.x - l.x")])
def test_asof_tolerance_on_a_decimal_equals_duckdb(op: str, gap: str) -> None:
    """A DECIMAL ordering column that is no event time: the tolerance is in its units,
    results are final at the end of input."""
    rng = random.Random(op)

    def table(n: int, name: str) -> pa.Table:
        return pa.table(
            {
                "k": pa.array([rng.choice([1, 2, None]) for _ in range(n)], pa.int64()),
                "x": pa.array(
                    [Decimal(rng.randint(0, 500)) / 100 for _ in range(n)], pa.decimal128(9, 2)
                ),
                name: pa.array(range(n), pa.int64()),
            }
        )

    left, right = table(60, "lid"), table(60, "rid")
    first: dict[tuple[Any, Any], int] = {}
    for i, key in enumerate(zip(right["k"].to_pylist(), right["x"].to_pylist())):
        first.setdefault(key, i)  # right times distinct per key: DuckDB breaks ties arbitrarily
    right = right.take(sorted(first.values()))
    ctx = ds.Context(state_dir=None)
    ctx.register_arrow("l", left, batch_size=7)
    ctx.register_arrow("r", right, batch_size=3)
    on = f"l.k = r.k AND l.x {op} r.x"
    sql = f"SELECT l.lid, r.rid FROM l ASOF LEFT JOIN r ON {on} AND {gap} <= 0.05"
    want = f"SELECT l.lid, CASE WHEN {gap} <= 0.05 THEN r.rid END FROM l ASOF LEFT JOIN r ON {on}"
    got = _rows(ctx.execute_streaming(sql).to_arrow(timeout=60))
    assert got == _duckdb(want, {"l": left, "r": right})
    assert any(rid is not None for _, rid in got) and any(rid is None for _, rid in got)


def test_residual_shapes_equal_the_batch_query() -> None:
    """Negated columns, typed literals, casts, [NOT] IN, [NOT] LIKE and NULL tests in ON; a literal of
    the wrong type is refused at planning, saying how to cast it."""
    rng = random.Random(7)
    ts = [dt.datetime(2024, 1, 1) + dt.timedelta(seconds=rng.randint(0, 20)) for _ in range(40)]
    table = pa.table(
        {
            "k": pa.array([rng.choice([1, 2]) for _ in ts], pa.int64()),
            "s": pa.array([rng.choice(["ab", "b", None]) for _ in ts]),
            "n": pa.array([rng.choice([1, 2, 3, None]) for _ in ts], pa.int64()),
            "ts": pa.array(sorted(ts), pa.timestamp("us")),
        }
    )
    ctx = ds.Context(state_dir=None)
    for name in ("l", "r"):
        ctx.register_arrow(
            name, table, event_time="ts", watermark=ds.BoundedOutOfOrderness(), batch_size=5
        )
    base = (
        "SELECT l.n AS ln, r.n AS rn, l.s AS ls FROM l LEFT JOIN r ON l.k = r.k "
        "AND l.ts BETWEEN r.ts - INTERVAL '3' SECOND AND r.ts + INTERVAL '2' SECOND"
    )
    for extra in (
        "l.n > -r.n + 3",
        "l.ts >= CAST('2024-01-01 00:00:05' AS TIMESTAMP)",
        "CAST(l.n AS VARCHAR) <> 'x' AND r.n IN (1, 3)",
        "(l.s LIKE 'a%' OR r.s IS NULL) AND NOT l.n = r.n",
        "l.s NOT LIKE 'a%'",
        "l.s IS NOT NULL AND r.n NOT IN (1, 3)",
    ):
        sql = f"{base} AND {extra}"
        got = _rows(ctx.execute_streaming(sql).to_arrow(timeout=60))
        assert got == _rows(ctx.sql(sql)), extra
        assert any(r[1] is not None for r in got) and any(r[1] is None for r in got), extra
    with pytest.raises(ds.PlanError, match=r"cast to one type, e\.g\. CAST\('2024-01-01' AS"):
        ctx.prepare(f"{base} AND l.ts > '2024-01-01'")
