"""Window state stays flat on an unbounded stream: peak RSS over N and 10xN events.

A tumbling 1 s count per auction (``auction % 1000``: bounded keys) over the Nexmark bid
generator — a generator source, not an in-memory table, so the input costs no memory that
grows with N (``rows = N`` only makes the otherwise endless stream stop). Each window's
state is dropped when the watermark (max event time - 1 s) passes its end, so the operator
holds a couple of windows x at most 1000 keys whatever N is. Each run, for N and for 10xN
events, is a fresh child process; the peak RSS of both, and the most state rows the window
operator held after any batch, should agree within ~10-15 %. datum-sql alone: there is
nothing to compare with, only memory over time.

``python -m benchmarks state`` runs N = 1M and 10xN = 10M (``--quick``: 100k and 1M).
"""

from __future__ import annotations

import time
from typing import Any

from benchmarks.child import call, peak_rss_mb
from benchmarks.environment import load_average
from benchmarks.harness import Session, group_record
from benchmarks.results import append

SOURCE = (
    "CREATE SOURCE bids (auction BIGINT, date_time TIMESTAMP, "
    "WATERMARK FOR date_time AS date_time - INTERVAL '1' SECOND) "
    "WITH (connector = 'nexmark', stream = 'bid', rows = '{rows}', seed = '1')"
)
QUERY = (
    "INSERT INTO out SELECT auction % 1000 AS auction, window_start, window_end, count(*) AS n "
    "FROM tumble(bids, date_time, INTERVAL '1 second') "
    "GROUP BY window_start, window_end, auction % 1000 EMIT ON WINDOW CLOSE"
)
#: peak RSS may grow this much at 10x the events and still count as flat
FLAT = 0.15


def _watch_state() -> dict[str, int]:
    """Record the window operator's state rows after every batch it takes."""
    from datum_sql.engine.operators.windows.aggregate import WindowAggregate

    seen = {"max_state_rows": 0, "batches": 0}
    on_batch = WindowAggregate.on_batch

    def watched(self: WindowAggregate, *args: Any, **kwargs: Any) -> Any:
        out = on_batch(self, *args, **kwargs)
        seen["max_state_rows"] = max(seen["max_state_rows"], self.state_size()[0])
        seen["batches"] += 1
        return out

    WindowAggregate.on_batch = watched  # type: ignore[method-assign]
    return seen


def run_state(events: int) -> dict[str, Any]:
    """Child entry: one run over ``events`` generated bids."""
    import datum_sql as ds

    seen = _watch_state()
    ctx = ds.Context(state_dir=None, checkpoint_interval=None)
    ctx.execute(SOURCE.format(rows=events))
    out = {"rows": 0}

    def count(batch: Any) -> None:
        out["rows"] += batch.num_rows

    ctx.register_append_sink("out", count)
    t0 = time.perf_counter()
    q = ctx.execute_streaming(QUERY)
    q.wait()
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
    """N and 10xN events, ``session.runs`` fresh processes each; print, record, verdict."""
    print(f"\n== window state over an unbounded stream with bounded keys (tumble 1 s, "
          f"auction % 1000), {session.runs} runs each")  # fmt: skip
    print(f"   {'events':>12} {'median ev/s':>11} {'peak RSS MB':>12} {'max state rows':>15} "
          f"{'rows out':>10}")  # fmt: skip
    records = []
    for n in (events, 10 * events):
        load_before = load_average()
        runs = [call("benchmarks.window_state:run_state", {"events": n})
                for _ in range(session.runs)]  # fmt: skip
        state_rows = max(r["max_state_rows"] for r in runs)
        record = group_record(
            session, group="state", benchmark="tumble_1s_state",
            about="tumble 1 s count per auction % 1000 over generated bids: peak RSS at N and 10xN",
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
        r["metrics"]["rss_growth_at_10x"] = round(growth, 4)
        r["metrics"]["flat"] = flat
    print(f"   peak RSS at 10x the events: {growth:+.1%} ({'flat' if flat else 'GROWS'})")
    if not flat:
        session.failures.append("tumble_1s_state (window state grows)")
    append(records, session.results_path)
    return records


__all__ = ["run_group", "run_state"]
