"""What a benchmark is, as data: its inputs, the SQL each engine runs, who is compared to whom.

Light on purpose (no pyarrow, no datum_sql): the orchestrating process imports it, and a
child process's ``ru_maxrss`` starts from its parent's RSS at spawn, so the parent stays small.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

#: the engine whose result every other engine's result must equal
REFERENCE = "duckdb"


@dataclass(frozen=True)
class Input:
    """One input table: ``rows`` rows of a cached dataset, and how datum-sql sees its time."""

    dataset: str
    rows: int
    seed: int = 0
    event_time: str | None = None
    watermark_ms: int = 0


@dataclass(frozen=True)
class Benchmark:
    """One query, run by each of ``engines`` in fresh processes over the same ``inputs``."""

    name: str
    group: str
    about: str
    #: events -> {table name: input}; the events of a run are the rows of all inputs
    inputs: Callable[[int], dict[str, Input]]
    datum_sql: str
    duckdb_sql: str
    #: {table name: polars LazyFrame} -> LazyFrame, or None where polars cannot say it
    polars: Callable[[dict[str, Any]], Any] | None = None
    #: datum-sql reads its inputs through async iterators that take turns (as live streams)
    paced: bool = False
    engines: tuple[str, ...] = ("datum-sql", "duckdb", "polars")
    #: the engine datum-sql's events/s is divided by
    baseline: str = REFERENCE
    #: engine -> "module:function" building that engine's run where the default does not fit
    runners: dict[str, str] = field(default_factory=dict)

    def events(self, events: int) -> int:
        return sum(i.rows for i in self.inputs(events).values())


def bids(events: int) -> dict[str, Input]:
    """``events`` Nexmark bids, event time ``date_time``, watermark 1 s behind."""
    return {"bids": Input("bid", events, event_time="date_time", watermark_ms=1000)}


def bid(events: int) -> dict[str, Input]:
    """The same bids as table ``bid``, the name the Nexmark queries read (as in the golden tests)."""
    return {"bid": bids(events)["bids"]}


__all__ = ["REFERENCE", "Benchmark", "Input", "bid", "bids"]
