"""Bounded replays: a script's queries re-run over a half-open range of their input (event
time, Kafka offsets or file names), optionally in chunks, moving the saved positions only when asked."""

from datum_sql.replay.ranges import ReplayRange
from datum_sql.replay.run import ReplayChunk, ReplayReport, replay

__all__ = ["ReplayChunk", "ReplayRange", "ReplayReport", "replay"]
