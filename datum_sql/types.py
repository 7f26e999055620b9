"""Shared primitives: time units, watermark policies and secret redaction.

Event time travels through the engine as int64 microseconds since the Unix epoch (UTC);
this module owns the conversions so every layer agrees on them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

MICROS_PER_SECOND = 1_000_000
#: The watermark of a source that has ended: every window may close.
END_OF_TIME = 2**63 - 1
#: The watermark before any row arrived.
START_OF_TIME = -(2**63)


def to_micros(value: datetime | timedelta | int) -> int:
    """Microseconds since the epoch for a datetime (naive means UTC), or in a timedelta."""
    if isinstance(value, timedelta):
        return (value.days * 86_400 + value.seconds) * MICROS_PER_SECOND + value.microseconds
    if isinstance(value, datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=UTC)
        return to_micros(value - datetime(1970, 1, 1, tzinfo=UTC))
    return int(value)


def from_micros(micros: int) -> datetime | None:
    """The naive UTC datetime of an event-time value; None for the two infinities."""
    if micros in (END_OF_TIME, START_OF_TIME):
        return None
    return datetime(1970, 1, 1) + timedelta(microseconds=micros)  # noqa: DTZ001


def format_micros(micros: int | None) -> str:
    """A watermark or event time as text for status and errors."""
    if micros is None or micros == START_OF_TIME:
        return "-inf"
    if micros == END_OF_TIME:
        return "+inf"
    dt = from_micros(micros)
    return dt.isoformat(sep=" ") if dt else str(micros)


@dataclass(frozen=True)
class BoundedOutOfOrderness:
    """Watermark = max event time seen so far minus ``delay``.

    Accepts a timedelta or ``seconds=`` / ``milliseconds=`` keywords.
    """

    delay: timedelta = timedelta(0)

    def __init__(
        self,
        delay: timedelta | None = None,
        *,
        seconds: float | None = None,
        milliseconds: float | None = None,
    ) -> None:
        total = delay or timedelta(0)
        if seconds is not None:
            total += timedelta(seconds=seconds)
        if milliseconds is not None:
            total += timedelta(milliseconds=milliseconds)
        if total < timedelta(0):
            raise ValueError(f"BoundedOutOfOrderness delay must not be negative, got {total}")
        object.__setattr__(self, "delay", total)

    @property
    def delay_micros(self) -> int:
        return to_micros(self.delay)


@dataclass(frozen=True)
class Watermark:
    """A source-provided watermark marker: an iterator may yield it between batches."""

    timestamp: datetime | int

    @property
    def micros(self) -> int:
        return to_micros(self.timestamp)


def parse_duration(text: str | timedelta | int | float, *, what: str = "duration") -> timedelta:
    """Parse '10 seconds', '500ms', '2 min', '1h', or a number of seconds."""
    if isinstance(text, timedelta):
        return text
    if isinstance(text, int | float):
        return timedelta(seconds=text)
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*", text)
    if not m:
        raise ValueError(f"cannot read {what} {text!r}: write e.g. '10 seconds' or '500 ms'")
    amount, unit = float(m.group(1)), m.group(2).lower()
    units = {
        "": 1.0, "s": 1.0, "sec": 1.0, "secs": 1.0, "second": 1.0, "seconds": 1.0,
        "ms": 1e-3, "millisecond": 1e-3, "milliseconds": 1e-3,
        "us": 1e-6, "microsecond": 1e-6, "microseconds": 1e-6,
        "m": 60.0, "min": 60.0, "mins": 60.0, "minute": 60.0, "minutes": 60.0,
        "h": 3600.0, "hour": 3600.0, "hours": 3600.0,
        "d": 86400.0, "day": 86400.0, "days": 86400.0,
    }  # fmt: skip
    if unit not in units:
        raise ValueError(f"cannot read {what} {text!r}: unknown unit {unit!r}")
    return timedelta(seconds=amount * units[unit])
