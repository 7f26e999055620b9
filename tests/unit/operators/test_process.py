"""The process operator driven directly with batches and watermarks: when a key's rows
and timers run, in what order, what a response may hold, and what a snapshot carries."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import pyarrow as pa
import pytest

import datum_sql as ds
from datum_sql.engine.operators.process import ProcessOperator
from datum_sql.types import END_OF_TIME, to_micros

BASE = datetime(2024, 1, 1)
SCHEMA = pa.schema([("k", pa.string()), ("ts", pa.timestamp("us")), ("v", pa.int64())])
CALLS: list[tuple[Any, list[int], datetime | None, dict[str, Any]]] = []


def _at(seconds: float) -> datetime:
    return BASE + timedelta(seconds=seconds)


def _wm(seconds: float) -> int:
    return to_micros(_at(seconds))


def _batch(*rows: tuple[str | None, float, int]) -> pa.RecordBatch:
    return pa.RecordBatch.from_pylist(
        [{"k": k, "ts": _at(s), "v": v} for k, s, v in rows], schema=SCHEMA
    )


def _op(name: str) -> ProcessOperator:
    config = {"function": name, "keys": ["k"], "time_column": "ts"}
    return ProcessOperator("process_1", config, [SCHEMA])


def _rows(batches: list[pa.RecordBatch]) -> list[dict[str, Any]]:
    return pa.Table.from_batches(batches, schema=batches[0].schema).to_pylist() if batches else []


@ds.process_function(
    state={"n": "BIGINT"}, output={"at": "TIMESTAMP", "what": "VARCHAR", "n": "BIGINT"}, time="at"
)
def recorder(act: ds.Activation) -> ds.ProcessResponse:
    """Records each call; counts rows; on a row with v = 9 sets a timer 10 s later."""
    CALLS.append((act.key, act.rows.column("v").to_pylist(), act.timer, dict(act.state)))
    n = act.state.get("n", 0) + act.rows.num_rows
    out = [{"at": act.timer, "what": "timer", "n": n}] if act.timer else []
    times = act.rows.column("ts").to_pylist()
    timers = [
        t + timedelta(seconds=10)
        for t, v in zip(times, act.rows.column("v").to_pylist(), strict=True)
        if v == 9
    ]
    return ds.ProcessResponse(rows=out, set={"n": n}, timers=timers)


def test_rows_wait_for_the_watermark_then_run_per_key_in_time_order() -> None:
    CALLS.clear()
    op = _op("recorder")
    assert op.on_batch(_batch(("a", 3, 1), ("b", 1, 2), ("a", 1, 3), ("a", 5, 4))) == []
    assert CALLS == []
    op.on_watermark(_wm(4))  # rows before 4 s are final
    assert sorted(CALLS, key=lambda c: c[0]) == [("a", [3, 1], None, {}), ("b", [2], None, {})]
    CALLS.clear()
    op.on_watermark(END_OF_TIME)
    assert CALLS == [("a", [4], None, {"n": 2})]


def test_a_timer_splits_its_keys_rows_and_fires_before_rows_at_its_time() -> None:
    CALLS.clear()
    op = _op("recorder")
    op.on_batch(_batch(("a", 1, 9)))
    op.on_watermark(_wm(2))  # timer at 11 s
    CALLS.clear()
    op.on_batch(_batch(("a", 5, 1), ("a", 11, 2), ("a", 12, 3)))
    out = op.on_watermark(END_OF_TIME)
    assert [
        ("a", [1], None, {"n": 1}),
        ("a", [2, 3], _at(11), {"n": 2}),
    ] == CALLS
    assert _rows(out) == [{"k": "a", "at": _at(11), "what": "timer", "n": 4}]


def test_the_end_of_input_fires_every_pending_timer_once() -> None:
    CALLS.clear()
    op = _op("recorder")
    op.on_batch(_batch(("a", 1, 9), ("b", 2, 9)))
    op.on_watermark(_wm(5))
    out = op.on_watermark(END_OF_TIME) + op.on_close()
    assert sorted(r["k"] for r in _rows(out)) == ["a", "b"]
    assert op.on_close() == []


def test_snapshot_and_restore_carry_rows_state_and_timers() -> None:
    CALLS.clear()
    op = _op("recorder")
    op.on_batch(_batch(("a", 1, 9), ("b", 2, 1), ("a", 20, 5)))
    op.on_watermark(_wm(3))
    data = op.snapshot()
    assert data is not None and b"pickle" not in data
    fresh = _op("recorder")
    fresh.restore(data)
    CALLS.clear()
    out = fresh.on_watermark(END_OF_TIME)
    # the timer at 11 s fires with the key's rows from then on
    assert [("a", [5], _at(11), {"n": 1})] == CALLS
    assert _rows(out) == [{"k": "a", "at": _at(11), "what": "timer", "n": 2}]
    assert fresh.describe() == {"rows_waiting": 0, "keys_with_state": 2, "timers_pending": 0}


@ds.process_function(
    state={"x": "BIGINT"},
    output={"at": "TIMESTAMP", "present": "BOOLEAN", "x": "BIGINT"},
    time="at",
)
def presence(act: ds.Activation) -> ds.ProcessResponse:
    """Each row reports what state x was before it, then applies its v: 0 clears x,
    1 sets it NULL, other values set it to v."""
    present, value = "x" in act.state, act.state.get("x")
    out = []
    for t, v in zip(
        act.rows.column("ts").to_pylist(), act.rows.column("v").to_pylist(), strict=True
    ):
        out.append({"at": t, "present": present, "x": value})
        present, value = v != 0, (None if v in (0, 1) else v)
    if present:
        return ds.ProcessResponse(rows=out, set={"x": value})
    return ds.ProcessResponse(rows=out, clear=["x"])


def test_absent_state_is_not_a_null_one_also_through_a_snapshot() -> None:
    op = _op("presence")
    out = []
    for i, v in enumerate([1, 5, 0, 1, 7]):
        op.on_batch(_batch(("a", i, v)))
        out += op.on_watermark(_wm(i + 0.5))
        restored = _op("presence")
        restored.restore(op.snapshot())  # type: ignore[arg-type]
        op = restored
    seen = [(r["present"], r["x"]) for r in _rows(out)]
    assert seen == [(False, None), (True, None), (True, 5), (False, None), (True, None)]


def _fails(name: str, *batches: pa.RecordBatch, match: str) -> ProcessOperator:
    op = _op(name)
    for b in batches:
        op.on_batch(b)
    with pytest.raises(ds.QueryFailed, match=match) as info:
        op.on_watermark(END_OF_TIME)
    assert "process_1" in str(info.value)
    return op


def _register(name: str, handler: Any, **kw: Any) -> None:
    kw.setdefault("output", {"at": "TIMESTAMP"})
    kw.setdefault("time", "at")
    ds.Context(state_dir=None).register_process_function(name, handler, **kw)


def test_a_handler_exception_names_function_key_and_carries_the_traceback() -> None:
    def boom(act: ds.Activation) -> ds.ProcessResponse:
        raise ZeroDivisionError("no luck")

    _register("boom", boom)
    op = _op("boom")
    op.on_batch(_batch(("a", 1, 0)))
    with pytest.raises(ds.QueryFailed) as info:
        op.on_watermark(END_OF_TIME)
    text = str(info.value)
    assert "process function boom() raised ZeroDivisionError for key k='a'" in text
    assert "Traceback" in text and "no luck" in text and "in boom" in text


@pytest.mark.parametrize(
    ("result", "match"),
    [
        (None, "must return a datum_sql.ProcessResponse, got NoneType"),
        ({"rows": []}, "must return a datum_sql.ProcessResponse, got dict"),
        (
            ds.ProcessResponse(rows=[{"when": 1}]),
            r"row 0 has columns \['when'\], expected \['at'\]",
        ),
        (
            ds.ProcessResponse(rows=pa.table({"at": [1]})),
            "returned column 'at' as int64, expected timestamp",
        ),
        (
            ds.ProcessResponse(rows="x"),
            "must be a pyarrow Table or RecordBatch or a list of dicts, got str",
        ),
        (ds.ProcessResponse(set={"nope": 1}), r"state 'nope' is not declared; declared: \['n'\]"),
        (ds.ProcessResponse(set={"n": "many"}), "state 'n' is declared int64, got a str"),
        (ds.ProcessResponse(set={"n": 2**63}), "state 'n' is declared int64, got a int"),
        (ds.ProcessResponse(set={"n": 1}, clear=["n"]), "is both set and cleared"),
        (ds.ProcessResponse(timers=[5]), "timers holds a int, expected a datetime"),
        (
            ds.ProcessResponse(timers=[_at(1)]),
            "timer at 2024-01-01 00:00:01 is not after the activation's time",
        ),
        (ds.ProcessResponse(rows=[{"at": _at(0)}]), "before the activation's first event time"),
        (ds.ProcessResponse(rows=[{"at": None}]), "time column 'at' is NULL"),
    ],
)
def test_a_wrong_response_fails_before_anything_is_applied(result: Any, match: str) -> None:
    _register("wrong", lambda act: result, state={"n": "BIGINT"})
    op = _fails("wrong", _batch(("a", 1, 0)), match=match)
    assert op.describe() == {"rows_waiting": 0, "keys_with_state": 0, "timers_pending": 0}


@pytest.mark.parametrize(
    ("response", "limits", "match"),
    [
        (
            ds.ProcessResponse(rows=[{"at": _at(1)}] * 3),
            {"max_rows_out": 2},
            "returned 3 rows, over max_rows_out = 2",
        ),
        (
            ds.ProcessResponse(set={"s": "x" * 100}),
            {"max_state_bytes": 64},
            "hold 100 bytes, over max_state_bytes = 64",
        ),
        (
            ds.ProcessResponse(timers=[_at(5), _at(6)]),
            {"max_timers": 1},
            "2 timers pending, over max_timers = 1",
        ),
    ],
)
def test_limits_fail_the_query_naming_the_key_and_the_limit(
    response: Any, limits: dict[str, int], match: str
) -> None:
    _register("limited", lambda act: response, state={"s": "VARCHAR"}, limits=limits)
    op = _fails(
        "limited",
        _batch(("a", 1, 0)),
        match=f"process function limited\\(\\), key k='a': .*{match}",
    )
    assert op.describe()["keys_with_state"] == 0


def test_a_timer_that_rearms_forever_stops_at_max_firings() -> None:
    def heartbeat(act: ds.Activation) -> ds.ProcessResponse:
        return ds.ProcessResponse(timers=[act.time + timedelta(seconds=1)])

    _register("heartbeat", heartbeat, limits=ds.ProcessLimits(max_firings=50))
    _fails("heartbeat", _batch(("a", 1, 0)), match="fired more than max_firings = 50 timers")


def test_the_state_view_is_read_only() -> None:
    def writer(act: ds.Activation) -> ds.ProcessResponse:
        act.state["n"] = 1  # type: ignore[index]
        return ds.ProcessResponse()

    _register("writer", writer, state={"n": "BIGINT"})
    _fails("writer", _batch(("a", 1, 0)), match="raised TypeError")


def test_a_checkpoint_of_other_declared_state_is_refused() -> None:
    op = _op("recorder")
    op.on_batch(_batch(("a", 1, 9)))
    op.on_watermark(_wm(3))
    data = op.snapshot()
    _register("recorder_v2", recorder, state={"n": "VARCHAR"})
    with pytest.raises(ds.CheckpointError, match="declares other state than when the checkpoint"):
        _op("recorder_v2").restore(data)  # type: ignore[arg-type]


def test_a_zoned_time_column_gives_the_handler_aware_datetimes() -> None:
    from datetime import UTC

    zoned = pa.schema([("k", pa.string()), ("ts", pa.timestamp("us", tz="UTC")), ("v", pa.int64())])
    seen: list[Any] = []

    def aware(act: ds.Activation) -> ds.ProcessResponse:
        seen.append((act.time, act.timer))
        if act.timer is not None:
            return ds.ProcessResponse(rows=[{"at": act.timer}])
        return ds.ProcessResponse(timers=[act.time + timedelta(seconds=5)])

    _register("aware", aware, output={"at": "TIMESTAMPTZ"})
    config = {"function": "aware", "keys": ["k"], "time_column": "ts"}
    op = ProcessOperator("process_1", config, [zoned])
    op.on_batch(pa.RecordBatch.from_pylist([{"k": "a", "ts": _at(1), "v": 0}], schema=zoned))
    out = op.on_watermark(END_OF_TIME)
    first = _at(1).replace(tzinfo=UTC)
    assert seen == [(first, None), (first + timedelta(seconds=5), first + timedelta(seconds=5))]
    assert _rows(out) == [{"k": "a", "at": first + timedelta(seconds=5)}]
