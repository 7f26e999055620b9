"""ctx.sample(table, n): a peek that starts no query and commits nothing — Arrow data, files,
generators, sinks, views, and the newest messages of a Kafka topic."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from nbtest_support import events

import datum_sql as ds


@pytest.fixture
def ctx() -> Any:
    with ds.Context(state_dir=None, checkpoint_interval=None) as c:
        yield c


def test_arrow_table_and_batches(ctx: Any) -> None:
    table = events([0, 1, 2, 3, 4])
    ctx.register_arrow("t", table)
    assert ctx.sample("t", 3).equals(table.slice(0, 3))
    ctx.register_arrow("b", table.to_batches(max_chunksize=2))
    assert ctx.sample("b", 3).column("v").to_pylist() == [1, 2, 3]
    assert ctx.sample("b", 50).num_rows == 5
    assert ctx.sample("b", 0).num_rows == 0
    assert ctx.queries == []


def test_a_one_shot_iterator_is_refused_and_not_consumed(ctx: Any) -> None:
    batches = events([0, 1]).to_batches()
    it = iter(batches)
    ctx.register_arrow("once", it, schema=batches[0].schema)
    with pytest.raises(ds.PlanError, match="one-shot iterator"):
        ctx.sample("once", 1)
    assert next(it).num_rows == 2  # still unread


def test_files(ctx: Any, tmp_path: Path) -> None:
    (tmp_path / "a.csv").write_text("id,name\n1,ann\n2,bob\n3,cid\n")
    (tmp_path / "a.jsonl").write_text("".join(json.dumps({"id": i}) + "\n" for i in range(10)))
    pq.write_table(pa.table({"x": list(range(100))}), tmp_path / "a.parquet")
    ctx.execute(f"CREATE SOURCE c WITH (connector = 'csv', path = '{tmp_path / 'a.csv'}')")
    ctx.execute(f"CREATE SOURCE j WITH (connector = 'jsonl', path = '{tmp_path / 'a.jsonl'}')")
    ctx.execute(f"CREATE SOURCE p WITH (connector = 'parquet', path = '{tmp_path / 'a.parquet'}')")
    assert ctx.sample("c", 2).to_pylist() == [{"id": 1, "name": "ann"}, {"id": 2, "name": "bob"}]
    assert ctx.sample("j", 4).column("id").to_pylist() == [0, 1, 2, 3]
    assert ctx.sample("p", 5).column("x").to_pylist() == [0, 1, 2, 3, 4]


def test_nexmark_peek_is_instant_and_shows_the_rows_a_query_reads_first(ctx: Any) -> None:
    # paced at 5 rows/s: a paced read of 50 rows would take 10 s; the peek is unpaced
    ctx.execute(
        "CREATE SOURCE bids WITH (connector = 'nexmark', stream = 'bid', events_per_second = '5', seed = '9')"
    )
    started = time.monotonic()
    peek = ctx.sample("bids", 50)
    assert time.monotonic() - started < 5
    assert peek.num_rows == 50 and "price" in peek.column_names
    ctx.execute(
        "CREATE SOURCE bounded WITH (connector = 'nexmark', stream = 'bid', rows = '50', seed = '9')"
    )
    assert peek.equals(ctx.sql("SELECT * FROM bounded"))
    assert ctx.queries == []


def test_sinks_and_views(ctx: Any, tmp_path: Path) -> None:
    ctx.register_arrow("t", events([0, 1, 2, 3]))
    ctx.execute(f"CREATE SINK out WITH (connector = 'parquet', path = '{tmp_path / 'out'}')")
    ctx.execute_streaming("INSERT INTO out SELECT k, v FROM t").wait(30)
    assert sorted(ctx.sample("out", 10).column("v").to_pylist()) == [1, 2, 3, 4]
    view = ctx.execute(
        "CREATE MATERIALIZED VIEW counts AS SELECT k, count(*) AS n FROM t GROUP BY k"
    )
    view.wait(30)
    assert ctx.sample("counts", 5).to_pylist() == [{"k": "a", "n": 4}]


@pytest.mark.kafka
def test_kafka_newest_messages_decoded_without_committing(ctx: Any, kafka_broker: Any) -> None:
    topic = f"sample-{time.time_ns()}"
    kafka_broker.create_topic(topic, partitions=2)
    base_ms = 1_767_225_600_000  # 2026-01-01
    for p in (0, 1):
        for i in range(10):
            n = p * 100 + i
            kafka_broker.produce(
                topic, [json.dumps({"id": n, "name": f"n{n}"})], partition=p,
                timestamp_ms=base_ms + i * 1000 + p * 10,
            )  # fmt: skip
    group = f"g-{topic}"
    ctx.register_kafka_topic(
        "k", topic=topic, bootstrap_servers=kafka_broker.bootstrap, group_id=group,
        schema=pa.schema([("id", pa.int64()), ("name", pa.string())]), include=["partition"],
    )  # fmt: skip
    newest = ctx.sample("k", 4)
    # the newest four by message time: i = 8 and 9 of both partitions, oldest first
    assert newest.column("id").to_pylist() == [8, 108, 9, 109]
    assert newest.column("name").to_pylist() == ["n8", "n108", "n9", "n109"]
    assert newest.column("partition").to_pylist() == [0, 1, 0, 1]
    assert newest.column_names == ["id", "name", "partition"]
    assert ctx.sample("k", 100).num_rows == 20
    assert ctx.sample("k", 0).column_names == ["id", "name", "partition"]
    assert ctx.queries == []
    assert _committed(kafka_broker.bootstrap, topic, group) == {}


def _committed(bootstrap: str, topic: str, group: str) -> dict[int, int]:
    import asyncio

    from aiokafka import AIOKafkaConsumer, TopicPartition

    async def go() -> dict[int, int]:
        consumer = AIOKafkaConsumer(
            bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False
        )
        await consumer.start()
        try:
            out = {}
            for p in (0, 1):
                offset = await consumer.committed(TopicPartition(topic, p))
                if offset is not None:
                    out[p] = offset
            return out
        finally:
            await consumer.stop()

    return asyncio.run(go())
