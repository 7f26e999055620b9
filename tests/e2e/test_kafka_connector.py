"""The kafka source and sink against the real broker (Tansu), driven directly with asyncio."""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import pyarrow as pa
import pytest

from datum_sql.connectors.base import ConnectorSpec, RejectedRecords, SplitBatch, SplitEnded
from datum_sql.connectors.kafka.decode import make_decoder
from datum_sql.connectors.kafka.options import KafkaSecurity, KafkaSourceOptions
from datum_sql.connectors.kafka.sink import KafkaSink
from datum_sql.connectors.kafka.source import KafkaSource
from datum_sql.connectors.registry import create_sink, create_source
from datum_sql.errors import PlanError, SinkError, SourceError

SCHEMA = pa.schema([("id", pa.int64()), ("name", pa.string()), ("ts", pa.timestamp("us"))])
BASE_MS = 1_700_000_000_000
# fast group membership on the test broker
GROUP_PROPS = {
    "properties.session.timeout.ms": "2000",
    "properties.heartbeat.interval.ms": "200",
    "properties.rebalance.timeout.ms": "500",
}


def topic_name() -> str:
    return f"t-{uuid.uuid4().hex[:10]}"


def row(i: int, *, millis: bool = False) -> bytes:
    ts: Any = BASE_MS + i if millis else f"2023-11-14T22:13:20.{i % 1000:03d}"
    return json.dumps({"id": i, "name": f"n{i}", "ts": ts, "extra": [1, 2]}).encode()


def source(
    broker: Any,
    topic: str,
    *,
    schema: pa.Schema | None = SCHEMA,
    encode: str = "JSON",
    include: Any = None,
    **options: Any,
) -> KafkaSource:
    opts = {"connector": "kafka", "topic": topic, "properties.bootstrap.server": broker.bootstrap}
    opts.update({k.replace("__", "."): v for k, v in options.items()})
    spec = ConnectorSpec(
        name="src", options=opts, schema=schema, encode=encode, extra={"include": include or []}
    )
    src = create_source("kafka", spec)
    assert isinstance(src, KafkaSource)
    return src


async def drain(
    src: KafkaSource,
    position: dict[str, Any] | None = None,
    *,
    until: Callable[[list[Any]], bool] | None = None,
    timeout: float = 30.0,
) -> list[Any]:
    """Open, read until the source ends (bounded) or ``until(items)``, close."""
    items: list[Any] = []
    await src.open(position)

    async def go() -> None:
        gen = src.read()
        try:
            async for item in gen:
                items.append(item)
                if until is not None and until(items):
                    return
        finally:
            await gen.aclose()

    try:
        await asyncio.wait_for(go(), timeout)
    finally:
        await src.close()
    return items


def rows_of(items: list[Any]) -> list[dict[str, Any]]:
    return [r for it in items if isinstance(it, SplitBatch) for r in it.batch.to_pylist()]


def n_rows(items: list[Any]) -> int:
    return sum(it.batch.num_rows for it in items if isinstance(it, SplitBatch))


def ids(items: list[Any]) -> list[int]:
    return sorted(r["id"] for r in rows_of(items))


# -- decoding (no broker) -----------------------------------------------------------------


def test_json_decoder_accepts_iso_and_epoch_millis_and_locates_bad_records() -> None:
    dec = make_decoder("JSON", SCHEMA)
    values = [row(i, millis=i % 2 == 0) for i in range(6)]  # mixed in one batch
    values += [b'{"id": 6, "name": "x", \n "ts": 1700000000006}', b"not json", b"", None]
    values += [b'{"id": "seven"}', b'{"id": 8} {"id": 9}', row(10)]
    out = dec.decode(values)
    assert [i for i, _ in out.bad] == [7, 8, 9, 10, 11]
    assert out.good == [0, 1, 2, 3, 4, 5, 6, 12]
    assert out.batch.column("id").to_pylist() == [0, 1, 2, 3, 4, 5, 6, 10]
    ts = out.batch.column("ts").cast(pa.int64()).to_pylist()
    assert ts[0] == (BASE_MS + 0) * 1000 and ts[6] == (BASE_MS + 6) * 1000
    assert ts[1] == (BASE_MS + 1) * 1000  # ISO 2023-11-14T22:13:20.001 == BASE_MS + 1 ms
    reasons = dict(out.bad)
    assert "empty" in reasons[8] and "empty" in reasons[9]
    assert "found 2" in reasons[11]
    # all good: one vectorized call, no index list
    clean = dec.decode([row(i) for i in range(1000)])
    assert clean.good is None and not clean.bad and clean.batch.num_rows == 1000


