"""``datum-sql status`` and ``reset`` after a Kafka query, against the real broker."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from kafka_support import unique

import datum_sql as ds
from datum_sql.cli import main

pytestmark = pytest.mark.kafka


def test_status_shows_the_offsets_per_partition(
    kafka_broker: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    topic = unique()
    kafka_broker.create_topic(topic, 2)
    kafka_broker.produce(topic, [json.dumps({"id": i}).encode() for i in range(5)], partition=0)
    kafka_broker.produce(topic, [json.dumps({"id": i}).encode() for i in range(3)], partition=1)
    state = tmp_path / "state"
    ctx = ds.Context(state_dir=state)
    ctx.execute(
        f"CREATE SOURCE events (id BIGINT) WITH (connector = 'kafka', topic = '{topic}', "
        f"properties.bootstrap.server = '{kafka_broker.bootstrap}', scan.bounded.mode = 'latest', "
        "properties.sasl.password = 'hunter2') FORMAT PLAIN ENCODE JSON"
    )
    ctx.execute(f"CREATE SINK copy WITH (connector = 'parquet', path = '{tmp_path / 'out'}')")
    q = ctx.execute_streaming("INSERT INTO copy SELECT id FROM events")
    assert q.wait(timeout=30)

    capsys.readouterr()
    assert main(["status", "--state-dir", str(state), "--json"]) == 0
    (status,) = json.loads(capsys.readouterr().out)["queries"]
    (source,) = status["sources"]
    assert source["table"] == "events" and source["connector"] == "kafka"
    assert source["kind"] == "kafka" and source["offsets"] == {"0": 5, "1": 3}
    assert main(["status", "--state-dir", str(state)]) == 0
    out = capsys.readouterr().out
    assert "next offset per partition: 0: 5, 1: 3" in out
    assert "hunter2" not in out

    assert main(["reset", "insert_into_copy", "--to", "start", "--state-dir", str(state)]) == 1
    plan = capsys.readouterr().out
    assert "source 'events' (kafka) is read from the earliest offset each partition retains" in plan


def test_reset_refuses_to_rewind_a_source_sharing_a_consumer_group(
    kafka_broker: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    topic, group = unique(), unique("g")
    kafka_broker.create_topic(topic, 1)
    state = tmp_path / "state"
    fast = ", ".join(
        f"{k} = '{v}'"
        for k, v in {
            "properties.session.timeout.ms": "2000",
            "properties.heartbeat.interval.ms": "200",
            "properties.rebalance.timeout.ms": "500",
        }.items()
    )
    script = tmp_path / "job.sql"
    script.write_text(
        f"CREATE SOURCE events (id BIGINT) WITH (connector = 'kafka', topic = '{topic}', "
        f"properties.bootstrap.server = '{kafka_broker.bootstrap}', scan.bounded.mode = 'latest', "
        f"properties.group.id = '{group}', {fast}) FORMAT PLAIN ENCODE JSON;\n"
        f"CREATE SINK seen WITH (connector = 'duckdb', path = '{tmp_path / 'seen.duckdb'}', "
        "table = 'seen', primary_key = 'id');\n"
        "INSERT INTO seen SELECT id, count(*) AS n FROM events GROUP BY id;\n"
    )
    run = ["run", str(script), "--state-dir", str(state)]
    kafka_broker.produce(topic, [json.dumps({"id": i}).encode() for i in range(3)], partition=0)
    assert main(run) == 0
    kafka_broker.produce(topic, [json.dumps({"id": i}).encode() for i in range(3, 5)], partition=0)
    assert main(run) == 0
    capsys.readouterr()
    reset = ["reset", "insert_into_seen", "--to", "checkpoint:1", "--state-dir", str(state)]
    assert main(reset) == 2
    err = capsys.readouterr().err
    assert f"source 'events' (kafka) shares consumer group '{group}'" in err
    assert "skip the rows in between" in err
