"""Results of a streaming SELECT, handed from the runtime thread to the caller.

The collect sink puts batches into a :class:`ResultBuffer`, which keeps two separate things:

- **the result** (``table()``, behind ``to_arrow()`` and ``latest_state()``). An updating
  query (a changelog) applies every batch to its current state, which stays complete: by
  the upsert key the plan carries (one row per key, kept as the changelog flows, so
  reading it is a gather and its memory follows the keys, not the input), or, for a
  changelog without a known key, as a multiset folded every few batches. An
  append-only query keeps every row, except an *unbounded* one past ``max_pending`` rows:
  it then waits for a reader (backpressure), unless it is being displayed: then it keeps
  only the newest rows, counts the ones it dropped, and ``table()`` raises instead of
  returning a truncated table. ``latest(n)`` (display) is
  always answered from what is kept, bounded either way.
- **what an iterating caller has not read yet**. While it lags ``max_pending`` rows behind,
  ``put`` waits, which holds back the sources (backpressure); :meth:`ResultBuffer.release`
  (the query is stopping) ends that wait so the runtime can reach its next step boundary.
  A caller that starts iterating after the first batches came gets every batch from the
  first: an append-only query replays its result (refused when rows were dropped); an
  updating query keeps its changelog for that, up to ``max_pending`` rows, and past them
  replays its current state as ``+I`` rows instead (the same state once applied).
"""

from __future__ import annotations

import asyncio
import threading
from collections import deque
from typing import Any

import pyarrow as pa

from datum_sql.connectors.base import ConnectorSpec, Sink
from datum_sql.engine.changelog import INSERT, OP_COLUMN, UpsertState, apply_changelog
from datum_sql.engine.state.codec import decode_state, encode_state
from datum_sql.errors import DatumError

#: Changelog batches kept before they are folded into the state table.
FOLD_EVERY = 64


class AppendResult:
    """The rows of an append-only result: all of them, or (past ``limit``, when there is
    one) the newest ``window`` rows and a count of the rows dropped."""

    def __init__(self, schema: pa.Schema, *, limit: int | None, window: int) -> None:
        self.schema = schema
        self.limit = limit
        self.window = window if limit is None else min(window, limit)
        self.batches: deque[pa.RecordBatch] = deque()
        self.rows = 0
        self.dropped_rows = 0

    def add(self, batch: pa.RecordBatch) -> None:
        self.batches.append(batch)
        self.rows += batch.num_rows
        if self.limit is None or (not self.dropped_rows and self.rows <= self.limit):
            return
        while len(self.batches) > 1 and self.rows - self.batches[0].num_rows >= self.window:
            old = self.batches.popleft()
            self.rows -= old.num_rows
            self.dropped_rows += old.num_rows

    def table(self) -> pa.Table:
        return pa.Table.from_batches(list(self.batches), schema=self.schema)

    def latest(self, n: int) -> pa.Table:
        newest: list[pa.RecordBatch] = []
        rows = 0
        for batch in reversed(self.batches):
            if rows >= n:
                break
            newest.append(batch)
            rows += batch.num_rows
        table = pa.Table.from_batches(newest[::-1], schema=self.schema)
        return table.slice(max(table.num_rows - n, 0))

    def replay(self) -> list[pa.RecordBatch]:
        """Every kept batch, for a caller that starts iterating now."""
        return list(self.batches)


