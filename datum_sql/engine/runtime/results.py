"""Results of a streaming SELECT, handed from the runtime thread to the caller.

The collect sink appends batches to a :class:`ResultBuffer`. A caller iterating the query
reads them in order; while it lags more than ``max_pending`` rows behind, the sink waits,
which stops the sources (backpressure). Without an iterating caller a bounded query keeps
every batch (for ``to_arrow()``); an unbounded one keeps only the newest rows (for display).
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pyarrow as pa

from datum_sql.connectors.base import ConnectorSpec, Sink
from datum_sql.engine.changelog import apply_changelog

OP_COLUMN = "_op"
#: Changelog batches kept before they are folded into the state table.
FOLD_EVERY = 64


class ResultBuffer:
    def __init__(self, schema: pa.Schema, *, bounded: bool, max_pending: int = 1_000_000,
                 display_rows: int = 10_000) -> None:  # fmt: skip
        self.schema = schema
        self.bounded = bounded
        self.max_pending = max_pending
        self.display_rows = display_rows
        self.updating = OP_COLUMN in schema.names
        self._batches: list[pa.RecordBatch] = []
        self._first = 0  # index of _batches[0] in the whole stream
        self._read = 0  # next index the iterator reads
        self._pending_rows = 0
        self._iterating = False
        self._closed = False
        self._cond = threading.Condition()
        self._space: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._state: pa.Table | None = None  # the applied changelog, for updating queries

    # -- runtime side ---------------------------------------------------------------------
    async def put(self, batch: pa.RecordBatch) -> None:
        if self._space is None:
            self._loop = asyncio.get_running_loop()
            self._space = asyncio.Event()
        while True:
            with self._cond:
                if not self._iterating or self._pending_rows < self.max_pending or self._closed:
                    self._append(batch)
                    self._cond.notify_all()
                    return
                self._space.clear()
            await self._space.wait()

    def _append(self, batch: pa.RecordBatch) -> None:
        self._batches.append(batch)
        if self._iterating:
            self._pending_rows += batch.num_rows
            return
        if self.updating:
            if len(self._batches) >= FOLD_EVERY:
                self._fold()
        elif not self.bounded:
            self._trim()

    def _fold(self) -> None:
        """Apply the kept changelog batches to the folded state (bounded work per batch)."""
        self._state = apply_changelog(self._state, pa.Table.from_batches(self._batches))
        self._first += len(self._batches)
        self._batches = []

    def _trim(self) -> None:
        rows = sum(b.num_rows for b in self._batches)
        while self._batches and rows - self._batches[0].num_rows >= self.display_rows:
            rows -= self._batches[0].num_rows
            self._batches.pop(0)
            self._first += 1

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        self._wake()

    def _wake(self) -> None:
        if self._loop is not None and self._space is not None and not self._loop.is_closed():
            self._loop.call_soon_threadsafe(self._space.set)

    # -- caller side ----------------------------------------------------------------------
    def next_batch(self, timeout: float | None = None) -> pa.RecordBatch | None:
        """The next unread batch; None when closed and drained. Raises TimeoutError."""
        with self._cond:
            if not self._iterating:
                self._iterating = True
                self._read = self._first
                self._pending_rows = sum(b.num_rows for b in self._batches)
            ok = self._cond.wait_for(
                lambda: self._read - self._first < len(self._batches) or self._closed, timeout
            )
            if not ok:
                raise TimeoutError
            idx = self._read - self._first
            if idx >= len(self._batches):
                return None
            batch = self._batches[idx]
            self._read += 1
            self._pending_rows -= batch.num_rows
            if not self.bounded:
                self._batches.pop(0)
                self._first += 1
        self._wake()
        return batch

    def table(self) -> pa.Table:
        """Every row kept, as a table; a changelog is applied (its current state)."""
        with self._cond:
            batches = list(self._batches)
            state = self._state
        if not self.updating:
            return pa.Table.from_batches(batches, schema=self.schema)
        if batches:
            state = apply_changelog(state, pa.Table.from_batches(batches))
        if state is None:
            return self.schema.remove(self.schema.get_field_index(OP_COLUMN)).empty_table()
        return state

    def latest(self, n: int) -> pa.Table:
        """The newest ``n`` rows (append) or the current state (changelog), for display."""
        table = self.table()
        return table.slice(max(table.num_rows - n, 0))


class CollectSink(Sink):
    """The sink of a streaming SELECT: batches go to a :class:`ResultBuffer`."""

    ACCEPTS_CHANGELOG = True

    def __init__(self, buffer: ResultBuffer) -> None:
        super().__init__(ConnectorSpec(name="(select)", options={}))
        self.buffer = buffer

    async def write(self, batch: pa.RecordBatch) -> None:
        await self.buffer.put(batch)

    def metrics(self) -> dict[str, Any]:
        return {}


__all__ = ["CollectSink", "ResultBuffer"]
