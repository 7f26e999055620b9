"""The built-in generators: nexmark and datagen, driven directly through Source.read()."""

from __future__ import annotations

import asyncio
import time
from contextlib import aclosing
from datetime import datetime
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

import datum_sql.connectors.generators  # noqa: F401  (registers the sources)
from datum_sql.connectors import registry
from datum_sql.connectors.base import ConnectorSpec, Source
from datum_sql.connectors.generators import nexmark_table
from datum_sql.connectors.generators._base import CHUNK_ROWS
from datum_sql.connectors.generators.datagen import DatagenSource
from datum_sql.connectors.generators.nexmark import SCHEMAS, NexmarkSource
from datum_sql.errors import PlanError, SourceError

TS = pa.timestamp("us")
BASE = datetime(2026, 1, 1)


def nexmark(schema: pa.Schema | None = None, **options: Any) -> NexmarkSource:
    return NexmarkSource(ConnectorSpec("nx", options, schema=schema))


def datagen(schema: pa.Schema | None, **options: Any) -> DatagenSource:
    return DatagenSource(ConnectorSpec("dg", options, schema=schema))


def read(
    source: Source, position: dict[str, Any] | None = None, max_batches: int | None = None
) -> tuple[list[pa.RecordBatch], dict[str, Any]]:
    """Batches read from ``position`` (at most ``max_batches``) and the position after them."""

    async def go() -> list[pa.RecordBatch]:
        await source.open(position)
        out: list[pa.RecordBatch] = []
        async with aclosing(source.read()) as items:  # type: ignore[type-var]
            async for item in items:
                assert isinstance(item, pa.RecordBatch)
                out.append(item)
                if max_batches is not None and len(out) >= max_batches:
                    break
        return out

    batches = asyncio.run(go())
    return batches, source.position()


def table(batches: list[pa.RecordBatch], schema: pa.Schema) -> pa.Table:
    return pa.Table.from_batches(batches, schema=schema)


# --------------------------------------------------------------------------- nexmark


def test_registered_under_their_connector_names() -> None:
    assert registry._SOURCES["nexmark"] is NexmarkSource
    assert registry._SOURCES["datagen"] is DatagenSource


def test_stream_schemas() -> None:
    assert nexmark(stream="bid").schema == pa.schema(
        [
            ("auction", pa.int64()),
            ("bidder", pa.int64()),
            ("price", pa.int64()),
            ("channel", pa.string()),
            ("url", pa.string()),
            ("date_time", TS),
            ("extra", pa.string()),
        ]
    )
    assert nexmark(stream="auction").schema.names == [
        "id", "item_name", "description", "initial_bid", "reserve",
        "date_time", "expires", "seller", "category", "extra",
    ]  # fmt: skip
    assert nexmark(stream="person").schema.names == [
        "id", "name", "email_address", "credit_card", "city", "state", "date_time", "extra",
    ]  # fmt: skip
    for stream in ("bid", "auction", "person"):
        batches, _ = read(nexmark(stream=stream, rows=10))
        assert batches[0].schema == SCHEMAS[stream]
        assert all(col.null_count == 0 for col in batches[0].columns)


@pytest.mark.parametrize("stream", ["bid", "auction", "person"])
def test_same_rows_whatever_the_batch_size(stream: str) -> None:
    rows = CHUNK_ROWS + 20_000  # crosses a chunk boundary
    schema = SCHEMAS[stream]
    big, _ = read(nexmark(stream=stream, rows=rows, seed=7))
    small, _ = read(nexmark(stream=stream, rows=rows, seed=7, batch_size=7_777))
    assert [b.num_rows for b in small][:3] == [7_777] * 3
    expected = table(big, schema)
    assert table(small, schema).equals(expected)
    assert nexmark_table(stream, rows, seed=7).equals(expected)
    # and the seed matters
    other = nexmark_table(stream, 1000, seed=8)
    assert not other.equals(expected.slice(0, 1000))


