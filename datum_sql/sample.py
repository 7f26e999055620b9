"""``ctx.sample(table, n)``: peek at a table without starting a query or committing offsets.

A data method of the Context (the notebook layer consumes it; it does not provide it).

* Files, generators and DuckDB tables: the first ``n`` rows, read by a throwaway instance
  of the source that is closed right after (generators unpaced: their rows do not depend on
  pacing, so the peek is instant and shows exactly the rows a query would read first).
* Arrow data registered from Python: the first ``n`` rows of the table or list of batches.
  A one-shot iterator cannot be peeked at without consuming it: that is refused.
* Kafka: the **newest** ``n`` messages of the topic, decoded with the table's schema and
  format (INCLUDE columns too). Throwaway readers of the table's own Kafka source, without
  its group id, first find each partition's end offset, then read from ``end - n`` to the
  end; nothing joins the consumer group, nothing is committed.
  Of those, the newest ``n`` by message timestamp are returned (oldest first).
* Sinks and materialized views: the first ``n`` rows of what they hold now.
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import AsyncIterator
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from datum_sql.catalog import SinkEntry, SourceEntry, ViewEntry
from datum_sql.connectors import registry
from datum_sql.connectors.arrow import is_replayable
from datum_sql.connectors.base import Source, data_batches
from datum_sql.errors import PlanError
from datum_sql.run_sync import run_async

__all__ = ["head", "sample"]

#: Options that only pace a generator (dropped for a peek).
_PACING = ("events_per_second",)
_HIDDEN = ("__sample_partition", "__sample_offset", "__sample_timestamp")


def sample(ctx: Any, table: str, n: int = 10) -> pa.Table:
    """Up to ``n`` rows of ``table`` (see the module docstring for which rows)."""
    if n < 0:
        raise ValueError("n must be >= 0")
    entry = ctx.catalog.require(table)
    if isinstance(entry, ViewEntry):
        return ctx.view(entry.name).latest_state().slice(0, n)
    if isinstance(entry, SinkEntry):
        return ctx._read_all(entry).slice(0, n)
    if not isinstance(entry, SourceEntry):
        raise PlanError(f"cannot sample {entry.kind} {entry.name!r}")
    if entry.connector == "arrow":
        return _arrow_head(entry, n)
    if entry.connector == "kafka":
        return run_async(_kafka_newest(ctx, entry, n))
    return head(ctx, entry, n)


def head(ctx: Any, entry: SourceEntry, n: int) -> pa.Table:
    """The first ``n`` rows a query would read from source ``entry`` (files, generators,
    DuckDB), from a throwaway reader."""
    if entry.connector == "arrow":
        return _arrow_head(entry, n)
    spec = ctx._spec(entry)
    spec.options = {k: v for k, v in spec.options.items() if k not in _PACING}
    spec.options.update(registry.READ_TO_NOW.get(entry.connector, {}))  # files there are now
    source = registry.create_source(entry.connector, spec)
    return run_async(_read_head(source, n))


def _arrow_head(entry: SourceEntry, n: int) -> pa.Table:
    data = entry.obj
    if not is_replayable(data):
        raise PlanError(
            f"source {entry.name!r} is a one-shot iterator: peeking at it would consume rows a "
            "query would then miss. Register a pyarrow Table or a list of batches to sample it"
        )
    parts = [data] if isinstance(data, pa.Table | pa.RecordBatch) else list(data)
    batches: list[pa.RecordBatch] = []
    rows = 0
    for part in parts:
        for batch in part.to_batches() if isinstance(part, pa.Table) else [part]:
            if rows >= n:
                break
            batches.append(batch.slice(0, n - rows))
            rows += min(batch.num_rows, n - rows)
    schema = entry.schema or (parts[0].schema if parts else None)
    table = pa.Table.from_batches(batches, schema=schema)
    return (
        table.cast(entry.schema)
        if entry.schema is not None and not table.schema.equals(entry.schema)
        else table
    )


async def _read_head(source: Source, n: int) -> pa.Table:
    batches: list[pa.RecordBatch] = []
    rows = 0
    async with contextlib.aclosing(data_batches(source)) as reader:
        async for batch in reader:  # (n <= 0: one batch read, none kept)
            batches.append(batch.slice(0, n - rows))
            rows += min(batch.num_rows, n - rows)
            if rows >= n:
                break
    return pa.Table.from_batches(batches, schema=source.schema)


# -- Kafka ---------------------------------------------------------------------------------
async def _kafka_newest(ctx: Any, entry: SourceEntry, n: int) -> pa.Table:
    """The newest ``n`` messages of a Kafka source, decoded (see the module docstring)."""
    spec = ctx._spec(entry)
    ends = await _kafka_end_offsets(copy.copy(spec))
    if not ends:
        raise PlanError(f"source {entry.name!r}: its topic has no partitions (does it exist?)")
    starts = {p: max(0, end - n) for p, end in ends.items()}
    table = await _kafka_read(spec, starts)
    # newest n by message timestamp (then partition, offset), shown oldest first
    order = pc.sort_indices(
        table,
        sort_keys=[("__sample_timestamp", "descending"), ("__sample_offset", "descending"),
                   ("__sample_partition", "ascending")],
    )  # fmt: skip
    newest = table.take(order).slice(0, n)
    newest = newest.take(pc.sort_indices(newest, sort_keys=[
        ("__sample_timestamp", "ascending"), ("__sample_partition", "ascending"),
        ("__sample_offset", "ascending"),
    ]))  # fmt: skip
    return newest.drop_columns(list(_HIDDEN))


def _peek_options(options: dict[str, Any]) -> dict[str, Any]:
    """A table's Kafka options for a throwaway reader: no group id (nothing joins the group
    or commits), bounded, no partition discovery, no dead-letter sink."""
    out = {
        k: v
        for k, v in options.items()
        if k not in ("properties.group.id", "dead_letter.sink") and not k.startswith("scan.")
    }
    out["scan.bounded.mode"] = "latest"
    out["scan.partition.discovery.interval"] = "0"
    if out.get("bad_records") == "dead_letter":
        out["bad_records"] = "skip"
    return out


async def _kafka_end_offsets(spec: Any) -> dict[int, int]:
    """Partition -> end offset now, from a throwaway reader started at the latest offsets
    (it reads nothing: bounded at the end it starts from)."""
    spec.options = {**_peek_options(spec.options), "scan.startup.mode": "latest"}
    source = registry.create_source("kafka", spec)
    await source.open(None)
    reader: AsyncIterator[Any] = source.read()
    try:
        async for _ in reader:
            pass
        parts = source.metrics().get("partitions") or {}
    finally:
        aclose = getattr(reader, "aclose", None)
        if aclose is not None:
            await aclose()
        await source.close()
    return {
        int(p): int(info.get("end_offset") or info.get("position") or 0)
        for p, info in parts.items()
    }


async def _kafka_read(spec: Any, starts: dict[int, int]) -> pa.Table:
    """Every message from ``starts`` (partition -> offset) to the end offsets, decoded by the
    table's own Kafka source (no group id, bounded), with hidden partition/offset/timestamp
    columns for ordering."""
    options = _peek_options(spec.options)
    options["scan.startup.mode"] = "specific-offsets"
    options["scan.startup.specific-offsets"] = ";".join(
        f"partition:{p},offset:{o}" for p, o in sorted(starts.items())
    )
    spec.options = options
    include = list(spec.extra.get("include") or [])
    include += [("partition", _HIDDEN[0]), ("offset", _HIDDEN[1]), ("timestamp", _HIDDEN[2])]
    spec.extra = {**spec.extra, "include": include}
    return await _read_head(registry.create_source("kafka", spec), 2**62)
