"""What the built-in generators share: option parsing, fixed chunking, pacing, positions.

Determinism rule: a generator's rows are cut into fixed chunks of :data:`CHUNK_ROWS` rows,
and chunk ``k`` is a pure function of the options and ``k`` (its random numbers come from
``numpy.random.default_rng([seed, stream, column group, k])``). Batches handed to the
runtime are slices of chunks, so the rows never depend on ``batch_size``, on pacing, or on
where a resumed reader started.
"""

from __future__ import annotations

import asyncio
import time
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Iterator, Sequence
from datetime import datetime
from typing import Any, ClassVar

import numpy as np
import pyarrow as pa

from datum_sql.connectors.base import ConnectorSpec, Source, SourceItem
from datum_sql.errors import PlanError, SourceError
from datum_sql.types import to_micros

#: Rows per internal chunk; the unit of randomness (never changes with ``batch_size``).
CHUNK_ROWS = 65_536
DEFAULT_BATCH_SIZE = 65_536
#: Batches per second when ``events_per_second`` paces a source and no ``batch_size`` is given.
PACED_BATCHES_PER_SECOND = 20
#: After a stall of the consumer, a paced source bursts at most this many seconds' worth of rows.
MAX_CATCH_UP_S = 1.0
#: Event time of the first generated row: 2026-01-01 00:00:00 UTC (timestamps are naive UTC).
BASE_TIME_US = to_micros(datetime(2026, 1, 1))  # noqa: DTZ001
#: 100 µs between consecutive events: 10,000 events per second of event time.
DEFAULT_INTER_EVENT_US = 100
_SEED_MOD = 2**64

LOWERCASE = np.frombuffer(b"abcdefghijklmnopqrstuvwxyz", dtype=np.uint8)
DIGITS = np.frombuffer(b"0123456789", dtype=np.uint8)


# --------------------------------------------------------------------------- options


def _bad(table: str, key: str, value: Any, want: str) -> PlanError:
    return PlanError(f"{table}: option {key!r} must be {want}, got {value!r}")


def optional_int_option(
    table: str, options: dict[str, Any], key: str, *, minimum: int | None = 0
) -> int | None:
    """An integer option given as an int or as SQL text (``'1000'``); ``None`` when absent."""
    value = options.get(key)
    if value is None:
        return None
    want = "an integer" if minimum is None else f"an integer >= {minimum}"
    out: int | None = None
    is_int = isinstance(value, int | np.integer) and not isinstance(value, bool)
    if is_int or (isinstance(value, float) and value.is_integer()):
        out = int(value)
    elif isinstance(value, str):
        try:
            out = int(value.strip())
        except ValueError:
            pass
    if out is None or (minimum is not None and out < minimum):
        raise _bad(table, key, value, want)
    return out


def int_option(
    table: str, options: dict[str, Any], key: str, default: int, *, minimum: int | None = 0
) -> int:
    """An integer option, ``default`` when absent."""
    value = optional_int_option(table, options, key, minimum=minimum)
    return default if value is None else value


def float_option(
    table: str, options: dict[str, Any], key: str, *, positive: bool = True
) -> float | None:
    """A number option given as a number or as SQL text; ``None`` when absent."""
    value = options.get(key)
    if value is None:
        return None
    want = "a number > 0" if positive else "a number"
    if isinstance(value, bool):
        raise _bad(table, key, value, want)
    try:
        out = float(value.strip()) if isinstance(value, str) else float(value)
    except (TypeError, ValueError):
        raise _bad(table, key, value, want) from None
    if not np.isfinite(out) or (positive and out <= 0):
        raise _bad(table, key, value, want)
    return out


# --------------------------------------------------------------------------- vectorized strings


def random_strings(
    rng: np.random.Generator, n: int, min_len: int, max_len: int, alphabet: np.ndarray = LOWERCASE
) -> pa.StringArray:
    """``n`` random strings of lengths in ``[min_len, max_len]`` drawn from ``alphabet`` bytes.

    Characters come from random bytes through a 256-entry table (a slight bias towards the
    first ``256 % len(alphabet)`` characters; these are filler strings).
    """
    lengths = rng.integers(min_len, max_len + 1, n, dtype=np.int32)
    offsets = np.zeros(n + 1, dtype=np.int32)
    np.cumsum(lengths, out=offsets[1:])
    data = random_chars(rng, int(offsets[-1]), alphabet)
    return pa.StringArray.from_buffers(n, pa.py_buffer(offsets), pa.py_buffer(data))


