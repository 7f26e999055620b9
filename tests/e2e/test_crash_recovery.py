"""Crash tests: a child process is killed (SIGKILL, or an exit at a chosen commit step) at
random moments and restarted until it finishes. The sinks must then hold exactly what a
run that never crashed wrote: the same rows, no duplicates, for files and DuckDB; for the
callback sink no lost row, duplicates only from replay after the last checkpoint.

The child (crash_child.py) runs, each into a Parquet and a DuckDB sink (the first three
also into a callback sink): a stateless filter and a tumbling window over a paced Nexmark
generator, a projection of Parquet files, an ASOF join of two Parquet inputs in event time,
and a tumbling window over a two-partition Kafka topic (bounded: read to the end offsets
seen at start). The topic is created and filled once, before the baseline run.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from crash_child import read_callback

from datum_sql.testing import sorted_rows

CHILD = Path(__file__).with_name("crash_child.py")
QUERIES = ["stateless", "windowed", "files", "asof", "kafka_windowed"]
CALLBACK_QUERIES = ["stateless", "windowed", "files"]
KAFKA_ROWS = 4000
KAFKA_KEYS = 5
BASE = datetime(2024, 5, 1, 12, 0, 0)


def _market(rows: int, seed: int, value: str) -> pa.Table:
    """``rows`` ticks of 8 symbols at distinct times (no ties), in time order."""
    rng = np.random.default_rng(seed)
    micros = np.sort(rng.choice(np.arange(1, 4_000_000), rows, replace=False)).astype(np.int64)
    values = (
        rng.integers(1, 1000, rows) if value == "qty" else np.round(rng.uniform(10, 20, rows), 2)
    )
    return pa.table(
        {
            "id": np.arange(rows, dtype=np.int64),
            "sym": pa.array([f"S{x}" for x in rng.integers(0, 8, rows)], pa.string()),
            "ts": pa.array(micros + 1_714_564_800_000_000).cast(pa.timestamp("us")),
            value: values,
        }
    )


@pytest.fixture(scope="module")
def inputs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The Parquet inputs every run reads (read-only): events/, trades/, quotes/."""
    d = tmp_path_factory.mktemp("inputs")
    (d / "events").mkdir()
    rng = random.Random(3)
    for f in range(20):
        ids = list(range(f * 100, f * 100 + 100))
        table = pa.table(
            {"id": ids, "amount": [rng.random() for _ in ids], "label": [f"f{f}"] * 100}
        )
        pq.write_table(table, d / "events" / f"part-{f:03d}.parquet")
    for name, seed, value in (("trades", 1, "qty"), ("quotes", 2, "bid")):
        table = _market(2000, seed, value)
        (d / name).mkdir()
        for f in range(10):
            pq.write_table(table.slice(f * 200, 200), d / name / f"part-{f:03d}.parquet")
    return d


@pytest.fixture(scope="module")
def kafka(kafka_broker: Any) -> str:
    """A two-partition topic holding KAFKA_ROWS JSON events, each partition in time order;
    ``<bootstrap>/<topic>`` for the child."""
    topic = f"crash-{uuid.uuid4().hex[:10]}"
    kafka_broker.create_topic(topic, 2)
    for partition in range(2):
        rows = [
            json.dumps(
                {
                    "id": i,
                    "k": f"k{i % KAFKA_KEYS}",
                    "v": i,
                    "ts": (BASE + timedelta(milliseconds=i)).isoformat(sep=" "),
                }
            )
            for i in range(partition, KAFKA_ROWS, 2)
        ]
        kafka_broker.produce(topic, rows, partition=partition)
    return f"{kafka_broker.bootstrap}/{topic}"


