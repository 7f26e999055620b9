"""The handle of a running streaming query.

The query runs on its own thread with its own asyncio loop, so a synchronous caller
(a script, a notebook cell) is never blocked and an async caller never shares its loop
with operator work. Everything the handle does crosses to that loop thread-safely.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from concurrent.futures import Future
from typing import Any

import pyarrow as pa

from datum_sql.engine.runtime.executor import Executor
from datum_sql.engine.runtime.results import ResultBuffer
from datum_sql.errors import DatumError, QueryFailed, QueryTimeout
from datum_sql.extensions import extension
from datum_sql.optional import require
from datum_sql.types import format_micros

STATES = ("starting", "running", "finished", "cancelled", "failed")


class StreamingQuery:
    """A running query: iterate it, watch ``status()``, ``cancel()`` it, ``wait()`` for it."""

    def __init__(
        self,
        executor: Executor,
        *,
        sql: str,
        buffer: ResultBuffer | None = None,
        on_exit: Callable[[StreamingQuery], None] | None = None,
        name: str | None = None,
    ) -> None:
        self.executor = executor
        self.sql = sql
        self.name = name or "query"
        self._buffer = buffer
        if buffer is not None:
            buffer.name = f"query {self.name!r}"
        self._on_exit = on_exit
        self._state = "starting"
        self._error: BaseException | None = None
        self._done = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_ready = threading.Event()
        self._thread = threading.Thread(target=self._main, name=f"datum-{self.name}", daemon=True)
        self._cancel_requested = False
        self._tasks: set[asyncio.Task[Any]] = set()  # started by the handle, kept until done
        self.started_at = time.time()
        self.finished_at: float | None = None

    # -- running ----------------------------------------------------------------------------
    def start(self) -> StreamingQuery:
        self._thread.start()
        self._loop_ready.wait()
        return self

    def _main(self) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        self._loop_ready.set()
        try:
            self._state = "running"
            loop.run_until_complete(self.executor.run())
            self._state = "cancelled" if self._cancel_requested else "finished"
        except BaseException as exc:
            self._error = exc if isinstance(exc, QueryFailed) else _wrap(exc)
            self._state = "failed"
        finally:
            self.finished_at = time.time()
            if self._buffer is not None:
                self._buffer.close()
            try:
                loop.run_until_complete(loop.shutdown_asyncgens())
            finally:
                loop.close()
            if self._on_exit is not None:
                self._on_exit(self)
            self._done.set()

    def _call_in_loop(self, coro_fn: Callable[[], Any], timeout: float | None) -> Any:
        loop = self._loop
        if loop is None or self._done.is_set() or loop.is_closed():
            return None
        fut: Future[Any] = asyncio.run_coroutine_threadsafe(coro_fn(), loop)
        return fut.result(timeout)

    def _soon_in_loop(self, coro_fn: Callable[[], Any]) -> None:
        """Start ``coro_fn()`` on the query's loop without waiting for it (nothing happens
        when the loop has ended meanwhile)."""
        loop = self._loop
        if loop is None or loop.is_closed():
            return

        def start() -> None:
            self._tasks.add(task := loop.create_task(coro_fn()))
            task.add_done_callback(self._tasks.discard)

        with contextlib.suppress(RuntimeError):  # the loop closed in between
            loop.call_soon_threadsafe(start)

    # -- control ----------------------------------------------------------------------------
    @property
    def state(self) -> str:
        return self._state

    @property
    def done(self) -> bool:
        return self._done.is_set()

    def cancel(self, timeout: float | None = 30.0) -> None:
        """Stop reading sources; commit what was processed; return when stopped.

        Prompt whatever the pace of a caller reading the results (rows it has not read
        are not waited for). Raises :class:`QueryTimeout` when the query has not stopped
        within ``timeout`` seconds (a step that does not end: a sink write or an operator
        still busy); it then stops as soon as that step ends."""
        if self._done.is_set():
            return
        deadline = None if timeout is None else time.monotonic() + timeout
        self._cancel_requested = True
        if self._buffer is not None:
            self._buffer.release()
        self._soon_in_loop(self.executor.stop)
        left = None if deadline is None else max(deadline - time.monotonic(), 0.0)
        if not self._done.wait(left):
            raise QueryTimeout(
                f"query {self.name!r} did not stop within {timeout} s: a step is still running "
                "(a sink write, a source read or an operator that has not returned). It stops "
                "when that step ends; wait() for it"
            )

    def wait(self, timeout: float | None = None) -> bool:
        """Block until the query ends (True) or ``timeout`` passes (False); raise if it failed.

        Ctrl-C (KeyboardInterrupt) while waiting cancels the query, which commits what was
        processed, as the CLI does; then the KeyboardInterrupt goes on."""
        try:
            finished = self._done.wait(timeout)
        except KeyboardInterrupt:
            self.cancel()
            raise
        if finished and self._error is not None:
            raise self._error
        return finished

    def checkpoint(self, timeout: float | None = 60.0) -> int | None:
        """Commit now (a checkpoint when the context has a state directory); its id."""
        result: int | None = self._call_in_loop(self.executor.commit, timeout)
        return result

    @property
    def error(self) -> BaseException | None:
        return self._error

    # -- results ----------------------------------------------------------------------------
    def __iter__(self) -> Iterator[pa.RecordBatch]:
        """The result batches as they are produced. Ctrl-C while waiting for the next one
        cancels the query (as in :meth:`wait`), then the KeyboardInterrupt goes on."""
        buf = self._require_buffer()
        while True:
            try:
                batch = buf.next_batch(timeout=0.1)
            except TimeoutError:
                continue
            except KeyboardInterrupt:
                self.cancel()
                raise
            if batch is None:
                break
            yield batch
        self.wait()

    def next_batch(self, timeout: float | None = None) -> pa.RecordBatch | None:
        """The next result batch, for a caller that polls (the server streaming a
        subscription): None once the query ended and every batch was read (raising if the
        query failed); TimeoutError when none came within ``timeout`` seconds."""
        batch = self._require_buffer().next_batch(timeout)
        if batch is None:
            self.wait()
        return batch

    @property
    def pending_rows(self) -> int:
        """Result rows produced that the caller iterating the query has not read yet; at
        ``max_pending_rows`` the sources wait for it."""
        return 0 if self._buffer is None else self._buffer.pending_rows

    async def __aiter__(self) -> AsyncIterator[pa.RecordBatch]:
        buf = self._require_buffer()
        while True:
            try:
                batch = await asyncio.to_thread(buf.next_batch, 0.1)
            except TimeoutError:
                continue
            if batch is None:
                break
            yield batch
        await asyncio.to_thread(self.wait)

    def to_arrow(self, timeout: float | None = None) -> pa.Table:
        """The final result, complete, once the query ended (a changelog applied: the final
        state, not the history).

        A bounded query is waited for. An unbounded one must have ended (its iterator ran
        out, or it was cancelled). Its rows are kept up to ``max_pending_rows``; past that
        only the newest are kept (for display), and this raises :class:`DatumError` rather
        than return a truncated table: iterate the query, or write it INTO a sink, to get
        every row of a long stream. An updating query's final state is always complete.
        Raises :class:`QueryTimeout` when ``timeout`` passes first."""
        buf = self._require_buffer()
        if not buf.bounded and not self._done.is_set():
            raise DatumError(
                f"to_arrow() needs a bounded query (or a finished one): query {self.name!r} "
                "reads an unbounded source. Iterate it, or cancel() it first"
            )
        if not self.wait(timeout):
            raise QueryTimeout(f"query {self.name!r} still running after {timeout} s")
        return buf.table()

    def to_pandas(self, timeout: float | None = None) -> Any:
        """:meth:`to_arrow` as a pandas DataFrame (needs pandas, nothing else)."""
        require("pandas", "to_pandas()")
        return self.to_arrow(timeout).to_pandas()

    def to_polars(self, timeout: float | None = None) -> Any:
        """:meth:`to_arrow` as a polars DataFrame, sharing its buffers (needs polars)."""
        pl = require("polars", "to_polars()")
        return pl.from_arrow(self.to_arrow(timeout))

    def iter_polars(self) -> Iterator[Any]:
        """The result batches as polars DataFrames, as they are produced (as iterating the
        handle gives them, one DataFrame per batch, ``_op`` included for a changelog)."""
        pl = require("polars", "iter_polars()")
        return (pl.from_arrow(batch) for batch in self)

    def iter_pandas(self) -> Iterator[Any]:
        """The result batches as pandas DataFrames, as they are produced (see
        :meth:`iter_polars`)."""
        require("pandas", "iter_pandas()")
        return (batch.to_pandas() for batch in self)

    def latest(self, n: int = 20) -> pa.Table:
        """The newest ``n`` result rows (append) or rows of the current state (changelog)."""
        return self._require_buffer().latest(n)

    def latest_state(self) -> pa.Table:
        """The whole current result, as of the last completed micro-batch (running or not);
        raises :class:`DatumError`, as :meth:`to_arrow` does, when rows were dropped."""
        if self._error is not None:
            raise self._error
        return self._require_buffer().table()

    def _require_buffer(self) -> ResultBuffer:
        if self._buffer is None:
            raise DatumError(
                "this query writes into a sink; read the sink, or run a SELECT to get rows back"
            )
        return self._buffer

    # -- status -----------------------------------------------------------------------------
    def status(self) -> dict[str, Any]:
        m = self.executor.metrics
        elapsed = (self.finished_at or time.time()) - self.started_at
        return {
            "name": self.name,
            "state": self._state,
            "error": None if self._error is None else str(self._error),
            "elapsed_s": round(elapsed, 3),
            "rows_in": m.rows_in,
            "rows_out": m.rows_out,
            "late_rows": m.late_rows,
            "sources": {s.table: s.as_dict() for s in m.sources.values()},
            "operators": {k: o.as_dict() for k, o in m.operators.items()},
            "sinks": {s.table: s.as_dict() for k, s in m.sinks.items()},
            "watermark": format_micros(
                min((s.watermark for s in m.sources.values()), default=None)
            ),
            "last_checkpoint": m.last_checkpoint,
            "recovered_from": m.recovered_from,
        }

    # -- views (implemented by datum_sql/notebook/, installed in datum_sql/extensions.py) ----
    def show(self, n: int = 20, *, interval: float = 0.5) -> Any:
        """In a notebook: a view of this query's status and newest rows (its current state
        for an updating query) that updates in place until the query ends, without
        blocking the kernel. Elsewhere: print a text snapshot."""
        return extension("query.show")(self, n, interval=interval)

    def plot(self) -> Any:
        """Throughput, watermark lag and state size over time (needs ``datum-sql[plot]``)."""
        return extension("query.plot")(self)

    def explain(self) -> Any:
        """The job graph this query runs, with row counts per node so far (text; a picture
        in a notebook)."""
        return extension("query.explain")(self)

    def explain_progress(self) -> Any:
        """Why is nothing coming out? Per operator: open windows and the watermark they
        wait for, which input holds the watermark back, join state, late rows so far."""
        return extension("query.explain_progress")(self)

    def _repr_html_(self) -> str:
        html: str = extension("query.html")(self)
        return html

    def _ipython_display_(self) -> None:
        # Displayed in a notebook: live while the query runs, else its final status.
        extension("query.display")(self)

    # -- context managers -------------------------------------------------------------------
    def __enter__(self) -> StreamingQuery:
        return self

    def __exit__(self, *exc: object) -> None:
        self.cancel()
        if exc[0] is None:
            self.wait()

    async def __aenter__(self) -> StreamingQuery:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await asyncio.to_thread(self.cancel)
        if exc[0] is None:
            await asyncio.to_thread(self.wait)

    def __repr__(self) -> str:
        m = self.executor.metrics
        return f"<StreamingQuery {self.name} {self._state}: {m.rows_in} rows in, {m.rows_out} out>"


def _wrap(exc: BaseException) -> QueryFailed:
    if isinstance(exc, DatumError):
        failed = QueryFailed(f"query failed: {exc}")
    else:
        failed = QueryFailed(f"query failed: {type(exc).__name__}: {exc}")
    failed.__cause__ = exc
    return failed
