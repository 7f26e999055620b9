"""Keyed process functions against hand-computed expectations (process_handlers.py): the
idle alert and the order state machine, streamed at several batch sizes with bounded
disorder, through a checkpoint and a restore, and as a batch query (``ctx.sql``). The idle
alert is also checked against DuckDB's batch SQL of the same quiet spells.
"""

from __future__ import annotations

import random
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from oracle import duckdb_result
from process_handlers import idle_reference, lifecycle_reference, orders_table

import datum_sql as ds
from datum_sql.testing import run_query, run_with_restore, sorted_rows

BASE = datetime(2024, 5, 1, 12, 0, 0)
DELAY = timedelta(seconds=5)
IDLE_SQL = "SELECT k, idle_since, alert_at FROM process(ev, 'idle_alert', key => k)"
LIFECYCLE_SQL = "SELECT order_id, at, event, status, kind FROM process(orders, 'order_lifecycle', key => order_id)"
#: DuckDB's quiet spells: each row whose next row of its key is IDLE or more later, or none
IDLE_DUCKDB = """
    SELECT k, ts AS idle_since, ts + INTERVAL 30 SECOND AS alert_at FROM (
        SELECT k, ts, lead(ts) OVER (PARTITION BY k ORDER BY ts) AS next_ts FROM ev)
    WHERE next_ts IS NULL OR next_ts - ts >= INTERVAL 30 SECOND
"""


def _disordered(rows: list[dict[str, Any]], rng: random.Random) -> list[dict[str, Any]]:
    """``rows`` (in time order) in an arrival order displaced by less than DELAY: no row
    is late for a watermark DELAY behind."""
    span = DELAY.total_seconds() * 0.9
    return sorted(rows, key=lambda r: r["ts"] + timedelta(seconds=rng.uniform(0, span)))


def _events(seed: int, n: int = 600) -> pa.Table:
    rng = random.Random(seed)
    t, rows = BASE, []
    for _ in range(n):
        t += timedelta(milliseconds=rng.choice([0, 200, 1500, 9000, 24000]))
        rows.append({"k": rng.choice([1, 2, 3, 4, None]), "ts": t, "v": rng.randint(0, 9)})
    return pa.Table.from_pylist(_disordered(rows, rng))


def _orders(seed: int) -> pa.Table:
    return orders_table(seed, disorder=DELAY)


def _stream(sql: str, name: str, table: pa.Table, batch_size: int) -> pa.Table:
    run = run_query(
        sql, {name: table}, event_time={name: "ts"},
        watermark={name: ds.BoundedOutOfOrderness(DELAY)}, batch_size=batch_size,
    )  # fmt: skip
    assert run.status["late_rows"] == 0
    return run.changelog


@pytest.mark.parametrize("seed", [1, 2])
@pytest.mark.parametrize("batch_size", [1, 7, 64, 10_000])
def test_idle_alert_streams_the_hand_computed_alerts(seed: int, batch_size: int) -> None:
    table = _events(seed)
    want = sorted(idle_reference(table.to_pylist()), key=repr)
    assert len(want) > 20
    got = _stream(IDLE_SQL, "ev", table, batch_size)
    assert sorted(sorted_rows(got), key=repr) == want
    duck = duckdb_result(IDLE_DUCKDB, {"ev": table})
    assert sorted(sorted_rows(duck), key=repr) == want


@pytest.mark.parametrize("seed", [3, 4])
@pytest.mark.parametrize("batch_size", [1, 5, 50, 10_000])
def test_order_state_machine_streams_the_hand_computed_rows(seed: int, batch_size: int) -> None:
    table = _orders(seed)
    want = sorted(lifecycle_reference(table.to_pylist()), key=repr)
    kinds = {row[-1] for row in want}
    assert kinds == {"ok", "invalid", "late"}
    got = _stream(LIFECYCLE_SQL, "orders", table, batch_size)
    assert sorted(sorted_rows(got), key=repr) == want


@pytest.mark.parametrize(
    ("sql", "name", "make", "reference"),
    [
        (IDLE_SQL, "ev", _events, idle_reference),
        (LIFECYCLE_SQL, "orders", _orders, lifecycle_reference),
    ],
    ids=["idle_alert", "order_lifecycle"],
)
def test_batch_query_runs_the_same_operator(sql: str, name: str, make: Any, reference: Any) -> None:
    table = make(5)
    ctx = ds.Context(state_dir=None)
    ctx.register_arrow(name, table, event_time="ts", watermark=ds.BoundedOutOfOrderness(DELAY))
    got = ctx.sql(sql)
    assert sorted(sorted_rows(got), key=repr) == sorted(reference(table.to_pylist()), key=repr)
    streamed = ctx.execute_streaming(sql).to_arrow(timeout=60)
    assert sorted(sorted_rows(streamed), key=repr) == sorted(sorted_rows(got), key=repr)


@pytest.mark.parametrize(
    ("sql", "name", "make", "reference"),
    [
        (IDLE_SQL, "ev", _events, idle_reference),
        (LIFECYCLE_SQL, "orders", _orders, lifecycle_reference),
    ],
    ids=["idle_alert", "order_lifecycle"],
)
@pytest.mark.parametrize("sink", ["duckdb", "parquet"])
def test_checkpoint_and_restore_mid_stream(
    tmp_path: Path, sql: str, name: str, make: Any, reference: Any, sink: str
) -> None:
    """State, timers and held rows go into the checkpoint; after the crash the resumed
    run fires each timer once, and the exactly-once sink holds the expected rows once."""
    table = make(6)
    run = run_with_restore(
        sql, {name: table}, tmp_path / "state", event_time={name: "ts"},
        watermark={name: ds.BoundedOutOfOrderness(DELAY)}, batch_size=20, sink=sink,
    )  # fmt: skip
    assert run.status["recovered_from"]["checkpoint"] == run.checkpoint_id
    assert 0 < run.checkpoint_items[name] < run.crash_items[name]
    assert sorted(sorted_rows(run.result), key=repr) == sorted(
        reference(table.to_pylist()), key=repr
    )


FILTERED_SQL = (
    "SELECT k, idle_since, alert_at FROM process("
    "(SELECT k, ts FROM ev WHERE v > 2 AND k IS NOT NULL), 'idle_alert', key => k)"
)


@pytest.mark.parametrize("batch_size", [3, 64, 10_000])
def test_process_over_a_subquery_streams_and_batches_alike(batch_size: int) -> None:
    table = _events(8)
    kept = [r for r in table.to_pylist() if r["v"] > 2 and r["k"] is not None]
    want = sorted(idle_reference(kept), key=repr)
    got = _stream(FILTERED_SQL, "ev", table, batch_size)
    assert sorted(sorted_rows(got), key=repr) == want
    ctx = ds.Context(state_dir=None)
    ctx.register_arrow("ev", table, event_time="ts", watermark=ds.BoundedOutOfOrderness(DELAY))
    assert sorted(sorted_rows(ctx.sql(FILTERED_SQL)), key=repr) == want


def test_process_over_a_subquery_through_a_checkpoint(tmp_path: Path) -> None:
    table = _events(9)
    kept = [r for r in table.to_pylist() if r["v"] > 2 and r["k"] is not None]
    run = run_with_restore(
        FILTERED_SQL, {"ev": table}, tmp_path / "state", event_time={"ev": "ts"},
        watermark={"ev": ds.BoundedOutOfOrderness(DELAY)}, batch_size=25,
    )  # fmt: skip
    assert sorted(sorted_rows(run.result), key=repr) == sorted(idle_reference(kept), key=repr)
