"""Kafka end to end through SQL and the Context, against the real broker (Tansu).

Each test creates its own topics (and consumer groups), so tests never see each other's
records. Queries are polled with deadlines; nothing sleeps longer than it needs to.
"""

from __future__ import annotations

import calendar
import json
import logging
import random
import threading
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from kafka_support import Collector, committed, unique, wait_for

import datum_sql as ds
from datum_sql.errors import QueryFailed

pytestmark = pytest.mark.kafka

BASE = datetime(2024, 5, 1, 12, 0, 0)
#: fast group membership on the test broker
GROUP_OPTIONS = {
    "properties.session.timeout.ms": "2000",
    "properties.heartbeat.interval.ms": "200",
    "properties.rebalance.timeout.ms": "500",
}
COLUMNS = "id BIGINT, k VARCHAR, v BIGINT, ts TIMESTAMP"


def event(
    i: int, *, seconds: float | None = None, k: str | None = None, millis: bool = False
) -> dict[str, Any]:
    """A JSON-able row; ``ts`` as ISO text, or as epoch milliseconds with ``millis``."""
    ts = BASE + timedelta(seconds=i if seconds is None else seconds)
    when: Any = ts.isoformat(sep=" ")
    if millis:
        when = calendar.timegm(ts.timetuple()) * 1000 + ts.microsecond // 1000
    return {"id": i, "k": k or f"k{i % 4}", "v": i * 10, "ts": when}


def encode(rows: list[dict[str, Any]]) -> list[bytes]:
    return [json.dumps(r).encode() for r in rows]


def create_source(
    ctx: ds.Context,
    broker: Any,
    name: str,
    topic: str,
    *,
    columns: str = COLUMNS,
    watermark: str | None = "ts - INTERVAL '5 seconds'",
    **options: Any,
) -> None:
    """``CREATE SOURCE name (...) WITH (connector = 'kafka', ...) FORMAT PLAIN ENCODE JSON``."""
    opts = {"topic": topic, "properties.bootstrap.server": broker.bootstrap, **options}
    with_ = ", ".join(f"{k} = '{v}'" for k, v in opts.items())
    wm = f", WATERMARK FOR ts AS {watermark}" if watermark else ""
    ctx.execute(
        f"CREATE SOURCE {name} ({columns}{wm}) "
        f"WITH (connector = 'kafka', {with_}) FORMAT PLAIN ENCODE JSON"
    )


def source_status(q: Any, table: str) -> dict[str, Any]:
    return dict(q.status()["sources"][table])


def read_parquet_dir(path: Path) -> pa.Table:
    files = sorted(p for p in path.glob("*.parquet"))
    return pa.concat_tables([pq.read_table(f) for f in files]) if files else pa.table({})


# -- 1. filter into a file sink, bounded -------------------------------------------------------


def test_filter_three_partitions_into_parquet_bounded(kafka_broker: Any, tmp_path: Path) -> None:
    topic = unique()
    kafka_broker.create_topic(topic, 3)
    rows = [event(i) for i in range(300)]
    # both accepted timestamp encodings, mixed within each partition's fetches
    sent = [event(i, millis=i % 5 == 0) for i in range(300)]
    for p in range(3):
        kafka_broker.produce(topic, encode(sent[p::3]), partition=p)
    ctx = ds.Context(state_dir=None)
    create_source(
        ctx, kafka_broker, "orders", topic, **{"scan.bounded.mode": "latest", "batch_size": 40}
    )
    ctx.execute(f"CREATE SINK big WITH (connector = 'parquet', path = '{tmp_path / 'big'}')")
    q = ctx.execute_streaming("INSERT INTO big SELECT id, k, v, ts FROM orders WHERE v % 3 = 0")
    assert q.wait(timeout=30), "a bounded Kafka query ends by itself"
    assert q.state == "finished"
    got = ctx.sql("SELECT id, k, v, ts FROM big ORDER BY id").to_pylist()
    expected = [r for r in rows if r["v"] % 3 == 0]
    assert [r["id"] for r in got] == [r["id"] for r in expected]
    assert got[3] == {"id": 9, "k": "k1", "v": 90, "ts": BASE + timedelta(seconds=9)}
    assert got[5] == {"id": 15, "k": "k3", "v": 150, "ts": BASE + timedelta(seconds=15)}
    st = source_status(q, "orders")
    assert st["finished"] and st["rows"] == 300 and st["late_rows"] == 0
    assert {p: v["lag"] for p, v in st["partitions"].items()} == {"0": 0, "1": 0, "2": 0}
    assert read_parquet_dir(tmp_path / "big").num_rows == len(expected)


