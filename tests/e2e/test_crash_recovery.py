"""Crash tests: a child process is killed (SIGKILL, or an exit at a chosen commit step) at
random moments and restarted until it finishes. The sinks must then hold exactly what a
run that never crashed wrote: the same rows, no duplicates, for files and DuckDB; for the
callback sink no lost row, duplicates only from replay after the last checkpoint.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from datum_sql.testing import sorted_rows

CHILD = Path(__file__).with_name("crash_child.py")
QUERIES = ["stateless", "windowed", "files"]


def _inputs(root: Path) -> Path:
    d = root / "inputs"
    d.mkdir()
    rng = random.Random(3)
    for f in range(20):
        ids = list(range(f * 100, f * 100 + 100))
        table = pa.table(
            {"id": ids, "amount": [rng.random() for _ in ids], "label": [f"f{f}"] * 100}
        )
        pq.write_table(table, d / f"part-{f:03d}.parquet")
    return d


def _run(
    root: Path, inputs: Path, *, kill_after: float | None = None, crash_at: str | None = None
) -> int:
    env = dict(os.environ)
    env.pop("DATUM_CRASH_AT", None)
    if crash_at:
        env["DATUM_CRASH_AT"] = crash_at
    proc = subprocess.Popen(
        [sys.executable, str(CHILD), str(root / "state"), str(root / "out"), str(inputs), *QUERIES],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
    )  # fmt: skip
    if kill_after is not None:
        assert proc.stdout is not None
        line = proc.stdout.readline()  # "started"
        if line.strip() == "started":
            time.sleep(kill_after)
            proc.send_signal(signal.SIGKILL)
    _, err = proc.communicate(timeout=120)
    if proc.returncode not in (0, -signal.SIGKILL, 86):
        raise AssertionError(f"child failed ({proc.returncode}):\n{err}")
    return proc.returncode


def _contents(root: Path) -> dict[str, object]:
    out = root / "out"
    result: dict[str, object] = {}
    for name in QUERIES:
        files = sorted((out / f"{name}_parquet").glob("*.parquet"))
        table = pa.concat_tables([pq.read_table(f) for f in files]) if files else None
        result[f"{name}_parquet"] = sorted_rows(table) if table is not None else []
        con = duckdb.connect(str(out / f"{name}_duckdb.duckdb"), read_only=True)
        result[f"{name}_duckdb"] = sorted_rows(con.sql("SELECT * FROM rows").to_arrow_table())
        con.close()
    return result


def _callback_rows(root: Path) -> Counter[str]:
    rows: Counter[str] = Counter()
    for f in (root / "out").glob("callback-*.jsonl"):
        rows.update(line for line in f.read_text().splitlines() if line)
    return rows


@pytest.fixture(scope="module")
def baseline(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, object], Counter[str]]:
    root = tmp_path_factory.mktemp("baseline")
    inputs = _inputs(root)
    assert _run(root, inputs) == 0
    contents = _contents(root)
    assert all(contents.values()), "the baseline run wrote nothing"
    return contents, _callback_rows(root)


CRASHES = (
    [("kill", None)] * 8
    + [("at", "before_manifest:2"), ("at", "after_manifest:2"), ("at", "mid_sink_commit:3")]
    + [("at", "after_manifest:1"), ("at", "mid_sink_commit:1"), ("at", "before_manifest:5")]
)


@pytest.mark.slow
@pytest.mark.timeout(600)
@pytest.mark.parametrize("trial", range(len(CRASHES)))
def test_crash_anywhere_then_recover(
    trial: int, baseline: tuple[dict[str, object], Counter[str]], tmp_path: Path
) -> None:
    rng = random.Random(trial)
    inputs = _inputs(tmp_path)
    mode, point = CRASHES[trial]
    crashes = 0
    for attempt in range(10):
        if attempt >= 3:
            code = _run(tmp_path, inputs)  # let it finish
        elif mode == "kill":
            code = _run(tmp_path, inputs, kill_after=rng.uniform(0.0, 1.2))
        else:
            code = _run(tmp_path, inputs, crash_at=point if attempt == 0 else None)
        if code == 0:
            break
        crashes += 1
    else:
        raise AssertionError("the child never finished")
    want, want_callback = baseline
    assert _contents(tmp_path) == want
    got_callback = _callback_rows(tmp_path)
    assert set(got_callback) == set(want_callback), "the callback sink lost rows"
    # at-least-once: a row may be delivered again once per crash (replay after the last checkpoint)
    assert all(n <= crashes + 1 for n in got_callback.values())


@pytest.mark.slow
def test_corrupt_newest_checkpoint_recovers_from_the_previous(tmp_path: Path) -> None:
    import datum_sql as ds

    ctx = ds.Context(state_dir=tmp_path / "state", checkpoint_interval=None)
    times = pa.array([1_000_000 * i for i in range(100)], pa.int64()).cast(pa.timestamp("us"))
    data = pa.table({"k": [i % 3 for i in range(100)], "ts": times})
    ctx.register_arrow(
        "t", data, event_time="ts", watermark=ds.BoundedOutOfOrderness(seconds=1), batch_size=10
    )
    ctx.execute(
        f"CREATE SINK counts WITH (connector = 'duckdb', path = '{tmp_path / 'o.duckdb'}', table = 'c', primary_key = 'k')"
    )
    sql = "INSERT INTO counts SELECT k, count(*) AS n FROM t GROUP BY k"
    q = ctx.execute_streaming(sql)
    q.wait(30)
    store = tmp_path / "state" / "queries" / "insert_into_counts" / "checkpoints"
    newest = sorted(store.iterdir())[-1]
    # a second, newer checkpoint to corrupt: run again (resumes at the end, checkpoints once more)
    ctx.execute_streaming(sql).wait(30)
    dirs = sorted(store.iterdir())
    assert len(dirs) >= 2 and dirs[-1] != newest
    state_file = next(dirs[-1].glob("op-*.state"))
    state_file.write_bytes(state_file.read_bytes()[:10])
    q = ctx.execute_streaming(sql)
    q.wait(30)
    recovered = q.status()["recovered_from"]
    assert recovered["checkpoint"] == int(dirs[-2].name.split("-")[1])
    assert any("corrupt" in s for s in recovered["skipped"])
