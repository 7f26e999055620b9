"""q.explain_progress(): why nothing comes out — open windows and the watermark they wait
for, the input holding the watermark back (no event time, idle or lagging split), join
state, late rows."""

from __future__ import annotations

from typing import Any

import pytest
from nbtest_support import Gate, events, wait_until

import datum_sql as ds
from datum_sql.engine.jobgraph import JobGraph, Node
from datum_sql.notebook.progress_report import build_report
from datum_sql.types import to_micros

SECOND = 1_000_000


@pytest.fixture
def ctx() -> Any:
    with ds.Context(state_dir=None, checkpoint_interval=None) as c:
        yield c


def test_open_window_waiting_for_the_watermark(ctx: Any) -> None:
    late_rows: list[Any] = []
    ctx.register_append_sink("late_out", late_rows.append)
    gate = Gate(events([0, 1, 5, 2]).to_batches(max_chunksize=1), events([30]).to_batches())
    ctx.register_arrow(
        "ev", gate, schema=events([0]).schema, event_time="ts",
        watermark=ds.BoundedOutOfOrderness(seconds=1), late_output="late_out",
    )  # fmt: skip
    q = ctx.execute_streaming(
        "SELECT window_start, count(*) AS n FROM tumble(ev, ts, INTERVAL '10 seconds') "
        "GROUP BY window_start, window_end EMIT ON WINDOW CLOSE"
    )
    try:
        wait_until(lambda: any(o.get("open_windows") for o in q.status()["operators"].values()))
        report = q.explain_progress()
        assert report.state == "running" and report.rows_out == 0
        assert report.headline == "nothing has come out yet"
        text = str(report)
        assert "1 window open" in text
        assert "closes when the watermark reaches 2026-01-01 00:00:10" in text
        assert "watermark now 2026-01-01 00:00:04" in text and "6s of event time to go" in text
        assert "EMIT ON WINDOW CLOSE" in text
        window_op = next(o for o in report.operators if o.kind == "window_aggregate")
        assert window_op.waiting
        source = report.sources[0]
        assert source.holds_back and source.table == "ev"
        assert any("newest event time 2026-01-01 00:00:05" in n for n in source.notes)
        # the late row (00:00:02 after 00:00:05, delay 1 s) is counted and was written out
        assert source.late_rows == 1
        assert any("1 late row from ev so far: written to late_out" in r for r in report.reasons)
    finally:
        gate.open()
    q.wait(30)
    done = q.explain_progress()
    assert done.state == "finished"
    assert done.rows_out == 2 and "finished" in done.headline


def test_a_source_without_event_time_is_named(ctx: Any) -> None:
    ctx.execute(
        "CREATE SOURCE bids WITH (connector = 'nexmark', stream = 'bid', events_per_second = '500')"
    )
    q = ctx.execute_streaming("SELECT channel, count(*) AS n FROM bids GROUP BY channel")
    wait_until(lambda: q.status()["rows_in"] > 0)
    report = q.explain_progress()
    q.cancel()
    assert any("no event time" in n for n in report.sources[0].notes)
    group = next(o for o in report.operators if o.kind == "group_aggregate")
    assert "emits updates after each batch" in group.lines[0]


def _graph(kind: str = "window_aggregate", inputs: int = 1) -> JobGraph:
    sources = [
        Node(f"source_{i}", "source", f"s{i}", {"event_time": "ts", "watermark_delay_us": SECOND})
        for i in range(inputs)
    ]
    op = Node("op_9", "operator", kind, {"emit": "window_close"}, tuple(s.id for s in sources))
    return JobGraph((*sources, op, Node("collect_10", "sink", "collect", {}, ("op_9",))))


def _status(sources: dict[str, Any], op: dict[str, Any]) -> dict[str, Any]:
    return {
        "name": "q", "state": "running", "rows_in": 10, "rows_out": 0, "late_rows": 0,
        "sources": sources, "operators": {"op_9": op}, "sinks": {"collect": {"rows": 0}},
    }  # fmt: skip


