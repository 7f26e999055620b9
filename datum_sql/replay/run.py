"""Running a replay: each query of it over each chunk of the range, one bounded run after
the other into the query's sinks, or (``dry_run``) only reading what each chunk holds.

The chunks of one query are one run cut in pieces: each chunk's run resumes the state,
clocks and watermarks the one before left in the replay's own checkpoint store (its
sources open at the chunk's range), and only the last chunk ends event time, so a window
that spans two chunks is one window. Each chunk's run commits its sinks when it ends: a
replay that fails in chunk *k* has committed chunks 1..k-1, and run again writes them again,
which an upsert sink (DuckDB with ``primary_key``) takes as the same rows and an append sink
keeps twice; the report says which sinks append.

A replay leaves the queries' saved positions where they are, unless ``save_positions``:
then, once every chunk of a query committed, the replay's last checkpoint becomes the
query's (its last chunk paused rather than ended, so event time goes on), with the
positions of the range's end: the next ordinary run goes on from there.
"""

from __future__ import annotations

import contextlib
import shutil
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from datum_sql.catalog import SinkEntry, SourceEntry
from datum_sql.connectors.base import data_batches
from datum_sql.engine.runtime.checkpoint import CheckpointStore, Manifest
from datum_sql.engine.runtime.lock import LOCK_FILE, QueryLock, is_running
from datum_sql.errors import PlanError
from datum_sql.replay.ranges import ReplayRange
from datum_sql.run_sync import run_async

#: The name of a replay's own store under the state directory starts so.
REPLAY_PREFIX = ".replay-"


@dataclass(frozen=True)
class ReplayChunk:
    """One chunk's run of a query: the range it reads, the replay's checkpoint store it
    resumes from and checkpoints into, and whether it ends event time at its end."""

    range: ReplayRange
    store: CheckpointStore
    ends_input: bool


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
    #: the queries whose saved checkpoint is now the replay's (``save_positions``)
    saved: list[str] = field(default_factory=list)

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
        if self.saved:
            names = ", ".join(self.saved)
            out.append(
                f"saved positions of {names} moved to the end of the range: the next run goes "
                "on from there"
            )
        elif not self.dry_run:
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
    save_positions: bool = False,
) -> ReplayReport:
    """Replay ``statements`` (``INSERT INTO ... SELECT`` queries of ``ctx``) over ``rng``."""
    if not statements:
        raise PlanError("replay: the script has no INSERT INTO ... SELECT query to replay")
    prepared = [ctx.prepare(sql) for sql in statements]
    for sql, p in zip(statements, prepared):
        if p.query.sink is None:
            raise PlanError(f"replay: {sql.strip()!r} is not an INSERT INTO: it writes nowhere")
    if save_positions:
        _check_saveable(ctx, rng, prepared, dry_run)
    chunks = rng.chunks(chunk, chunk_rows)
    report = ReplayReport(rng, dry_run)
    with contextlib.ExitStack() as stores:
        done = []
        for p in prepared:
            sink = p.query.sink
            name = f"replay_{sink.name}"
            if dry_run:
                report.runs.extend(_dry_run(ctx, p, part, name) for part in chunks)
                continue
            if not sink.options.get("primary_key") and sink.name not in report.append_sinks:
                report.append_sinks.append(sink.name)
            store = stores.enter_context(_replay_store(ctx))
            for i, part in enumerate(chunks):
                ends = i == len(chunks) - 1 and not save_positions
                q = ctx._start(p, name=name, replay=ReplayChunk(part, store, ends))
                q.wait()
                report.runs.append(_chunk_run(part, name, q.status()))
            done.append((p, store))
        # only once every chunk of every query committed
        for p, store in done if save_positions else ():
            query = f"insert_into_{p.query.sink.name}"
            _adopt(ctx, query, p.graph, store, rng)
            report.saved.append(query)
    return report


def _chunk_run(part: ReplayRange, name: str, status: dict[str, Any]) -> ChunkRun:
    run = ChunkRun(part, name)
    for table, info in status["sources"].items():
        run.sources[table] = {"rows": int(info.get("rows") or 0), **_located(info)}
    run.sinks = {t: int(i.get("rows") or 0) for t, i in status["sinks"].items()}
    return run


