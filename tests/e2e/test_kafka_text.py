"""Text read from Kafka is valid UTF-8, or the record follows the bad-record policy.

Every text format (JSON, CSV, BYTES into VARCHAR, a VARCHAR message key) validates the
bytes of its string columns; an invalid record is located (the rest of the fetch still
decodes) and then fails the query with its topic/partition/offset, is skipped and counted,
or is dead-lettered with its raw bytes, reason and position.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from kafka_support import Collector, unique

import datum_sql as ds
from datum_sql.connectors.kafka.decode import make_decoder
from datum_sql.errors import QueryFailed

TEXT = pa.schema([("id", pa.int64()), ("name", pa.string())])
#: invalid UTF-8 in a string: a stray continuation byte, a truncated sequence, an encoded
#: surrogate, an overlong encoding
INVALID = [b"\xff\xfe", b"caf\xc3", b"\xed\xa0\x80", b"\xc0\xaf"]


def json_row(i: int, name: bytes) -> bytes:
    return b'{"id": %d, "name": "%s"}' % (i, name)


def assert_valid(batch: pa.RecordBatch) -> None:
    batch.validate(full=True)  # raises on invalid UTF-8


# -- decoders (no broker) ----------------------------------------------------------------------


@pytest.mark.parametrize("encode", ["JSON", "CSV"])
def test_text_formats_reject_invalid_utf8_and_keep_the_rest(encode: str) -> None:
    def value(i: int, name: bytes) -> bytes:
        return json_row(i, name) if encode == "JSON" else b"%d,%s" % (i, name)

    names = [b"plain", b"caf\xc3\xa9", b"\xe2\x82\xac 5"]  # ASCII and valid multi-byte text
    values: list[bytes | None] = [value(i, names[i % 3]) for i in range(3000)]
    bad_at = [7, 1500, 1501, 2999]
    for k, i in enumerate(bad_at):
        values[i] = value(i, INVALID[k])
    out = make_decoder(encode, TEXT).decode(values)
    assert [i for i, _ in out.bad] == bad_at
    assert all("'name'" in reason and "UTF-8" in reason for _, reason in out.bad), out.bad
    assert out.good == [i for i in range(3000) if i not in bad_at]
    assert out.batch.column("id").to_pylist() == out.good
    assert out.batch.column("name").to_pylist()[:3] == ["plain", "café", "€ 5"]
    assert_valid(out.batch)


def test_bytes_into_varchar_rejects_invalid_utf8() -> None:
    schema = pa.schema([pa.field("text", pa.string(), nullable=False)])
    values: list[bytes | None] = [b"ok", INVALID[0], "naïve".encode(), None, INVALID[2], b""]
    out = make_decoder("BYTES", schema).decode(values)
    assert [i for i, _ in out.bad] == [1, 3, 4]
    reasons = dict(out.bad)
    assert "UTF-8" in reasons[1] and "'text'" in reasons[1] and "UTF-8" in reasons[4]
    assert "NULL" in reasons[3]
    assert out.good == [0, 2, 5]
    assert out.batch.column("text").to_pylist() == ["ok", "naïve", ""]
    assert_valid(out.batch)
    large = make_decoder("BYTES", pa.schema([("t", pa.large_string())])).decode(values)
    assert [i for i, _ in large.bad] == [1, 4]
    assert large.batch.column("t").to_pylist() == ["ok", "naïve", None, ""]
    assert_valid(large.batch)
    raw = make_decoder("BYTES", None).decode(values)  # BYTEA keeps any bytes
    assert not raw.bad and raw.batch.column("value").to_pylist() == values


def test_all_valid_text_takes_one_pass_and_reports_nothing() -> None:
    values: list[bytes | None] = [json_row(i, "ünïcödé".encode()) for i in range(5000)]
    out = make_decoder("JSON", TEXT).decode(values)
    assert out.good is None and not out.bad and out.batch.num_rows == 5000


# -- through the broker and SQL ----------------------------------------------------------------


def produce_text(broker: Any, topic: str) -> list[bytes]:
    """Partition 0: ids 0..4 with invalid UTF-8 at offsets 1 and 3; partition 1: ids 10, 11."""
    broker.create_topic(topic, 2)
    bad = [json_row(1, INVALID[0]), json_row(3, INVALID[2])]
    good = [json_row(i, f"n{i}".encode()) for i in (0, 2, 4, 10, 11)]
    broker.produce(topic, [good[0], bad[0], good[1], bad[1], good[2]], partition=0)
    broker.produce(topic, good[3:], partition=1)
    return bad


def text_source(ctx: ds.Context, broker: Any, topic: str, **options: str) -> None:
    opts = {"topic": topic, "properties.bootstrap.server": broker.bootstrap}
    opts.update({"scan.bounded.mode": "latest", "properties.fetch.max.wait.ms": "100", **options})
    with_ = ", ".join(f"{k} = '{v}'" for k, v in opts.items())
    ctx.execute(
        f"CREATE SOURCE src (id BIGINT, name VARCHAR) WITH (connector = 'kafka', {with_}) "
        "FORMAT PLAIN ENCODE JSON"
    )


@pytest.mark.kafka
def test_invalid_utf8_fails_naming_topic_partition_offset(kafka_broker: Any) -> None:
    topic = unique()
    produce_text(kafka_broker, topic)
    ctx = ds.Context(state_dir=None)
    text_source(ctx, kafka_broker, topic)
    out = Collector()
    ctx.register_append_sink("out", out)
    q = ctx.execute_streaming("INSERT INTO out SELECT id, name FROM src")
    with pytest.raises(QueryFailed) as err:
        q.wait(timeout=60)
    msg = str(err.value)
    assert f"topic {topic!r} partition 0 offset 1" in msg and "UTF-8" in msg, msg
    assert all(r["id"] not in (1, 2, 3, 4) for r in out.rows), "nothing at or after offset 1"
    ctx.close()


@pytest.mark.kafka
def test_invalid_utf8_skip_counts_and_dead_letter_keeps_raw_bytes(
    kafka_broker: Any, tmp_path: Path
) -> None:
    topic = unique()
    bad = produce_text(kafka_broker, topic)
    ctx = ds.Context(state_dir=None)
    text_source(ctx, kafka_broker, topic, bad_records="skip")
    skipped = Collector()
    ctx.register_append_sink("skipped", skipped)
    q = ctx.execute_streaming("INSERT INTO skipped SELECT id, name FROM src")
    assert q.wait(timeout=60)
    assert sorted(r["id"] for r in skipped.rows) == [0, 2, 4, 10, 11]
    assert q.status()["sources"]["src"]["rejected_rows"] == 2

    ctx.execute(f"CREATE SINK dlq WITH (connector = 'parquet', path = '{tmp_path / 'dlq'}')")
    ctx.execute("DROP SOURCE src")
    text_source(ctx, kafka_broker, topic, bad_records="dead_letter", **{"dead_letter.sink": "dlq"})
    kept = Collector()
    ctx.register_append_sink("kept", kept)
    q = ctx.execute_streaming("INSERT INTO kept SELECT id, name FROM src")
    assert q.wait(timeout=60)
    names = {r["id"]: r["name"] for r in kept.rows}
    assert names == {0: "n0", 2: "n2", 4: "n4", 10: "n10", 11: "n11"}
    written = pq.read_table(tmp_path / "dlq").sort_by("position")  # what the sink committed
    dead = written.select(["raw", "reason", "position"]).to_pylist()
    assert [d["raw"] for d in dead] == bad
    assert [d["position"] for d in dead] == [f"{topic}/0/1", f"{topic}/0/3"]
    assert all("UTF-8" in d["reason"] and "'name'" in d["reason"] for d in dead), dead
    ctx.close()


@pytest.mark.kafka
def test_varchar_key_with_invalid_utf8_follows_the_policy(kafka_broker: Any) -> None:
    topic = unique()
    kafka_broker.create_topic(topic, 1)
    kafka_broker.produce(topic, [json.dumps({"id": 0}).encode()], key=b"k0")
    kafka_broker.produce(topic, [json.dumps({"id": 1}).encode()], key=INVALID[1])
    kafka_broker.produce(topic, [json.dumps({"id": 2}).encode()], key="ключ".encode())
    ctx = ds.Context(state_dir=None)
    for name, policy in (("strict", "fail"), ("lenient", "skip")):
        ctx.execute(
            f"CREATE SOURCE {name} (id BIGINT, k VARCHAR) INCLUDE key AS k "
            f"WITH (connector = 'kafka', topic = '{topic}', "
            f"properties.bootstrap.server = '{kafka_broker.bootstrap}', "
            f"scan.bounded.mode = 'latest', bad_records = '{policy}') FORMAT PLAIN ENCODE JSON"
        )
    with pytest.raises(QueryFailed) as err:
        ctx.execute_streaming("SELECT id, k FROM strict").wait(timeout=60)
    msg = str(err.value)
    assert f"topic {topic!r} partition 0 offset 1" in msg and "UTF-8" in msg, msg
    q = ctx.execute_streaming("SELECT id, k FROM lenient")
    rows = sorted(q.to_arrow(timeout=60).to_pylist(), key=lambda r: r["id"])
    assert rows == [{"id": 0, "k": "k0"}, {"id": 2, "k": "ключ"}]
    assert q.status()["sources"]["lenient"]["rejected_rows"] == 1
    ctx.close()
