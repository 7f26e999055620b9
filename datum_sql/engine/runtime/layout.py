"""Where a query's files live under ``state_dir``::

    <state_dir>/queries/<query name, made file-safe>/
        LOCK            held while the query runs (lock.py)
        checkpoints/    its checkpoints (checkpoint.py)

The Context writes there; ``datum-sql status`` and ``reset`` (datum_sql/ops/) read the same
layout without starting anything.
"""

from __future__ import annotations

import re
from pathlib import Path

QUERIES_DIR = "queries"
CHECKPOINTS_DIR = "checkpoints"


def safe_name(name: str) -> str:
    """A query name as a directory name: anything but letters, digits, ``_.-`` becomes ``_``."""
    return re.sub(r"[^A-Za-z0-9_.-]", "_", name)


def query_dir(state_dir: Path, name: str) -> Path:
    return state_dir / QUERIES_DIR / safe_name(name)


def checkpoints_dir(state_dir: Path, name: str) -> Path:
    return query_dir(state_dir, name) / CHECKPOINTS_DIR
