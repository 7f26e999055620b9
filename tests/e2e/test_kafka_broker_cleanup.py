"""The test broker never outlives the pytest session that started it, however it ends.

Each case runs a tiny pytest session in a subprocess using the real ``kafka_broker``
fixture of tests/conftest.py; its test writes the broker's PID to a file. The session
then ends one way or another: all tests pass; ``-x`` with a failing test (the next test
is never run); Ctrl-C (SIGINT) while a test runs; SIGKILL of the pytest process (no
Python runs: only the kernel's parent-death signal can stop the broker then). Afterwards
the broker process must be gone.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import psutil
import pytest

TESTS = Path(__file__).resolve().parents[1]

CONFTEST = f"""
import importlib.util
import signal
import sys

# Ctrl-C as in a terminal even when this suite was started in the background, where SIGINT
# is ignored and the ignoring is inherited (Python then installs no KeyboardInterrupt).
signal.signal(signal.SIGINT, signal.default_int_handler)

sys.path.insert(0, {str(TESTS)!r})
_spec = importlib.util.spec_from_file_location("suite_conftest", {str(TESTS / "conftest.py")!r})
_suite = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_suite)
kafka_broker = _suite.kafka_broker
"""

SESSION = """
import faulthandler
import os
import time

# A session still running 75 s after it started prints where every thread is (and goes on),
# so a session that hangs instead of ending says where: the parent shows its output.
faulthandler.dump_traceback_later(75)


def test_uses_the_broker(kafka_broker):
    with open(os.environ["BROKER_INFO"] + ".tmp", "w") as f:
        f.write(f"{kafka_broker.pid}\\n{kafka_broker.log_path}\\n")
    os.rename(os.environ["BROKER_INFO"] + ".tmp", os.environ["BROKER_INFO"])
    mode = os.environ["SESSION_MODE"]
    if mode == "fail":
        raise RuntimeError("a test that fails")
    if mode == "wait":
        time.sleep(120)  # until the parent interrupts or kills this session


def test_after(kafka_broker):
    assert os.environ["SESSION_MODE"] == "pass", "-x should have stopped the session"
"""


def _gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE  # exited, not yet reaped
    except psutil.NoSuchProcess:
        return True


def _wait_for(check: Callable[[], bool], what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    delay = 0.02
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(delay)
        delay = min(delay * 2, 0.5)


@pytest.mark.kafka
@pytest.mark.slow
@pytest.mark.timeout(240)  # above the 60 s start wait and the 90 s end wait, which fail first
@pytest.mark.parametrize(
    ("mode", "ending", "exit_code"),
    [
        ("pass", None, 0),
        ("fail", None, 1),  # -x: stops after the failing test
        ("wait", signal.SIGINT, 2),  # Ctrl-C
        ("wait", signal.SIGKILL, -signal.SIGKILL),
    ],
    ids=["normal-end", "x-after-a-failure", "ctrl-c", "sigkill"],
)
def test_broker_is_stopped_however_the_session_ends(
    tmp_path: Path, mode: str, ending: signal.Signals | None, exit_code: int
) -> None:
    (tmp_path / "conftest.py").write_text(CONFTEST)
    (tmp_path / "test_session.py").write_text(SESSION)
    info = tmp_path / "broker.txt"
    env = {**os.environ, "BROKER_INFO": str(info), "SESSION_MODE": mode}
    env.pop("PYTEST_ADDOPTS", None)
    proc = subprocess.Popen(
        [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", str(tmp_path)],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        _wait_for(lambda: info.exists() or proc.poll() is not None, "the broker to start")
        assert info.exists(), f"the session ended before its test ran:\n{proc.communicate()[0]}"
        pid_text, log_path = info.read_text().splitlines()
        pid = int(pid_text)
        if ending is not None:
            broker = psutil.Process(pid)
            assert broker.is_running() and "broker" in broker.cmdline(), broker.cmdline()
            proc.send_signal(ending)
        try:
            out, _ = proc.communicate(timeout=90)
        except subprocess.TimeoutExpired:
            proc.kill()
            pytest.fail(f"the session did not end:\n{proc.communicate()[0]}")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == exit_code, out
    _wait_for(lambda: _gone(pid), f"broker {pid} to stop after the session ended")
    if ending == signal.SIGKILL:  # nothing ran to remove the log; the stop would have
        Path(log_path).unlink(missing_ok=True)
    else:
        assert not Path(log_path).exists(), "stop() removes the broker's log"
