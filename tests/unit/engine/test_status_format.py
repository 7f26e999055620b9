"""status(): every watermark and window time in one timestamp format, each counter once."""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any

import datum_sql as ds

TIMESTAMP = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(\.\d{6})?|[+-]inf)$")
TIME_KEYS = ("watermark", "oldest_open_window_end", "closes_at_watermark")


def _times(node: Any, path: str = "") -> list[tuple[str, Any]]:
    out = []
    if isinstance(node, dict):
        for key, value in node.items():
            if key.endswith(TIME_KEYS) and value is not None:
                out.append((f"{path}.{key}", value))
            out += _times(value, f"{path}.{key}")
    return out


def test_a_running_query_reports_times_in_one_format_and_counters_once(tmp_path: Path) -> None:
    data = tmp_path / "in.csv"
    data.write_text("id,v\n1,10\nbad,row\n2,20\n")
    ctx = ds.Context(state_dir=None)
    ctx.execute(
        "CREATE SOURCE bids (auction BIGINT, price BIGINT, date_time TIMESTAMP, "
        "WATERMARK FOR date_time AS date_time - INTERVAL '1' SECOND) "
        "WITH (connector = 'nexmark', stream = 'bid', events_per_second = '2000')"
    )
    ctx.execute(f"CREATE SINK out WITH (connector = 'parquet', path = '{tmp_path / 'out'}')")
    q = ctx.execute_streaming(
        "INSERT INTO out SELECT window_start, auction, count(*) AS n "
        "FROM tumble(bids, date_time, INTERVAL '1' SECOND) "
        "GROUP BY window_start, window_end, auction EMIT ON WINDOW CLOSE"
    )
    try:
        deadline = time.monotonic() + 120
        status = q.status()
        while time.monotonic() < deadline:  # until the watermark has moved past -inf
            status = q.status()
            if status["rows_out"] > 0 and status["watermark"] not in ("-inf", "+inf"):
                break
            time.sleep(0.05)
        times = _times(status)
        assert any(p.startswith(".operators") for p, _ in times), times
        assert any(p.endswith("oldest_open_window_end") for p, _ in times), times
        for path, value in times:
            assert isinstance(value, str) and TIMESTAMP.match(value), (path, value)
        (sink,) = status["sinks"].values()
        assert "rows_written" not in sink and sink["rows"] >= 0
    finally:
        q.cancel()
    # a file source's rejected rows are counted once, as rejected_rows
    ctx.execute(
        f"CREATE SOURCE raw (id BIGINT, v BIGINT) WITH (connector = 'csv', path = '{data}', "
        "bad_records = 'skip')"
    )
    ctx.register_append_sink("seen", lambda batch: None)
    q = ctx.execute_streaming("INSERT INTO seen SELECT id FROM raw")
    assert q.wait(timeout=60)
    source = q.status()["sources"]["raw"]
    assert source["rejected_rows"] == 1 and source["rows"] == 2
    assert "rejected" not in source
    assert "rows_written" not in q.status()["sinks"]["seen"]
