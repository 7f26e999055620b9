"""Checkpoint encoding of operator state: a versioned header, then Arrow IPC streams.

Layout (all integers little-endian)::

    b"DSQLSTATE\\n"                      magic
    u32 header length, header           JSON: {"kind", "version", "meta", "tables": [names]}
    per table: u64 length, bytes        one Arrow IPC stream per named table

``meta`` holds small scalars (counters, watermarks) as JSON; everything row-shaped is an
Arrow table. No pickle anywhere: a snapshot can be read by any Arrow implementation.
"""

from __future__ import annotations

import json
import struct
from typing import Any

import pyarrow as pa

from datum_sql.errors import CheckpointError

MAGIC = b"DSQLSTATE\n"


def encode_state(
    kind: str, version: int, meta: dict[str, Any], tables: dict[str, pa.Table | pa.RecordBatch]
) -> bytes:
    """Serialize ``tables`` and ``meta`` for operator ``kind`` at state ``version``."""
    header = json.dumps(
        {"kind": kind, "version": version, "meta": meta, "tables": list(tables)},
        separators=(",", ":"),
    ).encode()
    parts = [MAGIC, struct.pack("<I", len(header)), header]
    for table in tables.values():
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, table.schema) as writer:
            writer.write(table)
        buf = sink.getvalue()
        parts.append(struct.pack("<Q", buf.size))
        parts.append(buf.to_pybytes())
    return b"".join(parts)


def decode_state(
    data: bytes, kind: str, version: int
) -> tuple[dict[str, Any], dict[str, pa.Table]]:
    """(meta, tables) of a snapshot; :class:`CheckpointError` when it is not ours to read."""
    view = memoryview(data)
    if bytes(view[: len(MAGIC)]) != MAGIC:
        raise CheckpointError(f"{kind} state: not a datum-sql state snapshot (bad magic)")
    pos = len(MAGIC)
    try:
        (hlen,) = struct.unpack_from("<I", view, pos)
        pos += 4
        header = json.loads(bytes(view[pos : pos + hlen]))
        pos += hlen
    except (struct.error, ValueError) as exc:
        raise CheckpointError(f"{kind} state: unreadable header ({exc})") from exc
    if header.get("kind") != kind:
        raise CheckpointError(
            f"state snapshot was written by a {header.get('kind')!r} operator, not {kind!r}"
        )
    if header.get("version") != version:
        raise CheckpointError(
            f"{kind} state version {header.get('version')} cannot be restored by this version "
            f"of datum-sql (expects {version}); start the query from scratch"
        )
    tables: dict[str, pa.Table] = {}
    try:
        for name in header["tables"]:
            (size,) = struct.unpack_from("<Q", view, pos)
            pos += 8
            reader = pa.ipc.open_stream(pa.py_buffer(bytes(view[pos : pos + size])))
            tables[name] = reader.read_all()
            pos += size
    except (struct.error, pa.ArrowInvalid) as exc:
        raise CheckpointError(f"{kind} state: truncated or corrupt snapshot ({exc})") from exc
    return header.get("meta", {}), tables
