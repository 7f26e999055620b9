"""Watermarks over integer, DECIMAL and DATE event-time columns: declared in SQL or Python,
counted in the column's own unit, late rows cut by them, refused where they mean nothing."""

from __future__ import annotations

import asyncio
import datetime as dt
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import datum_sql as ds


def _late(ctx: ds.Context, sql: str) -> tuple[list[Any], list[pa.Table]]:
    late: list[pa.Table] = []
    ctx.register_append_sink("late", lambda b: late.append(pa.Table.from_batches([b])))
    out: list[pa.RecordBatch] = []
    ctx.register_append_sink("out", out.append)
    ctx.execute_streaming(f"INSERT INTO out {sql}", late_output="late").wait(30)
    return pa.Table.from_batches(out).column(0).to_pylist(), late


def test_integer_watermark_in_python_cuts_late_rows_in_its_own_unit() -> None:
    ctx = ds.Context(state_dir=None)
    data = pa.table({"seq": pa.array([10, 20, 14, 16, 30], pa.int32())})
    ctx.register_arrow("e", data, event_time="seq", watermark=5, batch_size=1)
    kept, late = _late(ctx, "SELECT seq FROM e")
    assert kept == [10, 20, 16, 30]  # after 20 the watermark is 15: 14 is late
    (table,) = late
    assert table.column("seq").to_pylist() == [14]
    assert table.column("_late_watermark").to_pylist() == [15]


def test_status_shows_an_integer_watermark_as_a_number() -> None:
    """A sequence-number watermark is no time: status shows the number, lag ignores it."""
    from datum_sql.engine.runtime.metrics import QueryMetrics, SourceMetrics

    seq = SourceMetrics("e", watermark=7, max_event_time=9, unit="int64")
    assert seq.as_dict()["watermark"] == "7"
    assert SourceMetrics("t", watermark=0).as_dict()["watermark"] == "1970-01-01 00:00:00"
    metrics = QueryMetrics()
    metrics.sources["e"] = seq
    metrics.sample()
    assert metrics.history[-1].watermark_lag_s is None


def test_decimal_watermark_counts_in_its_scale() -> None:
    ctx = ds.Context(state_dir=None)
    values = [Decimal(v) for v in ("1.00", "2.00", "1.40", "1.60")]
    data = pa.table({"x": pa.array(values, pa.decimal128(9, 2))})
    ctx.register_arrow("e", data, event_time="x", watermark=0.5, batch_size=1)
    kept, late = _late(ctx, "SELECT x FROM e")
    assert kept == [Decimal("1.00"), Decimal("2.00"), Decimal("1.60")]
    assert late[0].column("_late_watermark").to_pylist() == [Decimal("1.50")]


def test_create_source_accepts_a_watermark_on_an_integer_column(tmp_path: Path) -> None:
    path = tmp_path / "e.csv"
    path.write_text("k,seq\na,10\nb,20\nc,14\nd,16\n")
    ctx = ds.Context(state_dir=None)
    ctx.execute(
        "CREATE SOURCE e (k VARCHAR, seq BIGINT, WATERMARK FOR seq AS seq - 5) "
        f"WITH (connector = 'csv', path = '{path}')"
    )
    kept, _ = _late(ctx, "SELECT k FROM e")
    assert kept == ["a", "b", "d"]


def test_create_source_accepts_a_watermark_on_a_date_column(tmp_path: Path) -> None:
    path = tmp_path / "e.csv"
    path.write_text("k,d\na,2024-01-10\nb,2024-01-20\nc,2024-01-14\nd,2024-01-16\n")
    ctx = ds.Context(state_dir=None)
    ctx.execute(
        "CREATE SOURCE e (k VARCHAR, d DATE, WATERMARK FOR d AS d - INTERVAL '5 days') "
        f"WITH (connector = 'csv', path = '{path}')"
    )
    kept, late = _late(ctx, "SELECT k FROM e")
    assert kept == ["a", "b", "d"]
    assert late[0].column("_late_watermark").to_pylist() == [dt.date(2024, 1, 15)]


@pytest.mark.parametrize(
    ("columns", "message"),
    [
        ("x DOUBLE, WATERMARK FOR x AS x - 1", "must be a TIMESTAMP, DATE, integer or DECIMAL"),
        ("x BIGINT, WATERMARK FOR x AS x - INTERVAL '5 seconds'", "must be a non-negative number"),
        ("x BIGINT, WATERMARK FOR x AS x - 1.5", "without decimals"),
        ("x DECIMAL(9, 2), WATERMARK FOR x AS x - 0.001", "at most 2 decimals"),
        ("x TIMESTAMP, WATERMARK FOR x AS x - 5", "INTERVAL literal"),
    ],
)
def test_create_source_refuses_a_delay_in_the_wrong_unit(columns: str, message: str) -> None:
    ctx = ds.Context(state_dir=None)
    with pytest.raises(ds.DatumError, match=message):
        ctx.execute(f"CREATE SOURCE e ({columns}) WITH (connector = 'csv', path = 'e.csv')")


