"""The INSERT jobs ``datum-sql serve`` runs, remembered in the state directory so that the
next start resumes them from their checkpoints.

A job is recorded when a client starts it with a single ``INSERT INTO ... SELECT``
statement, and forgotten when ``CANCEL QUERY`` cancels it or when it finishes (its sources
ended). A job stopped by the server's shutdown (SIGTERM, which checkpoints it), killed with
the server or failed stays recorded: the next ``datum-sql serve`` on the state directory
starts it again under the same name, and the query resumes from its last checkpoint as any
INSERT does. The file (``server/jobs.json``) is owner-only and replaced atomically.
"""

from __future__ import annotations

import json
import logging
import threading
from pathlib import Path
from typing import Any

from datum_sql.durable import private_dir, replace_private
from datum_sql.errors import DatumError
from datum_sql.redaction import redact_sql

__all__ = ["Jobs"]

log = logging.getLogger("datum_sql.server")

JOBS_FILE = Path("server") / "jobs.json"


class Jobs:
    """The recorded jobs of one state directory (name -> SQL)."""

    def __init__(self, state_dir: Path) -> None:
        self.path = state_dir / JOBS_FILE
        self._lock = threading.Lock()
        self._running: dict[str, Any] = {}  # name -> the query handle started here
        self._jobs: dict[str, str] = {}
        if self.path.exists():
            try:
                doc = json.loads(self.path.read_text(encoding="utf-8"))
                self._jobs = {str(j["name"]): str(j["sql"]) for j in doc["jobs"]}
            except (OSError, ValueError, KeyError, TypeError) as exc:
                raise DatumError(
                    f"cannot read the server's job list {self.path}: {exc}; move it away to "
                    "start without resuming jobs"
                ) from None

    def add(self, query: Any, sql: str) -> None:
        with self._lock:
            self._running[query.name] = query
            self._jobs[query.name] = sql
            self._write()

    def forget(self, name: str) -> None:
        with self._lock:
            self._running.pop(name, None)
            if self._jobs.pop(name, None) is not None:
                self._write()

    def prune(self) -> None:
        """Forget the jobs started here that finished (their sources ended)."""
        with self._lock:
            done = [n for n, q in self._running.items() if q.done and q.state == "finished"]
            for name in done:
                del self._running[name]
                self._jobs.pop(name, None)
            if done:
                self._write()

    def resume(self, ctx: Any) -> list[str]:
        """Start every recorded job on ``ctx`` (each resumes from its checkpoint); the names
        started. A job that cannot start is logged and forgotten."""
        started = []
        for name, sql in list(self._jobs.items()):
            try:
                query = ctx.execute_streaming(sql, name=name)
            except DatumError as exc:
                log.error(
                    "job %s could not be resumed and is forgotten: %s (its SQL: %s)",
                    name, exc, " ".join(redact_sql(sql).split()),
                )  # fmt: skip
                self.forget(name)
                continue
            with self._lock:
                self._running[name] = query
            started.append(name)
            log.info("resumed job %s", name)
        return started

    def _write(self) -> None:
        doc = {"jobs": [{"name": n, "sql": s} for n, s in self._jobs.items()]}
        private_dir(self.path.parent)
        replace_private(self.path, json.dumps(doc, indent=1).encode())