def test_not_null_csv_and_bytes_decoders() -> None:
    strict = pa.schema([pa.field("id", pa.int64(), nullable=False), ("name", pa.string())])
    out = make_decoder("JSON", strict).decode([b'{"id": 1}', b'{"name": "x"}', b'{"id": 3}'])
    assert out.batch.column("id").to_pylist() == [1, 3]
    assert out.bad == [(1, "missing value for NOT NULL column 'id'")]
    csv = make_decoder("CSV", SCHEMA).decode(
        [b"1,a,2023-11-14 22:13:20", b"2,b\n", b"3,c,1700000000000", b"x,y,z"]
    )
    assert csv.batch.column("id").to_pylist() == [1, 3]
    assert [i for i, _ in csv.bad] == [1, 3]
    raw = make_decoder("BYTES", None).decode([b"\x00\xff", None])
    assert raw.batch.column("value").to_pylist() == [b"\x00\xff", None]


def test_security_options_map_to_aiokafka() -> None:
    sasl = KafkaSecurity.parse(
        "t",
        {
            "properties.security.protocol": "SASL_PLAINTEXT",
            "properties.sasl.mechanism": "SCRAM-SHA-256",
            "properties.sasl.jaas.config": "org.apache.kafka.common.security.scram."
            'ScramLoginModule required username="bob" password="pw-123";',
        },
    )
    assert sasl.client_kwargs() == {
        "security_protocol": "SASL_PLAINTEXT",
        "sasl_mechanism": "SCRAM-SHA-256",
        "sasl_plain_username": "bob",
        "sasl_plain_password": "pw-123",
    }
    assert "pw-123" not in repr(sasl) and "bob" in repr(sasl)
    tls = KafkaSecurity.parse(
        "t",
        {
            "properties.security.protocol": "SSL",
            "properties.ssl.ca.location": "/nonexistent/ca.pem",
            "properties.ssl.key.password": "key-pw-456",
        },
    )
    with pytest.raises(ValueError, match=r"ca\.pem") as err:
        tls.client_kwargs()
    assert "key-pw-456" not in str(err.value) and "key-pw-456" not in repr(tls)
    with pytest.raises(PlanError, match=r"sasl\.username"):
        KafkaSecurity.parse("t", {"properties.security.protocol": "SASL_SSL"})


def test_option_validation_names_the_option() -> None:
    with pytest.raises(PlanError, match=r"scan\.startup\.mode"):
        KafkaSourceOptions.parse(
            "t",
            {"topic": "x", "properties.bootstrap.server": "h:1", "scan.startup.mode": "yesterday"},
        )
    with pytest.raises(PlanError, match=r"dead_letter\.sink"):
        KafkaSourceOptions.parse(
            "t", {"topic": "x", "properties.bootstrap.server": "h:1", "bad_records": "dead_letter"}
        )
    with pytest.raises(PlanError, match=r"properties\.no\.such"):
        KafkaSourceOptions.parse(
            "t", {"topic": "x", "properties.bootstrap.server": "h:1", "properties.no.such": "1"}
        )
    opts = KafkaSourceOptions.parse(
        "t",
        {
            "topic": "x",
            "properties.bootstrap.servers": "h:1",
            "scan.startup.mode": "specific-offsets",
            "scan.startup.specific-offsets": "partition:0,offset:42;partition:1,offset:0",
            "scan.bounded.mode": "latest",
            "idle_timeout": "5 s",
        },
    )
    assert opts.specific_offsets == ((0, 42), (1, 0)) and opts.bounded and opts.bootstrap == "h:1"