@pytest.mark.parametrize("stream", ["bid", "person"])
def test_resume_from_position_yields_the_uninterrupted_tail(stream: str) -> None:
    schema = SCHEMAS[stream]
    whole, end = read(nexmark(stream=stream, rows=100_000, seed=3, batch_size=9_000))
    assert end == {"rows": 100_000}
    head, pos = read(nexmark(stream=stream, rows=100_000, seed=3, batch_size=9_000), None, 8)
    assert pos == {"rows": 72_000}
    # resume with another batch size, from a fresh source (as after a restart)
    tail, end2 = read(nexmark(stream=stream, rows="100000", seed="3", batch_size=5_000), pos)
    assert end2 == {"rows": 100_000}
    assert table(head + tail, schema).equals(table(whole, schema))
    # position after the end: nothing more
    assert read(nexmark(stream=stream, rows=100_000), {"rows": 100_000})[0] == []


def test_rows_bounds_the_stream() -> None:
    for rows in (12_345, "12345", " 12_345 "):
        src = nexmark(stream="auction", rows=rows, batch_size=5_000)
        assert src.bounded
        batches, pos = read(src)
        assert [b.num_rows for b in batches] == [5_000, 5_000, 2_345]
        assert pos == {"rows": 12_345}
    assert read(nexmark(stream="bid", rows=0))[0] == []


def test_without_rows_the_stream_is_unbounded() -> None:
    src = nexmark(stream="bid", batch_size=CHUNK_ROWS)
    assert not src.bounded
    batches, pos = read(src, None, 3)
    assert len(batches) == 3 and pos == {"rows": 3 * CHUNK_ROWS}


