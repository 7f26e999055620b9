"""Kafka: N JSON bids consumed from the real test broker, datum-sql beside raw aiokafka.

The parent process starts the Tansu broker (the one the tests use, ``tests/kafka_broker.py``),
creates a topic of ``PARTITIONS`` partitions and produces the first N Nexmark bids as JSON
(encoded by DuckDB ``to_json``; bid ``i`` goes to partition ``i % PARTITIONS``, so every
partition is in event-time order). Then, each in its own child process (so peak RSS is its own):

* ``aiokafka``: the practical limit — one ``AIOKafkaConsumer`` with the same settings the
  kafka source uses, reading the whole topic with a ``getmany`` loop, no decoding;
* ``datum-sql``: ``CREATE SOURCE ... FORMAT PLAIN ENCODE JSON`` bounded at the end offsets
  (``scan.bounded.mode = 'latest'``) into a tumble aggregation with ``EMIT ON WINDOW CLOSE``
  into a callback sink.

Both clocks include connecting to the broker. The windowed result's row count is checked
against DuckDB over the same bids.
"""

from __future__ import annotations

import asyncio
import sys
import time
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa

import datum_sql as ds
from benchmarks.harness import Result, peak_rss_mb, run_isolated
from datum_sql.connectors.generators import nexmark_table
from datum_sql.connectors.kafka.options import KafkaSourceOptions

COLUMNS = ["auction", "bidder", "price", "channel", "date_time"]
PARTITIONS = 4
TOPIC = "bids"
SCHEMA_SQL = (
    "auction BIGINT, bidder BIGINT, price BIGINT, channel VARCHAR, date_time TIMESTAMP, "
    "WATERMARK FOR date_time AS date_time - INTERVAL '1 second'"
)
QUERY = (
    "SELECT auction, window_start, window_end, count(*) AS n, sum(price) AS total, "
    "max(price) AS top FROM tumble(bids, date_time, INTERVAL '10 seconds') "
    "GROUP BY window_start, window_end, auction EMIT ON WINDOW CLOSE"
)
DUCKDB_QUERY = (
    "SELECT auction, time_bucket(INTERVAL 10 SECOND, date_time) AS window_start, count(*) AS n, "
    "sum(price) AS total, max(price) AS top FROM bids GROUP BY 1, 2"
)

HEADER = (
    f"{'benchmark':<28} {'events':>10} {'datum ev/s':>10} {'aiokafka ev/s':>13} {'ratio':>6} "
    f"{'peak RSS MB':>11} {'(aiokafka)':>10}"
)


def own_peak_rss_mb() -> float:
    """Peak RSS of this process's own memory (``VmHWM``).

    ``getrusage(...).ru_maxrss`` survives ``exec``: a child spawned by a parent holding
    the produced bids (~0.5 GB) would report the parent's peak. Falls back to it off Linux.
    """
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return peak_rss_mb()


def _broker_class() -> Any:
    """The test suite's broker helper (tests/ is not a package: put it on the path)."""
    tests = str(Path(__file__).resolve().parents[1] / "tests")
    if tests not in sys.path:
        sys.path.insert(0, tests)
    from kafka_broker import KafkaBroker

    return KafkaBroker


def encode_bids(bids: pa.Table) -> list[bytes]:
    """One JSON object per bid, vectorized by DuckDB (timestamps as 'YYYY-MM-DD HH:MM:SS.f')."""
    con = duckdb.connect()
    con.register("bids", bids)
    values = con.sql("SELECT to_json(b)::VARCHAR FROM bids AS b").to_arrow_table().column(0)
    return values.cast(pa.binary()).to_pylist()  # type: ignore[no-any-return]


async def produce(bootstrap: str, topic: str, values: list[bytes], partitions: int) -> None:
    """Fill whole record batches by hand (much faster than one ``send`` per message)."""
    from aiokafka import AIOKafkaProducer

    producer = AIOKafkaProducer(
        bootstrap_servers=bootstrap,
        acks="all",
        linger_ms=50,
        max_batch_size=1 << 20,
        max_request_size=16 << 20,
    )
    await producer.start()
    try:
        futures = []
        for p in range(partitions):
            chunk = values[p::partitions]
            i = 0
            while i < len(chunk):
                batch = producer.create_batch()
                while i < len(chunk):
                    if batch.append(key=None, value=chunk[i], timestamp=None) is None:
                        break  # the batch is full
                    i += 1
                batch.close()
                futures.append(await producer.send_batch(batch, topic, partition=p))
        await asyncio.gather(*futures)
    finally:
        await producer.stop()


