"""Every measured piece of work runs in a fresh child process: ``python -m benchmarks.child``.

``call("module:function", {...})`` starts ``python -m benchmarks.child module:function JSON``;
the child calls ``function(**args)``, adds its own peak RSS and prints one ``RESULT`` line.
A fresh process per run gives each engine its own memory, its own peak RSS and no warm
state from another engine or an earlier run.

Peak RSS is ``getrusage(RUSAGE_SELF).ru_maxrss``. Linux carries the parent's RSS at spawn
into it, so the orchestrating parent imports nothing heavy (no pyarrow, no engine); the
child also reports its own ``VmHWM`` and :func:`call` fails loudly if the two disagree.
"""

from __future__ import annotations

import importlib
import json
import resource
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
#: ru_maxrss may exceed VmHWM by this much before it is taken to include the parent's RSS
RSS_SLACK_MB = 16.0


class ChildFailed(RuntimeError):
    """A child process ended without a result: its exit code and the tail of its output."""


def peak_rss_mb() -> float:
    """This process's peak RSS so far, ``ru_maxrss`` (KiB on Linux), in MB."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def vm_hwm_mb() -> float | None:
    """This process's own peak RSS (``VmHWM``, reset by exec); None off Linux."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


def call(
    target: str, args: dict[str, Any], *, timeout: float = 3600.0, env: dict[str, str] | None = None
) -> dict[str, Any]:
    """Run ``target(**args)`` in a child process; its result dict (with peak RSS added)."""
    cmd = [sys.executable, "-m", "benchmarks.child", target, json.dumps(args)]
    try:
        proc = subprocess.run(
            cmd, capture_output=True, text=True, cwd=ROOT, timeout=timeout, env=env, check=False
        )
    except subprocess.TimeoutExpired as exc:
        raise ChildFailed(f"{target} did not finish within {timeout:.0f} s") from exc
    for line in proc.stdout.splitlines():
        if line.startswith("RESULT "):
            result: dict[str, Any] = json.loads(line[7:])
            check_own_rss(target, result)
            return result
    tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-30:])
    raise ChildFailed(f"{target} failed (exit code {proc.returncode}):\n{tail}")


def check_own_rss(target: str, result: dict[str, Any]) -> None:
    """Fail when the child's ``ru_maxrss`` is not its own (it carried a big parent's RSS)."""
    hwm = result.get("vm_hwm_mb")
    if hwm is not None and result["peak_rss_mb"] > hwm + RSS_SLACK_MB:
        raise ChildFailed(
            f"{target}: ru_maxrss {result['peak_rss_mb']:.0f} MB exceeds the child's own peak "
            f"(VmHWM {hwm:.0f} MB): the parent process holds too much memory to measure RSS"
        )


def main(argv: list[str]) -> None:
    target, raw = argv
    module, _, function = target.partition(":")
    result = getattr(importlib.import_module(module), function)(**json.loads(raw))
    result.setdefault("peak_rss_mb", peak_rss_mb())
    result.setdefault("vm_hwm_mb", vm_hwm_mb())
    print("RESULT " + json.dumps(result, default=str), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
