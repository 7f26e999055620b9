"""A Python aggregate function survives SIGKILL: a script run by the CLI (``CREATE
AGGREGATE FUNCTION``, a paced Nexmark source, a tumbling window into a Parquet sink) is
killed once a checkpoint holds the function's state, run again on the same state
directory, and ends holding exactly DuckDB's result over the same bids: every window once,
with the right values (the state came back from the checkpoint, not from the object)."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import duckdb
import pyarrow.dataset as pads
import pytest

from datum_sql.connectors.generators import nexmark_table
from datum_sql.testing import sorted_rows

ROWS = 6000
MODULE = """
    import pyarrow.compute as pc

    class SpreadSum:
        '''sum(price) and max(price) - min(price) of a window's bids.'''
        state = {"total": "BIGINT", "lo": "BIGINT", "hi": "BIGINT"}
        initial = {"total": 0}

        def accumulate(self, state, price):
            lo, hi = pc.min_max(price).values()
            part = {"total": pc.sum(price).as_py(), "lo": lo.as_py(), "hi": hi.as_py()}
            return self.merge(state, part)

        def merge(self, a, b):
            lo = min(x for x in (a["lo"], b["lo"]) if x is not None)
            hi = max(x for x in (a["hi"], b["hi"]) if x is not None)
            return {"total": a["total"] + b["total"], "lo": lo, "hi": hi}

        def finish(self, state):
            return f"{state['total']}:{state['hi'] - state['lo']}"
"""
SCRIPT = f"""
    CREATE AGGREGATE FUNCTION spread_sum(price BIGINT) RETURNS VARCHAR
        LANGUAGE python AS 'spreadfns:SpreadSum';
    CREATE SOURCE bids (WATERMARK FOR date_time AS date_time - INTERVAL '10 milliseconds')
        WITH (connector = 'nexmark', stream = 'bid', rows = '{ROWS}', events_per_second = '3000',
              seed = '7', inter_event_us = '1000');
    CREATE SINK out WITH (connector = 'parquet', path = 'out');
    INSERT INTO out SELECT window_start, auction % 7 AS bucket, spread_sum(price) AS s
        FROM tumble(bids, date_time, INTERVAL '100 milliseconds')
        GROUP BY window_start, window_end, auction % 7 EMIT ON WINDOW CLOSE;
"""
DUCKDB = """
    SELECT make_timestamp(epoch_us(date_time) // 100000 * 100000) AS window_start,
           auction % 7 AS bucket,
           CAST(sum(price) AS VARCHAR) || ':' || CAST(max(price) - min(price) AS VARCHAR) AS s
    FROM bids GROUP BY 1, 2
"""


def _start(root: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "datum_sql.cli", "run", "job.sql", "--state-dir", "state",
         "--checkpoint-interval", "200ms"],
        cwd=root, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_udaf_window_recovers_after_sigkill(tmp_path: Path) -> None:
    (tmp_path / "spreadfns.py").write_text(textwrap.dedent(MODULE))
    (tmp_path / "job.sql").write_text(textwrap.dedent(SCRIPT))
    first = _start(tmp_path)
    deadline = time.monotonic() + 300
    # the third checkpoint: windows are open, the function's state is in it
    while not list((tmp_path / "state").glob("**/chk-*/MANIFEST.json"))[2:]:
        assert first.poll() is None, f"the run ended before a checkpoint: {first.stderr}"
        assert time.monotonic() < deadline, "no checkpoint within 300 s"
        time.sleep(0.02)
    first.send_signal(signal.SIGKILL)
    first.communicate(timeout=120)
    assert first.returncode == -signal.SIGKILL
    before = pads.dataset(str(tmp_path / "out"), format="parquet").count_rows()
    second = _start(tmp_path)
    _, err = second.communicate(timeout=300)
    assert second.returncode == 0, err
    got = pads.dataset(str(tmp_path / "out"), format="parquet").to_table()
    bids = nexmark_table("bid", ROWS, 7, inter_event_us=1000)
    con = duckdb.connect()
    con.execute("SET TimeZone = 'UTC'")
    con.register("bids", bids)
    want = con.sql(DUCKDB).to_arrow_table()
    assert len(got) == len(want) > before > 0  # the first run committed some windows
    assert sorted_rows(got) == sorted_rows(want)
