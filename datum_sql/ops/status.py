"""``datum-sql status``: what each query of a ``state_dir`` saved, without running anything.

Per query (a directory under ``queries/``): its name and SQL (secrets masked), whether it
is running (its lock is held: see ``lock.is_running``, which never blocks it), every kept
checkpoint with its time, and per source the position of the newest intact checkpoint.
Every checkpoint is checked as recovery checks it; a damaged one is listed under
``problems``, naming the file.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

from datum_sql.engine.runtime.checkpoint import CheckpointStore, Manifest, Saved
from datum_sql.engine.runtime.layout import CHECKPOINTS_DIR, QUERIES_DIR
from datum_sql.engine.runtime.lock import is_running
from datum_sql.errors import CheckpointError
from datum_sql.ops.positions import summarize
from datum_sql.redaction import redact_sql

#: The version of the ``--json`` document.
VERSION = 1


def state_status(state_dir: Path) -> dict[str, Any]:
    """The status document of every query under ``state_dir``."""
    directories = query_dirs(state_dir)
    queries = [query_status(d) for d in directories]
    return {
        "version": VERSION,
        "state_dir": str(state_dir),
        "queries": queries,
        "problems": [p for q in queries for p in q["problems"]],
    }


def query_dirs(state_dir: Path) -> list[Path]:
    """The query directories of ``state_dir``; raises when it is not one."""
    if not state_dir.is_dir():
        raise CheckpointError(f"no state directory {state_dir}")
    root = state_dir / QUERIES_DIR
    return sorted(d for d in root.iterdir() if d.is_dir()) if root.is_dir() else []


def store_of(directory: Path) -> CheckpointStore:
    return CheckpointStore(directory / CHECKPOINTS_DIR)


def newest_intact(saved: list[Saved]) -> Manifest | None:
    intact = [s.manifest for s in saved if s.manifest is not None]
    return intact[-1] if intact else None


def query_name(directory: Path, manifest: Manifest | None) -> str:
    """The name the query runs under (its directory's name is made file-safe)."""
    name = manifest.query.get("name") if manifest is not None else None
    return str(name) if name else directory.name


def query_status(directory: Path) -> dict[str, Any]:
    saved = store_of(directory).saved()
    manifest = newest_intact(saved)
    name = query_name(directory, manifest)
    described = manifest.query if manifest is not None else {}
    tables: dict[str, Any] = described.get("tables", {})
    reread = set(described.get("reread", []))
    sources = []
    sinks = []
    if manifest is not None:
        for node, position in manifest.positions.items():
            table = tables.get(node, {})
            sources.append(
                {
                    "node": node,
                    "table": table.get("table"),
                    "connector": table.get("connector"),
                    "read_again_on_restart": node in reread,
                    **summarize(position),
                }
            )
        for node in manifest.staged:
            table = tables.get(node, {})
            sinks.append({"node": node, **{k: table.get(k) for k in _SINK_FIELDS}})
    sql = described.get("sql")
    return {
        "name": name,
        "directory": str(directory),
        "running": is_running(directory),
        "sql": redact_sql(sql) if sql else None,
        "checkpoints": [_checkpoint(s) for s in saved],
        "last_checkpoint": _checkpoint(saved[-1]) if saved else None,
        "positions_from": manifest.checkpoint_id if manifest is not None else None,
        "sources": sources,
        "sinks": sinks,
        "problems": [
            f"query {name!r}: checkpoint {s.checkpoint_id} is damaged: {s.problem}"
            for s in saved
            if s.problem
        ],
    }


_SINK_FIELDS = ("table", "connector", "delivery", "upserts")


def _checkpoint(saved: Saved) -> dict[str, Any]:
    m = saved.manifest
    return {
        "id": saved.checkpoint_id,
        "time": _time(m.created_at) if m is not None else None,
        "created_at": m.created_at if m is not None else None,
        "damaged": saved.problem,
    }


def _time(epoch: float) -> str:
    """Local time with its UTC offset, to the second."""
    return dt.datetime.fromtimestamp(epoch).astimezone().isoformat(timespec="seconds")
