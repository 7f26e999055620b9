"""The ``kafka`` source: a topic read with aiokafka and manual offset management.

What :meth:`KafkaSource.read` yields
------------------------------------
* ``SplitBatch(split="<partition>", batch)`` — the decoded records of one partition from
  one fetch (at most ``batch_size`` records per fetch over all partitions), in offset order.
  The runtime computes event time and watermarks per split (= per partition). When a
  partition becomes this consumer's (at start, by a rebalance or by discovery) an *empty*
  ``SplitBatch`` for it comes first: the runtime then tracks the partition, so it holds back
  the watermark even before its first record arrives (until ``idle_timeout``, if set) —
  otherwise the first partition to be fetched would move the watermark alone and close
  windows the other partitions still fill. (Only for tables with an event-time column:
  without one there is no watermark to hold back.)
* ``RejectedRecords(batch)`` — under ``bad_records = 'skip' | 'dead_letter'``: the records of
  that fetch that could not be decoded, with the columns ``raw`` (binary), ``reason``,
  ``position`` (``"topic/partition/offset"``), ``topic``, ``partition``, ``offset``. They are
  yielded *before* the good records of the same fetch, and the position only moves past them
  with the batch that follows, so a checkpoint never skips a record that was neither
  processed nor handed over for dead-lettering (a replay may hand one over twice).
* Under ``bad_records = 'fail'`` (the default) the good records before the first bad one are
  yielded, then :class:`~datum_sql.errors.SourceError` names topic, partition, offset and the
  reason; nothing at or after the bad record's offset is yielded for that partition.

Metadata columns (``spec.extra["include"]``)
--------------------------------------------
A list of ``(kind, column_name)`` pairs, ``kind`` in ``key``, ``partition``, ``offset``,
``timestamp`` (a bare ``kind`` string means ``(kind, kind)``). Each becomes a column filled
from the message rather than its value: ``key`` binary (NULL without a key), ``partition``
int32, ``offset`` int64, ``timestamp`` ``timestamp('us')`` (the Kafka message timestamp).
When ``spec.schema`` already declares that column, it keeps its position and declared type
(the metadata is cast to it, e.g. a VARCHAR key); otherwise it is appended after the value
columns, in the order given. Every other column of ``spec.schema`` comes from the value.

Positions, offsets and consumer groups
--------------------------------------
``position()`` is ``{"offsets": {"<partition>": next_offset}}``, just after the last item
yielded; ``open(position)`` resumes there (a partition missing from it starts per
``scan.startup.mode``; an offset outside the retained range is moved to its nearest end).
``commit(position)`` commits those offsets to the consumer group (only for partitions this
consumer still owns and at or after where it (re)acquired them); the runtime calls it after
a checkpoint covering the position is published. A failed commit is reported in
``metrics()["last_commit_error"]`` and retried by the next checkpoint's commit.

The group is ``properties.group.id`` when set; otherwise, inside a streaming query, one of
the query's own, ``datum-<query name>`` (``spec.query``), so that queries over one source
never share partitions; outside a query (batch reads, samples) there is none and nothing is
committed. Without ``properties.group.id`` every partition of the topic is assigned to this
consumer (the per-query group only receives commits; it never splits the topic, even if two
processes run queries of the same name); partitions added to the topic later are found by a
metadata refresh every ``scan.partition.discovery.interval`` and read from their beginning
(unbounded mode only). With ``properties.group.id`` the partitions are shared through the
group protocol. A partition assigned
to this consumer starts at: the restored position (``open``); else, if it was revoked and
given back, the later of the position it had and the group's committed offset; else, if this
consumer owned it before, the committed offset; else ``scan.startup.mode``. ``earliest`` and
``latest`` ignore committed offsets (as in Flink); members sharing work through a group should
use ``scan.startup.mode = 'group-offsets'`` (committed offset, else
``properties.auto.offset.reset``, default earliest). A revoked partition's position is
forgotten at once: it is neither yielded from, reported, nor committed any more.

``scan.startup.mode = 'timestamp'`` seeks to the broker's answer for the timestamp and then
also skips, per partition, the records before the first one whose timestamp is at or after
it (so a broker whose time index is coarse or by append time still gives exact results).

Resilience
----------
An unreachable broker (at start or mid-stream: requests failing or timing out) puts the
source into ``state = 'retrying'`` (see :meth:`metrics`) and is retried with exponential
backoff (0.1 s doubling, at most 5 s between attempts); after ``retry.deadline`` (default
60 s) without success, :class:`SourceError` is raised. A mid-stream outage is noticed by a
health probe (a ListOffsets request bounded by min(request timeout, 5 s)) run when a fetch
returns nothing. Secrets never appear in errors or metrics.
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import itertools
import logging
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pyarrow as pa

from datum_sql.connectors.base import ConnectorSpec, RejectedRecords, Source, SplitBatch, SplitEnded
from datum_sql.connectors.kafka.decode import Decoded, make_decoder
from datum_sql.connectors.kafka.fetch import (
    Record,
    as_plain,
    key_of,
    offset_of,
    plain_records,
    timestamp_of,
    value_of,
)
from datum_sql.connectors.kafka.options import SOURCE_OPTIONS, KafkaSourceOptions, scrub
from datum_sql.connectors.kafka.retry import (
    NotReady,
    Retry,
    attempt_timeout,
    describe,
    rpc_timeout,
    transient,
)
from datum_sql.connectors.registry import source
from datum_sql.connectors.text import has_text, invalid_utf8
from datum_sql.errors import PlanError, SchemaError, SourceError

log = logging.getLogger(__name__)

METADATA_KINDS: dict[str, pa.DataType] = {
    "key": pa.binary(),
    "partition": pa.int32(),
    "offset": pa.int64(),
    "timestamp": pa.timestamp("us"),
}

REJECTED_SCHEMA = pa.schema(
    [
        ("raw", pa.binary()),
        ("reason", pa.string()),
        ("position", pa.string()),
        ("topic", pa.string()),
        ("partition", pa.int32()),
        ("offset", pa.int64()),
    ]
)

#: seconds between health probes while fetches return nothing
PROBE_INTERVAL = 1.0


def require_aiokafka() -> Any:
    try:
        import aiokafka
    except ImportError:
        raise PlanError(
            "the kafka connector needs aiokafka: pip install 'datum-sql[kafka]'"
        ) from None
    return aiokafka


def parse_include(include: Any, table: str) -> list[tuple[str, str]]:
    """``spec.extra["include"]`` -> [(kind, column)], validated."""
    out: list[tuple[str, str]] = []
    for item in include or ():
        if isinstance(item, str):
            kind, name = item, item
        else:
            try:
                kind, name = item
            except (TypeError, ValueError):
                raise PlanError(
                    f"{table}: INCLUDE entries are (kind, column) pairs, got {item!r}"
                ) from None
        kind = str(kind).lower()
        if kind not in METADATA_KINDS:
            raise PlanError(
                f"{table}: cannot INCLUDE {kind!r}; Kafka metadata columns are "
                f"{', '.join(METADATA_KINDS)}"
            )
        if any(n == name for _, n in out):
            raise PlanError(f"{table}: INCLUDE names column {name!r} twice")
        out.append((kind, str(name)))
    return out


@source("kafka")
class KafkaSource(Source):
    """Rows of a Kafka topic; see the module docstring for the contract."""

    OPTIONS = SOURCE_OPTIONS
    REQUIRED = ("topic",)

    def __init__(self, spec: ConnectorSpec) -> None:
        super().__init__(spec)
        require_aiokafka()
        self.options = KafkaSourceOptions.parse(spec.name, spec.options)
        self._secrets = self.options.security.secrets()
        self._include = parse_include(spec.extra.get("include"), spec.name)
        self._schema, value_schema = self._build_schema(spec.schema)
        self._decoder = make_decoder(spec.encode, value_schema)
        #: INCLUDE key columns read as text: the key must be UTF-8 like any text
        self._text_keys = [
            name
            for kind, name in self._include
            if kind == "key" and has_text(self._schema.field(name).type)
        ]
        self._empty = pa.RecordBatch.from_arrays(
            [pa.array([], f.type) for f in self._schema], schema=self._schema
        )
        self._topic = self.options.topic
        #: the consumer group offsets are committed to: the source's own (members share
        #: the partitions), else one per query (the query reads every partition alone)
        self._group_id = self.options.group_id or (f"datum-{spec.query}" if spec.query else None)
        self._consumer: Any = None
        #: the consumer's getmany() returns plain record tuples (see fetch.py)
        self._plain = False
        self._next: dict[int, int] = {}  # partition -> next offset (after last yielded)
        self._owned: set[int] = set()
        #: partitions (newly) owned, not yet announced to the runtime with an empty batch
        self._announce: list[int] = []
        self._acquired: dict[int, int] = {}  # partition -> offset where we (re)got it
        self._restored: dict[int, int] = {}
        self._stash: dict[int, int] = {}  # positions of partitions revoked by a rebalance
        self._ended: list[str] = []  # revoked partitions not yet reported as SplitEnded
        self._done_splits: set[int] = set()  # bounded mode: partitions read to their end
        self._seen: set[int] = set()
        self._fresh: set[int] = set()  # partitions found by discovery: read from beginning
        self._ts_skip: dict[int, int] = {}
        self._end: dict[int, int] = {}  # bounded mode: end offsets captured at start
        self._latest_end: dict[int, int] = {}
        self._assigned_once = False
        #: bumped by every revocation: records fetched before it are not ours to yield
        self._generation = 0
        self._listener_error: BaseException | None = None
        self._listener_since = 0.0  # when the failed positioning started
        self._state = "created"
        self._last_error: str | None = None
        self._last_commit_error: str | None = None
        deadline = self.options.retry_deadline.total_seconds()
        self._retry = Retry(deadline)
        self._last_ok = time.monotonic()
        self._last_discovery = time.monotonic()
        self._records = 0
        self._rejected = 0
        self._rpc_timeout = rpc_timeout(self.options.request_timeout, deadline)

    def __repr__(self) -> str:
        return f"KafkaSource(name={self.name!r}, options={self.options!r})"

    # -- schema ----------------------------------------------------------------------------

    def _build_schema(self, declared: pa.Schema | None) -> tuple[pa.Schema, pa.Schema | None]:
        """(output schema, value schema): include columns come from message metadata."""
        inc = {name for _, name in self._include}
        fields = list(declared) if declared is not None else []
        value_fields = [f for f in fields if f.name not in inc]
        if not value_fields and (self.spec.encode or "JSON").upper() == "BYTES":
            value_fields = [pa.field("value", pa.binary())]
            fields = [value_fields[0], *fields]
        names = {f.name for f in fields}
        for kind, name in self._include:
            if name not in names:
                fields.append(pa.field(name, METADATA_KINDS[kind]))
        value = pa.schema(value_fields) if value_fields else None
        return pa.schema(fields), value

    @property
    def schema(self) -> pa.Schema:
        return self._schema

    @property
    def bounded(self) -> bool:
        return self.options.bounded

    @property
    def idle_timeout(self) -> float | None:
        """Seconds after which a silent partition stops holding back the watermark."""
        t = self.options.idle_timeout
        return None if t is None else t.total_seconds()

    # -- errors ----------------------------------------------------------------------------

    def _error(self, message: str) -> SourceError:
        return SourceError(scrub(f"kafka source {self.name!r}: {message}", self._secrets))

    def _describe(self, exc: BaseException) -> str:
        return describe(exc, self._secrets)

    async def _failed(self, exc: BaseException, during: str, since: float) -> None:
        """The attempt started at ``since`` failed: wait the backoff if transient, else (or
        past ``retry.deadline``) raise."""
        if not transient(exc):
            raise self._error(
                f"{during} failed (topic {self._topic!r}, brokers "
                f"{self.options.bootstrap!r}): {self._describe(exc)}"
            ) from None
        self._state = "retrying"
        self._last_error = self._describe(exc)
        delay = self._retry.next_delay(since)
        if delay is None:
            raise self._error(
                self._retry.passed(f"broker {self.options.bootstrap!r} unreachable")
                + f" while {during} (topic {self._topic!r}); last error: {self._last_error}"
                f"{self.options.security.connect_hint()}"
            )
        log.warning(
            "%s: %s failed (%s); retrying in %.1fs", self.name, during, self._last_error, delay
        )
        await asyncio.sleep(delay)

    def _healthy(self) -> None:
        self._state = "running"
        self._retry.reset()
        self._last_ok = time.monotonic()

    # -- lifecycle -------------------------------------------------------------------------

    async def open(self, position: dict[str, Any] | None) -> None:
        offsets = (position or {}).get("offsets") or {}
        self._restored = {int(p): int(o) for p, o in offsets.items()}

    async def close(self) -> None:
        await self._stop_consumer()
        if self._state != "failed":
            self._state = "closed"

    async def _stop_consumer(self) -> None:
        consumer, self._consumer = self._consumer, None
        if consumer is None:
            return
        try:
            await asyncio.wait_for(consumer.stop(), timeout=max(self._rpc_timeout, 2.0))
        except Exception as exc:
            log.warning("%s: stopping the Kafka consumer: %s", self.name, self._describe(exc))

    async def _start(self) -> None:
        self._state = "connecting"
        timeout = attempt_timeout(self._rpc_timeout, self._retry.deadline)
        while True:
            since = time.monotonic()
            try:
                await asyncio.wait_for(self._connect_once(), timeout=timeout)
                self._healthy()
                return
            except asyncio.CancelledError:
                await self._stop_consumer()
                raise
            except Exception as exc:
                await self._stop_consumer()
                if isinstance(exc, ValueError):  # bad TLS files and such: not transient
                    raise self._error(scrub(str(exc), self._secrets)) from None
                await self._failed(exc, "connecting", since)

    async def _connect_once(self) -> None:
        from aiokafka import AIOKafkaConsumer, TopicPartition

        consumer = AIOKafkaConsumer(
            **{**self.options.consumer_kwargs(), "group_id": self._group_id}
        )
        self._consumer = consumer
        await consumer.start()
        self._plain = plain_records(consumer)
        parts = await self._topic_partitions()
        if not parts:
            raise NotReady(f"topic {self._topic!r} does not exist (or has no partitions)")
        tps = [TopicPartition(self._topic, p) for p in sorted(parts)]
        if self.options.bounded and not self._end:
            self._end = (await self._offset_range(tps))[1]
            stop = self.options.stop_offsets
            if stop is not None:  # unlisted partitions end where they start: not read
                self._end = {
                    p: min(end, dict(stop)[p]) for p, end in self._end.items() if p in dict(stop)
                }
        if self.options.group_id:
            consumer.subscribe([self._topic], listener=_make_listener(self))
        else:
            consumer.assign(tps)
            await self._position(sorted(parts))
            self._owned = set(parts)
            self._announce.extend(sorted(parts))
            self._assigned_once = True

    async def _topic_partitions(self) -> set[int]:
        await self._consumer.topics()  # refresh metadata
        return set(self._consumer.partitions_for_topic(self._topic) or ())

    async def _position(self, parts: list[int]) -> None:
        """Seek each partition to where it must start (see the module docstring). Nothing
        is forgotten before the seeks: cancelled midway (a bounded wait), it can run again."""
        from aiokafka import TopicPartition

        consumer = self._consumer
        opts = self.options
        tps = {p: TopicPartition(self._topic, p) for p in parts}
        lo, hi = await self._offset_range(list(tps.values()))
        fallback = dict(opts.client).get("auto_offset_reset", "earliest")
        specific = dict(opts.specific_offsets)
        target: dict[int, int] = {}
        by_mode: list[int] = []
        for p in parts:
            if p in self._restored:
                target[p] = self._restored[p]
            elif p in self._stash:
                committed = await self._committed(tps[p])
                target[p] = max(self._stash[p], committed if committed is not None else -1)
            elif p in self._fresh:
                target[p] = lo[p]
            elif p in self._seen and opts.group_id:
                committed = await self._committed(tps[p])
                if committed is not None:
                    target[p] = committed
                else:
                    by_mode.append(p)
            else:
                by_mode.append(p)
        ts_parts: list[int] = []
        for p in by_mode:
            mode = opts.startup_mode
            if mode == "group-offsets":
                committed = await self._committed(tps[p])
                if committed is not None:
                    target[p] = committed
                    continue
                mode = "latest" if fallback == "latest" else "earliest"
            if mode == "earliest":
                target[p] = lo[p]
            elif mode == "latest":
                target[p] = hi[p]
            elif mode == "specific-offsets":
                target[p] = specific.get(p, lo[p])
            elif mode == "timestamp":
                ts_parts.append(p)
        if ts_parts:
            assert opts.startup_timestamp_ms is not None
            found = await consumer.offsets_for_times(
                {tps[p]: opts.startup_timestamp_ms for p in ts_parts}
            )
            for p in ts_parts:
                ans = found.get(tps[p])
                if ans is None or ans.timestamp is None or ans.timestamp < 0:
                    target[p] = hi[p]
                else:
                    target[p] = ans.offset
                    self._ts_skip[p] = opts.startup_timestamp_ms
        for p in parts:
            self._restored.pop(p, None)
            self._stash.pop(p, None)
            self._fresh.discard(p)
            off = min(max(target[p], lo[p]), hi[p])
            consumer.seek(tps[p], off)
            self._next[p] = off
            self._acquired[p] = off
            self._latest_end[p] = hi[p]
            self._seen.add(p)
            if self.options.bounded and off >= self._end.get(p, 0):
                consumer.pause(tps[p])

    async def _offset_range(self, tps: list[Any]) -> tuple[dict[int, int], dict[int, int]]:
        """(beginning, end) offsets per partition.

        The end offset is the high watermark of a fetch of the last record batch: some
        brokers (the Tansu test broker) answer ListOffsets(latest) with the last *batch's*
        base offset + 1, which is too small when that batch holds several records. Against
        Kafka both agree and this costs one small fetch."""
        from aiokafka import AIOKafkaConsumer

        consumer = self._consumer
        begin = await consumer.beginning_offsets(tps)
        listed = await consumer.end_offsets(tps)
        lo = {tp.partition: off for tp, off in begin.items()}
        hi = {tp.partition: off for tp, off in listed.items()}
        need = [tp for tp in tps if hi[tp.partition] > lo[tp.partition]]
        if not need:
            return lo, hi
        kwargs = self.options.consumer_kwargs()
        kwargs.update(group_id=None, fetch_max_wait_ms=10, max_poll_records=1)
        probe = AIOKafkaConsumer(**kwargs)
        await probe.start()
        try:
            probe.assign(need)
            for tp in need:
                probe.seek(tp, hi[tp.partition] - 1)
            missing = set(need)
            deadline = time.monotonic() + self._rpc_timeout
            while missing:
                if time.monotonic() > deadline:
                    raise TimeoutError("no high watermark in fetch responses")
                await probe.getmany(*missing, timeout_ms=50)
                for tp in list(missing):
                    hw = probe.highwater(tp)
                    if hw is not None:
                        hi[tp.partition] = max(hi[tp.partition], hw)
                        missing.discard(tp)
        finally:
            await probe.stop()
        return lo, hi

    async def _committed(self, tp: Any) -> int | None:
        off = await self._consumer.committed(tp)
        return None if off is None or off < 0 else int(off)

    # -- group membership ------------------------------------------------------------------

    def _on_revoked(self, parts: list[int]) -> None:
        self._generation += 1
        for p in parts:
            self._ended.append(str(p))
            self._owned.discard(p)
            if p in self._next:
                self._stash[p] = self._next.pop(p)
            self._ts_skip.pop(p, None)
            self._acquired.pop(p, None)

    async def _on_assigned(self, parts: list[int]) -> None:
        from aiokafka import TopicPartition

        tps = [TopicPartition(self._topic, p) for p in parts]
        since = time.monotonic()
        try:
            if tps:
                self._consumer.pause(*tps)
                timeout = attempt_timeout(self._rpc_timeout, self._retry.deadline)
                await asyncio.wait_for(self._position(sorted(parts)), timeout=timeout)
                self._owned |= set(parts)
                self._announce.extend(sorted(parts))
                live = [
                    tp
                    for tp in tps
                    if not (
                        self.options.bounded
                        and self._next[tp.partition] >= self._end.get(tp.partition, 0)
                    )
                ]
                if live:
                    self._consumer.resume(*live)
        except Exception as exc:
            self._listener_error, self._listener_since = exc, since
        finally:
            self._stash.clear()
            self._assigned_once = True

    # -- reading ---------------------------------------------------------------------------

    async def read(self) -> AsyncIterator[SplitBatch | RejectedRecords | SplitEnded]:  # type: ignore[override]
        from aiokafka import errors as ke

        opts = self.options
        #: the next fetch, drained while the previous one decoded: (records, generation)
        ahead: tuple[dict[Any, list[Record]], int] | None = None
        #: an error the fetch ahead met, handled like any failed fetch
        ahead_error: tuple[BaseException, float] | None = None
        try:
            await self._start()
            while True:
                if self._listener_error is not None:
                    ahead = None
                    exc, self._listener_error = self._listener_error, None
                    await self._failed(exc, "positioning the partitions", self._listener_since)
                    self._consumer.unsubscribe()
                    self._consumer.subscribe([self._topic], listener=_make_listener(self))
                    continue
                while self._ended:
                    yield SplitEnded(self._ended.pop(0))
                while self._announce:
                    p = self._announce.pop(0)
                    if (
                        self.spec.event_time
                        and p in self._owned
                        and not (opts.bounded and self._next.get(p, 0) >= self._end.get(p, 0))
                    ):
                        # an empty batch makes the runtime track the partition, so it holds
                        # back the watermark before its first record (until idle_timeout)
                        yield SplitBatch(str(p), self._empty)
                if opts.bounded:
                    for p in sorted(self._owned):
                        if p not in self._done_splits and self._next.get(p, 0) >= self._end.get(
                            p, 0
                        ):
                            self._done_splits.add(p)
                            yield SplitEnded(str(p))
                if opts.bounded and self._bounded_done():
                    self._state = "finished"
                    return
                if ahead_error is not None:
                    (exc, since), ahead_error = ahead_error, None
                    await self._failed(exc, "fetching", since)
                    continue
                if ahead is not None:
                    (data, gen), ahead = ahead, None
                else:
                    since = time.monotonic()
                    try:
                        data = await self._getmany(opts.fetch_max_wait_ms)
                    except (ke.KafkaError, OSError) as exc:
                        await self._failed(exc, "fetching", since)
                        continue
                    if not data:
                        await self._idle()
                        continue
                    self._healthy()
                    gen = self._generation
                fetch = [
                    (tp.partition, msgs)
                    for tp in sorted(data, key=lambda t: t.partition)
                    if (msgs := self._select(tp.partition, data[tp], gen))
                ]
                if not fetch:
                    continue
                # Decoding releases the GIL: it runs in a thread while this loop drains the
                # records aiokafka has already fetched (without waiting for more)
                decoding = asyncio.ensure_future(asyncio.to_thread(self._decode_fetch, fetch))
                try:
                    since = time.monotonic()
                    try:
                        nxt = await self._getmany(0)
                    except (ke.KafkaError, OSError) as exc:
                        ahead_error = (exc, since)
                    else:
                        if nxt:
                            self._healthy()
                            ahead = (nxt, self._generation)
                    decoded = await decoding
                finally:
                    decoding.cancel()
                for (p, msgs), dec in zip(fetch, decoded, strict=True):
                    for item in self._items(p, msgs, dec, gen):
                        yield item
        except SourceError:
            self._state = "failed"
            raise

    async def _getmany(self, timeout_ms: int) -> dict[Any, list[Record]]:
        """One ``getmany()`` (waiting at most ``timeout_ms`` for data), as record tuples."""
        data = await self._consumer.getmany(
            timeout_ms=timeout_ms, max_records=self.options.batch_size
        )
        return data if self._plain else as_plain(data)

    def _bounded_done(self) -> bool:
        if not self._assigned_once:
            return False
        return all(self._next.get(p, 0) >= self._end.get(p, 0) for p in self._owned)

    async def _idle(self) -> None:
        """No data in the last fetch: check the broker still answers, look for new partitions."""
        from aiokafka import TopicPartition

        now = time.monotonic()
        if now - self._last_ok >= PROBE_INTERVAL or self._state == "retrying":
            try:  # each request is bounded (rpc timeout): a frozen broker fails the probe
                if self._owned:
                    tps = [TopicPartition(self._topic, p) for p in sorted(self._owned)]
                    ends = await asyncio.wait_for(
                        self._consumer.end_offsets(tps), timeout=self._rpc_timeout
                    )
                    for tp, off in ends.items():  # a lower bound on some brokers
                        p = tp.partition
                        self._latest_end[p] = max(off, self._latest_end.get(p, 0))
                else:
                    await asyncio.wait_for(self._consumer.topics(), timeout=self._rpc_timeout)
                self._healthy()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                await self._failed(exc, "checking the broker", now)
                return
        interval = self.options.discovery_interval.total_seconds()
        if (
            not self.options.group_id
            and not self.options.bounded
            and interval > 0
            and now - self._last_discovery >= interval
        ):
            self._last_discovery = now
            await self._discover()

    async def _discover(self) -> None:
        try:
            parts = await asyncio.wait_for(self._topic_partitions(), timeout=self._rpc_timeout)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.warning("%s: partition discovery failed: %s", self.name, self._describe(exc))
            return
        new = sorted(parts - self._owned)
        if not new:
            return
        log.info("%s: topic %r has new partitions %s", self.name, self._topic, new)
        self._assign(sorted(self._owned | set(new)))
        self._fresh.update(new)
        try:
            timeout = attempt_timeout(self._rpc_timeout, self._retry.deadline)
            await asyncio.wait_for(self._position(new), timeout=timeout)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # the next discovery tries again
            log.warning("%s: positioning new partitions failed: %s", self.name, self._describe(exc))
            self._fresh.difference_update(new)
            self._assign(sorted(self._owned))
            return
        self._owned.update(new)
        self._announce.extend(new)

    def _assign(self, parts: list[int]) -> None:
        """Assign ``parts``, keeping the positions of the partitions already owned."""
        from aiokafka import TopicPartition

        self._consumer.assign([TopicPartition(self._topic, p) for p in parts])
        for p in self._owned:  # assign() forgets positions: put ours back
            self._consumer.seek(TopicPartition(self._topic, p), self._next[p])

    def _select(self, p: int, msgs: list[Record], gen: int) -> list[Record]:
        """The records of one partition's fetch to decode: none unless the partition is
        still ours, none at or past a bounded end, none before a startup timestamp."""
        if not self._owns(p, gen) or not msgs:
            return []
        if self.options.bounded:
            end = self._end.get(p, 0)
            if offset_of(msgs[-1]) >= end:  # offsets increase: cut at the first one past the end
                msgs = msgs[: bisect.bisect_left(msgs, end, key=offset_of)]
                self._pause(p)
        if p in self._ts_skip:
            target = self._ts_skip[p]
            first = next((i for i, m in enumerate(msgs) if timestamp_of(m) >= target), None)
            if first is None:
                if msgs:
                    self._next[p] = offset_of(msgs[-1]) + 1
                return []
            del self._ts_skip[p]
            msgs = msgs[first:]
        return msgs

    def _decode_fetch(self, fetch: list[tuple[int, list[Record]]]) -> list[Decoded]:
        """Decode each partition's records (in a worker thread: touches no source state).

        The values of every partition in the fetch go through one decoder call, sliced
        back per partition; only a fetch holding a bad record is decoded again partition
        by partition, so each partition's bad records are found and reported on their own."""
        whole = None
        if len(fetch) > 1:
            values = [v for _, msgs in fetch for v in map(value_of, msgs)]
            whole = self._decoder.decode(values)
            if whole.bad or whole.good is not None:
                whole = None
        out = []
        start = 0
        for _, msgs in fetch:
            if whole is not None:
                dec = Decoded(whole.batch.slice(start, len(msgs)))
                start += len(msgs)
            else:
                dec = self._decoder.decode(list(map(value_of, msgs)))
            if self._text_keys:
                dec = dec.without(self._bad_keys(msgs, dec))
            out.append(dec)
        return out

    def _items(
        self, p: int, msgs: list[Record], dec: Decoded, gen: int
    ) -> Iterator[SplitBatch | RejectedRecords]:
        """The items of one partition's decoded records. Runs between the read loop's
        yields, so ownership is checked right before each position change: records fetched
        before a rebalance revoked the partition (even if it was given back) are dropped."""
        if not self._owns(p, gen):
            return
        last = offset_of(msgs[-1]) + 1
        if not dec.bad:
            batch = self._attach(dec.batch, p, msgs, None)
            self._next[p] = last
            self._records += batch.num_rows
            yield SplitBatch(str(p), batch)
            return
        if self.options.bad_records == "fail":
            first_bad, reason = dec.bad[0]
            good = dec.good if dec.good is not None else list(range(len(msgs)))
            k = bisect.bisect_left(good, first_bad)
            if k:
                batch = self._attach(dec.batch.slice(0, k), p, msgs, good[:k])
                self._next[p] = offset_of(msgs[first_bad])
                self._records += batch.num_rows
                yield SplitBatch(str(p), batch)
            else:
                self._next[p] = offset_of(msgs[first_bad])
            raise self._error(
                f"cannot decode the record at topic {self._topic!r} partition {p} offset "
                f"{offset_of(msgs[first_bad])} (ENCODE {(self.spec.encode or 'JSON').upper()}): "
                f"{reason}. Set bad_records = 'skip' or 'dead_letter' to go on past bad records"
            )
        rejected = self._rejected_batch(p, msgs, dec.bad)
        self._rejected += rejected.num_rows
        if dec.batch.num_rows == 0:
            self._next[p] = last
            yield RejectedRecords(rejected)
            return
        yield RejectedRecords(rejected)
        if not self._owns(p, gen):
            return
        batch = self._attach(dec.batch, p, msgs, dec.good)
        self._next[p] = last
        self._records += batch.num_rows
        yield SplitBatch(str(p), batch)

    def _bad_keys(self, msgs: list[Record], dec: Decoded) -> dict[int, str]:
        """Rows of ``dec.batch`` whose message key, read as text, is not UTF-8."""
        rows = range(len(msgs)) if dec.good is None else dec.good
        keys = pa.array([key_of(msgs[i]) for i in rows], pa.binary())
        reason = f"message key is not valid UTF-8 (column {self._text_keys[0]!r})"
        return {j: reason for j in invalid_utf8(keys).tolist()}

    def _owns(self, p: int, gen: int) -> bool:
        return p in self._owned and gen == self._generation

    def _pause(self, p: int) -> None:
        from aiokafka import TopicPartition

        with contextlib.suppress(Exception):
            self._consumer.pause(TopicPartition(self._topic, p))

    def _attach(
        self, batch: pa.RecordBatch, p: int, msgs: list[Record], idx: list[int] | None
    ) -> pa.RecordBatch:
        """Add the requested metadata columns, in the output schema's order."""
        if not self._include:
            return batch
        sel = msgs if idx is None else [msgs[i] for i in idx]
        n = len(sel)
        meta: dict[str, pa.Array] = {}
        for kind, name in self._include:
            if kind == "key":
                arr = pa.array(map(key_of, sel), pa.binary(), size=n)
            elif kind == "partition":
                arr = pa.array(itertools.repeat(p, n), pa.int32(), size=n)
            elif kind == "offset":
                arr = pa.array(map(offset_of, sel), pa.int64(), size=n)
            else:
                ms = pa.array(map(timestamp_of, sel), pa.int64(), size=n)
                arr = ms.cast(pa.timestamp("ms")).cast(pa.timestamp("us"))
            typ = self._schema.field(name).type
            if arr.type != typ:
                try:
                    arr = arr.cast(typ)
                except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
                    raise SchemaError(
                        f"{self.name}: metadata column {name!r} ({kind}) cannot be {typ}: {exc}"
                    ) from None
            meta[name] = arr
        cols = [meta[f.name] if f.name in meta else batch.column(f.name) for f in self._schema]
        return pa.RecordBatch.from_arrays(cols, schema=self._schema)

    def _rejected_batch(
        self, p: int, msgs: list[Record], bad: list[tuple[int, str]]
    ) -> pa.RecordBatch:
        offsets = [offset_of(msgs[i]) for i, _ in bad]
        return pa.RecordBatch.from_arrays(
            [
                pa.array([value_of(msgs[i]) for i, _ in bad], pa.binary()),
                pa.array([r for _, r in bad], pa.string()),
                pa.array([f"{self._topic}/{p}/{o}" for o in offsets], pa.string()),
                pa.array([self._topic] * len(bad), pa.string()),
                pa.array([p] * len(bad), pa.int32()),
                pa.array(offsets, pa.int64()),
            ],
            schema=REJECTED_SCHEMA,
        )

    # -- checkpoints -----------------------------------------------------------------------

    def position(self) -> dict[str, Any]:
        offsets = dict(self._restored)  # restored, not yet assigned: keep them
        offsets.update(self._next)
        return {"offsets": {str(p): int(o) for p, o in sorted(offsets.items())}}

    async def commit(self, position: dict[str, Any]) -> None:
        """Commit ``position``'s offsets to the group for partitions still owned."""
        if not self._group_id or self._consumer is None:
            return
        from aiokafka import TopicPartition

        offsets = {}
        for p_text, off in (position.get("offsets") or {}).items():
            p, off = int(p_text), int(off)
            if p in self._owned and off >= self._acquired.get(p, 0):
                offsets[TopicPartition(self._topic, p)] = off
        if not offsets:
            return
        try:
            await asyncio.wait_for(self._consumer.commit(offsets), timeout=self._rpc_timeout)
            self._last_commit_error = None
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            self._last_commit_error = self._describe(exc)
            log.warning("%s: offset commit failed: %s", self.name, self._last_commit_error)

    def metrics(self) -> dict[str, Any]:
        """``state``: created, connecting, running, retrying (broker unreachable; see
        ``last_error``), finished (bounded end), failed or closed; per owned partition its
        ``position`` (next offset), ``end_offset`` (latest high watermark seen) and ``lag``;
        ``records`` and ``rejected`` counts; ``last_commit_error``; ``group_id`` (the group
        offsets are committed to, None outside a query)."""
        from aiokafka import TopicPartition

        parts: dict[str, dict[str, Any]] = {}
        for p in sorted(self._owned):
            pos = self._next.get(p)
            end = self._latest_end.get(p)
            if self._consumer is not None:
                with contextlib.suppress(Exception):
                    hw = self._consumer.highwater(TopicPartition(self._topic, p))
                    if hw is not None:
                        end = max(hw, end or 0)
            lag = None if pos is None or end is None else max(0, end - pos)
            parts[str(p)] = {"position": pos, "end_offset": end, "lag": lag}
        return {
            "state": self._state,
            "last_error": self._last_error,
            "last_commit_error": self._last_commit_error,
            "topic": self._topic,
            "group_id": self._group_id,
            "records": self._records,
            "rejected": self._rejected,
            "partitions": parts,
        }


def _make_listener(src: KafkaSource) -> Any:
    from aiokafka import ConsumerRebalanceListener

    class _Listener(ConsumerRebalanceListener):  # type: ignore[misc]
        async def on_partitions_revoked(self, revoked: Any) -> None:
            src._on_revoked([tp.partition for tp in revoked if tp.topic == src._topic])

        async def on_partitions_assigned(self, assigned: Any) -> None:
            await src._on_assigned([tp.partition for tp in assigned if tp.topic == src._topic])

    return _Listener()
