"""Ctrl-C in a plain script, inside ``q.wait()`` or while iterating the handle, cancels the
query (committing what was processed) before the KeyboardInterrupt ends the script."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq

CHILD = Path(__file__).with_name("interrupt_child.py")
#: The whole of one test, child start-ups included, even on a loaded machine.
BUDGET_S = 90.0


class _Child:
    def __init__(self, *args: str, deadline: float) -> None:
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        self.deadline = deadline
        self.proc = subprocess.Popen(
            [sys.executable, str(CHILD), *args],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
        )  # fmt: skip
        self.lines: list[str] = []

    def interrupt_when_ready(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line.strip())
            if line.strip() == "ready":
                self.proc.send_signal(signal.SIGINT)
                return
            assert time.monotonic() < self.deadline, "the child never got ready"
        self.proc.wait(5)
        raise AssertionError(f"the child ended before it was ready: {self._stderr()}")

    def finish(self) -> dict[str, str]:
        try:
            out, err = self.proc.communicate(timeout=max(self.deadline - time.monotonic(), 1))
        except subprocess.TimeoutExpired:
            self.proc.kill()
            out, err = self.proc.communicate()
            raise AssertionError(f"the child did not exit after SIGINT: {err[-2000:]}") from None
        self.lines += out.splitlines()
        assert self.proc.returncode != 0
        assert "KeyboardInterrupt" in err, err[-2000:]
        return dict(line.split(" ", 1) for line in self.lines if " " in line)

    def _stderr(self) -> str:
        assert self.proc.stderr is not None
        return self.proc.stderr.read()[-2000:]


def _committed_rows(out: Path) -> int:
    parts = sorted(out.glob("part-*.parquet"))
    assert parts, f"no committed part file in {out}"
    return sum(pq.read_table(p).num_rows for p in parts)


def test_ctrl_c_in_wait_cancels_commits_and_a_rerun_resumes(tmp_path: Path) -> None:
    deadline = time.monotonic() + BUDGET_S
    state, out = tmp_path / "state", tmp_path / "out"

    first = _Child("wait", str(state), str(out), deadline=deadline)
    first.interrupt_when_ready()
    seen = first.finish()
    assert json.loads(seen["recovered"]) is None
    assert seen["state"] == "cancelled"
    checkpoint = json.loads(seen["checkpoint"])
    assert checkpoint is not None
    rows = _committed_rows(out)
    assert rows == int(seen["written"]) > 0  # everything processed was committed

    second = _Child("wait", str(state), str(out), deadline=deadline)
    second.interrupt_when_ready()
    seen = second.finish()
    assert json.loads(seen["recovered"])["checkpoint"] == checkpoint["id"]
    assert seen["state"] == "cancelled"
    assert _committed_rows(out) == rows + int(seen["written"]) > rows


def test_ctrl_c_while_iterating_cancels_the_query() -> None:
    child = _Child("iterate", deadline=time.monotonic() + BUDGET_S)
    child.interrupt_when_ready()
    assert child.finish()["state"] == "cancelled"
