"""The machine-readable results: ``benchmarks/results.jsonl``, one JSON record per line.

A record is one engine on one benchmark in one invocation (``run_id``): every run's seconds,
their median, min and max, peak RSS, whether its result equalled the reference, the load
average before and after, the machine, the versions and the git commit. Kept out of git;
``python -m benchmarks report`` turns it into the tables of ``benchmarks/README.md``.
"""

from __future__ import annotations

import json
import secrets
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

PATH = Path(__file__).resolve().parent / "results.jsonl"


def new_run_id() -> str:
    """A sortable id for one invocation: its UTC start time and a random suffix."""
    return datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ") + "-" + secrets.token_hex(3)


def now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def append(records: list[dict[str, Any]], path: Path = PATH) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as f:
        for record in records:
            f.write(json.dumps(record, sort_keys=True) + "\n")


def read(path: Path = PATH) -> list[dict[str, Any]]:
    """Every record, in file order; a line that is not JSON fails naming its line number."""
    if not path.exists():
        return []
    out = []
    for n, line in enumerate(path.read_text().splitlines(), 1):
        if line.strip():
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError as exc:
                raise ValueError(f"{path}:{n}: not a JSON record ({exc})") from exc
    return out


__all__ = ["PATH", "append", "new_run_id", "now", "read"]
