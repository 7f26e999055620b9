"""A source's saved position, summarized by its shape: Kafka offsets per partition; a file
source's files done and the file being read; anything else as its JSON."""

from __future__ import annotations

import json
from typing import Any

KAFKA = "kafka"
FILES = "files"
OTHER = "other"


def summarize(position: Any) -> dict[str, Any]:
    """``{"kind": ..., ...}``: JSON-able, with the raw position under ``position``."""
    if isinstance(position, dict) and isinstance(position.get("offsets"), dict):
        offsets = {str(p): o for p, o in position["offsets"].items()}
        return {"kind": KAFKA, "offsets": offsets, "position": position}
    if isinstance(position, dict) and isinstance(position.get("done"), list):
        return _files(position)
    return {"kind": OTHER, "position": position}


def _files(position: dict[str, Any]) -> dict[str, Any]:
    done = position["done"]
    last = done[-1] if done else None
    reading = None
    if position.get("file"):
        reading = {k: position.get(k) for k in ("file", "at", "row", "rejected")}
    return {
        "kind": FILES,
        "files_done": len(done),
        "last_done": last.get("path") if isinstance(last, dict) else None,
        "reading": reading,
        "incremental": position.get("incremental"),
        "position": position,
    }


def describe(summary: dict[str, Any]) -> str:
    """One line of text for :func:`summarize`'s result."""
    kind = summary["kind"]
    if kind == KAFKA:
        offsets = summary["offsets"]
        if not offsets:
            return "no partition read yet"
        parts = ", ".join(f"{p}: {o}" for p, o in sorted(offsets.items(), key=_partition))
        return f"next offset per partition: {parts}"
    if kind == FILES:
        n = summary["files_done"]
        text = f"{n} file{'' if n == 1 else 's'} done"
        if summary["last_done"]:
            text += f" (last {summary['last_done']})"
        reading = summary["reading"]
        if reading:
            text += f"; reading {reading['file']}{_where(reading)}"
        incremental = summary["incremental"]
        if isinstance(incremental, dict):
            text += (
                f"; incremental on {incremental.get('column')}: mark {incremental.get('mark')}"
                f", highest seen {incremental.get('highest')}"
            )
        return text
    return json.dumps(summary["position"], sort_keys=True, default=str)


def _where(reading: dict[str, Any]) -> str:
    """Where in the file: the block's start (as the reader records it) and the rows of the
    block already read."""
    at = reading.get("at")
    parts = []
    if isinstance(at, dict):
        marks = [f"{k} {v}" for k, v in at.items() if k != "crc"]
        if marks:
            parts.append("block at " + ", ".join(marks))
    if reading.get("row"):
        parts.append(f"{reading['row']} rows of it read")
    return f" ({'; '.join(parts)})" if parts else ""


def _partition(item: tuple[str, Any]) -> tuple[int, str]:
    key = item[0]
    return (int(key), key) if key.isdigit() else (1 << 31, key)
