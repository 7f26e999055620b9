"""Checkpoints: what they cost a running query, and how big and slow they are for large state.

* ``overhead``: the ``tumble_count_sum_max`` Nexmark query (10 s tumbling windows per
  auction: count, sum, max; EMIT ON WINDOW CLOSE) into a counting callback sink, once with a
  ``state_dir`` and a 1 s checkpoint interval, once without (``state_dir=None``,
  ``checkpoint_interval=None``: no checkpoint, no periodic commit). 5M bids stream in well
  under a second, so the bids are a generator replaying 5M in-memory bids ``passes`` times
  with the event time shifted on (the windows keep moving, state stays realistic), long
  enough for many checkpoints. Each variant runs ``repeat`` times, interleaved, each run in
  its own child process; printed: the best run of each, the median ratio of the paired runs,
  and the share of the run the query spent paused in checkpoints (the direct cost).
* ``size``: an unbounded ``GROUP BY k`` (count, sum, max) over 1M distinct keys into a
  counting callback sink (its changelog); once every row is in, ``q.checkpoint()`` is called
  ``checkpoints`` times and ``status()["last_checkpoint"]`` read each time (size and
  duration: snapshot, sink pre-commit, state files and manifest written with fsync, sink
  commit, retention). Then the source ends and a second Context on the same ``state_dir``
  restarts the query: the recovery time is how long it takes to load the checkpoint,
  restore the state and finish.

Checkpoints are written under a temporary directory (removed afterwards) in the current
directory, i.e. on the disk the benchmark runs from. ``python -m benchmarks checkpoints``.
"""

from __future__ import annotations

import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

import datum_sql as ds
from benchmarks.nexmark import COLUMNS, QUERIES
from datum_sql.connectors.generators import nexmark_table

BATCH = 65_536
TUMBLE_SQL = QUERIES["tumble_count_sum_max"][0]


def _replayed(base: pa.Table, passes: int) -> Iterator[pa.RecordBatch]:
    """``base`` ``passes`` times over, each pass later in event time than the one before."""
    ts = base.column("date_time").cast(pa.int64())
    first, last = pc.min(ts).as_py(), pc.max(ts).as_py()
    span = last - first + 1_000
    batches = base.to_batches(max_chunksize=BATCH)
    index = base.schema.get_field_index("date_time")
    ts_type = base.schema.field("date_time").type
    for p in range(passes):
        shift = pa.scalar(p * span, pa.int64())
        for batch in batches:
            moved = pc.add(batch.column(index).cast(pa.int64()), shift).cast(ts_type)
            yield batch.set_column(index, "date_time", moved)


def run_overhead(
    checkpoints: bool, base_events: int = 5_000_000, passes: int = 20, interval: float = 1.0
) -> dict[str, Any]:
    """One run of the tumble query; events/s and how many checkpoints ran."""
    base = nexmark_table("bid", base_events, columns=COLUMNS)
    state = Path(tempfile.mkdtemp(prefix="datum-bench-", dir=".")) if checkpoints else None
    try:
        ctx = ds.Context(state_dir=state, checkpoint_interval=interval if checkpoints else None)
        ctx.register_arrow(
            "bids", _replayed(base, passes), schema=base.schema, event_time="date_time",
            watermark=ds.BoundedOutOfOrderness(seconds=1), batch_size=BATCH,
        )  # fmt: skip
        out = {"rows": 0}

        def count(batch: pa.RecordBatch) -> None:
            out["rows"] += batch.num_rows

        ctx.register_append_sink("out", count)
        t0 = time.perf_counter()
        q = ctx.execute_streaming(f"INSERT INTO out {TUMBLE_SQL}")
        seen: dict[int, dict[str, Any]] = {}
        while not q.wait(0.1):  # both variants poll status() alike
            last = q.status()["last_checkpoint"]
            if last:
                seen[last["id"]] = last
        seconds = time.perf_counter() - t0
        last = q.status()["last_checkpoint"] or {}
        periodic = [c for cid, c in sorted(seen.items()) if cid != last.get("id")]
        everything = periodic + ([last] if last else [])
    finally:
        if state is not None:
            shutil.rmtree(state, ignore_errors=True)
    events = base_events * passes
    return {
        "checkpoints": checkpoints,
        "events": events,
        "seconds": seconds,
        "eps": events / seconds,
        "rows_out": out["rows"],
        # ids count from 1 and the final commit at the end is a checkpoint too
        "checkpoints_taken": int(last.get("id") or 0),
        # the periodic checkpoints seen while running (the final one holds no open window)
        "sizes": [c["size_bytes"] for c in periodic],
        # the step lock is held for a checkpoint's whole duration: the query pauses
        "stall_s": sum(c["duration_s"] for c in everything),
    }


def _key_batches(keys: int, batch: int = BATCH) -> Iterator[pa.RecordBatch]:
    rng = np.random.default_rng(11)
    for start in range(0, keys, batch):
        k = np.arange(start, min(start + batch, keys), dtype=np.int64)
        yield pa.record_batch({"k": k, "v": rng.integers(0, 1_000_000, len(k))})


GROUP_SQL = (
    "INSERT INTO totals SELECT k, count(*) AS n, sum(v) AS total, max(v) AS top FROM t GROUP BY k"
)


