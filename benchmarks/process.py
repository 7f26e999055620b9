"""A keyed process function: the idle alert (an alert when a key is quiet for 30 s of event
time) over 1M events of 10k keys, beside DuckDB's batch SQL of the same quiet spells (each
row whose next row of its key is 30 s or more later, or has none).

The events (``keyed_events`` of inputs.py) are one per millisecond, each of one of 10k
random keys (about 100 per key, gaps of 10 s on average, so about 5% of them start a quiet spell). The handler is vectorized over each
call's rows with numpy, as a handler should be: what is measured is the engine's cost of
sorting and cutting rows by key, calling the handler once per key per watermark step,
checking its responses and firing its timers.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from benchmarks.spec import Benchmark, Input

IDLE_US = 30_000_000
EPOCH = datetime(1970, 1, 1)
SQL = "SELECT k, idle_since, alert_at FROM process(ev, 'idle_alert', key => k)"
DUCKDB_SQL = """
    SELECT k, ts AS idle_since, ts + INTERVAL 30 SECOND AS alert_at FROM (
        SELECT k, ts, lead(ts) OVER (PARTITION BY k ORDER BY ts) AS next_ts FROM ev)
    WHERE next_ts IS NULL OR next_ts - ts >= INTERVAL 30 SECOND
"""


def events(n: int) -> dict[str, Input]:
    return {"ev": Input("keyed_events", n, event_time="ts", watermark_ms=1000)}


def idle_alert(act: Any) -> Any:
    """The idle alert over ``act.rows`` with numpy (times as int64 microseconds)."""
    from datetime import timedelta

    import numpy as np
    import pyarrow as pa

    import datum_sql as ds

    ts = act.rows.column("ts").to_numpy().astype("datetime64[us]").astype(np.int64)
    last = act.state.get("last_us")
    since = np.empty(0, np.int64)
    if act.timer is not None:
        since = np.array([(act.timer - EPOCH) // timedelta(microseconds=1) - IDLE_US])
        last = None
    if len(ts):
        prev = np.concatenate([[last], ts[:-1]]) if last is not None else ts[:-1]
        gaps = prev[(ts[len(ts) - len(prev) :] - prev) >= IDLE_US]
        since = np.concatenate([since, gaps])
    rows = pa.table(
        {
            "idle_since": pa.array(since.astype("datetime64[us]")),
            "alert_at": pa.array((since + IDLE_US).astype("datetime64[us]")),
        }
    )
    if not len(ts):
        return ds.ProcessResponse(rows=rows, clear=["last_us"])
    old = act.state.get("last_us")
    end = int(ts[-1])
    return ds.ProcessResponse(
        rows=rows,
        set={"last_us": end},
        timers=[EPOCH + timedelta(microseconds=end + IDLE_US)],
        delete_timers=[EPOCH + timedelta(microseconds=old + IDLE_US)] if old is not None else [],
    )


def prepare_with_idle_alert(bench: Benchmark, n: int, params: dict[str, Any]) -> Any:
    """datum-sql's run, with the handler registered first (in the child that runs it)."""
    import datum_sql as ds
    from benchmarks.engines import prepare_datum

    ds.process_function(
        state={"last_us": "BIGINT"},
        output={"idle_since": "TIMESTAMP", "alert_at": "TIMESTAMP"},
        time="alert_at",
        name="idle_alert",
    )(idle_alert)
    return prepare_datum(bench, n, params)


BENCHMARKS = [
    Benchmark(
        "process_idle_alert",
        "process",
        "A keyed process function (Python handler, engine-owned state and timers): an alert "
        "per key quiet for 30 s of event time, 10k keys",
        events,
        SQL,
        DUCKDB_SQL,
        engines=("datum-sql", "duckdb"),
        runners={"datum-sql": "benchmarks.process:prepare_with_idle_alert"},
    ),
]

__all__ = ["BENCHMARKS"]