# -- source against the broker -----------------------------------------------------------


@pytest.mark.kafka
def test_three_partitions_bounded_round_trip(kafka_broker: Any) -> None:
    topic = topic_name()
    kafka_broker.create_topic(topic, 3)
    expected = []
    for p in range(3):
        vals = [row(i, millis=p == 1) for i in range(p, 90, 3)]
        kafka_broker.produce(topic, vals, partition=p, key=f"k{p}")
        expected += list(range(p, 90, 3))
    include = [("partition", "p"), ("offset", "off"), ("key", "k"), ("timestamp", "kts")]
    src = source(kafka_broker, topic, include=include, batch_size=7, scan__bounded__mode="latest")
    assert src.bounded
    assert src.schema.names == ["id", "name", "ts", "p", "off", "k", "kts"]
    everything = asyncio.run(drain(src))
    ended = sorted(it.split for it in everything if isinstance(it, SplitEnded))
    assert ended == ["0", "1", "2"], "each partition read to its end is reported once"
    items = [it for it in everything if not isinstance(it, SplitEnded)]
    assert all(isinstance(it, SplitBatch) for it in items)
    assert ids(items) == sorted(expected)
    for it in items:
        part = int(it.split)
        assert it.batch.schema == src.schema
        assert set(it.batch.column("p").to_pylist()) == {part}
        assert all(i % 3 == part for i in it.batch.column("id").to_pylist())
        assert set(it.batch.column("k").to_pylist()) == {f"k{part}".encode()}
    per_part = {p: [r["off"] for r in rows_of(items) if r["p"] == p] for p in range(3)}
    assert per_part == {p: list(range(30)) for p in range(3)}
    assert src.position() == {"offsets": {"0": 30, "1": 30, "2": 30}}
    m = src.metrics()
    assert m["records"] == 90 and {v["lag"] for v in m["partitions"].values()} == {0}


@pytest.mark.kafka
def test_fetches_decode_off_the_event_loop_while_the_next_fetch_drains(kafka_broker: Any) -> None:
    """Decoding (pyarrow, GIL released) runs in a worker thread while the read loop drains
    the records aiokafka already fetched: rows stay complete and in offset order."""
    topic = topic_name()
    kafka_broker.create_topic(topic, 2)
    for p in range(2):
        kafka_broker.produce(topic, [row(i) for i in range(p, 400, 2)], partition=p)
    src = source(kafka_broker, topic, batch_size=16, scan__bounded__mode="latest")
    threads: list[int] = []
    decode = src._decoder.decode

    def spy(values: list[bytes | None]) -> Any:
        threads.append(threading.get_ident())
        return decode(values)

    src._decoder.decode = spy  # type: ignore[method-assign]
    loop_thread: list[int] = []

    async def run() -> list[Any]:
        loop_thread.append(threading.get_ident())
        return await drain(src)

    items = asyncio.run(run())
    assert threads and loop_thread[0] not in threads, "decoding ran on the event loop"
    assert ids(items) == list(range(400))
    for it in items:
        if isinstance(it, SplitBatch):
            got = it.batch.column("id").to_pylist()
            assert got == sorted(got) and all(i % 2 == int(it.split) for i in got)
    assert src.position() == {"offsets": {"0": 200, "1": 200}}