@contextlib.contextmanager
def _replay_store(ctx: Any) -> Iterator[CheckpointStore]:
    """The replay's own checkpoint store, locked while the replay runs and removed when it
    ends; the stores of replays killed before they ended are removed here."""
    if ctx.state_dir is not None:
        state = Path(ctx.state_dir)
        state.mkdir(parents=True, exist_ok=True)
        for stale in state.glob(f"{REPLAY_PREFIX}*"):
            if (stale / LOCK_FILE).exists() and not is_running(stale):
                shutil.rmtree(stale, ignore_errors=True)
    root = Path(tempfile.mkdtemp(prefix=REPLAY_PREFIX, dir=ctx.state_dir))
    lock = QueryLock(root, "replay")
    try:
        yield CheckpointStore(root / "checkpoints")
    finally:
        lock.release()
        shutil.rmtree(root, ignore_errors=True)


def _check_saveable(ctx: Any, rng: ReplayRange, prepared: list[Any], dry_run: bool) -> None:
    """Refuse ``save_positions`` where the saved positions could not stand for the range."""
    if dry_run:
        raise PlanError("replay: a dry run saves nothing; leave out --save-positions")
    if ctx.state_dir is None:
        raise PlanError("replay: --save-positions needs a state directory to save them in")
    if rng.kind == "time":
        raise PlanError(
            "replay: a range of event time ends at no place in the sources (rows after it may "
            "sit anywhere in a topic or a file), so it cannot be saved as their position; "
            "replay a range of Kafka offsets or of files to save positions"
        )
    for p in prepared:
        query = f"insert_into_{p.query.sink.name}"
        recovered = CheckpointStore(ctx._query_dir(query) / "checkpoints").latest()
        if recovered is None:
            continue
        held = [nid for nid in recovered.states if p.graph.node(nid).role == "operator"]
        if held:
            raise PlanError(
                f"replay: query {query!r} has state of its own runs in its checkpoint "
                f"{recovered.manifest.checkpoint_id} ({', '.join(held)}); the replay's state "
                "cannot be merged into it. Reset the query first (datum-sql reset "
                f"{query} --to start), or replay without --save-positions"
            )


def _adopt(ctx: Any, query: str, graph: Any, store: CheckpointStore, rng: ReplayRange) -> None:
    """Make the replay's last checkpoint the query's, its source positions merged into
    those the query saved (files read are added; Kafka partitions of the range move)."""
    last = store.latest()
    assert last is not None, "every chunk of the replay checkpointed"
    lock = QueryLock(ctx._query_dir(query), query)
    try:
        own, recovered = ctx._checkpoints(query, graph, False)
        saved = recovered.manifest.positions if recovered is not None else {}
        positions = {
            sid: _merge(saved.get(sid, {}), replayed, rng)
            for sid, replayed in last.manifest.positions.items()
        }
        ids = own.ids()
        manifest = Manifest(
            checkpoint_id=(ids[-1] if ids else 0) + 1,
            fingerprint=graph.fingerprint(),
            created_at=time.time(),
            positions=positions,
            clocks=last.manifest.clocks,
            watermarks=last.manifest.watermarks,
            staged={},  # every chunk's output is committed already
            query={**last.manifest.query, "name": query},
        )
        own.write(manifest, last.states)
    finally:
        lock.release()


def _merge(saved: dict[str, Any], replayed: dict[str, Any], rng: ReplayRange) -> dict[str, Any]:
    """One source's saved position (``{}``: none) moved by what the replay read of ``rng``:
    the files it read are added to those done; the Kafka partitions of the range move to
    its end, the others keep their saved offsets (or, with none, start as the source says)."""
    if rng.kind == "offsets" and "offsets" in replayed:
        named = {str(p) for p in rng.offsets()[1]}
        offsets = dict(saved.get("offsets", {}))
        offsets.update({p: o for p, o in replayed["offsets"].items() if p in named})
        return {**saved, "offsets": offsets}
    if rng.kind == "files" and "done" in replayed:
        done = {read["path"]: read for read in saved.get("done", [])}
        done.update((read["path"], read) for read in replayed["done"])
        merged = {k: v for k, v in saved.items() if k != "done"}
        if merged.get("file") in done:  # read to its end by the replay
            merged = {k: v for k, v in merged.items() if k not in _READING}
        return {**merged, "done": list(done.values())}
    return replayed


#: The keys of a file source's position that say which file it was in the middle of.
_READING = ("file", "read", "at", "row", "rejected")


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
