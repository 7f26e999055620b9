"""A datum-sql process for crash tests: runs fixed INSERT queries to their end.

Usage: python crash_child.py STATE_DIR OUT_DIR INPUT_DIR KAFKA QUERY [QUERY...]

``KAFKA`` is ``<bootstrap>/<topic>`` (the topic the ``kafka_windowed`` query reads, filled
by the parent before the first run) or ``-``. ``INPUT_DIR`` holds ``events/``, ``trades/``
and ``quotes/`` (Parquet files). Prints ``started`` once the queries run. The parent kills
it at random moments and runs it again on the same directories until it exits 0.

Callback sinks append JSON lines to ``callback-<sink>-<pid>.jsonl``: one file per sink
(each query runs on its own thread, so a shared file would interleave their writes) and
one ``os.write`` per batch on an ``O_APPEND`` descriptor. A kill can only leave the last
line of a file without its newline; that batch's write never returned, so no checkpoint
covers it and it is delivered again after recovery. :func:`read_callback` drops exactly
that torn tail and fails on anything else that is not a whole JSON line.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa

import datum_sql as ds

ROWS = 4000
RATE = 4000  # bids per second: the run takes about one second, long enough to crash in

QUERIES = {
    # name: select (the source tables are created in main)
    "stateless": "SELECT auction, bidder, price, date_time FROM bids WHERE price % 3 <> 0",
    "windowed": (
        "SELECT window_start, window_end, auction % 10 AS bucket, count(*) AS n, sum(price) AS total "
        "FROM tumble(bids, date_time, INTERVAL '50 milliseconds') "
        "GROUP BY window_start, window_end, auction % 10 EMIT ON WINDOW CLOSE"
    ),
    "files": "SELECT id, amount * 2 AS doubled, label FROM events WHERE id % 5 <> 0",
    # ASOF over two Parquet inputs in event time: each trade with the latest quote of its
    # symbol at or before it (no ties, no late rows: the result is deterministic)
    "asof": (
        "SELECT t.id, t.sym, t.ts, t.qty, q.bid, q.ts AS quote_ts FROM trades t "
        "ASOF LEFT JOIN quotes q ON t.sym = q.sym AND t.ts >= q.ts"
    ),
    # a tumbling window over a Kafka topic (two partitions), read to the end offsets seen at start
    "kafka_windowed": (
        "SELECT window_start, window_end, k, count(*) AS n, sum(v) AS total "
        "FROM tumble(kevents, ts, INTERVAL '100 milliseconds') "
        "GROUP BY window_start, window_end, k EMIT ON WINDOW CLOSE"
    ),
}

#: the sinks each query writes to (every query: Parquet and DuckDB, the first three: callback)
SINKS = {
    "stateless": ("parquet", "duckdb", "callback"),
    "windowed": ("parquet", "duckdb", "callback"),
    "files": ("parquet", "duckdb", "callback"),
    "asof": ("parquet", "duckdb"),
    "kafka_windowed": ("parquet", "duckdb"),
}


def create_sources(ctx: ds.Context, inputs: str, kafka: str, queries: list[str]) -> None:
    ctx.execute(
        "CREATE SOURCE IF NOT EXISTS bids (WATERMARK FOR date_time AS date_time - INTERVAL '10 milliseconds') "
        f"WITH (connector = 'nexmark', stream = 'bid', rows = '{ROWS}', events_per_second = '{RATE}', "
        "seed = '7', inter_event_us = '1000')"
    )
    ctx.execute(
        "CREATE SOURCE IF NOT EXISTS events "
        f"WITH (connector = 'parquet', path = '{inputs}/events', batch_size = '50')"
    )
    for table in ("trades", "quotes"):
        ctx.execute(
            f"CREATE SOURCE IF NOT EXISTS {table} (WATERMARK FOR ts AS ts - INTERVAL '5 milliseconds') "
            f"WITH (connector = 'parquet', path = '{inputs}/{table}', batch_size = '25')"
        )
    if "kafka_windowed" in queries:
        bootstrap, _, topic = kafka.partition("/")
        ctx.execute(
            "CREATE SOURCE IF NOT EXISTS kevents (id BIGINT, k VARCHAR, v BIGINT, ts TIMESTAMP, "
            "WATERMARK FOR ts AS ts - INTERVAL '10 milliseconds') "
            f"WITH (connector = 'kafka', topic = '{topic}', properties.bootstrap.server = '{bootstrap}', "
            "scan.startup.mode = 'earliest', scan.bounded.mode = 'latest', batch_size = '100') "
            "FORMAT PLAIN ENCODE JSON"
        )


def _deliver_to(fd: int) -> Callable[[pa.RecordBatch], None]:
    """A callback writing each batch as whole JSON lines in one write, then fsyncing."""

    def deliver(batch: pa.RecordBatch) -> None:
        data = "".join(json.dumps(row, default=str) + "\n" for row in batch.to_pylist()).encode()
        view = memoryview(data)
        while view:  # a regular file takes it in one write; loop in case it does not
            view = view[os.write(fd, view) :]
        os.fsync(fd)

    return deliver


def read_callback(path: Path) -> list[str]:
    """The whole lines of a callback file; a torn last line (no newline) is dropped, any
    other line that is not a JSON object fails loudly."""
    text = path.read_bytes().decode()
    lines = text.split("\n")
    lines.pop()  # "" after the last newline, or the torn tail of a killed write
    for i, line in enumerate(lines):
        try:
            row = json.loads(line)
        except ValueError:
            raise AssertionError(f"{path.name}: line {i + 1} is not JSON: {line[:200]!r}") from None
        if not isinstance(row, dict):
            raise AssertionError(f"{path.name}: line {i + 1} is not a JSON object: {line[:200]!r}")
    return lines


def main() -> int:
    state, out, inputs, kafka, *queries = sys.argv[1:]
    out_dir = Path(out)
    out_dir.mkdir(parents=True, exist_ok=True)
    ctx = ds.Context(state_dir=state, checkpoint_interval=0.1)
    create_sources(ctx, inputs, kafka, queries)
    handles = []
    callbacks: list[int] = []
    for name in queries:
        for kind in SINKS[name]:
            sink = f"{name}_{kind}"
            if kind == "parquet":
                ctx.execute(
                    f"CREATE SINK IF NOT EXISTS {sink} WITH (connector = 'parquet', path = '{out}/{sink}')"
                )
            elif kind == "duckdb":
                ctx.execute(
                    f"CREATE SINK IF NOT EXISTS {sink} WITH (connector = 'duckdb', path = '{out}/{sink}.duckdb', table = 'rows')"
                )
            else:
                fd = os.open(
                    out_dir / f"callback-{sink}-{os.getpid()}.jsonl",
                    os.O_WRONLY | os.O_CREAT | os.O_APPEND,
                    0o644,
                )
                callbacks.append(fd)
                ctx.register_append_sink(sink, _deliver_to(fd))
            handles.append(ctx.execute_streaming(f"INSERT INTO {sink} {QUERIES[name]}"))
    print("started", flush=True)
    for q in handles:
        q.wait()
    for fd in callbacks:
        os.close(fd)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
