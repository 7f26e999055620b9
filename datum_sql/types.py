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


#: Length in microseconds of each duration unit; plurals ("seconds") are accepted too.
DURATION_UNITS = {
    "microsecond": 1,
    "millisecond": 1_000,
    "second": MICROS_PER_SECOND,
    "minute": 60 * MICROS_PER_SECOND,
    "hour": 3_600 * MICROS_PER_SECOND,
    "day": 86_400 * MICROS_PER_SECOND,
    "week": 7 * 86_400 * MICROS_PER_SECOND,
}
_UNIT_ALIASES = {"us": "microsecond", "ms": "millisecond", "s": "second", "sec": "second",
                 "secs": "second", "m": "minute", "min": "minute", "mins": "minute",
                 "h": "hour", "hr": "hour", "hrs": "hour", "d": "day", "w": "week"}  # fmt: skip
_DURATION_PART = re.compile(r"\s*([-+]?\d+(?:\.\d+)?)\s*([a-zA-Z]*)")


def unit_micros(word: str) -> int:
    """Microseconds in one duration unit ('s', 'ms', 'minute', 'hours', ...); ValueError
    naming the unit otherwise."""
    w = word.lower()
    w = _UNIT_ALIASES.get(w, w)
    if w not in DURATION_UNITS and w.endswith("s"):
        w = w[:-1]
    if w not in DURATION_UNITS:
        raise ValueError(f"unknown unit {word!r}")
    return DURATION_UNITS[w]


def duration_micros(text: str) -> int:
    """The one duration reader of datum-sql (options, CLI flags, INTERVAL literals):
    '10 seconds', '500ms', '1 minute 30 seconds', '1h', '-5 s', or a bare number of seconds
    → microseconds. ValueError for anything else."""
    parts: list[tuple[str, str]] = []
    end = 0
    for m in _DURATION_PART.finditer(text):
        if m.start() != end:
            break
        parts.append((m.group(1), m.group(2)))
        end = m.end()
    if not parts or text[end:].strip() or (len(parts) > 1 and not all(u for _, u in parts)):
        raise ValueError(f"cannot read {text!r}: write e.g. '10 seconds' or '500 ms'")
    return round(sum(float(n) * (unit_micros(u) if u else MICROS_PER_SECOND) for n, u in parts))


def parse_duration(text: str | timedelta | int | float, *, what: str = "duration") -> timedelta:
    """A non-negative duration from '10 seconds', '500ms', '2 min', '1h', a timedelta or a
    number of seconds (text read by :func:`duration_micros`)."""
    if isinstance(text, timedelta):
        return text
    if isinstance(text, int | float):
        return timedelta(seconds=text)
    try:
        micros = duration_micros(text)
    except ValueError as exc:
        raise ValueError(f"{what}: {exc}") from None
    if micros < 0:
        raise ValueError(f"{what}: {text!r} is negative")
    return timedelta(microseconds=micros)
