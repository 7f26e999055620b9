"""Streaming subscriptions: ``SUBSCRIBE TO <select>``, served as a ``DoGet`` that stays open.

``GetFlightInfo`` plans the SELECT (so that an error reaches the caller at execute time;
the schema comes from the plan) and returns a ticket. The ``DoGet`` of that ticket starts
the streaming query (``ctx.execute_streaming``, named ``subscription_N``, which SHOW QUERIES
lists) and sends each batch as the query produces it, until the query ends.

- **Disconnecting** (the client closes the stream) ends that subscription only: its query
  is cancelled as soon as the stream notices (at its next write, or within ``POLL_S`` while
  no rows come) and its thread returns.
- **Bounded buffering.** The query holds at most ``buffer_rows`` rows its client has not
  read (``max_pending_rows``); then its sources wait. A subscription whose buffer stays full
  for ``stall_limit_s`` (its client reads nothing, so the stream's writes block) is ended:
  its query is cancelled, and the stream ends, after the batches already in flight, with an
  error naming the subscription and the limit.
- **Shutdown** (:meth:`Subscriptions.close_all`) cancels every subscription's query; each
  stream ends with an Unavailable error saying the server stops. ``CANCEL QUERY
  subscription_N`` ends one with a Cancelled error; a query that ends (bounded sources)
  ends its stream.
"""

from __future__ import annotations

import logging
import secrets
import threading
import time
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.flight as flight

from datum_sql.errors import DatumError
from datum_sql.redaction import redact_sql

__all__ = ["DEFAULT_BUFFER_ROWS", "DEFAULT_STALL_LIMIT_S", "Subscriptions"]

log = logging.getLogger("datum_sql.server")

DEFAULT_STALL_LIMIT_S = 30.0
DEFAULT_BUFFER_ROWS = 100_000
#: How often a stream waiting for rows checks whether its client is still there.
POLL_S = 0.2
#: Planned subscriptions waiting for their DoGet: at most this many, each this long.
MAX_PLANNED = 64
PLANNED_TTL_S = 300.0


@dataclass
class _Planned:
    select: str
    schema: pa.Schema
    at: float


@dataclass
class _Subscription:
    name: str
    select: str
    peer: str
    query: Any
    rows_sent: int = 0
    full_since: float | None = None
    #: Why the server ended it (a stall, the shutdown): the error class and its message.
    ended: tuple[type[flight.FlightError], str] | None = None


