"""Vectorized Python UDFs over a real Kafka topic (three partitions, JSON): the streamed
filter and projection, and a tumbling window grouped by a UDF key, equal the functions
applied with pyarrow to the whole input at once."""

from __future__ import annotations

import json
import random
from datetime import datetime, timedelta
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from kafka_support import unique

import datum_sql as ds
from datum_sql.testing import sorted_rows

pytestmark = pytest.mark.kafka

BASE = datetime(2024, 5, 1, 12, 0, 0)
SCHEMA = pa.schema(
    [("id", pa.int64()), ("name", pa.string()), ("v", pa.int64()), ("ts", pa.timestamp("us"))]
)


@ds.udf(input_types=["BIGINT"], return_type="DOUBLE")
def to_eur(v: pa.Array) -> pa.Array:
    return pc.multiply(v.cast(pa.float64()), 0.908)


@ds.udf(input_types=["VARCHAR"], return_type="BIGINT")
def vowels(s: pa.Array) -> pa.Array:
    return pc.count_substring_regex(s, "[aeiou]").cast(pa.int64())


def _rows(n: int) -> list[dict[str, Any]]:
    rnd = random.Random(13)
    names = ["alice", "bob", "eve", "zz", "", None]
    return [
        {
            "id": i,
            "name": rnd.choice(names),
            "v": rnd.choice([rnd.randint(0, 500), None]),
            # each partition in order up to 2 s of jitter (the watermark allows 5 s)
            "ts": (BASE + timedelta(seconds=i // 3 + rnd.uniform(0, 2))).isoformat(sep=" "),
        }
        for i in range(n)
    ]


@pytest.fixture
def topic_ctx(kafka_broker: Any) -> tuple[ds.Context, pa.Table]:
    """A Context with ``events`` over a new topic of three partitions, and the whole input."""
    topic = unique()
    kafka_broker.create_topic(topic, 3)
    rows = _rows(600)
    for p in range(3):
        kafka_broker.produce(topic, [json.dumps(r).encode() for r in rows[p::3]], partition=p)
    ctx = ds.Context(state_dir=None)
    ctx.execute(
        "CREATE SOURCE events (id BIGINT, name VARCHAR, v BIGINT, ts TIMESTAMP, "
        "WATERMARK FOR ts AS ts - INTERVAL '5 seconds') WITH (connector = 'kafka', "
        f"topic = '{topic}', properties.bootstrap.server = '{kafka_broker.bootstrap}', "
        "scan.bounded.mode = 'latest', batch_size = '37') FORMAT PLAIN ENCODE JSON"
    )
    whole = pa.Table.from_pylist(
        [r | {"ts": datetime.fromisoformat(r["ts"])} for r in rows], schema=SCHEMA
    )
    return ctx, whole


def test_udf_filter_and_projection_equal_pyarrow_over_the_whole_input(
    topic_ctx: tuple[ds.Context, pa.Table],
) -> None:
    ctx, whole = topic_ctx
    got = ctx.execute_streaming(
        "SELECT id, to_eur(v) AS eur, vowels(name) AS nv FROM events "
        "WHERE to_eur(v) > 100 AND vowels(name) >= 1"
    ).to_arrow(timeout=60)
    eur, nv = (
        to_eur(whole.column("v").combine_chunks()),
        vowels(whole.column("name").combine_chunks()),
    )
    keep = pc.and_(pc.greater(eur, 100), pc.greater_equal(nv, 1))
    want = pa.table({"id": whole.column("id"), "eur": eur, "nv": nv}).filter(keep)
    assert want.num_rows > 100
    assert got.schema == want.schema
    assert sorted_rows(got) == sorted_rows(want)


def test_udf_group_key_in_a_tumbling_window_equals_pyarrow(
    topic_ctx: tuple[ds.Context, pa.Table],
) -> None:
    ctx, whole = topic_ctx
    got = ctx.execute_streaming(
        "SELECT window_start, vowels(name) AS nv, count(*) AS n, sum(to_eur(v)) AS eur "
        "FROM tumble(events, ts, INTERVAL '10 seconds') "
        "GROUP BY window_start, window_end, vowels(name)"
    ).to_arrow(timeout=60)
    start = pc.floor_temporal(whole.column("ts"), 10, "second")
    keyed = pa.table(
        {
            "window_start": start,
            "nv": vowels(whole.column("name").combine_chunks()),
            "eur": to_eur(whole.column("v").combine_chunks()),
        }
    )
    want = keyed.group_by(["window_start", "nv"], use_threads=False).aggregate(
        [([], "count_all"), ("eur", "sum")]
    )
    want_rows = sorted_rows(want.rename_columns(["window_start", "nv", "n", "eur"]))
    assert len(want_rows) > 20
    got_rows = sorted_rows(got.select(["window_start", "nv", "n", "eur"]))
    assert [r[:3] for r in got_rows] == [r[:3] for r in want_rows]
    for g, w in zip(got_rows, want_rows, strict=True):  # float sums, added in another order
        assert g[3] is None if w[3] is None else g[3] == pytest.approx(w[3])
