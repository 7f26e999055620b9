"""What the file formats share: option parsing, path listing, casting with diagnostics, fsync."""

from __future__ import annotations

import glob
import os
from typing import Any

import pyarrow as pa

from datum_sql.errors import PlanError, SourceError

#: Characters that make a ``path`` option a glob rather than a file or directory.
_GLOB_CHARS = frozenset("*?[")


def int_option(table: str, options: dict[str, Any], key: str, default: int) -> int:
    """A positive integer option; options from SQL arrive as strings."""
    raw = options.get(key, default)
    try:
        value = int(raw)
    except (TypeError, ValueError):
        value = 0
    if value <= 0 or isinstance(raw, bool):
        raise PlanError(f"{table}: option {key!r} must be a positive integer, got {raw!r}")
    return value


def bool_option(table: str, options: dict[str, Any], key: str, default: bool) -> bool:
    raw = options.get(key, default)
    if isinstance(raw, bool):
        return raw
    text = str(raw).strip().lower()
    if text in ("true", "1", "yes", "on"):
        return True
    if text in ("false", "0", "no", "off"):
        return False
    raise PlanError(f"{table}: option {key!r} must be true or false, got {raw!r}")


#: ``bad_records`` values, in any letter case (as for Kafka sources).
BAD_RECORD_POLICIES = ("fail", "skip", "dead_letter")


def bad_records_option(table: str, options: dict[str, Any]) -> str:
    """The ``bad_records`` policy; ``dead_letter`` needs ``dead_letter.sink``."""
    policy = str(options.get("bad_records", "fail")).lower()
    if policy not in BAD_RECORD_POLICIES:
        raise PlanError(
            f"{table}: option 'bad_records' must be one of {', '.join(BAD_RECORD_POLICIES)}; "
            f"got {policy!r}"
        )
    if policy == "dead_letter" and not options.get("dead_letter.sink"):
        raise PlanError(
            f"{table}: bad_records = 'dead_letter' needs option 'dead_letter.sink' "
            "(the sink receiving the rejected records)"
        )
    return policy


def _visible(rel_path: str) -> bool:
    """Hidden (``.x``) and underscore (``_staging``, ``_SUCCESS``) entries are never data."""
    return not any(part.startswith((".", "_")) for part in rel_path.split(os.sep) if part)


def list_files(source: str, path: str, extensions: tuple[str, ...]) -> list[str]:
    """The data files ``path`` names, sorted by path.

    A file is taken as is (whatever its extension); a directory contributes its own files
    (not subdirectories) ending in one of ``extensions``; a glob (``*``, ``?``, ``[``)
    contributes every matching file (``**`` recurses). Hidden and underscore-prefixed
    names are skipped in both, so a sink's ``_staging`` directory is never read.
    """
    if any(c in _GLOB_CHARS for c in path):
        root = path
        while any(c in _GLOB_CHARS for c in root):
            root = os.path.dirname(root)
        found = [
            p
            for p in glob.glob(path, recursive=True)
            if os.path.isfile(p) and _visible(os.path.relpath(p, root or "."))
        ]
        return sorted(found)
    if os.path.isdir(path):
        return sorted(
            os.path.join(path, name)
            for name in os.listdir(path)
            if _visible(name)
            and name.lower().endswith(extensions)
            and os.path.isfile(os.path.join(path, name))
        )
    if os.path.isfile(path):
        return [path]
    raise SourceError(f"source {source!r}: path {path!r} does not exist")


def uncastable_rows(
    values: pa.Array | pa.ChunkedArray, target: pa.DataType, *, first_only: bool = False
) -> list[int]:
    """Indices of the values of ``values`` that cannot be cast to ``target`` (only the
    first, if ``first_only``).

    Halves with whole-slice casts (slices that cast are cleared whole: O(n) work for one bad
    value, no per-row Python); only called after a cast of the whole has already failed.
    """

    def ok(lo: int, hi: int) -> bool:
        try:
            values.slice(lo, hi - lo).cast(target)
            return True
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
            return False

    found: list[int] = []

    def halve(lo: int, hi: int) -> None:
        if hi - lo == 1:
            found.append(lo)
            return
        mid = (lo + hi) // 2
        for a, b in ((lo, mid), (mid, hi)):
            if not (first_only and found) and not ok(a, b):
                halve(a, b)

    if len(values) and not ok(0, len(values)):
        halve(0, len(values))
    return found


def fsync_path(path: str) -> None:
    """Flush a file's or a directory's entries to disk (durable before a checkpoint)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