def run_size(keys: int = 1_000_000, checkpoints: int = 3) -> dict[str, Any]:
    """Checkpoint size and duration with ``keys`` groups of state, and recovery time."""
    root = Path(tempfile.mkdtemp(prefix="datum-bench-", dir="."))
    try:
        table = pa.Table.from_batches(list(_key_batches(keys)))
        release = threading.Event()
        def held() -> Iterator[pa.RecordBatch]:
            # the whole table, then wait (the query keeps its state) until released
            yield from table.to_batches(max_chunksize=BATCH)
            release.wait()

        def context(data: Any) -> ds.Context:
            ctx = ds.Context(state_dir=root / "state", checkpoint_interval=None)
            ctx.register_arrow("t", data, schema=table.schema)
            # a changelog needs an upsert sink: DuckDB keyed by the group
            ctx.execute(
                f"CREATE SINK IF NOT EXISTS totals WITH (connector = 'duckdb', "
                f"path = '{root / 'totals.duckdb'}', table = 'totals', primary_key = 'k')"
            )
            return ctx

        ctx = context(held())
        t0 = time.perf_counter()
        q = ctx.execute_streaming(GROUP_SQL)
        while q.status()["rows_in"] < keys:
            time.sleep(0.01)
        ingest_s = time.perf_counter() - t0
        taken = []
        for _ in range(checkpoints):
            q.checkpoint()
            taken.append(q.status()["last_checkpoint"])
        state = q.status()["operators"]
        state_rows = sum(o.get("state_rows") or 0 for o in state.values())
        state_bytes = sum(o.get("state_bytes") or 0 for o in state.values())
        release.set()
        q.wait()
        chk_dir = root / "state" / "queries" / "insert_into_totals" / "checkpoints"
        newest = sorted(chk_dir.iterdir())[-1]
        on_disk = sum(f.stat().st_size for f in newest.iterdir())
        # restart: a new Context resumes from the last checkpoint (a table source this time,
        # so the source can be sought to its end), restores 1M groups and finishes
        ctx2 = context(table)
        t1 = time.perf_counter()
        q2 = ctx2.execute_streaming(GROUP_SQL)
        q2.wait()
        recover_s = time.perf_counter() - t1
        recovered = q2.status()["recovered_from"]
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return {
        "keys": keys,
        "ingest_s": ingest_s,
        "state_rows": state_rows,
        "state_bytes_in_memory": state_bytes,
        "checkpoints": taken,
        "size_bytes": statistics.median(c["size_bytes"] for c in taken),
        "duration_s": statistics.median(c["duration_s"] for c in taken),
        "newest_on_disk_bytes": on_disk,
        "restart_s": recover_s,
        "recovered_from": recovered,
    }


def _isolated(name: str, args: dict[str, Any]) -> dict[str, Any]:
    """``run_<name>(**args)`` in a child process (its own memory, its own interpreter)."""
    code = (
        "import json, sys; from benchmarks import checkpoints as m; "
        f"print('RESULT ' + json.dumps(m.run_{name}(**json.loads(sys.argv[1])), default=str))"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code, json.dumps(args)], capture_output=True, text=True, check=False
    )
    for line in proc.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[7:])  # type: ignore[no-any-return]
    raise RuntimeError(f"benchmark {name} failed:\n{proc.stdout}\n{proc.stderr}")


def main(repeat: int = 5, passes: int = 20, keys: int = 1_000_000) -> None:
    """Run the checkpoints group and print its numbers."""
    print(
        f"checkpoint overhead: tumble_count_sum_max, {5 * passes}M bids "
        f"(5M replayed {passes} times), {repeat} runs of each, interleaved"
    )
    runs: dict[bool, list[dict[str, Any]]] = {False: [], True: []}
    for i in range(repeat):
        for with_checkpoints in (False, True) if i % 2 == 0 else (True, False):
            r = _isolated("overhead", {"checkpoints": with_checkpoints, "passes": passes})
            runs[with_checkpoints].append(r)
            label = "1 s checkpoints" if with_checkpoints else "no checkpoints "
            extra = ""
            if with_checkpoints:
                size = statistics.mean(r["sizes"]) if r["sizes"] else 0.0
                extra = (
                    f"  {r['checkpoints_taken']} checkpoints (periodic ones {size / 1e6:.2f} MB), "
                    f"{r['stall_s'] * 1e3:.0f} ms in checkpoints"
                )
            print(
                f"  {label} {r['eps'] / 1e6:6.2f}M ev/s ({r['seconds']:.2f} s){extra}", flush=True
            )
    best = {k: max(v, key=lambda r: r["eps"]) for k, v in runs.items()}
    ratio = best[True]["eps"] / best[False]["eps"]
    paired = statistics.median(
        b["eps"] / a["eps"] for a, b in zip(runs[False], runs[True], strict=True)
    )
    stall = statistics.median(r["stall_s"] / r["seconds"] for r in runs[True])
    print(
        f"  best: {best[False]['eps'] / 1e6:.2f}M ev/s without, {best[True]['eps'] / 1e6:.2f}M "
        f"with ({best[True]['checkpoints_taken']} checkpoints): ratio {ratio:.3f}, "
        f"cost {100 * (1 - ratio):.1f}% (target <= 15%)"
    )
    print(
        f"  median ratio of the paired runs {paired:.3f} (cost {100 * (1 - paired):.1f}%); "
        f"time spent checkpointing (the query paused): {100 * stall:.2f}% of the run"
    )
    print()
    print(f"checkpoint size and duration: GROUP BY over {keys:,} keys")
    s = _isolated("size", {"keys": keys})
    for c in s["checkpoints"]:
        print(f"  checkpoint {c['id']}: {c['size_bytes'] / 1e6:.1f} MB in {c['duration_s']:.3f} s")
    print(
        f"  median {s['size_bytes'] / 1e6:.1f} MB in {s['duration_s']:.3f} s "
        f"({s['size_bytes'] / s['keys']:.1f} bytes/key; state in memory "
        f"{s['state_bytes_in_memory'] / 1e6:.1f} MB, {s['state_rows']:,} rows); "
        f"restart from it (restore and finish): {s['restart_s']:.2f} s"
    )


if __name__ == "__main__":
    main()
