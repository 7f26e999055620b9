"""One runner per query directory: an exclusive lock held while a query runs.

Two Contexts (in one process or two) opening the same ``state_dir`` would otherwise both
resume a query — a materialized view restarts whenever its Context opens — and write its
checkpoints over each other. The lock is an ``flock`` on ``<query dir>/LOCK``: the
operating system releases it when the process ends, so a crash never leaves it behind.

:func:`is_running` tells whether a query holds it without waiting or creating anything (for
``datum-sql status``): it tries a shared lock and drops it at once. A query starting during
that instant would find the lock taken, so :class:`QueryLock` tries again for
:data:`PROBE_GRACE_S` before it calls the query already running.
"""

from __future__ import annotations

import fcntl
import os
import time
from pathlib import Path

from datum_sql.durable import PRIVATE_FILE, private_dir
from datum_sql.errors import CheckpointError

LOCK_FILE = "LOCK"
#: How long :class:`QueryLock` keeps trying a lock held by someone else (far longer than
#: an :func:`is_running` probe holds it).
PROBE_GRACE_S = 0.1


class QueryLock:
    """Held from construction until :meth:`release`; raises if another holder has it."""

    def __init__(self, directory: Path, query: str) -> None:
        private_dir(directory)
        path = directory / LOCK_FILE
        fd = os.open(path, os.O_RDWR | os.O_CREAT, PRIVATE_FILE)
        deadline = time.monotonic() + PROBE_GRACE_S
        while not _try_lock(fd, fcntl.LOCK_EX):
            if time.monotonic() < deadline:
                time.sleep(0.005)
                continue
            os.close(fd)
            raise CheckpointError(
                f"query {query!r} is already running on this state_dir (another Context or "
                f"process holds {path}); stop it there first, or use another state_dir"
            )
        self._fd: int | None = fd

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def is_running(directory: Path) -> bool:
    """Whether a query holds the lock of its ``directory`` (in this process or another)."""
    try:
        fd = os.open(directory / LOCK_FILE, os.O_RDONLY)
    except FileNotFoundError:
        return False  # never run here
    try:
        return not _try_lock(fd, fcntl.LOCK_SH)
    finally:
        os.close(fd)  # releases the shared lock at once


def _try_lock(fd: int, kind: int) -> bool:
    try:
        fcntl.flock(fd, kind | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True
