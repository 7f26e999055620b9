"""Checkpoints: a consistent cut of a query, published atomically, and read back.

Layout under a query's checkpoint directory::

    chk-00000042/
        op-<node id>.state        operator state (Arrow IPC, see engine/state/codec.py)
        MANIFEST.json             written last, by rename: the checkpoint exists once it does

The manifest records the plan fingerprint, every source position and event-time clock,
the watermark bookkeeping, every sink's staged output, and each state file's size and
SHA-256. A checkpoint whose manifest is missing, unreadable or whose files do not match
their checksums is skipped in favour of the one before it.

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
import os
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from datum_sql.errors import CheckpointError

MANIFEST = "MANIFEST.json"
MANIFEST_VERSION = 1
_DIR = re.compile(r"^chk-(\d{8})$")


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
    version: int = MANIFEST_VERSION

    def to_json(self) -> dict[str, Any]:
        return self.__dict__.copy()


@dataclass
class Recovered:
    manifest: Manifest
    states: dict[str, bytes]
    #: Newer checkpoints that were skipped, with the reason (for status and logs).
    skipped: list[str]


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
        """Write state files then the manifest (atomically); returns bytes written."""
        target = self._dir(manifest.checkpoint_id)
        if target.exists():
            shutil.rmtree(target)  # a half-written attempt with this id from a crash
        target.mkdir(parents=True)
        size = 0
        for node_id, data in states.items():
            name = f"op-{node_id}.state"
            _write_durable(target / name, data)
            manifest.states[node_id] = {
                "file": name,
                "size": len(data),
                "sha256": hashlib.sha256(data).hexdigest(),
            }
            size += len(data)
        body = json.dumps(manifest.to_json(), indent=1, default=str).encode()
        tmp = target / (MANIFEST + ".tmp")
        _write_durable(tmp, body)
        os.replace(tmp, target / MANIFEST)
        _fsync_dir(target)
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

    def latest(self) -> Recovered | None:
        """The newest complete, intact checkpoint, or None."""
        skipped: list[str] = []
        for cid in reversed(self.ids()):
            if not (self._dir(cid) / MANIFEST).exists():
                continue  # never published: a crash came before its manifest
            try:
                manifest, states = self._read(cid)
            except CheckpointError as exc:
                skipped.append(str(exc))
                continue
            return Recovered(manifest, states, skipped)
        if skipped:
            raise CheckpointError("no intact checkpoint to recover from: " + "; ".join(skipped))
        return None

    def _read(self, cid: int) -> tuple[Manifest, dict[str, bytes]]:
        d = self._dir(cid)
        path = d / MANIFEST
        try:
            doc = json.loads(path.read_text())
        except (OSError, ValueError) as exc:
            raise CheckpointError(f"checkpoint {cid}: unreadable manifest ({exc})") from exc
        if doc.get("version") != MANIFEST_VERSION:
            raise CheckpointError(
                f"checkpoint {cid}: manifest version {doc.get('version')} is not "
                f"{MANIFEST_VERSION}; this build cannot read it"
            )
        manifest = Manifest(**doc)
        states: dict[str, bytes] = {}
        for node_id, info in manifest.states.items():
            try:
                data = (d / info["file"]).read_bytes()
            except OSError as exc:
                raise CheckpointError(
                    f"checkpoint {cid}: state file {info['file']} missing"
                ) from exc
            if len(data) != info["size"] or hashlib.sha256(data).hexdigest() != info["sha256"]:
                raise CheckpointError(
                    f"checkpoint {cid}: state file {info['file']} is corrupt (checksum mismatch)"
                )
            states[node_id] = data
        return manifest, states


def _write_durable(path: Path, data: bytes) -> None:
    with open(path, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
