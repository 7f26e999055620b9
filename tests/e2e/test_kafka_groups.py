"""Consumer groups per query: each query reads the whole topic under its own group id
(``datum-<query name>``) unless the source names one (``properties.group.id``)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from kafka_support import Collector, committed, unique, wait_for

import datum_sql as ds

pytestmark = pytest.mark.kafka


def hundred_rows(broker: Any, topic: str) -> None:
    broker.create_topic(topic, 4)
    for p in range(4):
        rows = [json.dumps({"id": i}).encode() for i in range(100) if i % 4 == p]
        broker.produce(topic, rows, partition=p)


def events(ctx: ds.Context, broker: Any, topic: str, **options: str) -> None:
    opts = {"topic": topic, "properties.bootstrap.server": broker.bootstrap, **options}
    opts["properties.fetch.max.wait.ms"] = "100"
    with_ = ", ".join(f"{k} = '{v}'" for k, v in opts.items())
    ctx.execute(
        f"CREATE SOURCE events (id BIGINT) WITH (connector = 'kafka', {with_}) "
        "FORMAT PLAIN ENCODE JSON"
    )


def test_two_queries_on_one_source_each_read_the_whole_topic(kafka_broker: Any) -> None:
    topic = unique()
    hundred_rows(kafka_broker, topic)
    ctx = ds.Context(state_dir=None, checkpoint_interval=None)
    events(ctx, kafka_broker, topic)
    a, b = Collector(), Collector()
    ctx.register_append_sink("a", a)
    ctx.register_append_sink("b", b)
    try:
        qa = ctx.execute_streaming("INSERT INTO a SELECT id FROM events", name="reader_a")
        qb = ctx.execute_streaming("INSERT INTO b SELECT id FROM events", name="reader_b")
        wait_for("both queries to read 100 rows", lambda: a.count() >= 100 and b.count() >= 100)
        assert sorted(a.ids()) == sorted(b.ids()) == list(range(100))
        for q, name in ((qa, "reader_a"), (qb, "reader_b")):
            assert q.status()["sources"]["events"]["group_id"] == f"datum-{name}"
            q.checkpoint()  # commits the query's offsets to its own group
            assert committed(kafka_broker, topic, f"datum-{name}", 4) == dict.fromkeys(range(4), 25)
        assert sorted(a.ids()) == sorted(b.ids()) == list(range(100)), "nothing more"
    finally:
        ctx.close()


def test_a_group_id_set_on_the_source_is_honoured(kafka_broker: Any) -> None:
    topic, group = unique(), unique("g")
    hundred_rows(kafka_broker, topic)
    ctx = ds.Context(state_dir=None, checkpoint_interval=None)
    events(
        ctx,
        kafka_broker,
        topic,
        **{
            "properties.group.id": group,
            "properties.session.timeout.ms": "2000",
            "properties.heartbeat.interval.ms": "200",
            "properties.rebalance.timeout.ms": "500",
        },
    )
    out = Collector()
    ctx.register_append_sink("out", out)
    try:
        q = ctx.execute_streaming("INSERT INTO out SELECT id FROM events", name="reader")
        wait_for("100 rows", lambda: out.count() >= 100)
        assert q.status()["sources"]["events"]["group_id"] == group
        q.checkpoint()
        assert committed(kafka_broker, topic, group, 4) == dict.fromkeys(range(4), 25)
        assert committed(kafka_broker, topic, "datum-reader", 4) == dict.fromkeys(range(4))
    finally:
        ctx.close()
