"""``datum-sql reset QUERY --to start|checkpoint:N``: move a query's saved position.

``start`` deletes every checkpoint: the next run reads its sources from where a first run
starts, with no state. The sinks keep what they hold, so their rows come again.

``checkpoint:N`` deletes the checkpoints after N (N must be kept and intact): the next run
resumes from N and replays what came after it. That is exactly-once only if none of that
output reached a sink that appends: the checkpoints after N name what they staged for each
sink, and output staged there is published (or is, by the next run's recovery) — a replay
would write it a second time. So a rollback is refused when any checkpoint after N staged
rows for a sink that appends (files, DuckDB without ``primary_key``), or when one of them
is damaged and so cannot tell; a sink that upserts by key is overwritten by the replayed
changelog, as after a recovery that falls back (``engine/runtime/recovery.py``); a sink
that is at-least-once anyway (Kafka) receives the replayed rows again, which the plan says.
A Kafka source sharing a consumer group that read on after N is refused as well (see
:func:`_refuse_group_rewind`).

Nothing changes unless asked (``apply``): the plan says what would happen. Applying takes
the query's run lock, so a running query is refused, and no query starts meanwhile.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from datum_sql.catalog import Catalog, SinkEntry, SourceEntry
from datum_sql.engine.runtime.checkpoint import (
    AT_LEAST_ONCE,
    EXACTLY_ONCE,
    IN_CHECKPOINT,
    Manifest,
    Saved,
)
from datum_sql.engine.runtime.layout import safe_name
from datum_sql.engine.runtime.lock import QueryLock, is_running
from datum_sql.errors import CheckpointError, PlanError
from datum_sql.ops.positions import describe, summarize
from datum_sql.ops.status import newest_intact, query_dirs, query_name, store_of

START = "start"


@dataclass
class ResetPlan:
    query: str
    #: None: back to the start; else the checkpoint to resume from.
    to: int | None
    #: The checkpoints deleted, newest first.
    delete: list[int]
    #: What it means for each source, the state and each sink.
    effects: list[str] = field(default_factory=list)
    applied: bool = False

    def to_json(self) -> dict[str, Any]:
        return {
            "query": self.query,
            "to": START if self.to is None else f"checkpoint:{self.to}",
            "delete_checkpoints": self.delete,
            "effects": self.effects,
            "applied": self.applied,
        }


def parse_target(text: str) -> int | None:
    """``start`` -> None; ``checkpoint:N`` -> N."""
    if text == START:
        return None
    kind, _, number = text.partition(":")
    if kind == "checkpoint" and number.isdigit():
        return int(number)
    raise ValueError(f"--to takes 'start' or 'checkpoint:N' (N a checkpoint id), not {text!r}")


def reset(state_dir: Path, query: str, to: int | None, *, apply: bool) -> ResetPlan:
    """The plan of moving ``query`` to ``to``, carried out when ``apply``. Raises
    :class:`CheckpointError` (the reason) when it must not be done."""
    directory, name = _find(state_dir, query)
    if not apply:
        if is_running(directory):
            raise _running(name)
        return _plan(state_dir, directory, name, to)
    try:
        lock = QueryLock(directory, name)
    except CheckpointError:
        raise _running(name) from None
    try:
        plan = _plan(state_dir, directory, name, to)
        store_of(directory).delete(plan.delete)
        plan.applied = True
        return plan
    finally:
        lock.release()


def _running(name: str) -> CheckpointError:
    return CheckpointError(
        f"query {name!r} is running (it holds its lock); stop it first, then reset it"
    )


def _find(state_dir: Path, query: str) -> tuple[Path, str]:
    names = {}
    for directory in query_dirs(state_dir):
        name = query_name(directory, newest_intact(store_of(directory).saved()))
        if query in (name, directory.name) or directory.name == safe_name(query):
            return directory, name
        names[name] = directory
    known = f"; its queries: {', '.join(sorted(names))}" if names else "; it has none"
    raise PlanError(f"no query {query!r} in state directory {state_dir}{known}")


def _plan(state_dir: Path, directory: Path, name: str, to: int | None) -> ResetPlan:
    store = store_of(directory)
    saved = store.saved()
    newest = newest_intact(saved)
    tables: dict[str, Any] = newest.query.get("tables", {}) if newest is not None else {}
    if to is None:
        if not saved:
            return ResetPlan(
                name, None, [], ["no checkpoint is kept: the next run starts from the beginning"]
            )
        plan = ResetPlan(name, None, sorted(store.ids(), reverse=True))
        plan.effects += _from_start(state_dir, newest, tables)
        return plan
    plan = _rollback(name, to, saved, sorted(store.ids(), reverse=True), store.retain)
    if plan.delete:
        _refuse_group_rewind(name, to, saved, Catalog(state_dir))
    return plan


def _from_start(state_dir: Path, newest: Manifest | None, tables: dict[str, Any]) -> list[str]:
    catalog = Catalog(state_dir)
    effects = []
    for node in newest.positions if newest is not None else []:
        table = tables.get(node, {})
        entry = catalog.get(table.get("table") or "")
        effects.append(
            _source_start(node, table, entry if isinstance(entry, SourceEntry) else None)
        )
    effects.append("operator state is dropped: every window, group and join starts empty")
    for node, table in _sinks(newest, tables):
        entry = catalog.get(table.get("table") or "")
        effects.append(_sink_start(node, table, entry if isinstance(entry, SinkEntry) else None))
    return effects


def _source_start(node: str, table: dict[str, Any], entry: SourceEntry | None) -> str:
    what = _what("source", node, table)
    if entry is None or entry.connector != "kafka":
        return f"{what} is read from its start, as by a first run"
    mode = str(entry.options.get("scan.startup.mode", "earliest"))
    if mode == "earliest":
        return f"{what} is read from the earliest offset each partition retains"
    if mode == "group-offsets":
        return (
            f"{what} starts at its consumer group's committed offsets (scan.startup.mode = "
            "'group-offsets'), not at the beginning of the topic: move the group's offsets "
            "with Kafka's tools to read it all again"
        )
    return f"{what} starts where scan.startup.mode = {mode!r} says, as a first run does"


def _sink_start(node: str, table: dict[str, Any], entry: SinkEntry | None) -> str:
    what = _what("sink", node, table)
    where = f" ({entry.options['path']})" if entry is not None and "path" in entry.options else ""
    delivery = table.get("delivery")
    if delivery == IN_CHECKPOINT:
        return f"{what}: the result is built again from the sources"
    if table.get("upserts"):
        return (
            f"{what} keeps its data{where}: it upserts by key, so the rows written again "
            "overwrite those of the same key; keys the new run never writes stay"
        )
    return (
        f"{what} keeps its data{where}: every row is written again beside what it holds "
        "(duplicates), unless you empty it before the next run"
    )


def _rollback(name: str, to: int, saved: list[Saved], ids: list[int], retain: int) -> ResetPlan:
    kept = {s.checkpoint_id: s for s in saved}
    target = kept.get(to)
    if target is None or target.manifest is None:
        listing = ", ".join(
            f"{s.checkpoint_id}" + (" (damaged)" if s.problem else "") for s in saved
        )
        why = f"is damaged ({target.problem})" if target is not None else "is not kept"
        raise CheckpointError(
            f"query {name!r}: checkpoint {to} {why}; kept checkpoints: {listing or 'none'} "
            f"(the newest {retain} are kept). Use --to checkpoint:N with one of them, or --to start"
        )
    base = target.manifest
    later = [s for s in saved if s.checkpoint_id > to]
    if not later:
        return ResetPlan(name, to, [], [f"checkpoint {to} is the newest: nothing to change"])
    plan = ResetPlan(name, to, [i for i in ids if i > to])
    tables: dict[str, Any] = base.query.get("tables", {})
    after = _checkpoints(later)
    for node, position in base.positions.items():
        what = _what("source", node, tables.get(node, {}))
        plan.effects.append(f"{what} resumes at checkpoint {to}: {describe(summarize(position))}")
    plan.effects.append(
        f"operator state goes back to checkpoint {to}"
        if base.states
        else "the query keeps no operator state"
    )
    for node, table in _sinks(base, tables):
        what = _what("sink", node, table)
        delivery = table.get("delivery")
        if delivery == IN_CHECKPOINT:
            plan.effects.append(f"{what}: the result goes back to checkpoint {to}")
        elif delivery == AT_LEAST_ONCE:
            plan.effects.append(
                f"{what} is at least once: it receives again what the query sent it after "
                f"checkpoint {to} ({after})"
            )
        elif not (wrote := _wrote_after(node, base, later)):
            plan.effects.append(f"{what}: {after} wrote nothing into it")
        elif table.get("upserts"):
            plan.effects.append(
                f"{what} upserts by key: the rows of {_checkpoints(wrote)} are written "
                "again and overwrite those they wrote"
            )
        else:
            raise CheckpointError(
                f"query {name!r} cannot go back to checkpoint {to}: {_why(wrote)} for {what}, "
                "which appends"
                + ("" if delivery == EXACTLY_ONCE else " (or its delivery is not recorded)")
                + ", so the replay would write those rows a second time. Empty the sink and "
                "use --to start, or keep the newest checkpoint"
            )
    return plan


def _refuse_group_rewind(name: str, to: int, saved: list[Saved], catalog: Catalog) -> None:
    """A Kafka source sharing a consumer group (``properties.group.id``) must not go back:
    the group's committed offsets stay past checkpoint ``to``'s until the resumed run's
    first checkpoint, and a partition a rebalance gives back resumes at the later of its
    position and the committed offset, which would skip the rows in between."""
    base = next(s.manifest for s in saved if s.checkpoint_id == to)
    assert base is not None
    newer = [s.manifest for s in saved if s.checkpoint_id > to and s.manifest is not None]
    tables: dict[str, Any] = base.query.get("tables", {})
    for node, position in base.positions.items():
        table = tables.get(node, {})
        entry = catalog.get(table.get("table") or "")
        if not (isinstance(entry, SourceEntry) and entry.connector == "kafka"):
            continue
        group = entry.options.get("properties.group.id")
        offsets = summarize(position).get("offsets", {})
        moved = any(
            int(o) > int(offsets.get(p, -1))
            for m in newer
            for p, o in summarize(m.positions.get(node)).get("offsets", {}).items()
        )
        if group and moved:
            raise CheckpointError(
                f"query {name!r} cannot go back to checkpoint {to}: {_what('source', node, table)}"
                f" shares consumer group {group!r}, whose committed offsets are past checkpoint "
                f"{to}'s; after a rebalance the query could resume at them and skip the rows "
                "in between. Use --to start, or keep the newest checkpoint"
            )


def _sinks(manifest: Manifest | None, tables: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    if manifest is None:
        return []
    return [(node, tables.get(node, {})) for node in manifest.staged]


def _wrote_after(node: str, base: Manifest, later: list[Saved]) -> list[Saved]:
    """The checkpoints after ``base`` that staged output for sink ``node`` which ``base``
    did not (a record carries what earlier commits left unpublished), or that are damaged
    and so cannot tell."""
    mine = base.staged.get(node) or {}
    return [s for s in later if s.manifest is None or _new(s.manifest.staged.get(node) or {}, mine)]


def _new(record: dict[str, Any], base: dict[str, Any]) -> bool:
    for key in ("files", "parts"):  # the file sinks' staged files, DuckDB's staged parts
        if key in record:
            return any(item not in base.get(key, []) for item in record[key])
    return bool(record) and record != base


def _checkpoints(saved: list[Saved]) -> str:
    ids = ", ".join(str(s.checkpoint_id) for s in saved)
    return f"checkpoint{'s' if len(saved) > 1 else ''} {ids}"


def _why(wrote: list[Saved]) -> str:
    damaged = [s for s in wrote if s.manifest is None]
    if damaged:
        return f"checkpoint {damaged[0].checkpoint_id} is damaged, so what it published is unknown"
    return f"{_checkpoints(wrote)} published rows (or the next run publishes them)"


def _what(role: str, node: str, table: dict[str, Any]) -> str:
    name = table.get("table")
    connector = table.get("connector")
    if not name:
        return f"{role} {node}"
    return f"{role} {name!r}" + (f" ({connector})" if connector else "")