def test_batch_sql_over_a_topic_reads_it_bounded_with_the_needed_columns(
    kafka_broker: Any,
) -> None:
    """ctx.sql reads the topic to its current end (datum_sql/batch/scan.py), the same rows
    as the whole table read first and as DuckDB over it."""
    topic = unique()
    kafka_broker.create_topic(topic, 2)
    rows = [event(i) for i in range(400)]
    for p in range(2):
        kafka_broker.produce(topic, encode(rows[p::2]), partition=p)
    ctx = ds.Context(state_dir=None)
    create_source(ctx, kafka_broker, "orders", topic)
    sql = (
        "SELECT k, count(*) AS n, max(v) AS top FROM orders WHERE id % 3 = 0 GROUP BY k ORDER BY k"
    )
    got = ctx.sql(sql)
    whole = ctx._read_all(ctx.catalog.require("orders"))
    assert whole.num_rows == 400
    con = duckdb.connect()
    con.register("orders", whole)
    assert got.to_pylist() == con.sql(sql).to_arrow_table().to_pylist()
    with ds.Context(state_dir=None) as other:
        other.register_arrow("orders", whole)
        before = other.sql(sql)
    assert got.schema == before.schema and got.to_pylist() == before.to_pylist()
    assert sum(got.column("n").to_pylist()) == len([r for r in rows if r["id"] % 3 == 0])


# -- 2. windows over per-partition disorder == DuckDB ---------------------------------------


def test_tumble_over_disordered_partitions_equals_duckdb(kafka_broker: Any) -> None:
    topic = unique()
    kafka_broker.create_topic(topic, 3)
    rng = random.Random(7)
    # Each partition is ordered up to a jitter of < 4 s (the watermark allows 5 s); the
    # partitions cover very different time ranges, so a watermark that ran ahead on one
    # partition would close windows the others still fill.
    per_part: dict[int, list[dict[str, Any]]] = {}
    i = 0
    for p, offset in ((0, 0), (1, 120), (2, 45)):
        part = []
        for j in range(150):
            t = offset + j * 0.5 + rng.uniform(-3.9, 0)
            part.append(event(i, seconds=max(t, 0.0), k=f"k{rng.randrange(3)}"))
            i += 1
        per_part[p] = part
    # produce the partitions interleaved in random chunks
    cursors = dict.fromkeys(per_part, 0)
    while any(cursors[p] < len(per_part[p]) for p in per_part):
        p = rng.choice([p for p in per_part if cursors[p] < len(per_part[p])])
        n = rng.randint(1, 40)
        chunk = per_part[p][cursors[p] : cursors[p] + n]
        cursors[p] += len(chunk)
        kafka_broker.produce(topic, encode(chunk), partition=p)

    ctx = ds.Context(state_dir=None)
    create_source(
        ctx, kafka_broker, "events", topic, **{"scan.bounded.mode": "latest", "batch_size": 25}
    )
    out = Collector()
    ctx.register_append_sink("windows", out)
    q = ctx.execute_streaming(
        "INSERT INTO windows SELECT k, window_start, window_end, count(*) AS n, sum(v) AS total "
        "FROM tumble(events, ts, INTERVAL '10 seconds') "
        "GROUP BY window_start, window_end, k EMIT ON WINDOW CLOSE"
    )
    assert q.wait(timeout=30)
    assert q.status()["late_rows"] == 0

    everything = pa.Table.from_pylist([r for part in per_part.values() for r in part])
    everything = everything.set_column(
        3, "ts", pa.array([datetime.fromisoformat(t) for t in everything["ts"].to_pylist()])
    )
    con = duckdb.connect()
    con.register("events", everything)
    expected = con.sql(
        "SELECT k, time_bucket(INTERVAL 10 SECOND, ts) AS ws, count(*) AS n, sum(v) AS total "
        "FROM events GROUP BY ALL"
    ).fetchall()

    def key(r: tuple[Any, ...]) -> tuple[Any, ...]:
        return (r[1], r[0])

    got = [(r["k"], r["window_start"], r["n"], r["total"]) for r in out.rows]
    assert sorted(got, key=key) == sorted(
        [(k, ws, n, int(total)) for k, ws, n, total in expected], key=key
    )
    assert all(r["window_end"] - r["window_start"] == timedelta(seconds=10) for r in out.rows)