class ChangelogResult:
    """The current state of an updating result: every changelog batch applied, by
    ``key`` when the plan knows the changelog's upsert key, else as a multiset.

    ``key_column``: the batches also carry the producer's number of each row's key (see
    :class:`~datum_sql.engine.changelog.UpsertState`); ``schema`` is without it."""

    def __init__(self, schema: pa.Schema, key: tuple[str, ...] | None = None,
                 name: str = "query", key_column: str | None = None) -> None:  # fmt: skip
        self.schema = schema
        self.state_schema = schema.remove(schema.get_field_index(OP_COLUMN))
        self.dropped_rows = 0  # a state is never truncated
        self.key_column = key_column
        self._upsert = None
        if key is not None:
            self._upsert = UpsertState(self.state_schema, key, name, id_column=key_column)
        self._state: pa.Table | None = None
        self._changes: list[pa.RecordBatch] = []

    def add(self, batch: pa.RecordBatch) -> None:
        if self._upsert is not None:
            self._upsert.apply(batch)
            return
        self._changes.append(batch)
        if len(self._changes) >= FOLD_EVERY:
            self._fold()

    def _fold(self) -> None:
        """Apply the kept changelog batches to the folded state (bounded work per batch)."""
        if self._changes:
            self._state = apply_changelog(self._state, pa.Table.from_batches(self._changes))
            self._changes = []

    def table(self) -> pa.Table:
        if self._upsert is not None:
            return self._upsert.table()
        self._fold()  # work the next batches would cause anyway, done now
        return self.state_schema.empty_table() if self._state is None else self._state

    def latest(self, n: int) -> pa.Table:
        if self._upsert is not None:
            return self._upsert.latest(n)
        table = self.table()
        return table.slice(max(table.num_rows - n, 0))

    def replay(self) -> list[pa.RecordBatch]:
        """The current state as ``+I`` rows, for a caller that starts iterating now."""
        state = self.table()
        if state.num_rows == 0:
            return []
        ops = pa.repeat(pa.scalar(INSERT, self.schema.field(OP_COLUMN).type), state.num_rows)
        table = state.add_column(self.schema.get_field_index(OP_COLUMN), OP_COLUMN, ops)
        return table.select(self.schema.names).cast(self.schema).to_batches()

    def checkpoint_table(self) -> pa.Table:
        """What :meth:`ResultBuffer.restore` starts from: the state, with the key numbers."""
        if self._upsert is not None and self.key_column is not None:
            return self._upsert.numbered()
        return self.table()


