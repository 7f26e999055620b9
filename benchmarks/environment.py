"""What the figures ran under: machine, versions, load average, git commit.

Versions come from the installed distributions' metadata, so reading them imports nothing.
"""

from __future__ import annotations

import os
import platform
import subprocess
from importlib import metadata
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
DISTRIBUTIONS = ("pyarrow", "datafusion", "duckdb", "polars", "datum-sql")


def versions() -> dict[str, str]:
    out = {"python": platform.python_version()}
    for name in DISTRIBUTIONS:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = "not installed"
    return out


def load_average() -> list[float]:
    """The 1, 5 and 15 minute load averages."""
    return [round(x, 2) for x in os.getloadavg()]


def git_commit() -> dict[str, Any]:
    """The commit the benchmarks ran at, and whether the work tree had changes."""

    def git(*args: str) -> str:
        proc = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True)
        return proc.stdout.strip() if proc.returncode == 0 else ""

    commit = git("rev-parse", "--short=12", "HEAD") or "unknown"
    dirty = bool(git("status", "--porcelain", "--untracked-files=no"))
    return {"commit": commit, "dirty": dirty}


def machine() -> dict[str, Any]:
    return {
        "cpu_count": os.cpu_count(),
        "platform": platform.platform(terse=True),
        "processor": platform.machine(),
        **git_commit(),
        "versions": versions(),
    }


def describe(m: dict[str, Any]) -> str:
    """One line: CPUs, platform and versions."""
    v = m["versions"]
    libs = ", ".join(f"{k} {v[k]}" for k in DISTRIBUTIONS)
    dirty = " (with uncommitted changes)" if m["dirty"] else ""
    return (
        f"{m['cpu_count']} CPUs, {m['platform']} {m['processor']}; Python {v['python']}, {libs}; "
        f"commit {m['commit']}{dirty}"
    )


__all__ = ["describe", "load_average", "machine", "versions"]
