"""One duration reader (types.duration_micros) for options, CLI flags and INTERVAL literals."""

from __future__ import annotations

from datetime import timedelta

import pytest

from datum_sql.errors import SqlError
from datum_sql.sql.literals import interval_micros
from datum_sql.sql.parse import parse_one
from datum_sql.types import duration_micros, parse_duration

SPELLINGS = {
    "10 seconds": timedelta(seconds=10),
    "10": timedelta(seconds=10),
    "500ms": timedelta(milliseconds=500),
    "500 milliseconds": timedelta(milliseconds=500),
    "250 us": timedelta(microseconds=250),
    "2 min": timedelta(minutes=2),
    "2 m": timedelta(minutes=2),
    "1h": timedelta(hours=1),
    "3 hrs": timedelta(hours=3),
    "1 day": timedelta(days=1),
    "2 weeks": timedelta(weeks=2),
    "1.5 s": timedelta(seconds=1.5),
    "1 minute 30 seconds": timedelta(seconds=90),
    " 1 HOUR ": timedelta(hours=1),
}


def _interval(text: str) -> int:
    node = parse_one(f"SELECT INTERVAL '{text}'").expressions[0]
    return interval_micros(node, what="size")


@pytest.mark.parametrize("text", SPELLINGS)
def test_an_option_and_an_interval_literal_read_a_spelling_alike(text: str) -> None:
    assert parse_duration(text) == SPELLINGS[text]
    assert _interval(text) == duration_micros(text) == SPELLINGS[text] // timedelta(microseconds=1)


def test_an_interval_may_be_negative_an_option_may_not() -> None:
    assert _interval("-5 seconds") == -5_000_000
    with pytest.raises(ValueError, match=r"idle_timeout: '-5 s' is negative"):
        parse_duration("-5 s", what="idle_timeout")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("10 parsecs", "unknown unit 'parsecs'"),
        ("5 5", "cannot read '5 5'"),
        ("ten seconds", "cannot read 'ten seconds'"),
        ("", "cannot read ''"),
        ("10 s, 2 ms", "cannot read '10 s, 2 ms'"),
    ],
)
def test_what_is_not_a_duration_is_refused_by_both(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=f"checkpoint_interval: {message}"):
        parse_duration(text, what="checkpoint_interval")
    with pytest.raises(SqlError, match="size must be an INTERVAL literal"):
        _interval(text)


def test_a_number_or_timedelta_passes_through() -> None:
    assert parse_duration(3) == timedelta(seconds=3)
    assert parse_duration(timedelta(minutes=1)) == timedelta(minutes=1)
