"""Every row a table holds now: a source read to its current end, a sink's committed
output, a materialized view's state."""

from __future__ import annotations

from collections.abc import Callable
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


def read_all(
    entry: Any,
    spec: Callable[[SourceEntry | SinkEntry], ConnectorSpec],
    view_state: Callable[[str], pa.Table],
) -> pa.Table:
    """The rows of ``entry``; ``spec`` makes a catalog entry's connector spec,
    ``view_state`` gives a materialized view's current result."""
    if isinstance(entry, SourceEntry):
        options = reveal(entry.options)
        if entry.connector == "kafka":
            options["scan.bounded.mode"] = "latest"
        source_spec = spec(entry)
        source_spec.options = options
        source = registry.create_source(entry.connector, source_spec)
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
        return run_async(collect(source))
    if isinstance(entry, SinkEntry):
        if entry.connector not in ("parquet", "csv", "jsonl", "duckdb"):
            raise PlanError(
                f"sink {entry.name!r} ({entry.connector}) keeps no rows to query; "
                "file and DuckDB sinks can be read back with ctx.sql()"
            )
        reader = registry.source_class(entry.connector)
        reader_spec = ConnectorSpec(
            name=entry.name,
            options={k: v for k, v in reveal(entry.options).items() if k in reader.OPTIONS},
        )
        path = entry.options.get("path")
        if entry.connector != "duckdb" and path and not Path(path).exists():
            if entry.schema is not None:
                return entry.schema.empty_table()
            raise PlanError(f"sink {entry.name!r} has committed no output yet (nothing at {path})")
        return run_async(collect(reader(reader_spec)))
    if isinstance(entry, ViewEntry):
        return view_state(entry.name)
    raise PlanError(f"{entry.kind} {entry.name!r} cannot be read in batch")


async def collect(source: Source) -> pa.Table:
    """Read ``source`` from its start to its end into one table."""
    return pa.Table.from_batches([b async for b in data_batches(source)], schema=source.schema)
