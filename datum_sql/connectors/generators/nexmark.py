"""The Nexmark benchmark generator: ``connector = 'nexmark'`` and :func:`nexmark_table`.

Model (after the Beam/Flink Nexmark generators): one global event sequence, cut into
epochs of 50 events — 1 person, then 3 auctions, then 46 bids. Event ``e`` has event time
``2026-01-01 00:00:00 + e * inter_event_us``. Ids follow from the sequence: the ``r``-th
person has id ``1000 + r`` and the ``r``-th auction id ``1000 + r``, so the three streams
generated with the same seed agree with each other:

* a bid goes, half of the time, to the current *hot* auction (the latest auction rounded
  down to an even id), otherwise to one of the last 100 auctions; its bidder is, 3 times
  out of 4, a hot person (latest person rounded down to a multiple of 4), otherwise one of
  the last 1000 persons;
* an auction's seller is chosen the same way among persons;
* every referenced auction or person was generated before the referencing event (unlike the
  reference generators, which may point a little into the future).

Prices are log-uniform cents in ``[100, 10^8]``; half the bids come from 4 hot channels, the
rest from ``channel-0`` … ``channel-9999``, each with a fixed url.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

import numpy as np
import pyarrow as pa

from datum_sql.connectors.generators._base import (
    BASE_TIME_US,
    CHUNK_ROWS,
    DEFAULT_INTER_EVENT_US,
    DIGITS,
    LOWERCASE,
    ChunkedGenerator,
    GeneratorSource,
    fixed_width_strings,
    narrow,
    needed,
    random_chars,
    random_strings,
    rng_for,
    select_columns,
)
from datum_sql.connectors.registry import source
from datum_sql.errors import PlanError

PERSON_PROPORTION = 1
AUCTION_PROPORTION = 3
BID_PROPORTION = 46
TOTAL_PROPORTION = PERSON_PROPORTION + AUCTION_PROPORTION + BID_PROPORTION
FIRST_PERSON_ID = 1000
FIRST_AUCTION_ID = 1000
FIRST_CATEGORY_ID = 10
NUM_CATEGORIES = 5
HOT_AUCTION_RATIO = 2
HOT_BIDDER_RATIO = 4
HOT_SELLER_RATIO = 4
HOT_CHANNEL_RATIO = 2
NUM_IN_FLIGHT_AUCTIONS = 100
NUM_ACTIVE_PEOPLE = 1000
NUM_CHANNELS = 10_000
HOT_CHANNELS = ("Google", "Facebook", "Baidu", "Apple")
FIRST_NAMES: tuple[str, ...] = (
    *("Peter", "Paul", "Luke", "John", "Saul", "Vicky", "Kate", "Julie", "Sarah", "Deiter"),
    "Walter",
)
LAST_NAMES: tuple[str, ...] = (
    *("Shultz", "Abrams", "Spencer", "White", "Bartels", "Walton", "Smith", "Jones"),
    "Noris",
)
US_CITIES: tuple[str, ...] = (
    *("Phoenix", "Los Angeles", "San Francisco", "Boise", "Portland", "Bend", "Redmond"),
    *("Seattle", "Kent", "Cheyenne"),
)
US_STATES = ("AZ", "CA", "ID", "OR", "WA", "WY")

TIMESTAMP = pa.timestamp("us")
SCHEMAS: dict[str, pa.Schema] = {
    "bid": pa.schema(
        [
            ("auction", pa.int64()),
            ("bidder", pa.int64()),
            ("price", pa.int64()),
            ("channel", pa.string()),
            ("url", pa.string()),
            ("date_time", TIMESTAMP),
            ("extra", pa.string()),
        ]
    ),
    "auction": pa.schema(
        [
            ("id", pa.int64()),
            ("item_name", pa.string()),
            ("description", pa.string()),
            ("initial_bid", pa.int64()),
            ("reserve", pa.int64()),
            ("date_time", TIMESTAMP),
            ("expires", TIMESTAMP),
            ("seller", pa.int64()),
            ("category", pa.int64()),
            ("extra", pa.string()),
        ]
    ),
    "person": pa.schema(
        [
            ("id", pa.int64()),
            ("name", pa.string()),
            ("email_address", pa.string()),
            ("credit_card", pa.string()),
            ("city", pa.string()),
            ("state", pa.string()),
            ("date_time", TIMESTAMP),
            ("extra", pa.string()),
        ]
    ),
}
STREAMS = tuple(SCHEMAS)
_STREAM_CODE = {"person": 1, "auction": 2, "bid": 3}
#: Item names and descriptions: lowercase words, about one character in 14 a space.
_TEXT = np.frombuffer(b"abcdefghijklmnopqrstuvwxyz  ", dtype=np.uint8)
_CITY_POOL = pa.array(US_CITIES)
_STATE_POOL = pa.array(US_STATES)
_NAME_POOL = pa.array([f"{f} {last}" for f in FIRST_NAMES for last in LAST_NAMES])


@lru_cache(maxsize=8)
def _channel_pools(seed: int) -> tuple[pa.StringArray, pa.StringArray]:
    """Channel names and their urls: 4 hot channels, then ``channel-0`` … ``channel-9999``."""
    n = len(HOT_CHANNELS) + NUM_CHANNELS
    raw = LOWERCASE[rng_for(seed, 0, 0, 0).integers(0, 26, n * 15, dtype=np.uint8)]
    text = raw.tobytes().decode()
    parts = (text[i : i + 15] for i in range(0, n * 15, 15))
    bases = [f"https://www.nexmark.com/{p[:5]}/{p[5:10]}/{p[10:]}/item.htm?query=1" for p in parts]
    hot = len(HOT_CHANNELS)
    channels = list(HOT_CHANNELS) + [f"channel-{i}" for i in range(NUM_CHANNELS)]
    # as in Nexmark: the channel id bit-reversed, as a (positive) 32-bit integer
    rev = [int(f"{i:032b}"[::-1], 2) & 0x7FFFFFFF for i in range(NUM_CHANNELS)]
    urls = bases[:hot] + [f"{bases[hot + i]}&channel_id={rev[i]}" for i in range(NUM_CHANNELS)]
    return pa.array(channels, pa.string()), pa.array(urls, pa.string())


def _price(rng: np.random.Generator, n: int) -> np.ndarray:
    """Log-uniform prices in cents: ``round(10 ** (6u) * 100)``."""
    return np.rint(np.power(10.0, rng.random(n) * 6.0) * 100.0).astype(np.int64)


def _recent(u: np.ndarray, last: np.ndarray, hot_ratio: int, window: int) -> np.ndarray:
    """Base-0 ids ``<= last`` from uniform ``u``: with probability ``1 - 1/hot_ratio`` the hot id
    (``last`` rounded down to a multiple of ``hot_ratio``), else uniform among the last
    ``window`` ids. One uniform draw per row decides both."""
    cold = u < 1.0 / hot_ratio
    count = np.minimum(last + 1, window)
    pick = last + 1 - count + (u * hot_ratio * count).astype(np.int64)
    return np.where(cold, pick, (last // hot_ratio) * hot_ratio)


def _recent_person(rng: np.random.Generator, epoch: np.ndarray, hot_ratio: int) -> np.ndarray:
    """A person id for an event in ``epoch`` (base-0 persons ``0..epoch`` exist)."""
    u = rng.random(len(epoch))
    return _recent(u, epoch, hot_ratio, NUM_ACTIVE_PEOPLE) + FIRST_PERSON_ID


def _extra(rng: np.random.Generator, n: int) -> pa.StringArray:
    return random_strings(rng, n, 0, 16)


class NexmarkGenerator(ChunkedGenerator):
    """Rows of one Nexmark stream; ``columns`` limits what is computed (not the randomness)."""

    def __init__(
        self,
        stream: str,
        *,
        seed: int = 0,
        inter_event_us: int = DEFAULT_INTER_EVENT_US,
        columns: list[str] | None = None,
    ) -> None:
        full = SCHEMAS[stream]
        cols = list(full.names) if columns is None else list(columns)
        super().__init__(pa.schema([full.field(c) for c in cols]))
        self.stream = stream
        self.seed = seed
        self.inter_event_us = inter_event_us
        self.columns = cols
        self._code = _STREAM_CODE[stream]

    def _rng(self, group: int, k: int) -> np.random.Generator:
        return rng_for(self.seed, self._code, group, k)

    def make_chunk(self, k: int) -> pa.RecordBatch:
        rows = np.arange(k * CHUNK_ROWS, (k + 1) * CHUNK_ROWS, dtype=np.int64)
        if self.stream == "bid":
            out = self._bids(rows, k)
        elif self.stream == "auction":
            out = self._auctions(rows, k)
        else:
            out = self._persons(rows, k)
        return pa.RecordBatch.from_arrays([out[c] for c in self.columns], schema=self.schema)

    def _time(self, event: np.ndarray) -> pa.Array:
        micros = BASE_TIME_US + event * self.inter_event_us
        return pa.array(micros, TIMESTAMP)

    def _bids(self, rows: np.ndarray, k: int) -> dict[str, Any]:
        n, cols, out = len(rows), self.columns, {}
        epoch, offset = np.divmod(rows, BID_PROPORTION)
        if needed(cols, "auction"):
            last = epoch * AUCTION_PROPORTION + (AUCTION_PROPORTION - 1)  # latest auction
            # the reference generators choose among the last 100 auctions (inclusive: 101)
            u = self._rng(1, k).random(n)
            auction = _recent(u, last, HOT_AUCTION_RATIO, NUM_IN_FLIGHT_AUCTIONS + 1)
            out["auction"] = auction + FIRST_AUCTION_ID
        if needed(cols, "bidder"):
            out["bidder"] = _recent_person(self._rng(2, k), epoch, HOT_BIDDER_RATIO)
        if needed(cols, "price"):
            out["price"] = _price(self._rng(3, k), n)
        if needed(cols, "channel", "url"):
            # one draw: [0, NUM_CHANNELS) is a plain channel, the rest (as many) a hot one
            draw = self._rng(4, k).integers(0, HOT_CHANNEL_RATIO * NUM_CHANNELS, n, dtype=np.int32)
            hot = len(HOT_CHANNELS)
            idx = pa.array(np.where(draw < NUM_CHANNELS, draw + hot, draw % hot))
            channels, urls = _channel_pools(self.seed % 2**64)
            out["channel"] = channels.take(idx)
            out["url"] = urls.take(idx)
        if needed(cols, "date_time"):
            event = epoch * TOTAL_PROPORTION + PERSON_PROPORTION + AUCTION_PROPORTION + offset
            out["date_time"] = self._time(event)
        if needed(cols, "extra"):
            out["extra"] = _extra(self._rng(5, k), n)
        return out

    def _auctions(self, rows: np.ndarray, k: int) -> dict[str, Any]:
        n, cols, out = len(rows), self.columns, {}
        epoch, offset = np.divmod(rows, AUCTION_PROPORTION)
        event = epoch * TOTAL_PROPORTION + PERSON_PROPORTION + offset
        start = BASE_TIME_US + event * self.inter_event_us
        out["id"] = rows + FIRST_AUCTION_ID
        if needed(cols, "item_name"):
            out["item_name"] = random_strings(self._rng(1, k), n, 3, 19, _TEXT)
        if needed(cols, "description"):
            out["description"] = random_strings(self._rng(2, k), n, 3, 99, _TEXT)
        if needed(cols, "initial_bid", "reserve"):
            rng = self._rng(3, k)
            initial = _price(rng, n)
            out["initial_bid"] = initial
            out["reserve"] = initial + _price(rng, n)
        out["date_time"] = pa.array(start, TIMESTAMP)
        if needed(cols, "expires"):
            # open until about when it leaves the window of in-flight auctions
            events_in_flight = NUM_IN_FLIGHT_AUCTIONS * TOTAL_PROPORTION // AUCTION_PROPORTION
            horizon = max(2 * events_in_flight * self.inter_event_us, 1)
            length = 1000 + (self._rng(4, k).random(n) * horizon).astype(np.int64)
            out["expires"] = pa.array(start + length, TIMESTAMP)
        if needed(cols, "seller"):
            out["seller"] = _recent_person(self._rng(5, k), epoch, HOT_SELLER_RATIO)
        if needed(cols, "category"):
            cat = self._rng(6, k).integers(0, NUM_CATEGORIES, n, dtype=np.int64)
            out["category"] = cat + FIRST_CATEGORY_ID
        if needed(cols, "extra"):
            out["extra"] = _extra(self._rng(7, k), n)
        return out

    def _persons(self, rows: np.ndarray, k: int) -> dict[str, Any]:
        n, cols, out = len(rows), self.columns, {}
        out["id"] = rows + FIRST_PERSON_ID
        if needed(cols, "name"):
            idx = self._rng(1, k).integers(0, len(_NAME_POOL), n, dtype=np.int32)
            out["name"] = _NAME_POOL.take(pa.array(idx))
        if needed(cols, "email_address"):
            chars = random_chars(self._rng(2, k), (n, 17), LOWERCASE)
            chars[:, 7] = ord("@")
            chars[:, 13:] = np.frombuffer(b".com", dtype=np.uint8)
            out["email_address"] = fixed_width_strings(chars)
        if needed(cols, "credit_card"):
            chars = random_chars(self._rng(3, k), (n, 19), DIGITS)
            chars[:, 4::5] = ord(" ")
            out["credit_card"] = fixed_width_strings(chars)
        if needed(cols, "city", "state"):
            rng = self._rng(4, k)
            city = rng.integers(0, len(US_CITIES), n, dtype=np.int32)
            state = rng.integers(0, len(US_STATES), n, dtype=np.int32)
            out["city"] = _CITY_POOL.take(pa.array(city))
            out["state"] = _STATE_POOL.take(pa.array(state))
        if needed(cols, "date_time"):
            out["date_time"] = self._time(rows * TOTAL_PROPORTION)
        if needed(cols, "extra"):
            out["extra"] = _extra(self._rng(5, k), n)
        return out


def _stream(table: str, value: Any) -> str:
    text = str(value).strip().lower() if value is not None else ""
    if text not in SCHEMAS:
        raise PlanError(
            f"{table}: option 'stream' must be one of {', '.join(map(repr, STREAMS))}, "
            f"got {value!r}"
        )
    return text


@source("nexmark")
class NexmarkSource(GeneratorSource):
    """One Nexmark stream (bids, auctions or persons), bounded by ``rows`` or endless.

    A declared column list selects (and may cast) columns by name; omitted, the source has
    the stream's full schema (see :data:`SCHEMAS`).
    """

    CONNECTOR = "nexmark"
    OPTIONS = {
        "stream": "which Nexmark stream: 'bid', 'auction' or 'person' (required)",
        **GeneratorSource.COMMON_OPTIONS,
        "rows": "number of rows of this stream to produce, then end (omitted: unbounded)",
        "events_per_second": (
            "wall-clock rate limit in rows of this stream per second (omitted: as fast as possible)"
        ),
    }
    REQUIRED = ("stream",)

    def make_generator(self) -> NexmarkGenerator:
        stream = _stream(self.name, self.spec.options.get("stream"))
        declared, _ = select_columns(
            self.name, SCHEMAS[stream], self.spec.schema, f"nexmark stream {stream!r}"
        )
        self._declared = narrow(declared, self.spec.columns)
        return NexmarkGenerator(
            stream, seed=self.seed, inter_event_us=self.inter_event_us,
            columns=self._declared.names,
        )  # fmt: skip

    def output_columns(self) -> tuple[pa.Schema, list[str]]:
        return self._declared, self._declared.names


def nexmark_table(
    stream: str,
    rows: int,
    seed: int = 0,
    *,
    inter_event_us: int = DEFAULT_INTER_EVENT_US,
    columns: list[str] | None = None,
) -> pa.Table:
    """The first ``rows`` rows of a Nexmark stream, exactly as the ``nexmark`` source yields them.

    ``columns`` picks a subset of the stream's columns (cheaper; same values).
    """
    stream = _stream("nexmark_table", stream)
    if isinstance(rows, bool) or not isinstance(rows, int) or rows < 0:
        raise PlanError(f"nexmark_table: 'rows' must be an integer >= 0, got {rows!r}")
    if columns is not None:
        unknown = [c for c in columns if c not in SCHEMAS[stream].names]
        if unknown:
            raise PlanError(
                f"nexmark_table: stream {stream!r} has no column(s) {', '.join(map(repr, unknown))}"
            )
    gen = NexmarkGenerator(stream, seed=seed, inter_event_us=inter_event_us, columns=columns)
    return gen.table(rows)
