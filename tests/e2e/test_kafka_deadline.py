"""``retry.deadline`` is enforced: a broker that stops answering (frozen with SIGSTOP) for
longer than the deadline fails the query soon after the deadline, naming the topic, instead
of waiting out the freeze. The broker is resumed on every path."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import pyarrow as pa
import pytest
from kafka_support import Collector, unique, wait_for

import datum_sql as ds
from datum_sql.connectors.base import ConnectorSpec
from datum_sql.connectors.kafka.sink import KafkaSink
from datum_sql.connectors.registry import create_sink
from datum_sql.errors import QueryFailed, SinkError

pytestmark = pytest.mark.kafka

DEADLINE = 4.0
#: the longest a failure may come after the deadline: one bounded broker request (at most
#: half the deadline), the backoff and the query's teardown, with room for a loaded machine
GRACE = 6.0
#: how long the broker stays frozen at most (the query must fail well before)
FREEZE = 15.0


def events(ctx: ds.Context, broker: Any, topic: str) -> None:
    ctx.execute(
        f"CREATE SOURCE events (id BIGINT) WITH (connector = 'kafka', topic = '{topic}', "
        f"properties.bootstrap.server = '{broker.bootstrap}', "
        f"properties.fetch.max.wait.ms = '100', retry.deadline = '{DEADLINE:g}s') "
        "FORMAT PLAIN ENCODE JSON"
    )


def assert_deadline_error(message: str, topic: str) -> None:
    assert f"topic {topic!r}" in message, message
    assert "retry.deadline" in message and "passed" in message, message


def test_source_fails_after_its_retry_deadline_during_a_freeze(kafka_broker: Any) -> None:
    topic = unique()
    kafka_broker.create_topic(topic, 2)
    kafka_broker.produce(topic, [json.dumps({"id": i}).encode() for i in range(20)], partition=0)
    ctx = ds.Context(state_dir=None, checkpoint_interval=None)
    events(ctx, kafka_broker, topic)
    out = Collector()
    ctx.register_append_sink("out", out)
    q = ctx.execute_streaming("INSERT INTO out SELECT id FROM events")
    try:
        wait_for("the first 20 rows", lambda: out.count() == 20)
        wait_for("status: running", lambda: q.status()["sources"]["events"]["state"] == "running")
        kafka_broker.pause()
        try:
            frozen = time.monotonic()
            wait_for("the query to fail", lambda: q.state == "failed", timeout=FREEZE)
            took = time.monotonic() - frozen
        finally:
            kafka_broker.resume()
        assert took < DEADLINE + GRACE, f"failed {took:.1f}s after the broker froze"
        with pytest.raises(QueryFailed) as err:
            q.wait(timeout=10)
        assert_deadline_error(str(err.value), topic)
        assert sorted(out.ids()) == list(range(20))
    finally:
        ctx.close()


def test_source_starting_against_a_frozen_broker_fails_after_the_deadline(
    kafka_broker: Any,
) -> None:
    topic = unique()
    kafka_broker.create_topic(topic, 1)
    ctx = ds.Context(state_dir=None, checkpoint_interval=None)
    events(ctx, kafka_broker, topic)
    ctx.register_append_sink("out", Collector())
    kafka_broker.pause()
    try:
        started = time.monotonic()
        q = ctx.execute_streaming("INSERT INTO out SELECT id FROM events")
        wait_for("the query to fail", lambda: q.state == "failed", timeout=FREEZE)
        took = time.monotonic() - started
    finally:
        kafka_broker.resume()
    try:
        assert took < DEADLINE + GRACE, f"failed {took:.1f}s after the start"
        with pytest.raises(QueryFailed) as err:
            q.wait(timeout=10)
        assert_deadline_error(str(err.value), topic)
    finally:
        ctx.close()


def test_sink_fails_after_its_retry_deadline_during_a_freeze(kafka_broker: Any) -> None:
    topic = unique()
    kafka_broker.create_topic(topic, 1)
    spec = ConnectorSpec(
        name="out",
        options={
            "connector": "kafka",
            "topic": topic,
            "properties.bootstrap.server": kafka_broker.bootstrap,
            "retry.deadline": f"{DEADLINE:g}s",
        },
        encode="JSON",
    )
    sink = create_sink("kafka", spec)
    assert isinstance(sink, KafkaSink)
    schema = pa.schema([("id", pa.int64())])

    async def run() -> float:
        await sink.open(schema)
        try:
            await sink.write(pa.record_batch([pa.array([1, 2, 3])], schema=schema))
            await asyncio.wait_for(sink.pre_commit(1), 30)
            kafka_broker.pause()
            try:
                frozen = time.monotonic()
                await sink.write(pa.record_batch([pa.array([4, 5])], schema=schema))
                with pytest.raises(SinkError) as err:
                    await asyncio.wait_for(sink.pre_commit(2), FREEZE)
                took = time.monotonic() - frozen
            finally:
                kafka_broker.resume()
            assert_deadline_error(str(err.value), topic)
            assert sink.metrics()["acknowledged"] == 3
            return took
        finally:
            await asyncio.wait_for(sink.close(), 30)

    took = asyncio.run(run())
    assert took < DEADLINE + GRACE, f"failed {took:.1f}s after the broker froze"
