"""Runs a job graph on one asyncio loop: sources → operators → sinks.

Each source has a pump task. A pump takes one item from its source and carries it all
the way through (event-time cut, operators, sink writes, watermark propagation) as one
*step* under the step lock, so a checkpoint — which takes the same lock — always sees a
consistent cut. Backpressure is natural: a pump does not read its next item until the
sinks accepted the output of the previous one.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import Awaitable, Callable
from typing import Any

import numpy as np
import pyarrow as pa

from datum_sql.connectors.base import (
    RejectedRecords,
    Sink,
    Source,
    SplitBatch,
    SplitEnded,
)
from datum_sql.engine.eventtime import event_micros, from_ordinals
from datum_sql.engine.jobgraph import REJECTED_SCHEMA, JobGraph, Node
from datum_sql.engine.operators import Operator, operator_class
from datum_sql.engine.runtime.checkpoint import CheckpointStore, Manifest, Recovered
from datum_sql.engine.runtime.faults import crash_point
from datum_sql.engine.runtime.metrics import (
    OperatorMetrics,
    QueryMetrics,
    SinkMetrics,
    SourceMetrics,
)
from datum_sql.engine.runtime.recovery import resume_point
from datum_sql.engine.runtime.watermark import SourceClock
from datum_sql.errors import CheckpointError, DatumError, PlanError, QueryFailed
from datum_sql.types import END_OF_TIME, START_OF_TIME, Watermark

log = logging.getLogger("datum_sql.runtime")

LATE_COLUMNS = ("_late_reason", "_late_watermark", "_late_source")
#: The ``_late_reason`` of a row that a resumed run read from a source whose input had
#: ended in the run resumed from (see :meth:`Executor._restore`).
AFTER_END = "after the end of the input of the run resumed from"


class Executor:
    def __init__(
        self,
        graph: JobGraph,
        sources: dict[str, Source],
        sinks: dict[str, Sink],
        *,
        commit_interval_s: float | None = 10.0,
        store: CheckpointStore | None = None,
        recovered: Recovered | None = None,
        description: dict[str, Any] | None = None,
        end_input: bool = True,
        restore_positions: bool = True,
    ) -> None:
        self.graph = graph
        #: False: sources that end only pause the query (a chunk of a replay): event time
        #: does not end, nothing is flushed, and the state goes on in the next chunk's run.
        self.end_input = end_input
        #: False: a restored checkpoint gives state, clocks and watermarks but the sources
        #: open at their start (a replay chunk reads its own range of them).
        self.restore_positions = restore_positions
        self.sources = sources
        self.sinks = sinks
        self.commit_interval_s = commit_interval_s
        self.store = store
        self.recovered = recovered
        self.fingerprint = graph.fingerprint()
        self.metrics = QueryMetrics()
        self.ops: dict[str, Operator] = {}
        self.clocks: dict[str, SourceClock] = {}
        self._down = {n.id: graph.downstream(n.id) for n in graph.nodes}
        self._in_wm: dict[str, list[int]] = {}
        self._out_wm: dict[str, int] = {}
        self._side: dict[tuple[str, str], str] = {}
        self._lock: asyncio.Lock | None = None
        self._stopping = False
        self._pumps: list[asyncio.Task[None]] = []
        #: Each source's position after the last item the runtime *finished* processing:
        #: a checkpoint must never cover an item a pump fetched but has not yet processed.
        self._positions: dict[str, dict[str, Any]] = {}
        self._next_commit = 1
        self._last_commit = time.monotonic()
        #: Set once the checkpoint resumed from is restored (or there is none, or the run
        #: ended): from then on state and results read from another thread are complete.
        self.restored = threading.Event()
        lateness = int(graph.settings.get("allowed_lateness_us") or 0)
        #: Per source: the columns the query reads (a source may yield more of them).
        self._source_columns: dict[str, list[str]] = {}
        for node in graph.nodes:
            self._in_wm[node.id] = [START_OF_TIME] * len(node.inputs)
            self._out_wm[node.id] = START_OF_TIME
            if node.role == "source":
                event_time = node.config.get("event_time")
                schema = node.schema
                known = event_time and schema is not None and event_time in schema.names
                if schema is not None:
                    self._source_columns[node.id] = schema.names
                self.clocks[node.id] = SourceClock(
                    event_time,
                    node.config.get("watermark_delay_us"),
                    allowed_lateness_us=lateness,
                    idle_timeout_s=node.config.get("idle_timeout_s"),
                    column_type=schema.field(event_time).type if known else None,  # type: ignore[union-attr, arg-type]
                )
                self.metrics.sources[node.id] = SourceMetrics(
                    node.kind, unit=self.clocks[node.id].unit
                )
            elif node.role == "operator":
                self.ops[node.id] = self._build_operator(node)
                self.metrics.operators[node.id] = OperatorMetrics(node.kind)
            else:
                side = node.config.get("side")
                self.metrics.sinks[node.id] = SinkMetrics(node.kind, side=bool(side))
                if side:
                    self._side[(node.config["of"], side)] = node.id
        #: Nodes feeding a port that is read again on every (re)start: nothing of theirs
        #: is restored, and their sources' positions are never committed.
        self._reread = self._reread_nodes()
        #: What the query is (name, SQL, tables), recorded in every manifest; the sources
        #: read again on every restart are marked, their positions being only informative.
        self.description = {
            **(description or {}),
            "reread": sorted(sid for sid in sources if sid in self._reread),
        }
        #: Sources whose input ended in the run resumed from, feeding an operator that
        #: closed everything at that end: each row they read now is late (see _restore).
        self._after_end: set[str] = set()

    def _reread_nodes(self) -> set[str]:
        todo = [
            self.graph.node(oid).inputs[port]
            for oid, op in self.ops.items()
            for port in op.REREAD_PORTS
        ]
        seen: set[str] = set()
        while todo:
            nid = todo.pop()
            if nid not in seen:
                seen.add(nid)
                todo.extend(self.graph.node(nid).inputs)
        # A re-read node that also fed a restored path would replay that path's rows after a
        # restart (or, restored, leave the re-read side short): every reader of one must be
        # re-read too. Lowering gives re-read sides their own source nodes.
        for nid in seen:
            for down, port in self._down[nid]:
                op = self.ops.get(down.id)
                if down.id not in seen and not (op is not None and port in op.REREAD_PORTS):
                    node = self.graph.node(nid)
                    raise PlanError(
                        f"{node.id} ({node.kind}) feeds both a side read again on every restart "
                        f"and {down.id} ({down.kind}), whose state and position are restored"
                    )
        return seen

    def _build_operator(self, node: Node) -> Operator:
        cls = operator_class(node.kind)
        inputs = [self.graph.node(i).schema for i in node.inputs]
        return cls(node.id, {**node.config, "schema": node.schema}, inputs)  # type: ignore[arg-type]

    # -- lifecycle --------------------------------------------------------------------
    async def run(self) -> None:
        """Run until every source ends or :meth:`stop` is called; commit at the end."""
        self._lock = asyncio.Lock()
        positions: dict[str, dict[str, Any]] = {}
        opened_sinks: list[Sink] = []
        opened_sources: list[Source] = []
        ticker: asyncio.Task[None] | None = None
        try:
            for sid, sink in self.sinks.items():
                await self._guard(sink.open(self.graph.node(sid).schema), f"sink {sink.name}")  # type: ignore[arg-type]
                opened_sinks.append(sink)
            if self.recovered is not None:
                # Staged sink output is verified before anything is restored or published.
                assert self.store is not None
                self.recovered = await resume_point(self.store, self.recovered, self.sinks)
                positions = self._restore()
                if not self.restore_positions:
                    positions = {}
            self.restored.set()
            for sid, sink in self.sinks.items():
                if self.recovered is not None:
                    # Recovery step: repeat the commit of the checkpoint we resume from.
                    staged = self.recovered.manifest.staged.get(sid)
                    if staged is not None:
                        cid = self.recovered.manifest.checkpoint_id
                        await self._guard(sink.commit(cid, staged), f"sink {sink.name} recovery")
                if self.store is not None:
                    await self._guard(sink.discard_uncommitted(set()), f"sink {sink.name} recovery")
            for sid, source in self.sources.items():
                await self._guard(source.open(positions.get(sid)), f"source {source.name}")
                opened_sources.append(source)
                self._positions[sid] = source.position()
            self._sample()
            if not self._stopping:  # stop() may come while sources and sinks open
                self._pumps = [
                    asyncio.create_task(self._pump(sid), name=sid) for sid in self.sources
                ]
            ticker = asyncio.create_task(self._tick())
            await self._wait_pumps(ticker)
            if not self._stopping and self.end_input:
                async with self._lock:
                    await self._finish_operators()
            await self.commit()
        except BaseException:
            for sink in opened_sinks:
                with contextlib.suppress(Exception):
                    await sink.abort()
            raise
        finally:
            self.restored.set()
            if ticker is not None:
                ticker.cancel()
                with contextlib.suppress(BaseException):
                    await ticker
            for task in self._pumps:
                task.cancel()
            for source in opened_sources:
                with contextlib.suppress(Exception):
                    await source.close()
            for sink in opened_sinks:
                with contextlib.suppress(Exception):
                    await sink.close()
            self._sample()

    async def _wait_pumps(self, ticker: asyncio.Task[None]) -> None:
        """Until every pump ended. The first failure of a pump, or of the ticker (a periodic
        checkpoint that could not be taken), cancels the others and fails the run."""
        pending = {*self._pumps, ticker}
        while pending - {ticker}:
            done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
            for task in done:
                if not task.cancelled() and task.exception() is not None:
                    for other in pending:
                        other.cancel()
                    await asyncio.gather(*pending, return_exceptions=True)
                    raise task.exception()  # type: ignore[misc]

    async def stop(self) -> None:
        """Stop reading at a step boundary; what was processed is committed by :meth:`run`.

        The step in progress must be able to end: a sink waiting on its consumer (the
        result buffer of a SELECT) is released by the query handle before this is called."""
        self._stopping = True
        if self._lock is None:  # run() has not started: it starts no pump
            return
        async with self._lock:
            for task in self._pumps:
                task.cancel()

    async def _guard(self, aw: Awaitable[Any], where: str) -> Any:
        try:
            return await aw
        except DatumError:
            raise
        except Exception as exc:
            raise QueryFailed(f"{where} failed: {exc}") from exc

    # -- the data path ----------------------------------------------------------------
    async def _pump(self, sid: str) -> None:
        source = self.sources[sid]
        clock = self.clocks[sid]
        m = self.metrics.sources[sid]
        assert self._lock is not None
        reader = source.read().__aiter__()
        while True:
            try:
                item = await reader.__anext__()
            except StopAsyncIteration:
                break
            except DatumError:
                raise
            except Exception as exc:
                raise QueryFailed(f"source {source.name!r} failed: {exc}") from exc
            async with self._lock:
                if isinstance(item, SplitBatch):
                    await self._source_batch(sid, item.batch, item.split)
                elif isinstance(item, pa.RecordBatch):
                    await self._source_batch(sid, item, "")
                elif isinstance(item, Watermark):
                    await self._advance_source(sid, clock.provided(clock.marker(item)))
                elif isinstance(item, RejectedRecords):
                    await self._rejected(sid, item.batch)
                elif isinstance(item, SplitEnded):
                    clock.end_split(item.split)
                    await self._advance_source(sid, clock.advance())
                else:
                    raise QueryFailed(f"source {source.name!r} yielded {type(item).__name__}")
                self._positions[sid] = source.position()
            # Let the other sources take a step: in-memory sources never wait on I/O, and
            # without this one table would be read to its end before the next starts.
            await asyncio.sleep(0)
        async with self._lock:
            self._positions[sid] = source.position()
            m.finished = True
            if self.end_input:
                await self._advance_source(sid, clock.end())

    async def _source_batch(self, sid: str, batch: pa.RecordBatch, split: str) -> None:
        columns = self._source_columns.get(sid)
        if columns is not None and batch.num_columns > len(columns):
            batch = batch.select(columns)
        clock = self.clocks[sid]
        m = self.metrics.sources[sid]
        m.rows += batch.num_rows
        m.batches += 1
        if sid in self._after_end and batch.num_rows:
            await self._after_input_end(sid, batch)
            return
        cut = clock.split_batch(batch, split)
        if clock.event_time is not None:
            m.max_event_time = max(m.max_event_time, max(s.max_time for s in clock.splits.values()))
        if cut.late is not None:
            await self._late(sid, cut.late, cut.late_watermarks)  # type: ignore[arg-type]
        if cut.on_time.num_rows:
            await self._emit(sid, [cut.on_time])
        await self._advance_source(sid, clock.advance())

    async def _after_input_end(self, sid: str, batch: pa.RecordBatch) -> None:
        """Rows of a source whose input ended in the run resumed from: that end closed every
        window (and join) they could belong to, so they are late, routed, never merged
        into results already final."""
        clock = self.clocks[sid]
        if clock.event_time is None:
            raise QueryFailed(
                f"source {self.graph.node(sid).kind!r} has rows the run resumed from did not "
                "read, but that run read its input to the end and closed every window and "
                "join this query holds; rows after that end cannot be added. Start over with "
                "fresh=True (CLI: --fresh), or run the query continuously (a source with "
                "scan.mode = 'continuous' for files) so its input never ends"
            )
        seen = max((s.max_time for s in clock.splits.values()), default=START_OF_TIME)
        marks = np.full(batch.num_rows, seen, dtype=np.int64)
        await self._late(sid, batch, marks, why=AFTER_END)

    async def _late(
        self, sid: str, late: pa.RecordBatch, marks: np.ndarray, *, why: str = "late"
    ) -> None:
        self.metrics.sources[sid].late_rows += late.num_rows
        target = self._side.get((sid, "late"))
        if target is None:
            return
        event_time = self.clocks[sid].event_time
        _, valid = event_micros(late.column(event_time))  # type: ignore[arg-type]
        reason = (
            np.full(late.num_rows, why)
            if valid is None
            else np.where(valid, why, "null event time")
        )
        wm_type = late.schema.field(event_time).type  # type: ignore[arg-type]
        extra = {
            "_late_reason": pa.array(reason, pa.string()),
            "_late_watermark": from_ordinals(np.where(marks == START_OF_TIME, 0, marks), wm_type),
            "_late_source": pa.array([self.graph.node(sid).kind] * late.num_rows, pa.string()),
        }
        out = late
        for name, arr in extra.items():
            out = out.append_column(name, arr)
        await self._write(target, out)

    async def _rejected(self, sid: str, batch: pa.RecordBatch) -> None:
        self.metrics.sources[sid].rejected_rows += batch.num_rows
        target = self._side.get((sid, "dead_letter"))
        if target is not None:
            source = pa.array([self.graph.node(sid).kind] * batch.num_rows, pa.string())
            columns = [batch.column(n) for n in REJECTED_SCHEMA.names[:3]] + [source]
            await self._write(target, pa.RecordBatch.from_arrays(columns, schema=REJECTED_SCHEMA))

    async def _emit(self, node_id: str, batches: list[pa.RecordBatch]) -> None:
        for down, port in self._down[node_id]:
            if down.config.get("side"):
                continue
            for batch in batches:
                if down.role == "sink":
                    await self._write(down.id, batch)
                    continue
                op = self.ops[down.id]
                om = self.metrics.operators[down.id]
                om.rows_in += batch.num_rows
                out = self._call(op, op.on_batch, batch, port)
                if out:
                    om.rows_out += sum(b.num_rows for b in out)
                    await self._emit(down.id, out)

    def _call(
        self, op: Operator, fn: Callable[..., list[pa.RecordBatch]], *args: Any
    ) -> list[pa.RecordBatch]:
        try:
            return fn(*args)
        except DatumError:
            raise
        except Exception as exc:
            raise QueryFailed(
                f"operator failed: {type(exc).__name__}: {exc}", operator=op.name
            ) from exc

    async def _write(self, sink_id: str, batch: pa.RecordBatch) -> None:
        if batch.num_rows == 0:
            return
        sink = self.sinks[sink_id]
        sm = self.metrics.sinks[sink_id]
        try:
            await sink.write(batch)
        except DatumError:
            raise
        except Exception as exc:
            raise QueryFailed(
                f"sink {sink.name!r} failed: {exc}", operator=f"sink {sink.name}"
            ) from exc
        sm.rows += batch.num_rows
        sm.batches += 1

    async def _advance_source(self, sid: str, watermark: int) -> None:
        m = self.metrics.sources[sid]
        m.watermark = watermark
        if watermark > self._out_wm[sid]:
            self._out_wm[sid] = watermark
            await self._propagate(sid, watermark)

    async def _propagate(self, node_id: str, watermark: int) -> None:
        for down, port in self._down[node_id]:
            if down.role != "operator":
                continue
            marks = self._in_wm[down.id]
            if watermark <= marks[port]:
                continue
            marks[port] = watermark
            op = self.ops[down.id]
            out = self._call(op, op.on_watermark, watermark, port)
            if out:
                self.metrics.operators[down.id].rows_out += sum(b.num_rows for b in out)
                await self._emit(down.id, out)
            combined = op.output_watermark(min(marks))
            self.metrics.operators[down.id].watermark = combined
            if combined > self._out_wm[down.id]:
                self._out_wm[down.id] = combined
                await self._propagate(down.id, combined)

    async def _finish_operators(self) -> None:
        for node in self.graph.nodes:
            if node.role == "operator":
                op = self.ops[node.id]
                out = self._call(op, op.on_close)
                if out:
                    self.metrics.operators[node.id].rows_out += sum(b.num_rows for b in out)
                    await self._emit(node.id, out)

    # -- periodic work ----------------------------------------------------------------
    async def _tick(self) -> None:
        assert self._lock is not None
        while True:
            await asyncio.sleep(0.2)
            async with self._lock:
                for sid, clock in self.clocks.items():
                    if clock.idle_timeout_s is not None and not clock.ended:
                        self.metrics.sources[sid].idle_splits = clock.idle_splits()
                        await self._advance_source(sid, clock.advance())
                await self._align_idle_sources()
            self._sample()
            due = self.commit_interval_s is not None and (
                time.monotonic() - self._last_commit >= self.commit_interval_s
            )
            if due and not self._stopping:
                await self.commit()

    async def _align_idle_sources(self) -> None:
        """A source quiet for its whole ``idle_timeout`` stops holding back the operators it
        feeds: its watermark catches up with the most advanced other source that is not
        quiet, or, when every one is, with the most advanced of them (its rows that arrive
        later than that are late). Without the second rule, sources that all fell quiet
        between two ticks would hold each other back for good."""
        now = time.monotonic()
        for sid, clock in self.clocks.items():
            if not clock.fully_idle(now):
                continue
            # only sources whose watermarks share a unit (a sequence number is no time)
            others = [c for c in self.clocks.values() if c is not clock and c.unit == clock.unit]
            active = [c.watermark for c in others if not c.fully_idle(now)]
            lead = max(active or [c.watermark for c in others], default=START_OF_TIME)
            if lead > clock.watermark and lead != START_OF_TIME:
                await self._advance_source(sid, clock.provided(lead))

    def _sample(self) -> None:
        for oid, op in self.ops.items():
            rows, size = op.state_size()
            om = self.metrics.operators[oid]
            om.state_rows, om.state_bytes = rows, size
            om.detail = op.describe()
        for sid, source in self.sources.items():
            self.metrics.sources[sid].connector = source.metrics()
        for kid, sink in self.sinks.items():
            self.metrics.sinks[kid].connector = sink.metrics()
        self.metrics.sample()

    async def commit(self) -> int:
        """Checkpoint (with a store) or just commit sinks; the steps are numbered in
        ``checkpoint.py``. Returns the checkpoint id."""
        assert self._lock is not None
        async with self._lock:  # 1. barrier
            started = time.monotonic()
            cid = self._next_commit
            self._next_commit += 1
            # 2. snapshot
            positions = {sid: self._positions.get(sid, {}) for sid in self.sources}
            states: dict[str, bytes] = {}
            if self.store is not None:
                for oid, op in self.ops.items():
                    if oid in self._reread:
                        continue
                    data = self._call_snapshot(op)
                    if data is not None:
                        states[oid] = data
                for kid, sink in self.sinks.items():
                    data = self._call_snapshot(sink)
                    if data is not None:
                        states[kid] = data
            # 3. pre-commit sinks
            staged: dict[str, Any] = {}
            for kid, sink in self.sinks.items():
                staged[kid] = await self._guard(
                    sink.pre_commit(cid), f"sink {sink.name} pre-commit"
                )
            # 4. publish
            crash_point("before_manifest")
            size = 0
            if self.store is not None:
                manifest = Manifest(
                    checkpoint_id=cid,
                    fingerprint=self.fingerprint,
                    created_at=time.time(),
                    positions=positions,
                    clocks={sid: c.snapshot() for sid, c in self.clocks.items()},
                    watermarks={"in": self._in_wm, "out": self._out_wm},
                    staged=staged,
                    duration_s=round(time.monotonic() - started, 6),
                    query=self.description,
                )
                size = await asyncio.to_thread(self.store.write, manifest, states)
            # 5. commit sinks
            crash_point("after_manifest")
            for kid, sink in self.sinks.items():
                await self._guard(sink.commit(cid, staged[kid]), f"sink {sink.name} commit")
                self.metrics.sinks[kid].commits += 1
                crash_point("mid_sink_commit")
            # 6. commit source positions
            for sid, source in self.sources.items():
                if sid not in self._reread:
                    await self._guard(source.commit(positions[sid]), f"source {source.name} commit")
            # 7. retention
            if self.store is not None:
                await asyncio.to_thread(self.store.prune)
                self.metrics.last_checkpoint = {
                    "id": cid,
                    "time": time.strftime("%Y-%m-%d %H:%M:%S", time.localtime()),
                    "duration_s": round(time.monotonic() - started, 4),
                    "size_bytes": size,
                }
            self._last_commit = time.monotonic()
            return cid

    def _call_snapshot(self, holder: Operator | Sink) -> bytes | None:
        try:
            return holder.snapshot()
        except DatumError:
            raise
        except Exception as exc:
            what = "sink" if isinstance(holder, Sink) else "operator"
            raise CheckpointError(
                f"{what} {holder.name} could not snapshot its state: {exc}"
            ) from exc

    def _restore(self) -> dict[str, dict[str, Any]]:
        """Load operator state, clocks and watermarks of the checkpoint we resume from."""
        assert self.recovered is not None
        m = self.recovered.manifest
        for oid, data in self.recovered.states.items():
            holder = self.ops.get(oid) or self.sinks.get(oid)
            if holder is None:
                raise CheckpointError(
                    f"checkpoint {m.checkpoint_id} has state for {oid}, which this plan lacks"
                )
            holder.restore(data)
        for sid, doc in m.clocks.items():
            if sid in self.clocks and sid not in self._reread:
                self.clocks[sid].restore(doc)
                self.metrics.sources[sid].watermark = self.clocks[sid].watermark
                # Its input ended: what it reads now (rows added since) comes after every
                # window and join downstream was closed by that end.
                if self.clocks[sid].watermark >= END_OF_TIME and self._closes_downstream(sid):
                    self._after_end.add(sid)
        for nid, marks in m.watermarks.get("in", {}).items():
            fits = nid in self._in_wm and len(marks) == len(self._in_wm[nid])
            if fits and nid not in self._reread:
                self._in_wm[nid] = [int(x) for x in marks]
        for oid, op in self.ops.items():
            for port in op.REREAD_PORTS:  # that input starts over: it has not ended yet
                self._in_wm[oid][port] = START_OF_TIME
        for nid, mark in m.watermarks.get("out", {}).items():
            if nid in self._out_wm and nid not in self._reread:
                self._out_wm[nid] = int(mark)
        self._next_commit = m.checkpoint_id + 1
        self.metrics.recovered_from = {
            "checkpoint": m.checkpoint_id,
            "skipped": list(self.recovered.skipped),
        }
        return {sid: p for sid, p in m.positions.items() if sid not in self._reread}

    def _closes_downstream(self, node_id: str) -> bool:
        """Whether an operator downstream of ``node_id`` closes results on the watermark."""
        todo, seen = [node_id], set()
        while todo:
            for down, _ in self._down[todo.pop()]:
                if down.id in seen:
                    continue
                seen.add(down.id)
                op = self.ops.get(down.id)
                if op is not None and op.closes_on_watermark:
                    return True
                todo.append(down.id)
        return False

    @property
    def watermarks(self) -> dict[str, int]:
        return dict(self._out_wm)
