"""Files that must survive a crash intact: written durably, replaced atomically, checksummed.

Under ``state_dir`` they are also owner-only (directories 0700, files 0600, whatever the
umask): the catalog holds connector options, credentials among them, and checkpoints hold
the query's data. A leaf module (it imports nothing from datum_sql), so the catalog, the
runtime and the connectors can all use it. Callers turn ``OSError`` into their own errors.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
from pathlib import Path

PRIVATE_DIR = 0o700
PRIVATE_FILE = 0o600


def private_dir(path: Path) -> None:
    """Create ``path`` and its missing parents owner-only; make ``path`` owner-only."""
    missing = []
    parent = path
    while not parent.exists():
        missing.append(parent)
        parent = parent.parent
    for directory in reversed(missing):
        with contextlib.suppress(FileExistsError):
            os.mkdir(directory, PRIVATE_DIR)
        os.chmod(directory, PRIVATE_DIR)  # the umask may have taken bits away
    os.chmod(path, PRIVATE_DIR)


def write_private(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` (owner-only) and flush it to disk."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, PRIVATE_FILE)
    try:
        os.fchmod(fd, PRIVATE_FILE)  # an existing file keeps its mode through O_TRUNC
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    finally:
        os.close(fd)


def replace_private(path: Path, data: bytes) -> None:
    """Replace ``path`` with ``data`` atomically: a reader (or a crash) sees the old file
    or the new one, never a mix. On failure ``path`` is unchanged and no temp file is left."""
    tmp = path.with_name(path.name + ".tmp")
    try:
        write_private(tmp, data)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.remove(tmp)
        raise
    fsync_dir(path.parent)


def fsync_dir(path: Path) -> None:
    """Make a directory's entries (a rename, a new file) durable."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def file_sha256(path: str | Path) -> str:
    """The SHA-256 of a file's content, hex."""
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()