def test_ids_and_times_follow_the_shared_event_sequence() -> None:
    persons = nexmark_table("person", 3)
    assert persons["id"].to_pylist() == [1000, 1001, 1002]
    # person r is event 50 r; auctions are events 1..3 of each epoch of 50; bids 4..49
    first = [BASE.replace(microsecond=0)]
    assert persons["date_time"].to_pylist()[:1] == first
    auctions = nexmark_table("auction", 4)
    micros = pc.cast(auctions["date_time"], pa.int64()).to_numpy()
    base = int(pa.scalar(BASE, TS).cast(pa.int64()).as_py())
    assert list((micros - base) // 100) == [1, 2, 3, 51]
    bids = nexmark_table("bid", 47)
    micros = pc.cast(bids["date_time"], pa.int64()).to_numpy()
    assert list((micros[[0, 45, 46]] - base) // 100) == [4, 49, 54]
    # inter_event_us stretches event time
    slow = nexmark_table("bid", 2, inter_event_us=1_000_000)
    assert pc.cast(slow["date_time"], pa.int64()).to_pylist() == [
        base + 4_000_000,
        base + 5_000_000,
    ]


@pytest.mark.parametrize("stream", ["bid", "auction", "person"])
def test_timestamps_never_decrease(stream: str) -> None:
    batches, _ = read(nexmark(stream=stream, rows=CHUNK_ROWS + 5_000, batch_size=20_000))
    micros = pc.cast(table(batches, SCHEMAS[stream])["date_time"], pa.int64()).to_numpy()
    assert len(micros) == CHUNK_ROWS + 5_000
    assert (np.diff(micros) > 0).all()


def test_bids_and_auctions_reference_rows_generated_before_them() -> None:
    bids = nexmark_table("bid", 200_000, seed=11)
    bid_time = pc.cast(bids["date_time"], pa.int64()).to_numpy()
    # every auction and person up to the last bid's event time
    epochs = 200_000 // 46 + 2  # of 50 events: 1 person, 3 auctions, 46 bids
    n_auctions = epochs * 3
    auctions = nexmark_table("auction", n_auctions, seed=11)
    persons = nexmark_table("person", epochs, seed=11)
    auction_time = pc.cast(auctions["date_time"], pa.int64()).to_numpy()
    person_time = pc.cast(persons["date_time"], pa.int64()).to_numpy()
    assert auction_time[-1] > bid_time[-1] and person_time[-1] > bid_time[-1]
    # ids are dense from 1000, so an id's row is id - 1000
    assert auctions["id"].to_numpy()[0] == 1000 and (np.diff(auctions["id"].to_numpy()) == 1).all()
    assert persons["id"].to_numpy()[0] == 1000 and (np.diff(persons["id"].to_numpy()) == 1).all()

    auction = bids["auction"].to_numpy() - 1000
    assert auction.min() >= 0 and auction.max() < n_auctions
    assert (auction_time[auction] < bid_time).all()
    bidder = bids["bidder"].to_numpy() - 1000
    assert bidder.min() >= 0 and (person_time[bidder] < bid_time).all()
    seller = auctions["seller"].to_numpy() - 1000
    assert seller.min() >= 0 and (person_time[seller] < auction_time).all()
    # bids stay with recent auctions (the last ~100), not the whole history
    latest = np.searchsorted(auction_time, bid_time) - 1
    assert (latest - auction).max() <= 100


def test_bids_skew_to_hot_auctions_and_channels() -> None:
    bids = nexmark_table("bid", 100_000, seed=5)
    auction = bids["auction"].to_numpy() - 1000
    epoch = np.arange(100_000) // 46
    hot = (epoch * 3 + 2) // 2 * 2
    share = (auction == hot).mean()
    assert 0.45 < share < 0.56  # half the bids, plus cold picks that land on it
    channels = pc.value_counts(bids["channel"]).to_pylist()
    hot_channels = {"Google", "Facebook", "Baidu", "Apple"}
    top = sorted(channels, key=lambda c: -c["counts"])[:4]
    assert {c["values"] for c in top} == hot_channels
    assert 0.45 < sum(c["counts"] for c in top) / 100_000 < 0.55
    price = bids["price"].to_numpy()
    assert price.min() >= 100 and price.max() <= 100_000_000
    assert 10_000 < np.median(price) < 1_000_000  # log-uniform: median ~ 10^3 * 100
    # every channel has one url
    pairs = (
        pa.table({"c": bids["channel"], "u": bids["url"]})
        .group_by("c")
        .aggregate([("u", "count_distinct")])
    )
    assert set(pairs["u_count_distinct"].to_pylist()) == {1}


def test_declared_columns_select_and_cast() -> None:
    declared = pa.schema([("price", pa.float64()), ("auction", pa.int64()), ("date_time", TS)])
    src = nexmark(declared, stream="bid", rows=1000)
    assert src.schema == declared
    batches, _ = read(src)
    got = table(batches, declared)
    full = nexmark_table("bid", 1000)
    assert got["auction"].equals(full["auction"])
    assert got["price"].to_pylist() == [float(p) for p in full["price"].to_pylist()]
    with pytest.raises(PlanError, match="'bidders'"):
        nexmark(pa.schema([("bidders", pa.int64())]), stream="bid")


def test_events_per_second_limits_the_rate() -> None:
    src = nexmark(stream="bid", rows=2_000, events_per_second="10000")
    assert src.batch_size < 2_000  # paced sources use small batches
    started = time.monotonic()
    batches, _ = read(src)
    elapsed = time.monotonic() - started
    assert sum(b.num_rows for b in batches) == 2_000
    assert elapsed >= 0.15
    unpaced = nexmark(stream="bid", rows=2_000)  # no pacing: one full batch, never a wait
    assert unpaced.events_per_second is None and unpaced.batch_size >= 2_000


@pytest.mark.parametrize(
    ("options", "named"),
    [
        ({"stream": "bids2"}, "stream"),
        ({}, "stream"),
        ({"stream": "bid", "rows": "many"}, "rows"),
        ({"stream": "bid", "rows": -1}, "rows"),
        ({"stream": "bid", "rows": True}, "rows"),
        ({"stream": "bid", "seed": "0x"}, "seed"),
        ({"stream": "bid", "events_per_second": "0"}, "events_per_second"),
        ({"stream": "bid", "events_per_second": "fast"}, "events_per_second"),
        ({"stream": "bid", "batch_size": "0"}, "batch_size"),
        ({"stream": "bid", "inter_event_us": "-5"}, "inter_event_us"),
    ],
)
def test_bad_option_is_a_plan_error_naming_it(options: dict[str, Any], named: str) -> None:
    with pytest.raises(PlanError, match=f"'{named}'"):
        nexmark(**options)


def test_unknown_option_refused_by_the_registry() -> None:
    with pytest.raises(PlanError, match="'row'"):
        registry.check_options(NexmarkSource, "nexmark", "nx", {"stream": "bid", "row": "1"})
    registry.check_options(NexmarkSource, "nexmark", "nx", {"stream": "bid", "rows": "1"})


def test_bad_position_is_a_source_error() -> None:
    with pytest.raises(SourceError, match="nx"):
        read(nexmark(stream="bid", rows=10), {"offset": 3})


def test_nexmark_table_columns_subset() -> None:
    full = nexmark_table("auction", 5_000, seed=2)
    part = nexmark_table("auction", 5_000, seed=2, columns=["seller", "reserve"])
    assert part.schema.names == ["seller", "reserve"]
    assert part.equals(full.select(["seller", "reserve"]))
    with pytest.raises(PlanError, match="'nope'"):
        nexmark_table("auction", 5, columns=["nope"])


# --------------------------------------------------------------------------- datagen

DG_SCHEMA = pa.schema(
    [
        ("id", pa.int64()),
        ("small", pa.int16()),
        ("x", pa.float64()),
        ("amount", pa.decimal128(10, 2)),
        ("name", pa.string()),
        ("flag", pa.bool_()),
        ("ts", TS),
        ("day", pa.date32()),
    ]
)


def test_datagen_needs_declared_columns() -> None:
    with pytest.raises(PlanError, match="declared columns"):
        datagen(None, rows=10)


def test_datagen_generates_every_type_deterministically() -> None:
    big, _ = read(datagen(DG_SCHEMA, rows=CHUNK_ROWS + 100, seed=4))
    small, pos = read(datagen(DG_SCHEMA, rows=CHUNK_ROWS + 100, seed=4, batch_size=3_000))
    assert pos == {"rows": CHUNK_ROWS + 100}
    got = table(big, DG_SCHEMA)
    assert table(small, DG_SCHEMA).equals(got)
    assert got.num_rows == CHUNK_ROWS + 100
    assert not table(read(datagen(DG_SCHEMA, rows=100, seed=5))[0], DG_SCHEMA).equals(
        got.slice(0, 100)
    )
    assert pc.min(got["id"]).as_py() >= 0 and pc.max(got["id"]).as_py() <= 32767
    assert pc.max(got["x"]).as_py() <= 32767
    assert set(pc.utf8_length(got["name"]).to_pylist()) == {10}
    assert set(got["flag"].to_pylist()) == {True, False}
    micros = pc.cast(got["ts"], pa.int64()).to_numpy()
    assert got["ts"][0].as_py() == BASE and (np.diff(micros) == 100).all()
    assert got["day"][0].as_py() == BASE.date()


def test_datagen_resume_and_field_options() -> None:
    schema = pa.schema([("k", pa.int32()), ("s", pa.string()), ("v", pa.float32())])
    opts = {
        "fields.k.kind": "sequence",
        "fields.k.min": "5",
        "fields.k.max": "9",
        "fields.s.length": "3",
        "fields.v.min": "-1",
        "fields.v.max": "1",
    }
    whole, _ = read(datagen(schema, rows=40, batch_size=7, **opts))
    head, pos = read(datagen(schema, rows=40, batch_size=7, **opts), None, 2)
    tail, _ = read(datagen(schema, rows=40, batch_size=7, **opts), pos)
    got = table(whole, schema)
    assert table(head + tail, schema).equals(got)
    assert got["k"].to_pylist()[:7] == [5, 6, 7, 8, 9, 5, 6]
    assert set(pc.utf8_length(got["s"]).to_pylist()) == {3}
    assert pc.min(got["v"]).as_py() >= -1 and pc.max(got["v"]).as_py() <= 1


def test_datagen_is_unbounded_without_rows_and_paced() -> None:
    src = datagen(pa.schema([("a", pa.int64())]), events_per_second=10_000)
    assert not src.bounded
    started = time.monotonic()
    _batches, pos = read(src, None, 4)
    assert pos["rows"] == 4 * src.batch_size == 2_000
    assert time.monotonic() - started >= 0.15


@pytest.mark.parametrize(
    ("options", "named"),
    [
        ({"fields.nope.min": "1"}, "fields.nope.min"),
        ({"fields.a.colour": "red"}, "fields.a.colour"),
        ({"fields.a.kind": "walk"}, "fields.a.kind"),
        ({"fields.a.min": "5", "fields.a.max": "1"}, "fields.a.min"),
        ({"fields.a.min": "-1"}, "fields.a.min"),  # a is unsigned
        ({"rows": "ten"}, "rows"),
    ],
)
def test_datagen_bad_option_names_it(options: dict[str, Any], named: str) -> None:
    with pytest.raises(PlanError, match=f"'{named}'"):
        datagen(pa.schema([("a", pa.uint8())]), **options)


def test_datagen_refuses_types_it_cannot_generate() -> None:
    with pytest.raises(PlanError, match="'l'"):
        datagen(pa.schema([("l", pa.list_(pa.int64()))]), rows=1)
