"""The child-process side of the Kafka group: fill the topic, and the Kafka readers."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import duckdb
import pyarrow as pa

from benchmarks import inputs
from benchmarks.engines import Prepared
from benchmarks.spec import Benchmark

SCHEMA_SQL = (
    "auction BIGINT, bidder BIGINT, price BIGINT, channel VARCHAR, date_time TIMESTAMP, "
    "WATERMARK FOR date_time AS date_time - INTERVAL '1 second'"
)


def encode_bids(bids: pa.Table) -> list[bytes]:
    """One JSON object per bid, vectorized by DuckDB (timestamps as 'YYYY-MM-DD HH:MM:SS.f')."""
    con = duckdb.connect()
    con.register("bids", bids)
    values = con.sql("SELECT to_json(b)::VARCHAR FROM bids AS b").to_arrow_table().column(0)
    return values.cast(pa.binary()).to_pylist()  # type: ignore[no-any-return]


async def _produce(bootstrap: str, topic: str, values: list[bytes], partitions: int) -> None:
    """Create the topic, then fill whole record batches by hand (much faster than ``send``)."""
    from aiokafka import AIOKafkaProducer
    from aiokafka.admin import AIOKafkaAdminClient, NewTopic

    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(topic, num_partitions=partitions,
                                            replication_factor=1)])  # fmt: skip
    finally:
        await admin.close()
    producer = AIOKafkaProducer(
        bootstrap_servers=bootstrap, acks="all", linger_ms=50, max_batch_size=1 << 20,
        max_request_size=16 << 20,
    )  # fmt: skip
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


def produce(bootstrap: str, topic: str, partitions: int, events: int) -> dict[str, Any]:
    """Child entry: the cached bids, as JSON, into a new topic."""
    t0 = time.perf_counter()
    values = encode_bids(inputs.load("bid", events))
    asyncio.run(_produce(bootstrap, topic, values, partitions))
    return {"records": len(values), "seconds": time.perf_counter() - t0}


def _source_options(bootstrap: str, topic: str) -> dict[str, str]:
    return {
        "topic": topic,
        "properties.bootstrap.server": bootstrap,
        "scan.bounded.mode": "latest",
    }


def prepare_datum(bench: Benchmark, events: int, params: dict[str, Any]) -> Prepared:
    """datum-sql: the Kafka JSON source into the benchmark's SELECT, materialized."""
    import datum_sql as ds

    ctx = ds.Context(state_dir=None, checkpoint_interval=None)
    options = _source_options(params["bootstrap"], params["topic"])
    with_ = ", ".join(f"{k} = '{v}'" for k, v in options.items())
    ctx.execute(
        f"CREATE SOURCE bids ({SCHEMA_SQL}) WITH (connector = 'kafka', {with_}) "
        "FORMAT PLAIN ENCODE JSON"
    )
    handle: dict[str, Any] = {}

    def run() -> pa.Table:
        handle["q"] = q = ctx.execute_streaming(bench.datum_sql)
        table = q.to_arrow()
        rows_in = q.status()["rows_in"]
        if rows_in != events:
            raise RuntimeError(f"datum-sql read {rows_in:,} bids from Kafka, expected {events:,}")
        return table

    def notes() -> list[str]:
        late = handle["q"].status()["late_rows"]
        return [f"{late:,} LATE ROWS DROPPED"] if late else []

    return Prepared(run, None, None, notes)


def _raw_options(params: dict[str, Any]) -> Any:
    from datum_sql.connectors.kafka.options import KafkaSourceOptions

    return KafkaSourceOptions.parse("bids", _source_options(params["bootstrap"], params["topic"]))


def _aiokafka(events: int, params: dict[str, Any], *, tuples: bool) -> Prepared:
    """Raw aiokafka: ``getmany`` until every record was fetched; no decoding. With
    ``tuples``, the consumer hands out (offset, timestamp, key, value) tuples as it does
    inside the source (``datum_sql.connectors.kafka.fetch``), not ``ConsumerRecord``s."""
    from aiokafka import AIOKafkaConsumer, TopicPartition

    from datum_sql.connectors.kafka.fetch import plain_records

    topic, partitions = params["topic"], params["partitions"]
    options = _raw_options(params)

    async def consume() -> int:
        consumer = AIOKafkaConsumer(**options.consumer_kwargs())  # the source's settings
        await consumer.start()
        try:
            if tuples and not plain_records(consumer):
                raise RuntimeError("this aiokafka's fetcher does not take the tuple hook")
            consumer.assign([TopicPartition(topic, p) for p in range(partitions)])
            n = 0
            while n < events:
                data = await consumer.getmany(
                    timeout_ms=options.fetch_max_wait_ms, max_records=options.batch_size
                )
                n += sum(len(records) for records in data.values())
            return n
        finally:
            await consumer.stop()

    def run() -> int:
        n = asyncio.run(consume())
        if n != events:
            raise RuntimeError(f"aiokafka fetched {n:,} records, expected {events:,}")
        return n

    notes = ["no decoding", "record tuples"] if tuples else ["no decoding"]
    return Prepared(run, None, None, lambda: notes)


def prepare_raw(bench: Benchmark, events: int, params: dict[str, Any]) -> Prepared:
    """Raw aiokafka, its public API: ``getmany`` returning ``ConsumerRecord`` objects."""
    return _aiokafka(events, params, tuples=False)


def prepare_raw_tuples(bench: Benchmark, events: int, params: dict[str, Any]) -> Prepared:
    """Raw aiokafka as the source drives it: record tuples, no decoding."""
    return _aiokafka(events, params, tuples=True)


def prepare_confluent(bench: Benchmark, events: int, params: dict[str, Any]) -> Prepared:
    """Raw confluent-kafka (librdkafka): ``Consumer.consume(num_messages=batch_size)`` until
    every record was fetched, each message's error checked; no decoding."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    topic, partitions = params["topic"], params["partitions"]
    options = _raw_options(params)

    def run() -> int:
        consumer = Consumer(
            {
                "bootstrap.servers": params["bootstrap"],
                "group.id": "datum-bench-confluent",  # required; nothing is committed
                "enable.auto.commit": False,
                "fetch.wait.max.ms": options.fetch_max_wait_ms,
            }
        )
        try:
            consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
            n = 0
            while n < events:
                msgs = consumer.consume(num_messages=options.batch_size, timeout=1.0)
                for m in msgs:
                    if m.error() is not None:
                        raise RuntimeError(f"confluent-kafka: {m.error()}")
                n += len(msgs)
        finally:
            consumer.close()
        if n != events:
            raise RuntimeError(f"confluent-kafka fetched {n:,} records, expected {events:,}")
        return n

    return Prepared(run, None, None, lambda: ["no decoding"])


__all__ = [
    "encode_bids",
    "prepare_confluent",
    "prepare_datum",
    "prepare_raw",
    "prepare_raw_tuples",
    "produce",
]