# -- 3. bad records under each policy -------------------------------------------------------

BAD = [b'{"id": 1, "k": "x", "v": ', b'{"id": "three", "k": "y", "v": 3}']


def produce_with_bad_records(broker: Any, topic: str) -> None:
    broker.create_topic(topic, 2)
    good = encode([event(i) for i in (0, 2, 4, 10, 11)])
    broker.produce(topic, [good[0], BAD[0], good[1], BAD[1], good[2]], partition=0)
    broker.produce(topic, good[3:], partition=1)


def test_bad_json_fail_names_topic_partition_and_offset(kafka_broker: Any) -> None:
    topic = unique()
    produce_with_bad_records(kafka_broker, topic)
    ctx = ds.Context(state_dir=None)
    create_source(ctx, kafka_broker, "src", topic, **{"scan.bounded.mode": "latest"})
    out = Collector()
    ctx.register_append_sink("out", out)
    q = ctx.execute_streaming("INSERT INTO out SELECT id FROM src")
    with pytest.raises(QueryFailed) as err:
        q.wait(timeout=30)
    msg = str(err.value)
    assert f"topic {topic!r}" in msg and "partition 0" in msg and "offset 1" in msg, msg
    assert "bad_records" in msg  # says how to go on past bad records
    assert q.state == "failed"
    assert 1 not in out.ids() and 2 not in out.ids(), "nothing at or after the bad record"


def test_bad_json_skip_counts_rejected_rows(kafka_broker: Any) -> None:
    topic = unique()
    produce_with_bad_records(kafka_broker, topic)
    ctx = ds.Context(state_dir=None)
    create_source(
        ctx, kafka_broker, "src", topic, **{"scan.bounded.mode": "latest", "bad_records": "skip"}
    )
    out = Collector()
    ctx.register_append_sink("out", out)
    q = ctx.execute_streaming("INSERT INTO out SELECT id FROM src")
    assert q.wait(timeout=30)
    assert sorted(out.ids()) == [0, 2, 4, 10, 11]
    st = source_status(q, "src")
    assert st["rejected_rows"] == 2 and "rejected" not in st and st["rows"] == 5


def test_bad_json_dead_letter_sink_gets_raw_bytes_reason_position(
    kafka_broker: Any, tmp_path: Path
) -> None:
    topic = unique()
    produce_with_bad_records(kafka_broker, topic)
    ctx = ds.Context(state_dir=None)
    ctx.execute(f"CREATE SINK dlq WITH (connector = 'parquet', path = '{tmp_path / 'dlq'}')")
    create_source(
        ctx,
        kafka_broker,
        "src",
        topic,
        **{"scan.bounded.mode": "latest", "bad_records": "dead_letter", "dead_letter.sink": "dlq"},
    )
    out = Collector()
    ctx.register_append_sink("out", out)
    q = ctx.execute_streaming("INSERT INTO out SELECT id FROM src")
    assert q.wait(timeout=30)
    assert sorted(out.ids()) == [0, 2, 4, 10, 11]
    dead = ctx.sql("SELECT raw, reason, position, source FROM dlq ORDER BY position").to_pylist()
    assert [d["raw"] for d in dead] == BAD
    assert [d["position"] for d in dead] == [f"{topic}/0/1", f"{topic}/0/3"]
    assert all(d["reason"] for d in dead) and {d["source"] for d in dead} == {"src"}
    assert source_status(q, "src")["rejected_rows"] == 2


# -- 4. a consumer group of two contexts ------------------------------------------------------


def owned(q: Any, table: str) -> set[int]:
    return {int(p) for p in source_status(q, table).get("partitions") or {}}


