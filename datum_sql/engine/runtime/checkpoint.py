"""Checkpoints: a consistent cut of a query, published atomically, and read back.

Layout under a query's checkpoint directory (owner-only, like everything under state_dir)::

    chk-00000042/
        op-<node id>.state        operator state (Arrow IPC, see engine/state/codec.py)
        MANIFEST.json             written last, by rename: the checkpoint exists once it does

The manifest records what the query is (name, SQL, tables), the plan fingerprint, every
source position and event-time clock, the watermark bookkeeping, every sink's staged output
(with the sizes and SHA-256 of its staged files), each state file's size and SHA-256, and
the SHA-256 of its own content. A checkpoint whose manifest is unreadable or fails its
checksum, or whose state files do not match theirs, is passed over for the one before it
(a :class:`Skipped`, which keeps what the checkpoint staged when the manifest can still
tell: the ``staged`` section has a checksum of its own); ``recovery.py`` decides whether
falling back is exactly-once, and checks the staged sink files before anything is restored
or published. ``CheckpointStore.saved`` checks every checkpoint without loading it
(``datum-sql status``); ``CheckpointStore.delete`` removes some (``datum-sql reset``).

Commit protocol (``Executor.commit``), each step after the previous one finished:

1. take the step lock: no batch is between operators, so the cut is consistent;
2. snapshot every operator, source position and source clock;
3. ``pre_commit`` every sink: its output becomes durable but stays invisible;
4. write the state files, then the manifest (temp file, fsync, rename): *published*;
5. ``commit`` every sink: output becomes visible (idempotent, repeated by recovery);
6. ``commit`` every source position (Kafka offsets go to the broker only now);
7. delete checkpoints older than the newest ``retain``.

A crash before 4 recovers from the previous checkpoint; a crash after 4 recovers from this
one, and recovery repeats step 5 before reading on.
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from datum_sql.durable import (
    file_sha256,
    fsync_dir,
    private_dir,
    replace_private,
    write_private,
)
from datum_sql.errors import CheckpointError

MANIFEST = "MANIFEST.json"
#: 2: the manifest carries the checksum of its own content and of every staged sink file.
MANIFEST_VERSION = 2
#: The manifest's own checksum: SHA-256 of its other fields (see :func:`_digest`).
CHECKSUM = "sha256"
#: The checksum of the ``staged`` section alone: a manifest damaged elsewhere still says
#: what its checkpoint staged, so recovery can tell whether any of it was published.
STAGED_CHECKSUM = "staged_sha256"
_DIR = re.compile(r"^chk-(\d{8})$")
#: A sink's delivery, as ``Manifest.query`` records it: published with the checkpoint
#: (files, DuckDB); sent as produced, so replayed rows come again (Kafka, callbacks); or a
#: result kept in the checkpoint itself (a materialized view's), restored with it.
EXACTLY_ONCE = "exactly once"
AT_LEAST_ONCE = "at least once"
IN_CHECKPOINT = "kept in the checkpoint"
#: How long :meth:`CheckpointStore.saved` waits before checking a damaged checkpoint again.
_RECHECK_S = 0.05


@dataclass
class Manifest:
    checkpoint_id: int
    fingerprint: str
    created_at: float
    positions: dict[str, Any]
    clocks: dict[str, Any]
    watermarks: dict[str, Any]
    staged: dict[str, Any]
    #: operator node id -> {"file", "size", "sha256"}
    states: dict[str, dict[str, Any]] = field(default_factory=dict)
    duration_s: float = 0.0
    #: What the query is, for ``datum-sql status`` and ``reset`` (datum_sql/ops/): ``name``,
    #: ``sql``, ``tables`` (node id -> its ``table`` and ``connector``; a sink's also its
    #: ``delivery`` and whether it ``upserts``), ``reread`` (sources read again on every
    #: restart). Filled in by ``Context._launch``; empty in a manifest written before.
    query: dict[str, Any] = field(default_factory=dict)
    version: int = MANIFEST_VERSION

    def to_json(self) -> dict[str, Any]:
        return self.__dict__.copy()


@dataclass(frozen=True)
class Skipped:
    """A newer checkpoint that recovery passed over."""

    checkpoint_id: int
    #: What is damaged, naming the file.
    problem: str
    #: What its sinks staged (sink id -> record), when its manifest can still tell; None
    #: when it cannot (unreadable, or the ``staged`` section fails its own checksum).
    staged: dict[str, Any] | None

    @property
    def reason(self) -> str:
        return f"checkpoint {self.checkpoint_id}: {self.problem}"


@dataclass(frozen=True)
class Saved:
    """A published checkpoint as found on disk: its manifest when it is intact, else what
    is damaged (naming the file)."""

    checkpoint_id: int
    manifest: Manifest | None
    problem: str | None = None


@dataclass
class Recovered:
    manifest: Manifest
    states: dict[str, bytes]
    #: Newer checkpoints that were skipped, newest first.
    passed: list[Skipped]

    @property
    def skipped(self) -> list[str]:
        """Why each newer checkpoint was skipped (for status and logs)."""
        return [s.reason for s in self.passed]


class _Damaged(Exception):
    """A checkpoint that cannot be restored: why, and what it staged (if known)."""

    def __init__(self, problem: str, staged: dict[str, Any] | None) -> None:
        super().__init__(problem)
        self.problem = problem
        self.staged = staged


class CheckpointStore:
    """Checkpoints of one query in a local directory."""

    def __init__(self, root: Path, *, retain: int = 3) -> None:
        self.root = root
        self.retain = max(retain, 1)

    def _dir(self, checkpoint_id: int) -> Path:
        return self.root / f"chk-{checkpoint_id:08d}"

    def ids(self) -> list[int]:
        if not self.root.exists():
            return []
        out = []
        for p in self.root.iterdir():
            m = _DIR.match(p.name)
            if m and p.is_dir():
                out.append(int(m.group(1)))
        return sorted(out)

    def write(self, manifest: Manifest, states: dict[str, bytes]) -> int:
        """Write state files then the manifest (atomically); returns bytes written. A file
        that cannot be written (a full disk) raises CheckpointError naming it."""
        target = self._dir(manifest.checkpoint_id)
        path = self.root
        try:
            for stale in self.ids():
                # This id's half-written attempt from a crash, and newer checkpoints of a run
                # recovery fell back from: were one of them to read back intact later (a
                # passing I/O error), it would be resumed from instead of this one.
                if stale >= manifest.checkpoint_id:
                    shutil.rmtree(path := self._dir(stale))
            path = target
            private_dir(self.root)
            private_dir(target)
            size = 0
            for node_id, data in states.items():
                name = f"op-{node_id}.state"
                path = target / name
                write_private(path, data)
                manifest.states[node_id] = {
                    "file": name,
                    "size": len(data),
                    "sha256": hashlib.sha256(data).hexdigest(),
                }
                size += len(data)
            doc = json.loads(json.dumps(manifest.to_json(), default=str))  # as it reads back
            doc[STAGED_CHECKSUM] = _digest(doc["staged"])
            doc[CHECKSUM] = _digest(doc)
            body = json.dumps(doc, indent=1).encode()
            path = target / MANIFEST
            replace_private(path, body)
        except OSError as exc:
            raise CheckpointError(
                f"checkpoint {manifest.checkpoint_id}: cannot write {path}: {exc}"
            ) from exc
        return size + len(body)

    def prune(self) -> None:
        """Keep the newest ``retain`` published checkpoints; drop the rest."""
        published = [i for i in self.ids() if (self._dir(i) / MANIFEST).exists()]
        for old in published[: -self.retain]:
            shutil.rmtree(self._dir(old), ignore_errors=True)
        newest = published[-1] if published else None
        for i in self.ids():
            if newest is not None and i < newest and i not in published:
                shutil.rmtree(self._dir(i), ignore_errors=True)

    def delete(self, ids: list[int]) -> None:
        """Delete checkpoints ``ids`` (``datum-sql reset``), newest first, each unpublished
        (its manifest removed, durably) before its files go: a crash midway leaves whole
        checkpoints and unpublished ones, which recovery passes over and the next
        checkpoint deletes."""
        for cid in sorted(ids, reverse=True):
            target = self._dir(cid)
            path = target / MANIFEST
            try:
                path.unlink(missing_ok=True)
                fsync_dir(target)
                shutil.rmtree(path := target)
            except OSError as exc:
                raise CheckpointError(f"checkpoint {cid}: cannot delete {path}: {exc}") from exc

    def latest(self, *, before: int | None = None) -> Recovered | None:
        """The newest complete, intact checkpoint (older than ``before``, if given), or None."""
        passed: list[Skipped] = []
        for cid in reversed(self.ids()):
            if before is not None and cid >= before:
                continue
            if not (self._dir(cid) / MANIFEST).exists():
                continue  # never published: a crash came before its manifest
            try:
                manifest, states = self._read(cid)
            except _Damaged as exc:
                passed.append(Skipped(cid, exc.problem, exc.staged))
                continue
            return Recovered(manifest, states, passed)
        if passed:
            reasons = "; ".join(s.reason for s in passed)
            raise CheckpointError(f"no intact checkpoint to recover from: {reasons}")
        return None

    def saved(self) -> list[Saved]:
        """Every published checkpoint, oldest first, checked as recovery checks it (the
        manifest's checksum, each state file's size and checksum) without loading state.

        Read-only, so safe beside the query writing and pruning them: a manifest is
        replaced atomically, so it reads whole; a checkpoint deleted meanwhile (pruned) is
        left out; damage is reported only if it is still there when checked again."""
        found = [self._inspect(cid) for cid in self.ids()]
        return [s for s in found if s is not None]

    def _inspect(self, cid: int) -> Saved | None:
        problem = ""
        for attempt in range(2):
            if attempt:
                time.sleep(_RECHECK_S)  # a prune may be deleting it right now
            if not (self._dir(cid) / MANIFEST).exists():
                return None  # not published yet, or pruned meanwhile
            try:
                return Saved(cid, self._read(cid, load=False)[0])
            except _Damaged as exc:
                problem = exc.problem
        return Saved(cid, None, problem)

    def _read(self, cid: int, *, load: bool = True) -> tuple[Manifest, dict[str, bytes]]:
        """The manifest and (``load``) the state files of checkpoint ``cid``, all checked;
        without ``load`` the state files are only checked (streamed), not kept."""
        d = self._dir(cid)
        path = d / MANIFEST
        try:
            doc = json.loads(path.read_text())
        except (OSError, ValueError) as exc:
            raise _Damaged(f"unreadable manifest {path} ({exc})", None) from exc
        if not isinstance(doc, dict) or doc.get("version") != MANIFEST_VERSION:
            version = doc.get("version") if isinstance(doc, dict) else None
            raise _Damaged(
                f"manifest {path} has version {version}, not {MANIFEST_VERSION}; this build "
                "cannot read it",
                None,
            )
        staged = _staged_section(doc)
        if doc.pop(CHECKSUM, None) != _digest(doc):
            raise _Damaged(f"manifest {path} is corrupt (checksum mismatch)", staged)
        doc.pop(STAGED_CHECKSUM, None)
        manifest = Manifest(**doc)
        states: dict[str, bytes] = {}
        for node_id, info in manifest.states.items():
            file = d / info["file"]
            try:
                if load:
                    data = file.read_bytes()
                    size, digest = len(data), hashlib.sha256(data).hexdigest()
                else:
                    size, digest = file.stat().st_size, file_sha256(file)
            except OSError as exc:
                raise _Damaged(f"state file {file} missing", manifest.staged) from exc
            if size != info["size"] or digest != info["sha256"]:
                raise _Damaged(f"state file {file} is corrupt (checksum mismatch)", manifest.staged)
            if load:
                states[node_id] = data
        return manifest, states


def _staged_section(doc: dict[str, Any]) -> dict[str, Any] | None:
    """A manifest's ``staged`` section, if it matches its own checksum (whatever the rest)."""
    staged = doc.get("staged")
    if isinstance(staged, dict) and doc.get(STAGED_CHECKSUM) == _digest(staged):
        return staged
    return None


def _digest(doc: Any) -> str:
    """SHA-256 of a manifest's fields (without its checksum), or of one section, in one
    canonical JSON form."""
    canonical = json.dumps(doc, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()