@dataclass
class Subscriptions:
    """The subscriptions of one server over ``ctx``; ``lock`` is the statements' lock (a
    subscription starts as a reader, never beside DDL)."""

    ctx: Any
    lock: Any
    stall_limit_s: float = DEFAULT_STALL_LIMIT_S
    buffer_rows: int = DEFAULT_BUFFER_ROWS
    _planned: OrderedDict[bytes, _Planned] = field(default_factory=OrderedDict)
    _active: dict[str, _Subscription] = field(default_factory=dict)
    _mutex: threading.Lock = field(default_factory=threading.Lock)
    _count: int = 0
    _closed: bool = False
    _stop: threading.Event = field(default_factory=threading.Event)
    _watchdog: threading.Thread | None = None

    # -- planning (GetFlightInfo) -----------------------------------------------------------
    def plan(self, select: str) -> tuple[bytes, pa.Schema]:
        """Plan ``select`` as a streaming query (raising its planning errors); a handle for
        the DoGet that starts it, and its result schema."""
        with self.lock.read():
            schema = self.ctx.prepare(select).plan.root.schema
        handle = secrets.token_bytes(16)
        now = time.monotonic()
        with self._mutex:
            for key in [k for k, p in self._planned.items() if now - p.at > PLANNED_TTL_S]:
                del self._planned[key]
            while len(self._planned) >= MAX_PLANNED:
                self._planned.popitem(last=False)
            self._planned[handle] = _Planned(select, schema, now)
        return handle, schema

    def take(self, handle: bytes) -> _Planned | None:
        """The planned subscription of a ticket (once), or None when it is not one."""
        with self._mutex:
            return self._planned.pop(handle, None)

    # -- streaming (DoGet) ------------------------------------------------------------------
    def stream(self, planned: _Planned, context: Any, peer: str) -> flight.GeneratorStream:
        """Start the planned subscription's query; the stream of its batches."""
        with self._mutex:
            if self._closed:
                raise flight.FlightUnavailableError("the server is shutting down")
            self._count += 1
            name = f"subscription_{self._count}"
        with self.lock.read():
            query = self.ctx.execute_streaming(
                planned.select, name=name, max_pending_rows=self.buffer_rows
            )
        sub = _Subscription(name, planned.select, peer, query)
        with self._mutex:
            self._active[name] = sub
            if self._watchdog is None:
                self._watchdog = threading.Thread(
                    target=self._watch, name="datum-sql-subscriptions", daemon=True
                )
                self._watchdog.start()
        log.info("%s started by %s: %s", name, peer, " ".join(redact_sql(planned.select).split()))
        return flight.GeneratorStream(planned.schema, self._batches(sub, context))

    def _batches(self, sub: _Subscription, context: Any) -> Iterator[pa.RecordBatch]:
        reason = "its query ended"
        try:
            while True:
                if sub.ended is not None:
                    reason = "the server ended it"
                    raise sub.ended[0](sub.ended[1])
                if context.is_cancelled():
                    reason = "its client disconnected"
                    return
                try:
                    batch = sub.query.next_batch(POLL_S)
                except TimeoutError:
                    continue
                except DatumError as exc:
                    reason = f"it failed: {exc}"
                    raise flight.FlightServerError(f"{sub.name} failed: {exc}") from None
                if batch is None:
                    if sub.ended is not None:
                        continue  # raised above
                    if sub.query.state == "cancelled":
                        reason = "CANCEL QUERY"
                        raise flight.FlightCancelledError(
                            f"{sub.name} was cancelled (CANCEL QUERY {sub.name})"
                        )
                    return
                sub.rows_sent += batch.num_rows
                yield batch
        except GeneratorExit:
            reason = "its client disconnected"
            raise
        finally:
            self._end(sub, reason)

    def _end(self, sub: _Subscription, reason: str) -> None:
        with self._mutex:
            self._active.pop(sub.name, None)
        try:
            sub.query.cancel()
        except DatumError as exc:  # a step that does not end: it stops when it does
            log.warning("%s: %s", sub.name, exc)
        log.info("%s ended (%s) after %d rows", sub.name, reason, sub.rows_sent)

    # -- slow clients, shutdown -------------------------------------------------------------
    def _watch(self) -> None:
        tick = min(0.25, self.stall_limit_s / 4)
        while not self._stop.wait(tick):
            now = time.monotonic()
            with self._mutex:
                active = list(self._active.values())
            for sub in active:
                if sub.ended is not None or sub.query.pending_rows < self.buffer_rows:
                    sub.full_since = None
                elif sub.full_since is None:
                    sub.full_since = now
                elif now - sub.full_since >= self.stall_limit_s:
                    self._stall(sub)

    def _stall(self, sub: _Subscription) -> None:
        message = (
            f"{sub.name} was disconnected: its client read nothing for "
            f"{self.stall_limit_s:g} s (the subscription stall limit) while "
            f"{self.buffer_rows:,} unread rows filled its buffer (the subscription buffer "
            "rows); read the stream as it comes, or subscribe again"
        )
        sub.ended = (flight.FlightServerError, message)
        log.warning("%s (%s)", message, sub.peer)
        sub.query.cancel()

    def close_all(self) -> int:
        """End every subscription (the server stops); how many there were."""
        with self._mutex:
            self._closed = True
            active = list(self._active.values())
        self._stop.set()
        for sub in active:
            sub.ended = (
                flight.FlightUnavailableError,
                f"{sub.name} ended: the server is shutting down",
            )
            sub.query.cancel()
        return len(active)

    @property
    def active(self) -> list[str]:
        """The names of the running subscriptions."""
        with self._mutex:
            return list(self._active)
