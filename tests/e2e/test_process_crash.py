"""Process functions survive SIGKILL: a child process (process_child.py) running the idle
alert over a paced Nexmark stream and the order state machine over Parquet files, each
into Parquet and DuckDB sinks, is killed at random moments (or exits at a chosen commit
step) and restarted until it finishes. Every sink must then hold exactly the hand-computed
rows, each once: a timer registered before a checkpoint fires after the restore, one
that fired before it does not fire again.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "golden"))

from process_child import BIDS
from process_handlers import idle_reference, lifecycle_reference, orders_table

import datum_sql as ds
from datum_sql.testing import sorted_rows

CHILD = Path(__file__).with_name("process_child.py")


@pytest.fixture(scope="module")
def inputs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("process_inputs")
    (d / "orders").mkdir()
    table = orders_table(21, n=1500)
    for f in range(15):
        pq.write_table(table.slice(f * 100, 100), d / "orders" / f"part-{f:03d}.parquet")
    return d


@pytest.fixture(scope="module")
def expected(inputs: Path) -> dict[str, list[tuple[Any, ...]]]:
    """Each query's rows, computed by hand from its input."""
    ctx = ds.Context(state_dir=None)
    ctx.execute(BIDS)
    bids = ctx.sql("SELECT bidder AS k, date_time AS ts FROM bids").to_pylist()
    orders = pq.read_table(inputs / "orders").to_pylist()
    idle, lifecycle = idle_reference(bids), lifecycle_reference(orders)
    # quiet spells inside the stream (timers fired by the watermark), not only at its end
    end = max(b["ts"] for b in bids)
    assert sum(alert_at < end for _, _, alert_at in idle) > 20
    assert {r[-1] for r in lifecycle} == {"ok", "invalid", "late"}
    return {"idle": sorted(idle, key=repr), "orders": sorted(lifecycle, key=repr)}


def _run(
    root: Path, inputs: Path, *, kill_after: float | None = None, crash_at: str | None = None
) -> int:
    env = dict(os.environ)
    env.pop("DATUM_CRASH_AT", None)
    if crash_at:
        env["DATUM_CRASH_AT"] = crash_at
    proc = subprocess.Popen(
        [sys.executable, str(CHILD), str(root / "state"), str(root / "out"), str(inputs)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
    )  # fmt: skip
    if kill_after is not None:
        assert proc.stdout is not None
        if proc.stdout.readline().strip() == "started":
            time.sleep(kill_after)
            proc.send_signal(signal.SIGKILL)
    _, err = proc.communicate(timeout=180)
    if proc.returncode not in (0, -signal.SIGKILL, 86):
        raise AssertionError(f"child failed ({proc.returncode}):\n{err}")
    return proc.returncode


def _contents(root: Path) -> dict[str, list[tuple[Any, ...]]]:
    out = root / "out"
    result = {}
    for name in ("idle", "orders"):
        files = sorted((out / f"{name}_parquet").glob("*.parquet"))
        parquet = pa.concat_tables([pq.read_table(f) for f in files]) if files else None
        result[f"{name}_parquet"] = sorted(sorted_rows(parquet), key=repr) if parquet else []
        con = duckdb.connect(str(out / f"{name}.duckdb"), read_only=True)
        result[f"{name}_duckdb"] = sorted(
            sorted_rows(con.sql("SELECT * FROM rows").to_arrow_table()), key=repr
        )
        con.close()
    return result


CRASHES = [("kill", None)] * 6 + [
    ("at", "before_manifest:3"), ("at", "after_manifest:4"), ("at", "mid_sink_commit:5"),
]  # fmt: skip


@pytest.mark.slow
@pytest.mark.timeout(900)
@pytest.mark.parametrize("trial", range(len(CRASHES)))
def test_killed_and_recovered_process_functions_write_each_row_once(
    trial: int, inputs: Path, expected: dict[str, list[tuple[Any, ...]]], tmp_path: Path
) -> None:
    rng = random.Random(trial)
    mode, point = CRASHES[trial]
    crashes = 0
    for attempt in range(10):
        if attempt >= 3:
            code = _run(tmp_path, inputs)
        elif mode == "kill":
            code = _run(
                tmp_path, inputs, kill_after=rng.uniform(0.05, 1.2 if attempt == 0 else 0.6)
            )
        else:
            code = _run(tmp_path, inputs, crash_at=point if attempt == 0 else None)
        if code == 0:
            break
        crashes += 1
    else:
        raise AssertionError("the child never finished")
    assert crashes >= 1, "the child was never interrupted"
    got = _contents(tmp_path)
    for sink, rows in got.items():
        assert rows == expected[sink.rsplit("_", 1)[0]], (
            f"{sink} differs from the hand-computed rows"
        )
