"""How the Kafka source and sink retry an unreachable broker within ``retry.deadline``.

The deadline is enforced, not advisory: a streak of failures starts when the first failed
attempt *started* (a request that hangs for seconds before timing out counts from its
start), and every request awaited during the streak is bounded by :func:`rpc_timeout`
(at most half the deadline), so the failure comes at most one request timeout plus a
backoff after the deadline, whatever the broker does (refuse, hang, answer slowly).
"""

from __future__ import annotations

import asyncio
import time

from datum_sql.connectors.kafka.options import scrub

BACKOFF_START = 0.1
BACKOFF_CAP = 5.0
#: the longest we wait for one broker request we await ourselves
RPC_TIMEOUT_CAP = 5.0


def rpc_timeout(request_timeout: float, deadline: float) -> float:
    """Seconds to wait for one broker request: the request timeout, at most 5 s and at most
    half of ``retry.deadline`` (so that a hung request cannot outlive it)."""
    return max(0.1, min(request_timeout, RPC_TIMEOUT_CAP, deadline / 2))


def attempt_timeout(rpc: float, deadline: float) -> float:
    """Seconds for one connection attempt (a few requests): four requests' time, cut to the
    deadline."""
    return max(rpc, min(4 * rpc, deadline))


class Retry:
    """Exponential backoff (0.1 s doubling, at most 5 s) within a deadline counted from the
    start of the first failed attempt of a streak."""

    def __init__(self, deadline: float) -> None:
        self.deadline = deadline
        self.first: float | None = None
        self.delay = BACKOFF_START

    def reset(self) -> None:
        self.first = None
        self.delay = BACKOFF_START

    def next_delay(self, since: float) -> float | None:
        """Seconds to wait before the next attempt after one that started at ``since``
        (``time.monotonic()``) failed, or None when the deadline passed."""
        now = time.monotonic()
        if self.first is None:
            self.first = min(since, now)
        if now - self.first >= self.deadline:
            return None
        delay = min(self.delay, max(0.0, self.first + self.deadline - now))
        self.delay = min(self.delay * 2, BACKOFF_CAP)
        return delay

    @property
    def elapsed(self) -> float:
        return 0.0 if self.first is None else time.monotonic() - self.first

    def passed(self, what: str) -> str:
        """The message of a passed deadline: ``retry.deadline (4s) passed: <what> for 5.2s``."""
        return f"retry.deadline ({self.deadline:g}s) passed: {what} for {self.elapsed:.1f}s"


def describe(exc: BaseException, secrets: list[str]) -> str:
    """``Type: message`` of an exception, secrets scrubbed."""
    name = type(exc).__name__
    text = str(exc)
    if not text and isinstance(exc, TimeoutError):
        text = "request timed out"
    if not text.startswith(name):
        text = f"{name}: {text}" if text else name
    return scrub(text, secrets)


class NotReady(Exception):
    """A transient condition of our own (e.g. the topic does not exist yet)."""


def transient(exc: BaseException) -> bool:
    """True for failures worth retrying: the broker unreachable, slow or not ready yet."""
    from aiokafka import errors as ke

    if isinstance(exc, NotReady | OSError | asyncio.TimeoutError | TimeoutError):
        return True
    if isinstance(
        exc,
        ke.KafkaTimeoutError
        | ke.KafkaConnectionError
        | ke.KafkaUnavailableError
        | ke.NodeNotReadyError
        | ke.NoBrokersAvailable,
    ):
        return True
    return isinstance(exc, ke.KafkaError) and bool(getattr(exc, "retriable", False))
