"""Running a replay: each chunk of the range, each query of it, one bounded run after the
other into the queries' sinks, or (``dry_run``) only reading what the chunk would read.

A replay checkpoints nothing and leaves the queries' saved positions where they are: the
next ordinary run goes on from where the last one stopped. Each chunk's run commits its
sinks when it ends, so a replay that fails in chunk *k* has committed chunks 1..k-1; run
it again and those are written again, which an upsert sink (DuckDB with ``primary_key``)
takes as the same rows, and an append sink keeps twice: the report says which sinks append.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from datum_sql.catalog import SinkEntry, SourceEntry
from datum_sql.connectors.base import data_batches
from datum_sql.errors import PlanError
from datum_sql.replay.ranges import ReplayRange
from datum_sql.run_sync import run_async


@dataclass
class ChunkRun:
    """What one query did (or, in a dry run, would read) in one chunk."""

    chunk: ReplayRange
    query: str
    #: source table -> rows read of the range, and what the connector reports of where
    #: (files, Kafka partitions)
    sources: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: sink table -> rows written (none in a dry run)
    sinks: dict[str, int] = field(default_factory=dict)


@dataclass
class ReplayReport:
    """What a replay did, chunk by chunk."""

    range: ReplayRange
    dry_run: bool
    runs: list[ChunkRun] = field(default_factory=list)
    #: append sinks written: a replay repeated writes their rows again
    append_sinks: list[str] = field(default_factory=list)

    @property
    def rows_in(self) -> int:
        return sum(s["rows"] for r in self.runs for s in r.sources.values())

    def lines(self) -> list[str]:
        """The report as text, one line per query and chunk, then what it means."""
        verb = "would read" if self.dry_run else "read"
        out = []
        chunks = sorted({id(r.chunk): r.chunk for r in self.runs}.values(), key=self._order)
        for i, chunk in enumerate(chunks, start=1):
            head = f"chunk {i}/{len(chunks)} {chunk}" if len(chunks) > 1 else str(chunk)
            for run in (r for r in self.runs if r.chunk is chunk):
                parts = [f"{head}: {run.query}"]
                for table, info in run.sources.items():
                    parts.append(f"{verb} {table}: {info['rows']:,} rows{_where(info)}")
                for table, rows in run.sinks.items():
                    parts.append(f"wrote {table}: {rows:,} rows")
                out.append(" | ".join(parts))
        if self.dry_run:
            out.append("dry run: nothing was written")
        elif self.append_sinks:
            names = ", ".join(self.append_sinks)
            out.append(
                f"{names} append: replaying this range again writes its rows again (an upsert "
                "sink, DuckDB with primary_key, would take them as the same rows)"
            )
        out.append(
            "saved positions unchanged: the next run goes on from where the last one stopped"
        )
        return out

    def _order(self, chunk: ReplayRange) -> int:
        return next(i for i, r in enumerate(self.runs) if r.chunk is chunk)


def replay(
    ctx: Any,
    statements: Sequence[str],
    rng: ReplayRange,
    *,
    chunk: Any = None,
    chunk_rows: int | None = None,
    dry_run: bool = False,
) -> ReplayReport:
    """Replay ``statements`` (``INSERT INTO ... SELECT`` queries of ``ctx``) over ``rng``."""
    if not statements:
        raise PlanError("replay: the script has no INSERT INTO ... SELECT query to replay")
    prepared = [ctx.prepare(sql) for sql in statements]
    for sql, p in zip(statements, prepared):
        if p.query.sink is None:
            raise PlanError(f"replay: {sql.strip()!r} is not an INSERT INTO: it writes nowhere")
    chunks = rng.chunks(chunk, chunk_rows)
    report = ReplayReport(rng, dry_run)
    for p in prepared:
        sink = p.query.sink
        if (
            not dry_run
            and not sink.options.get("primary_key")
            and sink.name not in report.append_sinks
        ):
            report.append_sinks.append(sink.name)
    for part in chunks:
        for p in prepared:
            name = f"replay_{p.query.sink.name}"
            if dry_run:
                report.runs.append(_dry_run(ctx, p, part, name))
                continue
            q = ctx._start(p, name=name, replay=part)
            q.wait()
            status = q.status()
            run = ChunkRun(part, name)
            for table, info in status["sources"].items():
                run.sources[table] = {"rows": int(info.get("rows") or 0), **_located(info)}
            run.sinks = {t: int(i.get("rows") or 0) for t, i in status["sinks"].items()}
            report.runs.append(run)
    return report


def _dry_run(ctx: Any, prepared: Any, part: ReplayRange, name: str) -> ChunkRun:
    """What the query's sources hold of ``part``, read and counted, written nowhere."""
    run = ChunkRun(part, name)
    for node in prepared.graph.sources:
        entry = ctx.catalog.require(node.kind, kinds=("source", "sink"))
        if isinstance(entry, SinkEntry):
            continue  # a sink read back (a lookup of what another query wrote)
        assert isinstance(entry, SourceEntry)
        spec = ctx._spec(entry, query=name)
        spec.columns = tuple(node.schema.names)
        source = part.source(entry, spec)
        run.sources[entry.name] = run_async(_count(source))
    return run


async def _count(source: Any) -> dict[str, Any]:
    rows = 0
    async with contextlib.aclosing(data_batches(source)) as batches:
        async for batch in batches:
            rows += batch.num_rows
    return {"rows": rows, **_located(source.metrics())}


def _located(found: dict[str, Any]) -> dict[str, Any]:
    """Where a source read, from its connector's metrics: files or Kafka partitions."""
    out: dict[str, Any] = {}
    if "files_read" in found:
        out["files"] = found["files_read"]
    if found.get("partitions"):
        out["partitions"] = {
            p: {k: v for k, v in part.items() if k in ("position", "end_offset")}
            for p, part in found["partitions"].items()
        }
    return out


def _where(info: dict[str, Any]) -> str:
    if "files" in info:
        return f" ({info['files']} files)"
    if "partitions" in info:
        parts = ", ".join(
            f"p{p} to {v.get('position')}" for p, v in sorted(info["partitions"].items())
        )
        return f" ({parts})"
    return ""