def random_chars(
    rng: np.random.Generator, size: int | tuple[int, ...], alphabet: np.ndarray
) -> np.ndarray:
    """Random ``uint8`` characters from ``alphabet``, in the shape ``size``."""
    table = alphabet[np.arange(256) % len(alphabet)]
    count = int(np.prod(size))
    return table[np.frombuffer(rng.bytes(count), dtype=np.uint8)].reshape(size)


def fixed_width_strings(chars: np.ndarray) -> pa.StringArray:
    """One string per row of a 2-D ``uint8`` array of ASCII bytes."""
    n, width = chars.shape
    offsets = np.arange(0, (n + 1) * width, width, dtype=np.int32)
    data = np.ascontiguousarray(chars, dtype=np.uint8).reshape(-1)
    return pa.StringArray.from_buffers(n, pa.py_buffer(offsets), pa.py_buffer(data))


def rng_for(seed: int, *parts: int) -> np.random.Generator:
    """The random generator of one (seed, stream, column group, chunk) cell."""
    return np.random.default_rng([seed % _SEED_MOD, *parts])


# --------------------------------------------------------------------------- generators


class ChunkedGenerator(ABC):
    """Rows ``[0, inf)`` of one generated stream, built chunk by chunk."""

    def __init__(self, schema: pa.Schema) -> None:
        self.schema = schema
        self._cached: tuple[int, pa.RecordBatch] | None = None

    @abstractmethod
    def make_chunk(self, k: int) -> pa.RecordBatch:
        """Rows ``[k * CHUNK_ROWS, (k + 1) * CHUNK_ROWS)``: a pure function of ``k``."""

    def chunk(self, k: int) -> pa.RecordBatch:
        if self._cached is None or self._cached[0] != k:
            self._cached = (k, self.make_chunk(k))
        return self._cached[1]

    def slices(self, start: int, stop: int) -> Iterator[pa.RecordBatch]:
        """Rows ``[start, stop)`` as zero-copy slices of chunks."""
        while start < stop:
            k, offset = divmod(start, CHUNK_ROWS)
            take = min(stop - start, CHUNK_ROWS - offset)
            yield self.chunk(k).slice(offset, take)
            start += take

    def rows(self, start: int, stop: int) -> pa.RecordBatch:
        """Rows ``[start, stop)`` as one record batch."""
        pieces = list(self.slices(start, stop))
        if not pieces:
            return _empty(self.schema)
        return pieces[0] if len(pieces) == 1 else pa.concat_batches(pieces)

    def table(self, rows: int) -> pa.Table:
        """The first ``rows`` rows, as a table of chunk-sized batches."""
        return pa.Table.from_batches(list(self.slices(0, rows)), schema=self.schema)


def _empty(schema: pa.Schema) -> pa.RecordBatch:
    return pa.RecordBatch.from_arrays([pa.array([], f.type) for f in schema], schema=schema)


def select_columns(
    table: str, full: pa.Schema, declared: pa.Schema | None, what: str
) -> tuple[pa.Schema, list[str]]:
    """The output schema and column names for a declared column list (or all columns).

    Declared columns must exist in ``full`` (by name); a different declared type is a cast
    that must be possible.
    """
    if declared is None or len(declared) == 0:
        return full, full.names
    for field in declared:
        idx = full.get_field_index(field.name)
        if idx < 0:
            raise PlanError(
                f"{table}: {what} has no column {field.name!r}; "
                f"its columns are: {', '.join(full.names)}"
            )
        have = full.field(idx).type
        if have != field.type:
            try:
                pa.array([], have).cast(field.type)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
                raise PlanError(
                    f"{table}: column {field.name!r} is generated as {have}, "
                    f"which cannot be read as the declared {field.type}"
                ) from None
    return declared, declared.names


def narrow(schema: pa.Schema, columns: Sequence[str] | None) -> pa.Schema:
    """``schema`` cut to the ``columns`` a query reads (all when None). A column's values
    never depend on which others are generated: each has its own random stream."""
    if columns is None:
        return schema
    return pa.schema([f for f in schema if f.name in columns])


def conform(batch: pa.RecordBatch, schema: pa.Schema) -> pa.RecordBatch:
    """``batch``'s columns in ``schema``'s order and types."""
    arrays = []
    for field in schema:
        col = batch.column(field.name)
        arrays.append(col if col.type == field.type else col.cast(field.type))
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


