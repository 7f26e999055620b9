"""The ``kafka`` sink: rows as JSON messages, produced with aiokafka.

Encoding (FORMAT PLAIN ENCODE JSON)
    One JSON object per row, column name -> value, made by DuckDB's ``to_json`` over the
    whole Arrow batch (vectorized; about 10x faster than ``json.dumps`` per row, measured
    on 100k rows). Timestamps are written as ``"YYYY-MM-DD HH:MM:SS[.ffffff]"`` (UTC for
    time-zone aware columns), which the ``kafka`` source reads back. Row order is kept.
Key
    ``key = 'col'`` makes that column's value the message key: binary as is, anything else
    as its UTF-8 text (``42`` -> ``b"42"``); NULL -> no key. Without ``key`` messages have no
    key and are spread over partitions by aiokafka's default partitioner.
Changelog (upsert)
    With ``key``, the sink accepts a changelog (an ``_op`` column of ``+I``, ``-U``, ``+U``,
    ``-D``) and writes it as upsert messages: ``+I``/``+U`` -> key + row JSON (without
    ``_op``), ``-D`` -> key + tombstone (NULL value), ``-U`` -> nothing (the ``+U`` that
    follows replaces it). A compacted topic then holds the latest row per key. Without
    ``key`` a changelog is refused (``accepts_changelog`` is False).
Delivery
    At-least-once: ``acks=all``, aiokafka retries failed sends until ``retry.deadline``
    (its request timeout is set to it); a message still unacknowledged then fails the sink
    (at the next write or checkpoint) with an error saying the deadline passed.
    :meth:`pre_commit` waits for every message sent so far to be acknowledged (so a
    checkpoint implies delivery). Messages are published as they are written — after a crash
    the rows since the last checkpoint are sent again (duplicates are possible; consumers
    de-duplicate by key when needed). ``compression`` is one of none/gzip/snappy/lz4/zstd;
    snappy, lz4 and zstd need their Python codec packages (aiokafka's extras).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from datum_sql.connectors.base import ConnectorSpec, Sink
from datum_sql.connectors.kafka.options import SINK_OPTIONS, KafkaSinkOptions, scrub
from datum_sql.connectors.kafka.retry import (
    Retry,
    attempt_timeout,
    describe,
    rpc_timeout,
    transient,
)
from datum_sql.connectors.kafka.source import require_aiokafka
from datum_sql.connectors.registry import sink
from datum_sql.errors import PlanError, SinkError

log = logging.getLogger(__name__)

OP = "_op"
#: acknowledge in-flight messages once this many are pending (bounds memory)
MAX_PENDING = 200_000


class JsonRowEncoder:
    """Arrow record batch -> one JSON document (bytes) per row, via DuckDB ``to_json``."""

    def __init__(self) -> None:
        import duckdb

        self._con = duckdb.connect()
        self._con.execute("SET preserve_insertion_order = true")

    def encode(self, batch: pa.RecordBatch) -> list[bytes]:
        if batch.num_rows == 0:
            return []
        cols = []
        for f, col in zip(batch.schema, batch.columns):
            if pa.types.is_timestamp(f.type) and f.type.tz is not None:
                col = col.cast(pa.timestamp(f.type.unit))  # UTC wall time
            cols.append(col)
        table = pa.Table.from_arrays(cols, names=batch.schema.names)
        self._con.register("_datum_rows", table)
        try:
            out = self._con.sql("SELECT to_json(t)::VARCHAR FROM _datum_rows AS t").to_arrow_table()
        finally:
            self._con.unregister("_datum_rows")
        return out.column(0).cast(pa.binary()).to_pylist()  # type: ignore[no-any-return]

    def close(self) -> None:
        self._con.close()


def key_bytes(col: pa.Array | pa.ChunkedArray) -> list[bytes | None]:
    """Message keys from a column: binary as is, anything else as UTF-8 text."""
    typ = col.type
    if not (pa.types.is_binary(typ) or pa.types.is_large_binary(typ)):
        if not (pa.types.is_string(typ) or pa.types.is_large_string(typ)):
            col = pc.cast(col, pa.string())
        col = pc.cast(col, pa.binary())
    return col.to_pylist()  # type: ignore[no-any-return]


@sink("kafka")
class KafkaSink(Sink):
    """Rows of a query as JSON messages on a topic; see the module docstring."""

    OPTIONS = SINK_OPTIONS
    REQUIRED = ("topic",)
    ACCEPTS_CHANGELOG = True
    EXACTLY_ONCE = False

    def __init__(self, spec: ConnectorSpec) -> None:
        super().__init__(spec)
        require_aiokafka()
        self.options = KafkaSinkOptions.parse(spec.name, spec.options)
        encode = (spec.encode or "JSON").upper()
        if encode != "JSON":
            raise PlanError(f"{spec.name}: the kafka sink writes ENCODE JSON only, not {encode}")
        self._secrets = self.options.security.secrets()
        self._producer: Any = None
        self._encoder: JsonRowEncoder | None = None
        #: send futures not yet seen resolved, oldest first
        self._pending: deque[asyncio.Future[Any]] = deque()
        self._deadline = self.options.retry_deadline.total_seconds()
        self._rpc_timeout = rpc_timeout(self.options.request_timeout, self._deadline)
        self._schema: pa.Schema | None = None
        self._sent = 0
        self._acked = 0
        self._state = "created"
        self._last_error: str | None = None

    def __repr__(self) -> str:
        return f"KafkaSink(name={self.name!r}, options={self.options!r})"

    @property
    def accepts_changelog(self) -> bool:
        """A changelog is written as upserts, which needs a key column."""
        return self.options.key is not None

    def _error(self, message: str) -> SinkError:
        return SinkError(scrub(f"kafka sink {self.name!r}: {message}", self._secrets))

    def _describe(self, exc: BaseException) -> str:
        return describe(exc, self._secrets)

    async def open(self, schema: pa.Schema) -> None:
        self._schema = schema
        key = self.options.key
        if key is not None and key not in schema.names:
            raise self._error(
                f"option key = {key!r} names no column; columns: "
                f"{', '.join(n for n in schema.names if n != OP)}"
            )
        if OP in schema.names and key is None:
            raise self._error(
                "a changelog (updating query) needs option 'key' (the upsert key column): "
                "-D rows become tombstones for that key"
            )
        self._encoder = JsonRowEncoder()
        await self._start()

    async def _start(self) -> None:
        from aiokafka import AIOKafkaProducer
        from aiokafka.errors import UnsupportedCodecError

        retry = Retry(self._deadline)
        timeout = attempt_timeout(self._rpc_timeout, self._deadline)
        while True:
            since = time.monotonic()
            try:
                kwargs = self.options.producer_kwargs()
            except ValueError as exc:  # TLS files
                raise self._error(str(exc)) from None
            try:
                producer = AIOKafkaProducer(**kwargs)
            except (UnsupportedCodecError, AssertionError, ValueError) as exc:
                raise self._error(
                    f"compression = {self.options.compression!r} is not available: "
                    f"{self._describe(exc)} (install the codec, e.g. pip install "
                    "'aiokafka[lz4,snappy,zstd]')"
                ) from None
            try:
                await asyncio.wait_for(producer.start(), timeout=timeout)
                self._producer = producer
                self._state = "running"
                return
            except asyncio.CancelledError:
                await self._stop(producer)
                raise
            except Exception as exc:
                await self._stop(producer)
                if not transient(exc):
                    raise self._error(
                        f"cannot connect to {self.options.bootstrap!r}: {self._describe(exc)}"
                    ) from None
                self._state = "retrying"
                self._last_error = self._describe(exc)
                delay = retry.next_delay(since)
                if delay is None:
                    raise self._error(
                        retry.passed(f"broker {self.options.bootstrap!r} unreachable")
                        + f" while connecting (topic {self.options.topic!r}); last error: "
                        f"{self._last_error}{self.options.security.connect_hint()}"
                    ) from None
                await asyncio.sleep(delay)

    async def _stop(self, producer: Any) -> None:
        try:
            await asyncio.wait_for(producer.stop(), timeout=max(self._rpc_timeout, 2.0))
        except Exception as exc:
            log.warning("%s: stopping the Kafka producer: %s", self.name, self._describe(exc))

    async def write(self, batch: pa.RecordBatch) -> None:
        if batch.num_rows == 0:
            return
        if self._producer is None:
            raise self._error("write() before open()")
        assert self._encoder is not None
        deletes: list[bool] | None = None
        if OP in batch.schema.names:
            if self.options.key is None:
                raise self._error("a changelog needs option 'key'")
            ops = batch.column(OP)
            batch = batch.filter(pc.not_equal(ops, "-U"))
            ops = batch.column(OP)
            is_del = pc.equal(ops, "-D")
            if pc.any(is_del).as_py():
                deletes = is_del.to_pylist()
            batch = batch.drop_columns([OP])
            if batch.num_rows == 0:
                return
        values: list[bytes | None] = list(self._encoder.encode(batch))
        if deletes is not None:
            values = [None if d else v for v, d in zip(values, deletes)]
        key = self.options.key
        keys = key_bytes(batch.column(key)) if key is not None else None
        topic = self.options.topic
        send = self._producer.send
        try:
            if keys is None:
                for v in values:
                    self._pending.append(await send(topic, v))
            else:
                for k, v in zip(keys, values):
                    self._pending.append(await send(topic, v, key=k))
        except Exception as exc:
            raise self._unsent(exc, f"sending to topic {topic!r} failed") from None
        self._sent += len(values)
        self._reap()
        if len(self._pending) >= MAX_PENDING:
            await self._drain()

    def _reap(self) -> None:
        """Count the messages acknowledged so far; raise on the first one that failed, so
        a failure surfaces at the next write, not only at the next checkpoint."""
        pending = self._pending
        while pending and pending[0].done():
            fut = pending.popleft()
            exc = None if fut.cancelled() else fut.exception()
            if exc is not None:
                self._pending = deque()
                raise self._unsent(exc, f"a message to topic {self.options.topic!r} failed")
            self._acked += 1

    async def _drain(self) -> None:
        """Wait until every message sent so far is acknowledged (at most until
        ``retry.deadline`` passes: aiokafka gives up on a message by then)."""
        pending, self._pending = list(self._pending), deque()
        if not pending:
            return
        limit = self._deadline + self._rpc_timeout
        done, waiting = await asyncio.wait(pending, timeout=limit)
        errors = [e for f in done if not f.cancelled() and (e := f.exception()) is not None]
        self._acked += len(done) - len(errors)
        failed = len(errors) + len(waiting)
        if failed:
            first = errors[0] if errors else TimeoutError(f"no acknowledgement in {limit:g}s")
            raise self._unsent(
                first,
                f"{failed} message(s) to topic {self.options.topic!r} were not acknowledged",
            )

    def _unsent(self, exc: BaseException, what: str) -> SinkError:
        """The error for messages that could not be delivered; a timeout means the broker
        did not answer within the retry deadline."""
        self._last_error = self._describe(exc)
        if transient(exc):
            what = f"retry.deadline ({self._deadline:g}s) passed: {what}"
        return self._error(f"{what}: {self._last_error}")

    async def pre_commit(self, checkpoint_id: int) -> dict[str, Any]:
        """Wait until every message written so far is acknowledged (acks=all)."""
        await self._drain()
        return {"topic": self.options.topic, "acknowledged": self._acked}

    async def abort(self) -> None:
        """Published messages cannot be taken back (at-least-once); forget the futures."""
        self._pending = deque()

    async def close(self) -> None:
        producer, self._producer = self._producer, None
        try:
            if producer is not None:
                try:
                    await self._drain()
                finally:
                    await self._stop(producer)
        finally:
            if self._encoder is not None:
                self._encoder.close()
                self._encoder = None
            self._state = "closed"

    def metrics(self) -> dict[str, Any]:
        return {
            "state": self._state,
            "last_error": self._last_error,
            "topic": self.options.topic,
            "sent": self._sent,
            "acknowledged": self._acked,
        }
