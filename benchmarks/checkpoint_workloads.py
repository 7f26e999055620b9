"""The child-process side of the checkpoints group (see ``checkpoints.py``): one run each."""

from __future__ import annotations

import shutil
import statistics
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
from benchmarks import inputs
from benchmarks.nexmark import TUMBLE_COUNT_SUM_MAX

BATCH = 65_536


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
    checkpoints: bool, base_events: int, passes: int, interval: float = 1.0
) -> dict[str, Any]:
    """One run of the tumble query; events/s and how many checkpoints ran."""
    base = inputs.load("bid", base_events)
    state = Path(tempfile.mkdtemp(prefix="checkpoints-", dir=inputs.CACHE)) if checkpoints else None
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
        q = ctx.execute_streaming(f"INSERT INTO out {TUMBLE_COUNT_SUM_MAX}")
        seen: dict[int, dict[str, Any]] = {}
        while not q.wait(0.1):  # both variants poll status() alike
            last = q.status()["last_checkpoint"]
            if last:
                seen[last["id"]] = last
        seconds = time.perf_counter() - t0
        late = q.status()["late_rows"]
        if late:
            raise RuntimeError(f"checkpoint overhead run dropped {late:,} late rows")
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


def run_size(keys: int, checkpoints: int = 3) -> dict[str, Any]:
    """Checkpoint size and duration with ``keys`` groups of state, and recovery time."""
    inputs.CACHE.mkdir(parents=True, exist_ok=True)
    root = Path(tempfile.mkdtemp(prefix="checkpoints-", dir=inputs.CACHE))
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
        # every operator has taken every row (the source's rows_in counts rows read, earlier)
        while min(o["rows_in"] for o in q.status()["operators"].values()) < keys:
            if q.wait(0.01):  # raises if the query failed
                raise RuntimeError(f"the query ended before its operators took {keys:,} rows")
        ingest_s = time.perf_counter() - t0
        taken = []
        for _ in range(checkpoints):
            q.checkpoint()
            taken.append(q.status()["last_checkpoint"])
        # state sizes in status() are sampled now and then: wait for a sample holding every key
        deadline = time.monotonic() + 60
        while True:
            state = q.status()["operators"]
            state_rows = sum(o.get("state_rows") or 0 for o in state.values())
            state_bytes = sum(o.get("state_bytes") or 0 for o in state.values())
            if state_rows >= keys or time.monotonic() > deadline:
                break
            time.sleep(0.05)
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


__all__ = ["run_overhead", "run_size"]