def _t(seconds: float) -> int:
    from datetime import datetime

    return to_micros(datetime(2026, 1, 1)) + int(seconds * SECOND)


def test_an_idle_partition_holds_the_watermark_back() -> None:
    status = _status(
        {"s0": {"rows": 10, "watermark": "2026-01-01 00:00:01", "partitions": {"1": {"lag": 0}}}},
        {"kind": "window_aggregate", "open_windows": 2, "watermark": "2026-01-01 00:00:01",
         "oldest_open_window_end": "2026-01-01 00:00:10", "closes_at_watermark": "2026-01-01 00:00:10"},
    )  # fmt: skip
    clocks = {"source_0": {"splits": {"0": (_t(20), 0.1), "1": (_t(2), 42.0)}, "derived": True,
                           "delay_us": SECOND, "idle_timeout_s": None}}  # fmt: skip
    report = build_report(status, _graph(), clocks)
    notes = " ".join(report.sources[0].notes)
    assert "split 1 is idle (no rows for 42s)" in notes and "set idle_timeout" in notes
    split1 = next(s for s in report.sources[0].splits if s["split"] == "1")
    assert split1["note"] == "idle: holds the watermark back" and split1["lag"] == 0
    assert any("2 windows open" in r for r in report.reasons)


def test_a_lagging_partition_and_a_partition_without_rows() -> None:
    status = _status(
        {"s0": {"rows": 10, "watermark": "2026-01-01 00:00:04"}}, {"kind": "window_aggregate"}
    )
    clocks = {"source_0": {"splits": {"0": (_t(20), 0.1), "1": (_t(5), 0.2)}, "derived": True,
                           "delay_us": SECOND, "idle_timeout_s": None}}  # fmt: skip
    notes = " ".join(build_report(status, _graph(), clocks).sources[0].notes)
    assert "split 1 lags 15s of event time behind split 0" in notes
    from datum_sql.types import START_OF_TIME

    clocks["source_0"]["splits"]["1"] = (START_OF_TIME, 0.2)
    report = build_report(status, _graph(), clocks)
    assert "split 1 has no rows yet" in " ".join(report.sources[0].notes)
    # an idle_timeout makes an idle split drop out instead
    clocks["source_0"]["splits"]["1"] = (_t(5), 30.0)
    clocks["source_0"]["idle_timeout_s"] = 10.0
    report = build_report(status, _graph(), clocks)
    split1 = next(s for s in report.sources[0].splits if s["split"] == "1")
    assert split1["note"] == "idle, skipped"


def test_join_state_and_the_side_that_holds_results_back() -> None:
    status = _status(
        {"s0": {"rows": 5, "watermark": "2026-01-01 00:00:09"},
         "s1": {"rows": 1, "watermark": "2026-01-01 00:00:01"}},
        {"kind": "asof_join", "left_rows_held": 4, "right_rows_held": 1,
         "left_watermark": "2026-01-01 00:00:09", "right_watermark": "2026-01-01 00:00:01"},
    )  # fmt: skip
    report = build_report(status, _graph("asof_join", inputs=2), {})
    join = report.operators[0]
    assert join.waiting
    assert "holds 4 left and 1 right rows in state" in join.lines[0]
    assert "the right input holds results back" in join.lines[0]
    assert [s.table for s in report.sources if s.holds_back] == ["s1"]
    html = report._repr_html_()
    assert "asof_join" in html and "datum-warn" in html


def test_report_of_a_failed_query_names_the_error() -> None:
    status = _status({"s0": {"rows": 1, "watermark": "-inf"}}, {"kind": "calc"})
    status.update(state="failed", error="query failed: <boom>")
    report = build_report(status, _graph("calc"), {})
    assert report.headline.startswith("the query failed")
    assert "error: query failed: <boom>" in report.reasons
    assert "&lt;boom&gt;" in report._repr_html_()
