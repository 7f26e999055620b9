"""The catalog: named sources, sinks and views, persisted as JSON under ``state_dir``.

Python-registered in-memory tables and callbacks are kept for the life of the process only
(``persistent=False``); everything created by SQL survives a restart.

A change is atomic: the new file replaces the old one by rename, and the entries in memory
change only once it did; a failed write (a full disk) changes nothing. The file and
``state_dir`` are owner-only: connector options may hold credentials.
"""

from __future__ import annotations

import contextlib
import difflib
import errno
import json
import os
import threading
from pathlib import Path

from datum_sql.catalog.entries import Entry, SinkEntry, SourceEntry, ViewEntry
from datum_sql.durable import private_dir, replace_private
from datum_sql.errors import AlreadyExists, CatalogError, PlanError

CATALOG_FILE = "catalog.json"
CATALOG_VERSION = 1
#: The lists of the catalog file, and the entry kind each holds.
_KINDS: tuple[tuple[str, type[SourceEntry | SinkEntry | ViewEntry]], ...] = (
    ("sources", SourceEntry),
    ("sinks", SinkEntry),
    ("views", ViewEntry),
)


class Catalog:
    """Name → entry, one namespace for sources, sinks and views (as in SQL)."""

    def __init__(self, state_dir: Path | None) -> None:
        self._dir = state_dir
        self._entries: dict[str, Entry] = {}
        self._lock = threading.Lock()
        if state_dir is not None:
            try:
                if state_dir.exists() and not state_dir.is_dir():
                    raise NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR))
                private_dir(state_dir)
            except OSError as exc:
                raise CatalogError(f"cannot use state directory {state_dir}: {exc}") from exc
            self._load()

    # -- lookups ----------------------------------------------------------------------
    def get(self, name: str) -> Entry | None:
        return self._entries.get(name.lower())

    def require(
        self, name: str, *, kinds: tuple[str, ...] = ("source", "sink", "materialized view")
    ) -> Entry:
        entry = self.get(name)
        if entry is None or entry.kind not in kinds:
            candidates = [e.name for e in self._entries.values() if e.kind in kinds]
            near = difflib.get_close_matches(name.lower(), candidates, n=3)
            what = " or ".join(kinds)
            hint = f" Did you mean {', '.join(map(repr, near))}?" if near else ""
            have = f" Known: {', '.join(sorted(candidates))}." if candidates and not near else ""
            raise PlanError(f"unknown {what} {name!r}.{hint}{have}")
        return entry

    def sources(self) -> list[SourceEntry]:
        return [e for e in self._entries.values() if isinstance(e, SourceEntry)]

    def sinks(self) -> list[SinkEntry]:
        return [e for e in self._entries.values() if isinstance(e, SinkEntry)]

    def views(self) -> list[ViewEntry]:
        return [e for e in self._entries.values() if isinstance(e, ViewEntry)]

    def names(self) -> list[str]:
        return sorted(self._entries)

    # -- changes ----------------------------------------------------------------------
    def add(self, entry: Entry, *, replace: bool = False, if_not_exists: bool = False) -> None:
        with self._lock:
            key = entry.name.lower()
            old = self._entries.get(key)
            if old is not None and not replace:
                if if_not_exists:
                    return
                raise AlreadyExists(
                    f"{old.kind} {entry.name!r} already exists; DROP it first or use another name",
                    kind=old.kind,
                    name=old.name,
                )
            self._change({**self._entries, key: entry})

    def drop(self, name: str, kind: str, *, if_exists: bool = False) -> None:
        with self._lock:
            entry = self._entries.get(name.lower())
            if entry is None or entry.kind != kind:
                if if_exists:
                    return
                self.require(name, kinds=(kind,))
            self._change({k: e for k, e in self._entries.items() if k != name.lower()})

    # -- persistence ------------------------------------------------------------------
    def _path(self) -> Path | None:
        return None if self._dir is None else self._dir / CATALOG_FILE

    def _change(self, entries: dict[str, Entry]) -> None:
        """Make ``entries`` the catalog: on disk first, then in memory."""
        path = self._path()
        if path is not None:
            self._write(path, entries)
        self._entries = entries

    def _write(self, path: Path, entries: dict[str, Entry]) -> None:
        values = entries.values()
        doc = {
            "version": CATALOG_VERSION,
            "sources": [e.to_json() for e in values if isinstance(e, SourceEntry) and e.persistent],
            "sinks": [e.to_json() for e in values if isinstance(e, SinkEntry) and e.persistent],
            "views": [e.to_json() for e in values if isinstance(e, ViewEntry) and e.persistent],
        }
        try:
            previous = path.read_bytes() if path.exists() else None
        except OSError as exc:
            raise CatalogError(f"catalog file {path} cannot be read: {exc}") from exc
        try:
            private_dir(path.parent)
            replace_private(path, json.dumps(doc, indent=1).encode())
        except OSError as exc:
            self._restore(path, previous)
            raise CatalogError(f"catalog file {path} could not be written: {exc}") from exc

    @staticmethod
    def _restore(path: Path, previous: bytes | None) -> None:
        """Put the previous file back if the new one already replaced it (making the rename
        durable is the one step that can fail after it). Best effort: the error reported is
        the write's."""
        with contextlib.suppress(OSError):
            if previous is None:
                path.unlink(missing_ok=True)
            elif path.read_bytes() != previous:
                replace_private(path, previous)

    def _load(self) -> None:
        path = self._path()
        if path is None or not path.exists():
            return
        try:
            doc = json.loads(path.read_text())
        except OSError as exc:
            raise CatalogError(f"catalog file {path} cannot be read: {exc}") from exc
        except ValueError as exc:
            raise CatalogError(f"catalog file {path} is not valid JSON: {exc}") from exc
        version = doc.get("version") if isinstance(doc, dict) else None
        if version != CATALOG_VERSION:
            raise CatalogError(
                f"catalog file {path} has version {version}, expected {CATALOG_VERSION}"
            )
        for key, kind in _KINDS:
            listed = doc.get(key, [])
            if not isinstance(listed, list):
                raise CatalogError(f"catalog file {path}: {key!r} is not a list")
            for n, d in enumerate(listed):
                try:
                    entry = kind.from_json(d)
                except (AttributeError, KeyError, TypeError, ValueError) as exc:
                    raise CatalogError(
                        f"catalog file {path}: entry {n} of {key!r} is malformed ({exc})"
                    ) from exc
                self._entries[entry.name.lower()] = entry