class ResultBuffer:
    def __init__(self, schema: pa.Schema, *, bounded: bool, max_pending: int = 1_000_000,
                 display_rows: int = 10_000, key: tuple[str, ...] | None = None,
                 name: str = "query", key_column: str | None = None) -> None:  # fmt: skip
        """``key``: the upsert key of an updating result (the job graph's
        :attr:`~datum_sql.engine.jobgraph.Node.upsert_key`); None folds it as a multiset.
        ``key_column``: a column of ``schema`` numbering each row's key, by which the
        result is kept (and that no reader sees)."""
        self.key_column = key_column
        if key_column is not None:
            schema = schema.remove(schema.get_field_index(key_column))
        self.schema = schema
        self.bounded = bounded
        self.max_pending = max_pending
        #: Named in error messages; the query handle sets it to the query's name.
        self.name = name
        self.updating = OP_COLUMN in schema.names
        self._result: AppendResult | ChangelogResult = (
            ChangelogResult(schema, key, name, key_column)
            if self.updating
            else AppendResult(schema, limit=None if bounded else max_pending, window=display_rows)
        )
        self._unread: deque[pa.RecordBatch] = deque()
        self._unread_rows = 0
        self._iterating = False
        self._history_lost = False  # an updating query's changelog outgrew max_pending
        self._display = False  # read for display: an unread unbounded result may drop rows
        self._released = False  # the query is stopping: put() no longer waits for the caller
        self._closed = False  # the runtime ended: nothing more will come
        self._cond = threading.Condition()
        self._space: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    # -- runtime side ---------------------------------------------------------------------
    async def put(self, batch: pa.RecordBatch) -> None:
        if self._space is None:
            self._loop = asyncio.get_running_loop()
            self._space = asyncio.Event()
        while True:
            with self._cond:
                if self._has_room() or self._released:
                    self._result.add(batch)
                    if self.key_column is not None:
                        batch = batch.drop_columns([self.key_column])
                    if self._iterating:
                        self._queue(batch)
                    elif self.updating and not self._history_lost:
                        self._keep_history(batch)
                    self._cond.notify_all()
                    return
                self._space.clear()
            await self._space.wait()

    def _has_room(self) -> bool:
        if self._iterating:
            return self._unread_rows < self.max_pending
        # Nobody iterates yet: an unbounded append-only result waits for a reader once it
        # holds max_pending rows, so that iterating it later still starts at its first row
        # (nothing is dropped because the caller was slow to start); only a display
        # (``latest``) lets it run on, keeping its newest rows.
        if not isinstance(self._result, AppendResult) or self.bounded or self._display:
            return True
        return self._result.rows < self.max_pending

    def _queue(self, batch: pa.RecordBatch) -> None:
        self._unread.append(batch)
        self._unread_rows += batch.num_rows

    def _keep_history(self, batch: pa.RecordBatch) -> None:
        """The changelog so far, for a caller that starts iterating later (bounded)."""
        self._queue(batch)
        if self._unread_rows > self.max_pending:
            self._unread.clear()
            self._unread_rows = 0
            self._history_lost = True

    def release(self) -> None:
        """The query is stopping: a ``put`` waiting for the caller to read goes on at once
        (the step in progress ends, so the runtime can stop at its boundary)."""
        with self._cond:
            self._released = True
        self._wake()

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._released = True
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
                self._start_iterating()
            if not self._cond.wait_for(lambda: self._unread or self._closed, timeout):
                raise TimeoutError
            if not self._unread:
                return None
            batch = self._unread.popleft()
            self._unread_rows -= batch.num_rows
        self._wake()
        return batch

    @property
    def pending_rows(self) -> int:
        """Rows the iterating caller has not read yet (``put`` waits at ``max_pending``)."""
        with self._cond:
            return self._unread_rows

    def _start_iterating(self) -> None:
        if self._result.dropped_rows:
            raise DatumError(
                f"{self.name}: cannot iterate from the first row: nobody read the result and "
                f"the oldest {self._result.dropped_rows:,} rows were dropped (an unbounded query "
                f"keeps at most max_pending_rows={self.max_pending:,} unread rows). Iterate from "
                "the start, or raise max_pending_rows"
            )
        if not self.updating or self._history_lost:
            for batch in self._result.replay():
                self._queue(batch)
        self._iterating = True

    def table(self) -> pa.Table:
        """The whole result (an updating query: its current state); raises DatumError when
        rows were dropped, never returning a truncated table."""
        with self._cond:
            if self._result.dropped_rows:
                raise DatumError(
                    f"{self.name}: the result is incomplete: this unbounded query dropped the "
                    f"oldest {self._result.dropped_rows:,} rows (past max_pending_rows="
                    f"{self.max_pending:,}, only the newest rows are kept, for display). "
                    "Iterate the query to read every row, write it INTO a sink, or raise "
                    "max_pending_rows"
                )
            return self._result.table()

    def latest(self, n: int) -> pa.Table:
        """The newest ``n`` rows (append) or the last ``n`` rows of the current state
        (changelog), for display: bounded, and answered even when rows were dropped.

        Displaying an unbounded append-only result that nobody iterates lets it run on past
        ``max_pending`` rows, keeping only the newest (its first rows are then gone)."""
        with self._cond:
            self._display = True
            table = self._result.latest(n)
        self._wake()
        return table

    def checkpoint_table(self) -> pa.Table:
        """The result as :meth:`restore` takes it back (an updating one's state, with the
        key numbers when it is kept by them)."""
        if not isinstance(self._result, ChangelogResult):
            return self.table()
        with self._cond:
            return self._result.checkpoint_table()

    def restore(self, table: pa.Table) -> None:
        """Start from ``table``, a :meth:`checkpoint_table` taken before."""
        schema = self.schema
        if self.updating:
            ops = pa.repeat(pa.scalar(INSERT, schema.field(OP_COLUMN).type), table.num_rows)
            if self.key_column is not None:
                key = pa.field(self.key_column, pa.int64())
                schema = schema.insert(schema.get_field_index(OP_COLUMN), key)
            table = table.append_column(OP_COLUMN, ops).select(schema.names)
        table = table.cast(schema)
        with self._cond:
            for batch in table.to_batches():
                self._result.add(batch)
            # The changelog before the checkpoint is gone: a reader starts from the state.
            self._history_lost = self.updating


class CollectSink(Sink):
    """The sink of a streaming SELECT: batches go to a :class:`ResultBuffer`.

    ``checkpointed`` (a materialized view): the whole result goes into every checkpoint and
    comes back on restore — operator state alone cannot rebuild it (closed windows, rows
    of a stateless query are gone from it)."""

    ACCEPTS_CHANGELOG = True
    STATE_KIND = "result"
    STATE_VERSION = 2

    def __init__(self, buffer: ResultBuffer, *, checkpointed: bool = False) -> None:
        super().__init__(ConnectorSpec(name="(select)", options={}))
        self.buffer = buffer
        self.checkpointed = checkpointed

    def snapshot(self) -> bytes | None:
        if not self.checkpointed:
            return None
        result = self.buffer.checkpoint_table()
        return encode_state(self.STATE_KIND, self.STATE_VERSION, {}, {"result": result})

    def restore(self, data: bytes) -> None:
        _, tables = decode_state(data, self.STATE_KIND, self.STATE_VERSION)
        self.buffer.restore(tables["result"])

    async def write(self, batch: pa.RecordBatch) -> None:
        await self.buffer.put(batch)

    def metrics(self) -> dict[str, Any]:
        return {}


__all__ = ["AppendResult", "ChangelogResult", "CollectSink", "ResultBuffer"]
