"""State stays flat on an unbounded stream with bounded keys: peak RSS over N and k x N events.

Two workloads over the Nexmark bid generator — a generator source, not an in-memory table,
so the input costs no memory that grows with N (``rows = N`` only makes the otherwise
endless stream stop):

- ``tumble_1s_state``: a tumbling 1 s count per ``auction % 1000``, ``EMIT ON WINDOW
  CLOSE``, at N and 10xN. Each window's state is dropped when the watermark (max event
  time - 1 s) passes its end, so the operator holds a couple of windows x at most 1000 keys.
- ``groupby_100k_state``: an unbounded ``GROUP BY price % 100000`` (count, max), its
  changelog kept as the final state by ``to_arrow()``, at 1M and 20M (N at least 1M, so
  both runs meet all 100k keys). The operator and the result hold one row per key.

Each run is a fresh child process; the peak RSS of both sizes, and the most state rows the
operator held after any batch, should agree within 15 %. datum-sql alone: there is nothing
to compare with, only memory over time.

``python -m benchmarks state`` runs N = 1M (``--quick``: 100k for the tumble).
"""

from __future__ import annotations

import importlib
import time
from dataclasses import dataclass
from typing import Any

from benchmarks.child import call, peak_rss_mb
from benchmarks.environment import load_average
from benchmarks.harness import Session, group_record
from benchmarks.results import append

SOURCE = (
    "CREATE SOURCE bids (auction BIGINT, price BIGINT, date_time TIMESTAMP, "
    "WATERMARK FOR date_time AS date_time - INTERVAL '1' SECOND) "
    "WITH (connector = 'nexmark', stream = 'bid', rows = '{rows}', seed = '1')"
)
#: peak RSS may grow this much at k x the events and still count as flat
FLAT = 0.15


@dataclass(frozen=True)
class Workload:
    name: str
    about: str
    query: str
    #: the stateful operator whose state rows are watched, "module:Class"
    operator: str
    #: the larger run has this many times the events of the smaller
    factor: int
    #: the smaller run has at least this many events
    min_events: int = 0
    #: an INSERT INTO a counting sink (True) or a SELECT read by ``to_arrow()``
    insert: bool = True


WORKLOADS = (
    Workload(
        "tumble_1s_state", "tumble 1 s count per auction % 1000, EMIT ON WINDOW CLOSE",
        "INSERT INTO out SELECT auction % 1000 AS auction, window_start, window_end, "
        "count(*) AS n FROM tumble(bids, date_time, INTERVAL '1 second') "
        "GROUP BY window_start, window_end, auction % 1000 EMIT ON WINDOW CLOSE",
        "datum_sql.engine.operators.windows.aggregate:WindowAggregate", factor=10,
    ),
    Workload(
        "groupby_100k_state", "unbounded GROUP BY price % 100000 (count, max), final state",
        "SELECT price % 100000 AS k, count(*) AS n, max(auction) AS top FROM bids "
        "GROUP BY price % 100000",
        "datum_sql.engine.operators.aggregate:GroupAggregate", factor=20,
        min_events=1_000_000, insert=False,
    ),
)  # fmt: skip


def _watch_state(operator: str) -> dict[str, int]:
    """Record the operator's state rows after every batch it takes."""
    module, name = operator.split(":")
    cls = getattr(importlib.import_module(module), name)
    seen = {"max_state_rows": 0, "batches": 0}
    on_batch = cls.on_batch

    def watched(self: Any, *args: Any, **kwargs: Any) -> Any:
        out = on_batch(self, *args, **kwargs)
        seen["max_state_rows"] = max(seen["max_state_rows"], self.state_size()[0])
        seen["batches"] += 1
        return out

    cls.on_batch = watched
    return seen


def run_state(workload: str, events: int) -> dict[str, Any]:
    """Child entry: one run of ``workload`` over ``events`` generated bids."""
    import datum_sql as ds

    w = next(w for w in WORKLOADS if w.name == workload)
    seen = _watch_state(w.operator)
    ctx = ds.Context(state_dir=None, checkpoint_interval=None)
    ctx.execute(SOURCE.format(rows=events))
    out = {"rows": 0}

    def count(batch: Any) -> None:
        out["rows"] += batch.num_rows

    ctx.register_append_sink("out", count)
    t0 = time.perf_counter()
    q = ctx.execute_streaming(w.query)
    if w.insert:
        q.wait()
    else:
        out["rows"] = q.to_arrow().num_rows
    seconds = time.perf_counter() - t0
    status = q.status()
    if status["late_rows"] or status["rows_in"] != events:
        raise RuntimeError(f"read {status['rows_in']:,} bids ({status['late_rows']:,} late), "
                           f"expected {events:,} on time")  # fmt: skip
    return {
        "seconds": seconds,
        "rows_out": out["rows"],
        "max_state_rows": seen["max_state_rows"],
        "peak_rss_mb": peak_rss_mb(),
    }


def run_group(events: int, session: Session) -> list[dict[str, Any]]:
    """Every workload at N and k x N events, ``session.runs`` fresh processes each."""
    records = []
    for w in WORKLOADS:
        records += _run_workload(w, max(events, w.min_events), session)
    append(records, session.results_path)
    return records


def _run_workload(w: Workload, events: int, session: Session) -> list[dict[str, Any]]:
    print(f"\n== {w.name}: {w.about}, over an unbounded stream, {session.runs} runs each")
    print(f"   {'events':>12} {'median ev/s':>11} {'peak RSS MB':>12} {'max state rows':>15} "
          f"{'rows out':>10}")  # fmt: skip
    records = []
    for n in (events, w.factor * events):
        load_before = load_average()
        runs = [call("benchmarks.window_state:run_state", {"workload": w.name, "events": n})
                for _ in range(session.runs)]  # fmt: skip
        state_rows = max(r["max_state_rows"] for r in runs)
        record = group_record(
            session, group="state", benchmark=w.name,
            about=f"{w.about}: peak RSS at N and {w.factor}xN",
            engine="datum-sql", events=n, runs=runs,
            metrics={"max_state_rows": state_rows, "rows_out": runs[0]["rows_out"]},
            load_before=load_before, load_after=load_average(),
        )  # fmt: skip
        records.append(record)
        print(f"   {n:>12,} {record['events_per_s'] / 1e6:>10.2f}M {record['peak_rss_mb']:>12.0f} "
              f"{state_rows:>15,} {runs[0]['rows_out']:>10,}", flush=True)  # fmt: skip
    small, big = records
    growth = big["peak_rss_mb"] / small["peak_rss_mb"] - 1
    flat = abs(growth) <= FLAT
    for r in records:
        r["metrics"]["rss_growth"] = round(growth, 4)
        r["metrics"]["flat"] = flat
    print(f"   peak RSS at {w.factor}x the events: {growth:+.1%} ({'flat' if flat else 'GROWS'})")
    if not flat:
        session.failures.append(f"{w.name} (state grows)")
    return records


__all__ = ["WORKLOADS", "run_group", "run_state"]
