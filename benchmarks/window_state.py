"""Window state stays flat on an unbounded stream: peak RSS over N and 10xN events.

A tumbling 1 s count per auction (``auction % 1000``: bounded keys) over the Nexmark bid
generator — a generator source, not an in-memory table, so the input costs no memory that
grows with N (``rows = N`` only makes the otherwise endless stream stop). Each window's state is dropped when the watermark (max event time - 1 s)
passes its end, so the operator holds a couple of windows x at most 1000 keys whatever N
is. The run is repeated for N and 10xN events, each in its own child process; the peak RSS
of both, and the most state rows the window operator held after any batch, should agree
within ~10-15 %.

``python -m benchmarks state`` runs N = 1M and 10xN = 10M.
"""

from __future__ import annotations

from typing import Any

import datum_sql as ds
from benchmarks.harness import Result, peak_rss_mb, run_isolated, timed
from datum_sql.engine.operators.windows.aggregate import WindowAggregate

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
DEFAULT_EVENTS = 1_000_000


def _watch_state() -> dict[str, int]:
    """Record the window operator's state rows after every batch it takes."""
    seen = {"max_state_rows": 0, "batches": 0}
    on_batch = WindowAggregate.on_batch

    def watched(self: WindowAggregate, *args: Any, **kwargs: Any) -> Any:
        out = on_batch(self, *args, **kwargs)
        seen["max_state_rows"] = max(seen["max_state_rows"], self.state_size()[0])
        seen["batches"] += 1
        return out

    WindowAggregate.on_batch = watched  # type: ignore[method-assign]
    return seen


def run_state(events: int = DEFAULT_EVENTS) -> Result:
    """One run in this process (called in a child by :func:`main`)."""
    seen = _watch_state()
    ctx = ds.Context(state_dir=None, checkpoint_interval=None)
    ctx.execute(SOURCE.format(rows=events))
    out = {"rows": 0}

    def count(batch: Any) -> None:
        out["rows"] += batch.num_rows

    ctx.register_append_sink("out", count)
    seconds, q = timed(lambda: ctx.execute_streaming(QUERY))
    extra, _ = timed(lambda: q.wait())
    status = q.status()
    assert status["late_rows"] == 0 and status["rows_in"] == events
    return Result(
        f"tumble_1s_state_{events // 1_000_000}M" if events >= 1_000_000 else "tumble_1s_state",
        events,
        seconds + extra,
        None,
        peak_rss_mb(),
        out["rows"],
        note=f"max_state_rows={seen['max_state_rows']}",
    )


def main(events: int = DEFAULT_EVENTS) -> None:
    print("Window state over an unbounded stream with bounded keys (tumble 1 s, auction % 1000)")
    print(
        f"{'events':>12} {'datum ev/s':>11} {'peak RSS MB':>12} {'max state rows':>15} {'rows out':>10}"
    )
    results = []
    for n in (events, 10 * events):
        r = run_isolated("benchmarks.window_state", "state", {"events": n})
        results.append(r)
        state_rows = int(r.note.split("=")[1])
        print(
            f"{r.events:>12,} {r.datum_eps / 1e6:>10.2f}M {r.peak_rss_mb:>12.0f} "
            f"{state_rows:>15,} {r.rows_out:>10,}",
            flush=True,
        )
    small, big = results
    growth = big.peak_rss_mb / small.peak_rss_mb - 1
    print(
        f"peak RSS at 10x the events: {growth:+.1%} ({'flat' if abs(growth) <= 0.15 else 'GROWS'})"
    )


if __name__ == "__main__":
    main()