def _run(
    root: Path,
    inputs: Path,
    kafka: str,
    *,
    kill_after: float | None = None,
    crash_at: str | None = None,
) -> int:
    env = dict(os.environ)
    env.pop("DATUM_CRASH_AT", None)
    if crash_at:
        env["DATUM_CRASH_AT"] = crash_at
    args = [str(root / "state"), str(root / "out"), str(inputs), kafka, *QUERIES]
    proc = subprocess.Popen(
        [sys.executable, str(CHILD), *args],
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


def _contents(root: Path) -> dict[str, list[tuple[Any, ...]]]:
    out = root / "out"
    result: dict[str, list[tuple[Any, ...]]] = {}
    for name in QUERIES:
        files = sorted((out / f"{name}_parquet").glob("*.parquet"))
        table = pa.concat_tables([pq.read_table(f) for f in files]) if files else None
        result[f"{name}_parquet"] = sorted_rows(table) if table is not None else []
        con = duckdb.connect(str(out / f"{name}_duckdb.duckdb"), read_only=True)
        result[f"{name}_duckdb"] = sorted_rows(con.sql("SELECT * FROM rows").to_arrow_table())
        con.close()
    return result


def _callback_rows(root: Path) -> dict[str, Counter[str]]:
    """Per callback sink, how often each row (a JSON line) was delivered, over every run."""
    rows: dict[str, Counter[str]] = {f"{q}_callback": Counter() for q in CALLBACK_QUERIES}
    for sink, counter in rows.items():
        for f in (root / "out").glob(f"callback-{sink}-*.jsonl"):
            counter.update(read_callback(f))
    return rows


def _expected_asof(inputs: Path) -> list[tuple[Any, ...]]:
    """The ASOF query as a DuckDB batch query over the same files (no ties: same result)."""
    con = duckdb.connect()
    table = con.sql(
        f"SELECT t.id, t.sym, t.ts, t.qty, q.bid, q.ts AS quote_ts "
        f"FROM read_parquet('{inputs}/trades/*.parquet') t "
        f"ASOF LEFT JOIN read_parquet('{inputs}/quotes/*.parquet') q "
        "ON t.sym = q.sym AND t.ts >= q.ts"
    ).to_arrow_table()
    con.close()
    return sorted_rows(table)


@pytest.fixture(scope="module")
def baseline(
    tmp_path_factory: pytest.TempPathFactory, inputs: Path, kafka: str
) -> tuple[dict[str, list[tuple[Any, ...]]], dict[str, Counter[str]]]:
    """The sinks after a run that never crashed (the same child, the same inputs)."""
    root = tmp_path_factory.mktemp("baseline")
    assert _run(root, inputs, kafka) == 0
    contents = _contents(root)
    assert all(contents.values()), "the baseline run wrote nothing"
    # the baseline itself is right: the ASOF join agrees with DuckDB, the Kafka windows
    # count every event of the topic once
    assert contents["asof_parquet"] == _expected_asof(inputs)
    windows = contents["kafka_windowed_duckdb"]
    assert sum(row[3] for row in windows) == KAFKA_ROWS
    assert sum(row[4] for row in windows) == sum(range(KAFKA_ROWS))
    assert len(windows) == KAFKA_ROWS // 100 * KAFKA_KEYS  # 100 ms windows, 1 event per ms
    callback = _callback_rows(root)
    for sink, rows in callback.items():
        # the callback of a query got exactly the rows its DuckDB sink holds
        assert sum(rows.values()) == len(contents[sink.replace("callback", "duckdb")]), sink
    return contents, callback


#: (how, crash point): "kill" = SIGKILL at a random moment, up to 3 times in a row; "at" =
#: exit (like SIGKILL) the n-th time any query of the process reaches that commit step:
#: before_manifest (sinks pre-committed, checkpoint not yet published), after_manifest
#: (published, no sink committed yet), mid_sink_commit (published, a sink committed).
CRASHES = (
    [("kill", None)] * 12
    + [("at", "before_manifest:2"), ("at", "after_manifest:2"), ("at", "mid_sink_commit:3")]
    + [("at", "after_manifest:1"), ("at", "mid_sink_commit:1"), ("at", "before_manifest:5")]
    # later: while the ASOF and Kafka queries run (a run reaches each step about 50 times)
    + [("at", "before_manifest:12"), ("at", "after_manifest:20"), ("at", "mid_sink_commit:28")]
    + [("at", "before_manifest:24")]
)


@pytest.mark.slow
@pytest.mark.kafka
@pytest.mark.timeout(600)
@pytest.mark.parametrize("trial", range(len(CRASHES)))
def test_crash_anywhere_then_recover(
    trial: int,
    baseline: tuple[dict[str, list[tuple[Any, ...]]], dict[str, Counter[str]]],
    inputs: Path,
    kafka: str,
    tmp_path: Path,
) -> None:
    rng = random.Random(trial)
    mode, point = CRASHES[trial]
    crashes = 0
    for attempt in range(10):
        if attempt >= 3:
            code = _run(tmp_path, inputs, kafka)  # let it finish
        elif mode == "kill":
            # a run reads for about 1.5 s after "started"; a restarted one for less
            kill_after = rng.uniform(0.0, 1.4 if attempt == 0 else 0.7)
            code = _run(tmp_path, inputs, kafka, kill_after=kill_after)
        else:
            code = _run(tmp_path, inputs, kafka, crash_at=point if attempt == 0 else None)
        if code == 0:
            break
        crashes += 1
    else:
        raise AssertionError("the child never finished")
    if mode == "at":
        assert crashes == 1, f"the child never reached {point}"
    want, want_callback = baseline
    got = _contents(tmp_path)
    for sink, rows in want.items():
        assert got[sink] == rows, f"{sink} differs from the run that never crashed"
    got_callback = _callback_rows(tmp_path)
    for sink, want_rows in want_callback.items():
        got_rows = got_callback[sink]
        assert set(got_rows) == set(want_rows), f"{sink} lost rows or got foreign ones"
        # at-least-once: a row may come again once per crash (replay after the last checkpoint)
        too_many = [r for r, n in got_rows.items() if n > want_rows[r] * (crashes + 1)]
        assert not too_many, f"{sink}: rows delivered more than once per crash: {too_many[:3]}"


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


def test_callback_file_drops_only_a_torn_last_line(tmp_path: Path) -> None:
    """A kill mid-write leaves the last line without its newline: that line is dropped
    (its batch is delivered again after recovery); a broken line anywhere else fails."""
    f = tmp_path / "callback-x_callback-1.jsonl"
    f.write_text('{"id": 1}\n{"id": 2}\n{"id": 3, "na')
    assert read_callback(f) == ['{"id": 1}', '{"id": 2}']
    f.write_text('{"id": 1}\n{"id": 2}\n')
    assert read_callback(f) == ['{"id": 1}', '{"id": 2}']
    f.write_text('{"id": 1}\n{"id": 2, "na{"id": 7}\n{"id": 3}\n')
    with pytest.raises(AssertionError, match="line 2 is not JSON"):
        read_callback(f)