def test_consumer_group_of_two_contexts_loses_nothing(kafka_broker: Any) -> None:
    """Member A reads the first half alone; B joins (a rebalance moves partitions to B);
    the second half is shared. At-least-once: a partition moved before A's last offset
    commit covered what A read is read again by B — those duplicates are counted."""
    topic, group = unique(), unique("g")
    kafka_broker.create_topic(topic, 4)
    opts = {"properties.group.id": group, "scan.startup.mode": "group-offsets", **GROUP_OPTIONS}
    opts["properties.fetch.max.wait.ms"] = "100"
    n = 400
    rows = [event(i) for i in range(n)]

    def produce(ids: range) -> None:
        for p in range(4):
            kafka_broker.produce(topic, encode([rows[i] for i in ids if i % 4 == p]), partition=p)

    members: list[tuple[ds.Context, Collector, Any]] = []

    def join() -> tuple[Collector, Any]:
        ctx = ds.Context(state_dir=None, checkpoint_interval=0.5)
        create_source(ctx, kafka_broker, "events", topic, watermark=None, **opts)
        out = Collector()
        ctx.register_append_sink("out", out)
        members.append((ctx, out, ctx.execute_streaming("INSERT INTO out SELECT id FROM events")))
        return out, members[-1][2]

    def split() -> tuple[set[int], set[int]]:
        return owned(qa, "events"), owned(qb, "events")

    def shared() -> bool:
        a, b = split()
        return bool(a and b and not a & b and len(a | b) == 4)

    try:
        out_a, qa = join()
        produce(range(n // 2))
        wait_for("member A to read the first half", lambda: len(set(out_a.ids())) == n // 2)
        out_b, qb = join()
        wait_for("the group to split the 4 partitions", shared, timeout=30)
        parts = split()
        produce(range(n // 2, n))
        wait_for(f"{n} distinct ids", lambda: len(set(out_a.ids()) | set(out_b.ids())) == n)
        got = out_a.ids() + out_b.ids()
        assert set(got) == set(range(n)), "no loss"
        dup = sorted(i for i in set(got) if got.count(i) > 1)
        print(f"consumer group: A {len(out_a.ids())} rows, B {len(out_b.ids())}, {len(dup)} dup")
        # duplicates are explained only by the rebalance: first-half rows of partitions
        # that moved to B, read again from the last offsets A committed
        assert all(i < n // 2 and i % 4 in parts[1] for i in dup), dup
        assert all(i % 4 in parts[0] for i in out_a.ids() if i >= n // 2)
        assert all(i % 4 in parts[1] for i in out_b.ids() if i >= n // 2)
    finally:
        for ctx, _, _ in members:
            ctx.close()


# -- 5. offsets are committed only after delivery ---------------------------------------------


def group_source(ctx: ds.Context, broker: Any, topic: str, group: str, **extra: Any) -> None:
    opts = {
        "properties.group.id": group,
        "scan.startup.mode": "group-offsets",
        "properties.fetch.max.wait.ms": "100",
        **GROUP_OPTIONS,
        **extra,
    }
    create_source(ctx, broker, "events", topic, watermark=None, **opts)


def test_group_offsets_are_committed_after_delivery_only(kafka_broker: Any) -> None:
    topic, group = unique(), unique("g")
    kafka_broker.create_topic(topic, 2)
    for p in range(2):
        kafka_broker.produce(topic, encode([event(i) for i in range(p, 20, 2)]), partition=p)

    # a consumer delivers 20 rows, checkpoints (commits offsets), is cancelled
    ctx = ds.Context(state_dir=None, checkpoint_interval=None)
    group_source(ctx, kafka_broker, topic, group)
    first = Collector()
    ctx.register_append_sink("out", first)
    q = ctx.execute_streaming("INSERT INTO out SELECT id FROM events")
    wait_for("20 rows delivered", lambda: len(first.ids()) == 20)
    assert committed(kafka_broker, topic, group, 2) == {0: None, 1: None}, "nothing yet"
    q.checkpoint()
    assert committed(kafka_broker, topic, group, 2) == {0: 10, 1: 10}
    q.cancel()
    assert q.state == "cancelled" and source_status(q, "events")["last_commit_error"] is None

    # a new member of the group starts after what was committed: only the new rows
    for p in range(2):
        kafka_broker.produce(topic, encode([event(i) for i in range(20 + p, 30, 2)]), partition=p)
    ctx2 = ds.Context(state_dir=None, checkpoint_interval=None)
    group_source(ctx2, kafka_broker, topic, group, **{"scan.bounded.mode": "latest"})
    second = Collector()
    ctx2.register_append_sink("out", second)
    assert ctx2.execute_streaming("INSERT INTO out SELECT id FROM events").wait(timeout=30)
    assert sorted(second.ids()) == list(range(20, 30)), "no loss, no re-read"
    assert committed(kafka_broker, topic, group, 2) == {0: 15, 1: 15}

    # a sink that fails: the group's offsets stay where the last delivery left them
    for p in range(2):
        kafka_broker.produce(topic, encode([event(i) for i in range(30 + p, 40, 2)]), partition=p)
    ctx3 = ds.Context(state_dir=None, checkpoint_interval=0.2)
    group_source(ctx3, kafka_broker, topic, group)

    def refuse(batch: pa.RecordBatch) -> None:
        raise ConnectionError("downstream is down")

    ctx3.register_append_sink("out", refuse)
    q3 = ctx3.execute_streaming("INSERT INTO out SELECT id FROM events")
    with pytest.raises(QueryFailed, match="downstream is down"):
        q3.wait(timeout=30)
    assert committed(kafka_broker, topic, group, 2) == {0: 15, 1: 15}


def test_checkpoint_while_a_fetched_batch_waits_never_covers_it(kafka_broker: Any) -> None:
    import asyncio

    topic, group = unique(), unique("g")
    kafka_broker.create_topic(topic, 2)
    for p in range(2):  # one fetch holds both partitions: two batches, yielded back to back
        kafka_broker.produce(topic, encode([event(i) for i in range(p, 20, 2)]), partition=p)
    ctx = ds.Context(state_dir=None, checkpoint_interval=None)
    group_source(ctx, kafka_broker, topic, group)
    entered = threading.Event()
    delivered: list[int] = []

    async def slow_then_failing(batch: pa.RecordBatch) -> None:
        ids = batch.column("id").to_pylist()
        if ids[0] % 2:  # partition 1's batch cannot be delivered
            raise ConnectionError("downstream is down")
        entered.set()
        await asyncio.sleep(0.5)  # a checkpoint is requested meanwhile
        delivered.extend(ids)

    ctx.register_append_sink("out", slow_then_failing)
    q = ctx.execute_streaming("INSERT INTO out SELECT id FROM events")
    assert entered.wait(30)
    q.checkpoint()
    with pytest.raises(QueryFailed):
        q.wait(timeout=30)
    assert sorted(delivered) == list(range(0, 20, 2))
    offsets = committed(kafka_broker, topic, group, 2)
    assert offsets[0] == 10
    assert (offsets[1] or 0) == 0, "partition 1's rows were never delivered"


# -- 6. the broker becomes unreachable mid-stream --------------------------------------------


def test_broker_paused_mid_stream_status_retrying_then_no_loss(kafka_broker: Any) -> None:
    topic = unique()
    kafka_broker.create_topic(topic, 2)
    ctx = ds.Context(state_dir=None, checkpoint_interval=None)
    create_source(
        ctx,
        kafka_broker,
        "events",
        topic,
        watermark=None,
        **{
            "properties.fetch.max.wait.ms": "100",
            "properties.request.timeout.ms": "1500",
            "retry.deadline": "60 seconds",
        },
    )
    out = Collector()
    ctx.register_append_sink("out", out)
    q = ctx.execute_streaming("INSERT INTO out SELECT id FROM events")
    try:
        for p in range(2):
            kafka_broker.produce(topic, encode([event(i) for i in range(p, 40, 2)]), partition=p)
        wait_for("the first 40 rows", lambda: len(out.ids()) == 40)
        wait_for("status: running", lambda: source_status(q, "events").get("state") == "running")
        kafka_broker.pause()
        try:
            wait_for(
                "status to show the source retrying",
                lambda: source_status(q, "events").get("state") == "retrying",
            )
            st = source_status(q, "events")
            assert st["last_error"] and q.state == "running"
        finally:
            kafka_broker.resume()
        for p in range(2):
            kafka_broker.produce(
                topic, encode([event(i) for i in range(40 + p, 80, 2)]), partition=p
            )
        wait_for("every row after the outage", lambda: len(out.ids()) == 80, timeout=60)
        assert sorted(out.ids()) == list(range(80)), "no loss, no duplicates"
        wait_for("status: running again", lambda: source_status(q, "events")["state"] == "running")
    finally:
        ctx.close()


# -- 7. recovery from a checkpoint into an exactly-once file sink -----------------------------


def test_insert_resumes_from_its_checkpoint_every_row_once(
    kafka_broker: Any, tmp_path: Path
) -> None:
    topic = unique()
    kafka_broker.create_topic(topic, 3)
    n = 300
    rows = [event(i) for i in range(n)]

    def produce(ids: range) -> None:
        for p in range(3):
            kafka_broker.produce(topic, encode([rows[i] for i in ids if i % 3 == p]), partition=p)

    state = tmp_path / "state"
    sql = "INSERT INTO archive SELECT id, k, v, ts FROM events"
    ctx = ds.Context(state_dir=state, checkpoint_interval=None)
    create_source(ctx, kafka_broker, "events", topic, **{"properties.fetch.max.wait.ms": "100"})
    ctx.execute(f"CREATE SINK archive WITH (connector = 'parquet', path = '{tmp_path / 'out'}')")
    q = ctx.execute_streaming(sql)
    produce(range(n // 2))
    wait_for("the first half processed", lambda: q.status()["rows_in"] == n // 2)
    assert q.checkpoint() == 1
    q.cancel()
    assert q.state == "cancelled"
    assert ctx.sql("SELECT count(*) AS n FROM archive").column("n")[0].as_py() == n // 2

    produce(range(n // 2, n))
    ctx2 = ds.Context(state_dir=state, checkpoint_interval=None)  # the catalog is on disk
    q2 = ctx2.execute_streaming(sql)
    try:
        wait_for("the second half processed", lambda: q2.status()["rows_in"] == n - n // 2)
        assert q2.status()["recovered_from"]["checkpoint"] >= 1
        q2.checkpoint()
    finally:
        q2.cancel()
    got = ctx2.sql("SELECT id, k, v, ts FROM archive ORDER BY id").to_pylist()
    assert [r["id"] for r in got] == list(range(n)), "every row exactly once"
    assert got[-1]["ts"] == BASE + timedelta(seconds=n - 1)


# -- 8. secrets ---------------------------------------------------------------------------


def test_sasl_password_never_shown(kafka_broker: Any, caplog: pytest.LogCaptureFixture) -> None:
    password = "hunter2"
    topic = unique()
    kafka_broker.create_topic(topic, 1)
    ctx = ds.Context(state_dir=None)
    create_source(
        ctx,
        kafka_broker,
        "secure",
        topic,
        watermark=None,
        **{
            "properties.security.protocol": "SASL_PLAINTEXT",
            "properties.sasl.mechanism": "PLAIN",
            "properties.sasl.username": "alice",
            "properties.sasl.password": password,
            "retry.deadline": "2 seconds",
            "properties.request.timeout.ms": "1000",
        },
    )
    ctx.register_append_sink("out", Collector())
    caplog.set_level(logging.DEBUG)
    q = ctx.execute_streaming("INSERT INTO out SELECT id FROM secure")
    statuses = [json.dumps(q.status(), default=str)]
    with pytest.raises(QueryFailed) as err:
        q.wait(timeout=30)  # this broker speaks no SASL: the connection fails
    statuses.append(json.dumps(q.status(), default=str))
    shown = [
        str(err.value),
        repr(err.value),
        str(err.value.__cause__),
        str(ctx.execute("SHOW SOURCES").to_pylist()),
        *(repr(e) for e in ctx.catalog.sources()),
        *statuses,
        caplog.text,
    ]
    for text in shown:
        assert password not in text, text
    assert "alice" in shown[3] and "secure" in str(err.value)
    assert "SASL_PLAINTEXT" in str(err.value), "the message points at the security settings"


# -- 9. status of a running Kafka query -------------------------------------------------------


def test_status_shows_position_end_offset_and_lag_per_partition(kafka_broker: Any) -> None:
    import asyncio

    topic = unique()
    kafka_broker.create_topic(topic, 2)
    for p in range(2):
        kafka_broker.produce(topic, encode([event(i) for i in range(p, 120, 2)]), partition=p)
    ctx = ds.Context(state_dir=None, checkpoint_interval=None)
    create_source(ctx, kafka_broker, "events", topic, watermark=None, batch_size=10)
    seen: list[dict[str, Any]] = []

    async def slow(batch: pa.RecordBatch) -> None:
        await asyncio.sleep(0.02)  # the sink is slower than the topic: a lag builds up

    ctx.register_append_sink("out", slow)
    q = ctx.execute_streaming("INSERT INTO out SELECT id FROM events")
    try:

        def caught_up() -> bool:
            parts = source_status(q, "events").get("partitions", {})
            seen.append(parts)
            return len(parts) == 2 and all(v["lag"] == 0 for v in parts.values())

        wait_for("the query to catch up", caught_up)
        assert any(
            v["lag"] and v["lag"] > 0 and v["position"] + v["lag"] == v["end_offset"]
            for parts in seen
            for v in parts.values()
        ), "a lag was visible while the query was behind"
        final = source_status(q, "events")["partitions"]
        assert final == {
            "0": {"position": 60, "end_offset": 60, "lag": 0},
            "1": {"position": 60, "end_offset": 60, "lag": 0},
        }
        assert q.status()["state"] == "running"
    finally:
        ctx.close()