@pytest.mark.kafka
def test_a_fetch_of_several_partitions_is_decoded_in_one_parser_call(kafka_broker: Any) -> None:
    """The values of every partition in a fetch are parsed together and sliced back per
    partition: one decoder call per fetch, rows still per partition and in offset order."""
    topic = topic_name()
    kafka_broker.create_topic(topic, 3)
    for p in range(3):
        kafka_broker.produce(topic, [row(i) for i in range(p, 60, 3)], partition=p)
    include = [("partition", "p"), ("offset", "off")]
    src = source(kafka_broker, topic, include=include, scan__bounded__mode="latest")
    decodes: list[int] = []
    fetches: list[int] = []
    decode, decode_fetch = src._decoder.decode, src._decode_fetch

    def spy_decode(values: list[bytes | None]) -> Any:
        decodes.append(len(values))
        return decode(values)

    def spy_fetch(fetch: list[tuple[int, list[Any]]]) -> Any:
        fetches.append(len(fetch))
        return decode_fetch(fetch)

    src._decoder.decode = spy_decode  # type: ignore[method-assign]
    src._decode_fetch = spy_fetch  # type: ignore[method-assign]
    items = asyncio.run(drain(src))
    assert max(fetches) > 1, "the broker answered one partition per fetch: nothing measured"
    assert len(decodes) == len(fetches), f"{decodes} decoder calls for fetches of {fetches}"
    assert sorted(ids(items)) == list(range(60))
    for it in items:
        if isinstance(it, SplitBatch) and it.batch.num_rows:
            part = int(it.split)
            assert set(it.batch.column("p").to_pylist()) == {part}
            got = it.batch.column("id").to_pylist()
            assert got == sorted(got) and all(i % 3 == part for i in got)
            offs = it.batch.column("off").to_pylist()
            assert offs == [i // 3 for i in got]
    assert src.position() == {"offsets": {"0": 20, "1": 20, "2": 20}}


@pytest.mark.kafka
def test_plain_record_tuples_read_what_consumer_records_read(
    kafka_broker: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The source takes aiokafka's fetches as (offset, timestamp, key, value) tuples, not
    ConsumerRecord objects; with an aiokafka where that hook does not apply it converts
    ConsumerRecords to the same tuples: rows, metadata and rejected records are the same."""
    import datum_sql.connectors.kafka.source as source_module

    topic = topic_name()
    kafka_broker.create_topic(topic, 2)
    bad = b'{"id": "not a number"}'
    for p in range(2):
        vals = [row(i) for i in range(p, 40, 2)]
        vals.insert(7, bad)
        kafka_broker.produce(topic, vals, partition=p, key=f"k{p}", timestamp_ms=BASE_MS + p)
    include = [("partition", "p"), ("offset", "off"), ("key", "k"), ("timestamp", "kts")]

    def read(plain: bool) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        with monkeypatch.context() as m:
            if not plain:
                m.setattr(source_module, "plain_records", lambda consumer: False)
            src = source(
                kafka_broker, topic, include=include, batch_size=9, bad_records="skip",
                scan__bounded__mode="latest",
            )  # fmt: skip
            fetched: list[Any] = []
            decode_fetch = src._decode_fetch

            def spy(fetch: list[tuple[int, list[Any]]]) -> Any:
                fetched.extend(m for _, msgs in fetch for m in msgs)
                return decode_fetch(fetch)

            src._decode_fetch = spy  # type: ignore[method-assign]
            items = asyncio.run(drain(src))
            assert src._plain is plain
            assert fetched and all(type(m) is tuple and len(m) == 4 for m in fetched)
            assert {m[2] for m in fetched} == {b"k0", b"k1"}
            rejected = [r for it in items if isinstance(it, RejectedRecords)
                        for r in it.batch.to_pylist()]  # fmt: skip
            rejected.sort(key=lambda r: (r["partition"], r["offset"]))
            return sorted(rows_of(items), key=lambda r: (r["p"], r["off"])), rejected

    rows, rejected = read(plain=True)
    assert [r["id"] for r in rows if r["p"] == 0] == list(range(0, 40, 2))
    assert [r["off"] for r in rows if r["p"] == 1] == [o for o in range(21) if o != 7]
    assert {(r["p"], r["k"], r["kts"]) for r in rows} == {
        (
            p,
            f"k{p}".encode(),
            datetime.fromtimestamp((BASE_MS + p) / 1000, UTC).replace(tzinfo=None),
        )
        for p in range(2)
    }
    assert [(r["partition"], r["offset"], r["raw"]) for r in rejected] == [
        (0, 7, bad),
        (1, 7, bad),
    ]
    assert read(plain=False) == (rows, rejected)


@pytest.mark.kafka
def test_startup_modes(kafka_broker: Any) -> None:
    topic = topic_name()
    kafka_broker.create_topic(topic, 1)
    now = int(time.time() * 1000) - 60_000
    for i in range(10):
        kafka_broker.produce(topic, [row(i)], partition=0, timestamp_ms=now + i * 1000)

    def read(**opts: Any) -> list[int]:
        return ids(
            asyncio.run(drain(source(kafka_broker, topic, scan__bounded__mode="latest", **opts)))
        )

    assert read() == list(range(10))
    assert read(scan__startup__mode="earliest") == list(range(10))
    assert read(scan__startup__mode="latest") == []
    assert read(scan__startup__mode="timestamp", scan__startup__timestamp=now + 6500) == [7, 8, 9]
    iso = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime((now + 4000) // 1000))
    iso += f".{(now + 4000) % 1000:03d}Z"
    assert read(scan__startup__mode="timestamp", scan__startup__timestamp=iso) == list(range(4, 10))
    assert read(scan__startup__mode="timestamp", scan__startup__timestamp=now + 99_000) == []
    specific = {"scan.startup.specific-offsets": "partition:0,offset:7"}
    assert read(scan__startup__mode="specific-offsets", **specific) == [7, 8, 9]

    # latest, unbounded: only what arrives after the start
    async def latest() -> list[int]:
        src = source(kafka_broker, topic, scan__startup__mode="latest", fetch__max__wait__ms=100)
        task = asyncio.create_task(drain(src, until=lambda its: n_rows(its) >= 3))
        for _ in range(200):
            if src.metrics()["state"] == "running":
                break
            await asyncio.sleep(0.05)
        await kafka_broker.produce_async(topic, [row(i) for i in (100, 101, 102)], partition=0)
        return ids(await task)

    assert asyncio.run(latest()) == [100, 101, 102]


@pytest.mark.kafka
def test_resume_from_position_yields_exactly_the_rest(kafka_broker: Any) -> None:
    topic = topic_name()
    kafka_broker.create_topic(topic, 2)
    for p in range(2):
        kafka_broker.produce(topic, [row(i) for i in range(p * 100, p * 100 + 50)], partition=p)
    src = source(kafka_broker, topic, batch_size=9, scan__bounded__mode="latest")
    first = asyncio.run(drain(src, until=lambda its: n_rows(its) >= 30))
    pos = src.position()
    assert sum(pos["offsets"].values()) == n_rows(first) < 100
    rest_src = source(kafka_broker, topic, batch_size=9, scan__bounded__mode="latest")
    rest = asyncio.run(drain(rest_src, pos))
    got = ids(first) + ids(rest)
    assert sorted(got) == list(range(50)) + list(range(100, 150))
    assert len(set(got)) == 100


@pytest.mark.kafka
@pytest.mark.parametrize("policy", ["fail", "skip", "dead_letter"])
def test_bad_json_policies(kafka_broker: Any, policy: str) -> None:
    topic = topic_name()
    kafka_broker.create_topic(topic, 2)
    bad1, bad2 = b'{"id": 1, "name": "x", "ts": ', b'{"id": "three"}'
    kafka_broker.produce(topic, [row(0), bad1, row(2), bad2, row(4)], partition=0)
    kafka_broker.produce(topic, [row(10), row(11)], partition=1)
    opts: dict[str, Any] = {"bad_records": policy, "scan__bounded__mode": "latest"}
    if policy == "dead_letter":
        opts["dead_letter__sink"] = "dlq"
    src = source(kafka_broker, topic, **opts)
    if policy == "fail":
        items: list[Any] = []

        async def run() -> None:
            await src.open(None)
            try:
                async for it in src.read():
                    items.append(it)
            finally:
                await src.close()

        with pytest.raises(SourceError) as err:
            asyncio.run(run())
        msg = str(err.value)
        assert topic in msg and "partition 0" in msg and "offset 1" in msg
        got = rows_of(items)
        assert [r["id"] for r in got if r["id"] < 10] == [0]  # nothing at/after offset 1
        assert src.position()["offsets"]["0"] == 1
        return
    items = asyncio.run(drain(src))
    assert ids(items) == [0, 2, 4, 10, 11]
    rejected = [it for it in items if isinstance(it, RejectedRecords)]
    assert sum(r.batch.num_rows for r in rejected) == 2
    assert src.metrics()["rejected"] == 2
    table = pa.Table.from_batches([r.batch for r in rejected])
    assert table.column("raw").to_pylist() == [bad1, bad2]
    assert table.column("position").to_pylist() == [f"{topic}/0/1", f"{topic}/0/3"]
    assert table.column("offset").to_pylist() == [1, 3]
    assert all(table.column("reason").to_pylist())
    assert src.position() == {"offsets": {"0": 5, "1": 2}}


@pytest.mark.kafka
def test_group_commit_then_group_offsets_resumes_after_it(kafka_broker: Any) -> None:
    topic = topic_name()
    group = f"g-{uuid.uuid4().hex[:8]}"
    kafka_broker.create_topic(topic, 2)
    for p in range(2):
        kafka_broker.produce(topic, [row(p * 100 + i) for i in range(10)], partition=p)

    async def first() -> KafkaSource:
        src = source(kafka_broker, topic, properties__group__id=group, **GROUP_PROPS)
        await src.open(None)
        got = 0
        gen = src.read()
        async for it in gen:
            got += it.batch.num_rows
            if got >= 20:
                break
        await gen.aclose()
        assert src.position() == {"offsets": {"0": 10, "1": 10}}
        await src.commit({"offsets": {"0": 4, "1": 7}})
        assert src.metrics()["last_commit_error"] is None
        await src.close()
        return src

    asyncio.run(first())
    second = source(
        kafka_broker,
        topic,
        properties__group__id=group,
        scan__startup__mode="group-offsets",
        scan__bounded__mode="latest",
        **GROUP_PROPS,
    )
    items = asyncio.run(drain(second))
    assert ids(items) == [4, 5, 6, 7, 8, 9, 107, 108, 109]


@pytest.mark.kafka
def test_sink_to_topic_to_source_round_trip_with_key_and_gzip(kafka_broker: Any) -> None:
    topic = topic_name()
    kafka_broker.create_topic(topic, 3)
    n = 500
    batch = pa.RecordBatch.from_pydict(
        {
            "id": pa.array(range(n), pa.int64()),
            "name": pa.array([f'name "{i}"\n' for i in range(n)]),
            "ts": pa.array([(BASE_MS + i) * 1000 for i in range(n)], pa.int64()).cast(
                pa.timestamp("us")
            ),
        }
    )
    spec = ConnectorSpec(
        name="out",
        options={
            "connector": "kafka",
            "topic": topic,
            "key": "id",
            "compression": "gzip",
            "properties.bootstrap.server": kafka_broker.bootstrap,
        },
    )
    snk = create_sink("kafka", spec)
    assert isinstance(snk, KafkaSink) and snk.accepts_changelog

    async def write() -> None:
        await snk.open(batch.schema)
        await snk.write(batch.slice(0, 200))
        await snk.write(batch.slice(200))
        assert (await snk.pre_commit(1))["acknowledged"] == n
        await snk.commit(1)
        await snk.close()

    asyncio.run(write())
    src = source(kafka_broker, topic, include=[("key", "k")], scan__bounded__mode="latest")
    rows = sorted(rows_of(asyncio.run(drain(src))), key=lambda r: r["id"])
    assert [r["k"] for r in rows] == [str(i).encode() for i in range(n)]
    assert [{k: r[k] for k in ("id", "name", "ts")} for r in rows] == batch.to_pylist()
    # one key always lands on one partition
    by_key = src.metrics()["partitions"]
    assert sum(v["position"] for v in by_key.values()) == n


@pytest.mark.kafka
def test_sink_writes_changelog_as_upserts_and_tombstones(kafka_broker: Any) -> None:
    topic = topic_name()
    kafka_broker.create_topic(topic, 1)
    changelog = pa.RecordBatch.from_pydict(
        {
            "_op": ["+I", "+I", "-U", "+U", "-D"],
            "k": ["a", "b", "a", "a", "b"],
            "v": [1, 2, 1, 3, 2],
        }
    )
    spec = ConnectorSpec(
        name="out",
        options={"topic": topic, "key": "k", "properties.bootstrap.server": kafka_broker.bootstrap},
    )
    snk = create_sink("kafka", spec)

    async def write() -> None:
        await snk.open(changelog.schema)
        await snk.write(changelog)
        await snk.pre_commit(1)
        await snk.close()

    asyncio.run(write())
    src = source(
        kafka_broker,
        topic,
        schema=None,
        encode="BYTES",
        include=[("key", "key")],
        scan__bounded__mode="latest",
    )
    got = [(r["key"], r["value"]) for r in rows_of(asyncio.run(drain(src)))]
    assert got == [
        (b"a", b'{"k":"a","v":1}'),
        (b"b", b'{"k":"b","v":2}'),
        (b"a", b'{"k":"a","v":3}'),
        (b"b", None),
    ]
    no_key = KafkaSink(
        ConnectorSpec(
            name="o",
            options={"topic": topic, "properties.bootstrap.server": kafka_broker.bootstrap},
        )
    )
    assert not no_key.accepts_changelog
    with pytest.raises(SinkError, match="key"):
        asyncio.run(no_key.open(changelog.schema))


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_secrets_never_in_reprs_errors_or_metrics() -> None:
    password = "hunter2-Sup3rSecret"
    key_password = "k3y-pa55word"
    bootstrap = f"127.0.0.1:{_closed_port()}"
    opts = {
        "connector": "kafka",
        "topic": "t",
        "properties.bootstrap.server": bootstrap,
        "properties.security.protocol": "SASL_PLAINTEXT",
        "properties.sasl.mechanism": "PLAIN",
        "properties.sasl.username": "alice",
        "properties.sasl.password": password,
        "properties.ssl.key.password": key_password,
        "retry.deadline": "1 s",
    }
    spec = ConnectorSpec(name="secret_src", options=opts, schema=SCHEMA, encode="JSON")
    src = create_source("kafka", spec)
    with pytest.raises(SourceError) as err:
        asyncio.run(drain(src, timeout=20))
    assert "unreachable" in str(err.value) and bootstrap in str(err.value)
    snk = create_sink("kafka", ConnectorSpec(name="secret_sink", options=dict(opts)))
    with pytest.raises(SinkError) as sink_err:
        asyncio.run(asyncio.wait_for(snk.open(SCHEMA), 20))
    texts = [
        str(err.value),
        repr(err.value),
        str(sink_err.value),
        repr(src),
        repr(spec),
        repr(src.options),
        repr(snk),
        repr(snk.options),
        json.dumps(src.metrics()),
        json.dumps(snk.metrics()),
    ]
    for text in texts:
        assert password not in text and key_password not in text
    assert "alice" in repr(src.options)  # the repr is useful, only secrets are masked
    with pytest.raises(PlanError) as plan_err:
        create_source("kafka", ConnectorSpec(name="s", options={**opts, "scan.startup.mode": "x"}))
    assert password not in str(plan_err.value)


@pytest.mark.kafka
def test_broker_paused_mid_read_retries_then_resumes_without_loss(kafka_broker: Any) -> None:
    topic = topic_name()
    kafka_broker.create_topic(topic, 2)
    for p in range(2):
        kafka_broker.produce(topic, [row(p * 1000 + i) for i in range(40)], partition=p)
    src = source(
        kafka_broker,
        topic,
        batch_size=10,
        fetch__max__wait__ms=100,
        properties__request__timeout__ms="1500",
        retry__deadline="60 s",
    )
    states: list[str] = []

    async def run() -> list[Any]:
        items: list[Any] = []
        await src.open(None)
        gen = src.read()

        async def consume() -> None:
            async for it in gen:
                items.append(it)
                if n_rows(items) >= 100:
                    return

        task = asyncio.create_task(consume())
        try:
            while n_rows(items) < 10:
                await asyncio.sleep(0.02)
            kafka_broker.pause()
            try:
                for _ in range(300):
                    states.append(src.metrics()["state"])
                    if states[-1] == "retrying":
                        break
                    await asyncio.sleep(0.1)
                assert src.metrics()["last_error"]
            finally:
                kafka_broker.resume()
            await kafka_broker.produce_async(topic, [row(5000 + i) for i in range(20)], partition=0)
            await asyncio.wait_for(task, 60)
            states.append(src.metrics()["state"])
        finally:
            task.cancel()
            await gen.aclose()
            await src.close()
        return items

    items = asyncio.run(run())
    assert "retrying" in states
    assert states[-1] == "running"
    expected = list(range(40)) + list(range(1000, 1040)) + list(range(5000, 5020))
    assert ids(items) == sorted(expected)  # all rows, no duplicates


@pytest.mark.kafka
def test_two_group_members_split_partitions_without_loss(kafka_broker: Any) -> None:
    topic = topic_name()
    group = f"g-{uuid.uuid4().hex[:8]}"
    kafka_broker.create_topic(topic, 4)
    for p in range(4):
        kafka_broker.produce(topic, [row(p * 100 + i) for i in range(10)], partition=p)
    opts = {
        "properties__group__id": group,
        "scan__startup__mode": "group-offsets",
        "fetch__max__wait__ms": 100,
        **GROUP_PROPS,
    }
    a, b = source(kafka_broker, topic, **opts), source(kafka_broker, topic, **opts)
    got: dict[str, list[int]] = {"a": [], "b": []}

    async def member(name: str, src: KafkaSource) -> None:
        await src.open(None)
        gen = src.read()
        try:
            async for it in gen:
                got[name] += it.batch.column("id").to_pylist()
        finally:  # cancelled by the test when done
            await gen.aclose()
            await src.close()

    async def run() -> None:
        ta = asyncio.create_task(member("a", a))
        tb: asyncio.Task[None] | None = None
        try:
            for _ in range(300):
                if len(got["a"]) >= 40:
                    break
                await asyncio.sleep(0.05)
            assert sorted(got["a"]) == sorted(p * 100 + i for p in range(4) for i in range(10))
            await a.commit(a.position())  # everything so far is processed
            tb = asyncio.create_task(member("b", b))
            for _ in range(300):  # wait for the rebalance to split the partitions
                owned_a, owned_b = set(a.position()["offsets"]), set(b.position()["offsets"])
                if owned_a and owned_b and len(owned_a | owned_b) == 4:
                    break
                await asyncio.sleep(0.05)
            assert not owned_a & owned_b, "a revoked partition must leave the position"
            assert len(owned_a | owned_b) == 4
            new = [p * 100 + 50 + i for p in range(4) for i in range(5)]
            for p in range(4):
                await kafka_broker.produce_async(
                    topic, [row(p * 100 + 50 + i) for i in range(5)], partition=p
                )
            for _ in range(300):
                if len([i for i in got["a"] + got["b"] if i % 100 >= 50]) >= 20:
                    break
                await asyncio.sleep(0.05)
            fresh_a = [i for i in got["a"] if i % 100 >= 50]
            fresh_b = [i for i in got["b"] if i % 100 >= 50]
            # each new row read once, by the member owning its partition
            assert sorted(fresh_a + fresh_b) == sorted(new)
            assert {i // 100 for i in fresh_a} <= {int(p) for p in owned_a}
            assert {i // 100 for i in fresh_b} <= {int(p) for p in owned_b}
            assert [i for i in got["b"] if i % 100 < 50] == []  # b started at the commit
        finally:
            tasks = [t for t in (ta, tb) if t is not None]
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    asyncio.run(run())
