"""One runner per query directory: an exclusive lock held while a query runs.

Two Contexts (in one process or two) opening the same ``state_dir`` would otherwise both
resume a query — a materialized view restarts whenever its Context opens — and write its
checkpoints over each other. The lock is an ``flock`` on ``<query dir>/LOCK``: the
operating system releases it when the process ends, so a crash never leaves it behind.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

from datum_sql.durable import PRIVATE_FILE, private_dir
from datum_sql.errors import CheckpointError

LOCK_FILE = "LOCK"


class QueryLock:
    """Held from construction until :meth:`release`; raises if another holder has it."""

    def __init__(self, directory: Path, query: str) -> None:
        private_dir(directory)
        path = directory / LOCK_FILE
        fd = os.open(path, os.O_RDWR | os.O_CREAT, PRIVATE_FILE)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise CheckpointError(
                f"query {query!r} is already running on this state_dir (another Context or "
                f"process holds {path}); stop it there first, or use another state_dir"
            ) from None
        self._fd: int | None = fd

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