def source_options(bootstrap: str, topic: str) -> dict[str, str]:
    return {
        "topic": topic,
        "properties.bootstrap.server": bootstrap,
        "scan.bounded.mode": "latest",
    }


# -- the two contenders (each runs in a child process) ------------------------------------


def run_raw(bootstrap: str, topic: str, events: int) -> Result:
    """Raw aiokafka: getmany until every record was fetched; no decoding."""
    from aiokafka import AIOKafkaConsumer, TopicPartition

    options = KafkaSourceOptions.parse("bids", source_options(bootstrap, topic))

    async def consume() -> int:
        consumer = AIOKafkaConsumer(**options.consumer_kwargs())  # the source's settings
        await consumer.start()
        try:
            consumer.assign([TopicPartition(topic, p) for p in range(PARTITIONS)])
            n = 0
            while n < events:
                data = await consumer.getmany(
                    timeout_ms=options.fetch_max_wait_ms, max_records=options.batch_size
                )
                n += sum(len(records) for records in data.values())
            return n
        finally:
            await consumer.stop()

    t0 = time.perf_counter()
    n = asyncio.run(consume())
    seconds = time.perf_counter() - t0
    return Result("aiokafka_getmany", events, seconds, None, own_peak_rss_mb(), n, "no decoding")


def run_datum(bootstrap: str, topic: str, events: int) -> Result:
    """datum-sql: Kafka JSON source -> tumble aggregation -> callback sink, bounded."""
    ctx = ds.Context(state_dir=None, checkpoint_interval=None)
    with_ = ", ".join(f"{k} = '{v}'" for k, v in source_options(bootstrap, topic).items())
    ctx.execute(
        f"CREATE SOURCE bids ({SCHEMA_SQL}) WITH (connector = 'kafka', {with_}) "
        "FORMAT PLAIN ENCODE JSON"
    )
    out = {"rows": 0}

    def count(batch: pa.RecordBatch) -> None:
        out["rows"] += batch.num_rows

    ctx.register_append_sink("out", count)
    t0 = time.perf_counter()
    q = ctx.execute_streaming(f"INSERT INTO out {QUERY}")
    q.wait()
    seconds = time.perf_counter() - t0
    status = q.status()
    rows_in = status["rows_in"]
    if rows_in != events:
        raise RuntimeError(f"datum-sql read {rows_in} bids, expected {events}")
    note = f"late rows: {status['late_rows']}" if status["late_rows"] else ""
    return Result("kafka_json_tumble", events, seconds, None, own_peak_rss_mb(), out["rows"], note)


# -- the group ------------------------------------------------------------------------------


def run_all(events: int = 1_000_000) -> list[str]:
    """Start the broker, produce ``events`` bids, run both contenders; the lines to print."""
    t0 = time.perf_counter()
    bids = nexmark_table("bid", events, columns=COLUMNS)
    values = encode_bids(bids)
    broker = _broker_class().start()
    try:
        broker.create_topic(TOPIC, PARTITIONS)
        asyncio.run(produce(broker.bootstrap, TOPIC, values, PARTITIONS))
        setup_s = time.perf_counter() - t0
        del values
        args = {"bootstrap": broker.bootstrap, "topic": TOPIC, "events": events}
        raw = run_isolated("benchmarks.kafka", "raw", args)
        datum = run_isolated("benchmarks.kafka", "datum", args)
    finally:
        broker.stop()
    con = duckdb.connect()
    con.register("bids", bids)
    expected = con.sql(f"SELECT count(*) FROM ({DUCKDB_QUERY})").fetchall()[0][0]
    if datum.rows_out != expected:
        raise RuntimeError(f"kafka_json_tumble emitted {datum.rows_out} rows, DuckDB {expected}")
    ratio = datum.datum_eps / raw.datum_eps
    return [
        f"{datum.name:<28} {events:>10,} {datum.datum_eps / 1e6:9.3f}M {raw.datum_eps / 1e6:12.3f}M "
        f"{ratio:6.2f} {datum.peak_rss_mb:11.0f} {raw.peak_rss_mb:10.0f} "
        f"(setup {setup_s:.1f}s; {PARTITIONS} partitions; {datum.rows_out:,} windows = DuckDB)"
        + (f" {datum.note}" if datum.note else ""),
    ]


def main(events: int = 1_000_000) -> None:
    print(HEADER)
    for line in run_all(events):
        print(line, flush=True)


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 1_000_000)