# --------------------------------------------------------------------------- the source


class GeneratorSource(Source):
    """Rows of a :class:`ChunkedGenerator`, bounded by ``rows``, paced by ``events_per_second``.

    Position is ``{"rows": rows yielded so far}``; :meth:`open` resumes exactly there.
    """

    CONNECTOR: ClassVar[str] = ""
    COMMON_OPTIONS: ClassVar[dict[str, str]] = {
        "rows": "number of rows to produce, then end (omitted: unbounded)",
        "seed": "random seed (default 0); the same seed gives the same rows",
        "events_per_second": (
            "wall-clock rate limit in rows per second (omitted: as fast as possible)"
        ),
        "batch_size": (
            f"rows per batch (default {DEFAULT_BATCH_SIZE}; when paced, "
            f"events_per_second / {PACED_BATCHES_PER_SECOND})"
        ),
        "inter_event_us": (
            f"event-time microseconds between consecutive rows (default {DEFAULT_INTER_EVENT_US},"
            " i.e. 10,000 rows per second of event time); timestamps start at"
            " 2026-01-01 00:00:00 (naive UTC)"
        ),
    }

    def __init__(self, spec: ConnectorSpec) -> None:
        super().__init__(spec)
        opts, name = spec.options, spec.name
        self.rows_limit = optional_int_option(name, opts, "rows")
        self.seed = int_option(name, opts, "seed", 0, minimum=None)
        self.events_per_second = float_option(name, opts, "events_per_second")
        default_batch = DEFAULT_BATCH_SIZE
        if self.events_per_second is not None:
            paced = int(self.events_per_second / PACED_BATCHES_PER_SECOND)
            default_batch = max(1, min(DEFAULT_BATCH_SIZE, paced))
        self.batch_size = int_option(name, opts, "batch_size", default_batch, minimum=1)
        self.inter_event_us = int_option(name, opts, "inter_event_us", DEFAULT_INTER_EVENT_US)
        self._next = 0
        self.generator = self.make_generator()
        self._schema, columns = self.output_columns()
        self._conform = (
            self._schema != self.generator.schema or columns != self.generator.schema.names
        )

    @abstractmethod
    def make_generator(self) -> ChunkedGenerator:
        """The row generator for the parsed options."""

    def output_columns(self) -> tuple[pa.Schema, list[str]]:
        """The schema :meth:`read` yields (default: the generator's)."""
        return self.generator.schema, self.generator.schema.names

    @property
    def schema(self) -> pa.Schema:
        return self._schema

    @property
    def bounded(self) -> bool:
        return self.rows_limit is not None

    async def open(self, position: dict[str, Any] | None) -> None:
        if position is None:
            self._next = 0
            return
        rows = position.get("rows") if isinstance(position, dict) else None
        if isinstance(rows, bool) or not isinstance(rows, int) or rows < 0:
            raise SourceError(
                f"{self.name}: cannot resume {self.CONNECTOR} source from position "
                f"{position!r}; expected {{'rows': <non-negative integer>}}"
            )
        self._next = rows

    async def read(self) -> AsyncIterator[SourceItem]:
        eps = self.events_per_second
        started = time.monotonic()
        emitted = 0
        while True:
            start = self._next
            stop = start + self.batch_size
            if self.rows_limit is not None:
                stop = min(stop, self.rows_limit)
            if stop <= start:
                return
            batch = self.generator.rows(start, stop)
            if self._conform:
                batch = conform(batch, self._schema)
            emitted += stop - start
            if eps is not None:
                # Release each batch when its last row is due: never more than eps rows/s.
                delay = started + emitted / eps - time.monotonic()
                if delay < -MAX_CATCH_UP_S:
                    # the consumer stalled: catch up at most MAX_CATCH_UP_S worth of rows
                    started -= delay + MAX_CATCH_UP_S
                await asyncio.sleep(max(delay, 0.0))
            else:
                await asyncio.sleep(0)
            self._next = stop
            yield batch

    def position(self) -> dict[str, Any]:
        return {"rows": self._next}

    def metrics(self) -> dict[str, Any]:
        return {"rows": self._next, "rows_limit": self.rows_limit}


def needed(columns: Sequence[str], *names: str) -> bool:
    """True when any of ``names`` is among the requested ``columns``."""
    return any(n in columns for n in names)
