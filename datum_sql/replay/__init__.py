"""Bounded replays: a script's queries re-run over a half-open range of their input (event
time, Kafka offsets or file names), optionally in chunks, without moving saved positions."""

from datum_sql.replay.ranges import ReplayRange
from datum_sql.replay.run import ReplayReport, replay

__all__ = ["ReplayRange", "ReplayReport", "replay"]
