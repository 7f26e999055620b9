"""Everything under ``state_dir`` is owner-only: the catalog (connector options may hold
credentials) and the checkpoints (the query's data); a sink's own output is not."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pyarrow as pa

import datum_sql as ds


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_a_checkpointed_run_leaves_only_owner_only_entries_in_state_dir(tmp_path: Path) -> None:
    state, out = tmp_path / "state", tmp_path / "out"
    ctx = ds.Context(state_dir=state, checkpoint_interval=None)
    times = pa.array([1_000_000 * i for i in range(200)], pa.int64()).cast(pa.timestamp("us"))
    ctx.register_arrow(
        "t",
        pa.table({"k": [i % 4 for i in range(200)], "ts": times}),
        event_time="ts",
        watermark=ds.BoundedOutOfOrderness(seconds=1),
        batch_size=20,
    )
    ctx.execute(f"CREATE SINK counts WITH (connector = 'parquet', path = '{out}')")
    sql = (
        "INSERT INTO counts SELECT window_start, window_end, k, count(*) AS n "
        "FROM tumble(t, ts, INTERVAL '10 seconds') GROUP BY window_start, window_end, k EMIT ON WINDOW CLOSE"
    )
    q = ctx.execute_streaming(sql)
    q.wait(60)
    assert q.state == "finished"
    ctx.execute_streaming(sql).wait(60)  # a second checkpoint, written by a recovered run

    entries = [state, *state.rglob("*")]
    files = [p for p in entries if p.is_file()]
    assert {p.name for p in files} >= {"catalog.json", "MANIFEST.json"}
    assert any(p.name.startswith("op-") for p in files), "no operator state was written"
    wrong = {
        str(p): oct(_mode(p)) for p in entries if _mode(p) != (0o600 if p.is_file() else 0o700)
    }
    assert not wrong, f"not owner-only: {wrong}"

    umask = os.umask(0)
    os.umask(umask)
    parts = list(out.glob("*.parquet"))
    assert parts
    assert {_mode(p) for p in parts} == {0o666 & ~umask}  # the sink's output: as usual


def test_a_new_state_dir_and_its_new_parents_are_owner_only(tmp_path: Path) -> None:
    state = tmp_path / "a" / "b" / "state"
    ds.Context(state_dir=state)
    assert [_mode(p) for p in (state, state.parent, state.parent.parent)] == [0o700] * 3


def test_a_state_dir_that_is_a_file_is_a_catalog_error(tmp_path: Path) -> None:
    (tmp_path / "f").write_text("not a directory")
    try:
        ds.Context(state_dir=tmp_path / "f")
    except ds.CatalogError as exc:
        assert str(tmp_path / "f") in str(exc)
    else:
        raise AssertionError("a state_dir that is a file was accepted")
