"""Every row a table holds now: a source read to its current end, a sink's committed
output, a materialized view's state; and the connector a batch query reads a source or
sink through (:func:`reader`), made and checked once for a query."""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa

from datum_sql.catalog import SinkEntry, SourceEntry, ViewEntry
from datum_sql.connectors import registry
from datum_sql.connectors.arrow import is_replayable
from datum_sql.connectors.base import ConnectorSpec, Source, data_batches
from datum_sql.errors import PlanError
from datum_sql.redaction import reveal
from datum_sql.run_sync import run_async

#: The sinks that keep the rows they committed, where a batch query can read them back.
READABLE_SINKS = ("parquet", "csv", "jsonl", "duckdb")


@dataclass
class TableReader:
    """A source or sink's rows as a batch query reads them: ``source`` made from ``spec``
    (read at most once), and ``make`` to make another, e.g. of fewer columns."""

    connector: str
    spec: ConnectorSpec
    make: Callable[[ConnectorSpec], Source]
    source: Source

    def read_all(self) -> pa.Table:
        return run_async(collect(self.source))


def reader(
    entry: SourceEntry | SinkEntry, spec: Callable[[SourceEntry | SinkEntry], ConnectorSpec]
) -> TableReader | pa.Table:
    """How a batch query reads ``entry`` (``spec`` makes its connector spec): through its
    connector, or, for a file sink that has committed nothing yet, its rows (none).
    PlanError when a batch query cannot read it."""
    if isinstance(entry, SourceEntry):
        source_spec = spec(entry)
        source_spec.options = reveal(entry.options)
        source_spec.options.update(registry.READ_TO_NOW.get(entry.connector, {}))
        make = functools.partial(registry.create_source, entry.connector)
        source = make(source_spec)
        if not source.bounded and entry.connector != "arrow":
            raise PlanError(
                f"source {entry.name!r} is unbounded ({entry.connector}); a batch query needs "
                "a bounded source (set rows = N for generators)"
            )
        if entry.connector == "arrow" and not is_replayable(entry.obj):
            raise PlanError(
                f"source {entry.name!r} is a one-shot iterator; a batch query would consume it. "
                "Register a pyarrow Table or a list of batches to query it in batch"
            )
        return TableReader(entry.connector, source_spec, make, source)
    if entry.connector not in READABLE_SINKS:
        raise PlanError(
            f"sink {entry.name!r} ({entry.connector}) keeps no rows to query; "
            "file and DuckDB sinks can be read back with ctx.sql()"
        )
    path = entry.options.get("path")
    if entry.connector != "duckdb" and path and not Path(path).exists():
        if entry.schema is not None:
            return entry.schema.empty_table()
        raise PlanError(f"sink {entry.name!r} has committed no output yet (nothing at {path})")
    read_class = registry.source_class(entry.connector)
    options = {k: v for k, v in reveal(entry.options).items() if k in read_class.OPTIONS}
    sink_spec = ConnectorSpec(name=entry.name, options=options)
    return TableReader(entry.connector, sink_spec, read_class, read_class(sink_spec))


def read_all(
    entry: Any,
    spec: Callable[[SourceEntry | SinkEntry], ConnectorSpec],
    view_state: Callable[[str], pa.Table],
) -> pa.Table:
    """The rows of ``entry``; ``spec`` makes a catalog entry's connector spec,
    ``view_state`` gives a materialized view's current result."""
    if isinstance(entry, ViewEntry):
        return view_state(entry.name)
    if not isinstance(entry, (SourceEntry, SinkEntry)):
        raise PlanError(f"{entry.kind} {entry.name!r} cannot be read in batch")
    found = reader(entry, spec)
    return found if isinstance(found, pa.Table) else found.read_all()


async def collect(source: Source) -> pa.Table:
    """Read ``source`` from its start to its end into one table."""
    return pa.Table.from_batches([b async for b in data_batches(source)], schema=source.schema)