def test_python_refuses_a_delay_in_the_wrong_unit() -> None:
    ctx = ds.Context(state_dir=None)
    ints = pa.table({"n": [1], "ts": pa.array([dt.datetime(2024, 1, 1)], pa.timestamp("us"))})
    with pytest.raises(ds.PlanError, match="give watermark= as a number"):
        ctx.register_arrow("e", ints, event_time="n", watermark=ds.BoundedOutOfOrderness(seconds=5))
    with pytest.raises(ds.PlanError, match=r"use ds\.BoundedOutOfOrderness"):
        ctx.register_arrow("e", ints, event_time="ts", watermark=5)
    with pytest.raises(ds.PlanError, match="must be a TIMESTAMP, DATE, integer or DECIMAL"):
        ctx.register_arrow("e", pa.table({"f": [1.5]}), event_time="f")


def test_windows_refuse_an_integer_event_time() -> None:
    ctx = ds.Context(state_dir=None)
    ctx.register_arrow("e", pa.table({"seq": [1, 2]}), event_time="seq", watermark=0)
    with pytest.raises(ds.DatumError, match="'seq' must be a TIMESTAMP"):
        ctx.execute_streaming(
            "SELECT window_start, count(*) AS n FROM tumble(e, seq, INTERVAL '1' SECOND) "
            "GROUP BY window_start, window_end"
        )


def test_an_idle_integer_source_never_takes_a_timestamp_watermark() -> None:
    """A quiet source aligns only with sources whose watermarks count the same unit: a
    sequence number given a timestamp's microseconds would make every later row late."""
    left = pa.table(
        {
            "k": [1],
            "o": pa.array([5], pa.int64()),
            "ts": pa.array([dt.datetime(2024, 1, 1)], pa.timestamp("us")),
        }
    )
    schema = pa.schema([("k", pa.int64()), ("seq", pa.int64())])

    async def right():  # type: ignore[no-untyped-def]
        yield pa.record_batch({"k": [1], "seq": [1]}, schema=schema)
        await asyncio.sleep(1.0)  # idle for five idle timeouts
        yield pa.record_batch({"k": [1], "seq": [5]}, schema=schema)

    ctx = ds.Context(state_dir=None)
    ctx.register_arrow("l", left, event_time="ts", watermark=ds.BoundedOutOfOrderness())
    ctx.register_arrow("r", right(), schema=schema, event_time="seq", watermark=0, idle_timeout=0.2)
    with ctx.execute_streaming(
        "SELECT l.o, r.seq FROM l JOIN r ON l.k = r.k AND l.o BETWEEN r.seq AND r.seq"
    ) as q:
        got = [row for batch in q for row in batch.to_pylist()]
        assert q.status()["late_rows"] == 0
    assert got == [{"o": 5, "seq": 5}]


def test_watermark_markers_are_values_of_the_event_time_column() -> None:
    """A source-provided marker on a DECIMAL column counts in its scale, on a DATE in days."""
    x = pa.schema([("x", pa.decimal128(9, 2))])
    d = pa.schema([("d", pa.date32())])

    def decimals():  # type: ignore[no-untyped-def]
        yield pa.record_batch({"x": pa.array([Decimal("1.00")], x.field("x").type)}, schema=x)
        yield ds.Watermark(Decimal("1.50"))  # type: ignore[arg-type]
        yield pa.record_batch(
            {"x": pa.array([Decimal("1.40"), Decimal("1.60")], x.field("x").type)}, schema=x
        )

    def dates():  # type: ignore[no-untyped-def]
        yield pa.record_batch({"d": pa.array([dt.date(2024, 1, 1)])}, schema=d)
        yield ds.Watermark(dt.date(2024, 1, 5))  # type: ignore[arg-type]
        yield pa.record_batch({"d": pa.array([dt.date(2024, 1, 4), dt.date(2024, 1, 6)])}, schema=d)

    for name, feed, schema, want in (
        ("x", decimals(), x, [Decimal("1.00"), Decimal("1.60")]),
        ("d", dates(), d, [dt.date(2024, 1, 1), dt.date(2024, 1, 6)]),
    ):
        ctx = ds.Context(state_dir=None)
        ctx.register_arrow("e", feed, schema=schema, event_time=name)
        with ctx.execute_streaming(f"SELECT {name} FROM e") as q:
            got = [v for b in q for v in b.column(0).to_pylist()]
            assert q.status()["late_rows"] == 1
        assert got == want
