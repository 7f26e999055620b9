"""A periodic checkpoint that fails (a full disk, a sink that cannot stage its output) fails
the running query promptly, with the cause and the path at fault: it is never lost while an
unbounded query goes on without checkpoints."""

from __future__ import annotations

import errno
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import datum_sql as ds
from datum_sql.connectors.files import sink as file_sink
from datum_sql.engine.runtime import checkpoint
from datum_sql.errors import CheckpointError, QueryFailed, SinkError

#: Generous for a loaded machine: a periodic checkpoint is due every 0.2 s.
PROMPT_S = 30.0


def _full_disk_once_set(real: Callable[..., Any], failing: threading.Event) -> Callable[..., Any]:
    """``real``, until ``failing`` is set: then an OSError as on a full disk."""

    def call(*args: Any) -> Any:
        if failing.is_set():
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real(*args)

    return call


@pytest.mark.parametrize(
    ("module", "function", "cause", "at"),
    [
        (checkpoint, "replace_private", CheckpointError, "MANIFEST.json"),
        (file_sink, "fsync_path", SinkError, "_staging"),
    ],
    ids=["manifest", "sink_pre_commit"],
)
def test_a_failed_periodic_checkpoint_fails_the_query(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    module: Any,
    function: str,
    cause: type[Exception],
    at: str,
) -> None:
    failing = threading.Event()
    monkeypatch.setattr(module, function, _full_disk_once_set(getattr(module, function), failing))
    ctx = ds.Context(state_dir=tmp_path / "state", checkpoint_interval=0.2)
    ctx.execute(
        "CREATE SOURCE bids WITH (connector = 'nexmark', stream = 'bid', "
        "events_per_second = '2000', batch_size = '50')"  # no rows: unbounded
    )
    ctx.execute(f"CREATE SINK out WITH (connector = 'parquet', path = '{tmp_path / 'out'}')")
    q = ctx.execute_streaming("INSERT INTO out SELECT auction, price FROM bids")
    try:
        deadline = time.monotonic() + PROMPT_S
        while q.status()["last_checkpoint"] is None:  # periodic checkpoints work at first
            assert q.state == "running", q.error
            assert time.monotonic() < deadline, "no periodic checkpoint was taken"
            time.sleep(0.05)
        failing.set()
        with pytest.raises(QueryFailed) as failed:
            assert q.wait(PROMPT_S), "the query ran on after its checkpoint failed"
    finally:
        failing.clear()
        if not q.done:
            q.cancel()
    assert q.state == "failed"
    error = failed.value.cause
    assert isinstance(error, cause)
    message = str(failed.value)
    assert at in message and str(tmp_path) in message
    assert "No space left on device" in message
