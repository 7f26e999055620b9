"""Checkpoints: what they cost a running query, and how big and slow they are for large state.

* ``checkpoint_overhead``: the ``tumble_count_sum_max`` Nexmark query (10 s tumbling
  windows per auction: count, sum, max; EMIT ON WINDOW CLOSE) into a counting callback
  sink, once with a ``state_dir`` and a 1 s checkpoint interval, once without
  (``state_dir=None``, ``checkpoint_interval=None``: no checkpoint, no periodic commit).
  The cached bids are replayed ``passes`` times with the event time shifted on (the windows
  keep moving, state stays realistic), long enough for many checkpoints. Each variant runs
  ``repeat`` times, interleaved, each run in a fresh child process; printed: every run with
  its peak RSS, the best run of each, the median ratio of the paired runs, and the share of
  the run the query spent paused in checkpoints (the direct cost).
* ``checkpoint_size``: an unbounded ``GROUP BY k`` (count, sum, max) over ``keys``
  distinct keys into a DuckDB upsert sink (its changelog); once every row is in,
  ``q.checkpoint()`` is called 3 times and ``status()["last_checkpoint"]`` read each time
  (size and duration: snapshot, sink pre-commit, state files and manifest written with
  fsync, sink commit, retention). Then the source ends and a second Context on the same
  ``state_dir`` restarts the query: the recovery time is how long it takes to load the
  checkpoint, restore the state and finish.

datum-sql alone (checkpoints are its own). Checkpoints are written under a temporary
directory in ``benchmarks/.cache/`` (removed afterwards), i.e. on the disk the benchmarks
live on. ``python -m benchmarks checkpoints``.
"""

from __future__ import annotations

import statistics
from typing import Any

from benchmarks.child import call
from benchmarks.environment import load_average
from benchmarks.harness import Session, group_record
from benchmarks.results import append

#: the overhead a 1 s checkpoint interval may cost
TARGET = 0.15


def run_group(sizes: Any, session: Session) -> list[dict[str, Any]]:
    """Both checkpoint benchmarks; print, record."""
    return [*_overhead(sizes, session), _size(sizes.checkpoint_keys, session)]


def _overhead(sizes: Any, session: Session) -> list[dict[str, Any]]:
    base, passes, repeat = sizes.checkpoint_events, sizes.checkpoint_passes, sizes.checkpoint_repeat
    call("benchmarks.inputs:ensure", {"dataset": "bid", "rows": base, "seed": 0})
    print(f"\n== checkpoint overhead: tumble_count_sum_max, {base * passes:,} bids ({base:,} "
          f"replayed {passes} times), {repeat} runs of each, interleaved")  # fmt: skip
    load_before = load_average()
    runs: dict[bool, list[dict[str, Any]]] = {False: [], True: []}
    for i in range(repeat):
        for with_checkpoints in (False, True) if i % 2 == 0 else (True, False):
            args = {"checkpoints": with_checkpoints, "base_events": base, "passes": passes}
            r = call("benchmarks.checkpoint_workloads:run_overhead", args)
            runs[with_checkpoints].append(r)
            label = "1 s checkpoints" if with_checkpoints else "no checkpoints "
            extra = ""
            if with_checkpoints:
                size = statistics.mean(r["sizes"]) if r["sizes"] else 0.0
                extra = (
                    f"  {r['checkpoints_taken']} checkpoints (periodic ones {size / 1e6:.2f} MB), "
                    f"{r['stall_s'] * 1e3:.0f} ms in checkpoints"
                )
            print(f"   {label} {r['eps'] / 1e6:6.2f}M ev/s ({r['seconds']:.2f} s), peak RSS "
                  f"{r['peak_rss_mb']:.0f} MB{extra}", flush=True)  # fmt: skip
    best = {k: max(v, key=lambda r: r["eps"]) for k, v in runs.items()}
    ratio = best[True]["eps"] / best[False]["eps"]
    paired = statistics.median(
        b["eps"] / a["eps"] for a, b in zip(runs[False], runs[True], strict=True)
    )
    stall = statistics.median(r["stall_s"] / r["seconds"] for r in runs[True])
    print(
        f"   best: {best[False]['eps'] / 1e6:.2f}M ev/s without, {best[True]['eps'] / 1e6:.2f}M "
        f"with ({best[True]['checkpoints_taken']} checkpoints): ratio {ratio:.3f}, "
        f"cost {100 * (1 - ratio):.1f}% (target <= {100 * TARGET:.0f}%)"
    )
    print(
        f"   median ratio of the paired runs {paired:.3f} (cost {100 * (1 - paired):.1f}%); "
        f"time spent checkpointing (the query paused): {100 * stall:.2f}% of the run"
    )
    load_after = load_average()
    shared = {"paired_ratio": round(paired, 4), "best_ratio": round(ratio, 4)}
    taken = statistics.median(r["checkpoints_taken"] for r in runs[True])
    metrics = {
        False: shared,
        True: {**shared, "checkpoints": taken, "paused_share": round(stall, 4)},
    }
    records = [
        group_record(
            session,
            group="checkpoints",
            benchmark="checkpoint_overhead",
            about="tumble_count_sum_max into a callback sink, with and without 1 s checkpoints",
            engine="datum-sql, 1 s checkpoints" if with_checkpoints else "datum-sql, none",
            events=base * passes,
            runs=rs,
            metrics=metrics[with_checkpoints],
            load_before=load_before,
            load_after=load_after,
        )
        for with_checkpoints, rs in runs.items()
    ]
    append(records, session.results_path)
    return records


def _size(keys: int, session: Session) -> dict[str, Any]:
    print(f"\n== checkpoint size and duration: GROUP BY over {keys:,} keys")
    load_before = load_average()
    s = call("benchmarks.checkpoint_workloads:run_size", {"keys": keys})
    for c in s["checkpoints"]:
        print(f"   checkpoint {c['id']}: {c['size_bytes'] / 1e6:.1f} MB in {c['duration_s']:.3f} s")
    print(
        f"   median {s['size_bytes'] / 1e6:.1f} MB in {s['duration_s']:.3f} s "
        f"({s['size_bytes'] / s['keys']:.1f} bytes/key; state in memory "
        f"{s['state_bytes_in_memory'] / 1e6:.1f} MB, {s['state_rows']:,} rows); "
        f"restart from it (restore and finish): {s['restart_s']:.2f} s; "
        f"peak RSS {s['peak_rss_mb']:.0f} MB"
    )
    record = group_record(
        session, group="checkpoints", benchmark="checkpoint_size",
        about="GROUP BY k over distinct keys into a DuckDB upsert sink: checkpoint size, restart",
        engine="datum-sql", events=keys, runs=[{**s, "seconds": s["ingest_s"]}],
        metrics={"checkpoint_mb": round(s["size_bytes"] / 1e6, 2),
                 "checkpoint_s": round(s["duration_s"], 4),
                 "state_mb_in_memory": round(s["state_bytes_in_memory"] / 1e6, 2),
                 "restart_s": round(s["restart_s"], 3)},
        load_before=load_before, load_after=load_average(),
    )  # fmt: skip
    append([record], session.results_path)
    return record


__all__ = ["TARGET", "run_group"]
