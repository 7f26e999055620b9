"""A plain script the parent interrupts with SIGINT (Ctrl-C) inside the query handle.

Usage: python interrupt_child.py wait STATE_DIR OUT_DIR | python interrupt_child.py iterate

``wait``: an INSERT from an endless Nexmark stream into a Parquet sink, then ``q.wait()``.
``iterate``: a SELECT over an endless iterator, read with ``for batch in q``.
Prints ``ready`` once rows flow and the main thread is blocked inside the handle (so the
signal lands there, not between two statements), then, on KeyboardInterrupt, the query's
state and its last checkpoint, and lets the KeyboardInterrupt end the script.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from collections.abc import Iterator

import pyarrow as pa

import datum_sql as ds

SCHEMA = pa.schema([("v", pa.int64())])


def _blocked_in(name: str) -> bool:
    """Whether the main thread is inside a function ``name`` of the query handle."""
    frame = sys._current_frames().get(threading.main_thread().ident or 0)
    while frame is not None:
        code = frame.f_code
        if code.co_name == name and code.co_filename.endswith("query.py"):
            return True
        frame = frame.f_back
    return False


def _announce_when(q: ds.StreamingQuery, inside: str) -> None:
    def watch() -> None:
        while q.status()["rows_out"] == 0 or not _blocked_in(inside):
            if q.done:
                return
            time.sleep(0.02)
        print("ready", flush=True)

    threading.Thread(target=watch, daemon=True).start()


def _quiet_after_one() -> Iterator[pa.RecordBatch]:
    yield pa.record_batch({"v": [1, 2, 3]}, schema=SCHEMA)
    while True:  # endless, but each next() returns soon: the reading thread can end
        time.sleep(0.02)
        yield pa.record_batch({"v": []}, schema=SCHEMA)


def main() -> None:
    mode = sys.argv[1]
    if mode == "wait":
        state_dir, out_dir = sys.argv[2], sys.argv[3]
        ctx = ds.Context(state_dir=state_dir)
        ctx.execute(
            "CREATE SOURCE IF NOT EXISTS bids "
            "WITH (connector = 'nexmark', stream = 'bid', events_per_second = '2000')"
        )
        ctx.execute(
            f"CREATE SINK IF NOT EXISTS out WITH (connector = 'parquet', path = '{out_dir}')"
        )
        q = ctx.execute_streaming("INSERT INTO out SELECT auction, bidder, price FROM bids")
        _announce_when(q, "wait")
        try:
            q.wait()
        finally:
            print("state", q.state, flush=True)
            print("checkpoint", json.dumps(q.status()["last_checkpoint"]), flush=True)
            print("recovered", json.dumps(q.status()["recovered_from"]), flush=True)
            print("written", q.status()["sinks"]["out"]["rows"], flush=True)
    else:
        ctx = ds.Context(state_dir=None)
        ctx.register_arrow("quiet", _quiet_after_one(), schema=SCHEMA)
        q = ctx.execute_streaming("SELECT v FROM quiet")
        _announce_when(q, "__iter__")
        try:
            for _batch in q:
                pass
        finally:
            print("state", q.state, flush=True)


if __name__ == "__main__":
    main()
