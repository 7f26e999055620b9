"""Process functions from Python and SQL: registration and planning refuse what cannot
work (PlanError, SqlError), and a failing handler fails the query, not the context."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.dataset as pads
import pytest

import datum_sql as ds
from datum_sql.testing import sorted_rows

BASE = datetime(2024, 1, 1)


def _count(act: ds.Activation) -> ds.ProcessResponse:
    n = act.state.get("n", 0) + act.rows.num_rows
    return ds.ProcessResponse(rows=[{"n": n}], set={"n": n})


@pytest.fixture
def ctx() -> ds.Context:
    ctx = ds.Context(state_dir=None)
    times = [BASE + timedelta(seconds=s) for s in (1, 2, 3)]
    ctx.register_arrow(
        "ev", pa.table({"k": [1, 1, 2], "ts": times, "f": [0.5, 1.5, 2.5]}),
        event_time="ts", watermark=ds.BoundedOutOfOrderness(seconds=1),
    )  # fmt: skip
    ctx.register_arrow("plain", pa.table({"k": [1], "ts": times[:1]}))
    ctx.register_process_function(
        "count_rows", _count, state={"n": "BIGINT"}, output={"n": "BIGINT"}
    )
    return ctx


def test_from_sql_and_in_batch(ctx: ds.Context) -> None:
    sql = "SELECT k, n FROM process(ev, 'count_rows', key => k) AS c WHERE n > 0"
    assert sorted(ctx.sql(sql).to_pylist(), key=lambda r: r["k"]) == [
        {"k": 1, "n": 2}, {"k": 2, "n": 1}
    ]  # fmt: skip
    streamed = ctx.execute_streaming(sql).to_arrow(timeout=30).to_pylist()
    assert sum(r["n"] for r in streamed if r["k"] == 2) == 1
    assert "Process(count_rows, keys=[k], time=ts)" in ctx.explain(sql)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"output": {"n": "NOT_A_TYPE"}}, "unknown type 'NOT_A_TYPE' for output 'n'"),
        ({"output": {}}, "output must declare at least one column"),
        ({"output": {"n": "BIGINT"}, "time": "at"}, "time='at' is not an output column"),
        ({"output": {"n": "BIGINT"}, "time": "n"}, "time column 'n' must be a TIMESTAMP"),
        (
            {"output": {"n": "BIGINT"}, "state": {"s": 5}},
            "must be a SQL type name or a pyarrow type",
        ),
        ({"output": {"n": "BIGINT"}, "limits": {"max_rowz": 1}}, "limits:"),
        ({"output": {"n": "BIGINT"}, "limits": {"max_timers": -1}}, "non-negative"),
    ],
)
def test_registration_errors_are_plan_errors(
    ctx: ds.Context, kwargs: dict[str, Any], match: str
) -> None:
    with pytest.raises(ds.PlanError, match=match):
        ctx.register_process_function("bad", _count, **kwargs)


def test_a_name_must_be_an_identifier(ctx: ds.Context) -> None:
    with pytest.raises(ds.PlanError, match="plain identifier"):
        ctx.register_process_function("no-dash", _count, output={"n": "BIGINT"})


@pytest.mark.parametrize(
    ("sql", "match"),
    [
        ("SELECT * FROM process(ev, 'nope', key => k)", "unknown process function 'nope'"),
        ("SELECT * FROM process(ev, 'count_rows')", "process\\(\\) needs the key"),
        ("SELECT * FROM process(ev, 'count_rows', key => zz)", "zz"),
        ("SELECT * FROM process(ev, 'count_rows', key => f)", "key column 'f' is double"),
        ("SELECT * FROM process(ev, 'count_rows', key => k, time => k)", "must be a TIMESTAMP"),
        ("SELECT * FROM process(ev, 'count_rows', key => k, size => 3)", "key => and time =>"),
        ("SELECT * FROM process(plain, 'count_rows', key => k)", "has no event time"),
        (
            "SELECT * FROM process(ev.k, 'count_rows', key => k)",
            "reads a table by name or a subquery",
        ),
        ("SELECT * FROM process(ev, count_rows, key => k)", "takes a table and a function name"),
    ],
)
def test_binding_errors_name_what_is_wrong(ctx: ds.Context, sql: str, match: str) -> None:
    with pytest.raises(ds.SqlError, match=match):
        ctx.execute_streaming(sql)
    with pytest.raises(ds.SqlError, match=match):
        ctx.sql(sql)


def test_an_output_column_named_like_the_key_is_refused(ctx: ds.Context) -> None:
    ctx.register_process_function("keyed_out", _count, output={"k": "BIGINT"})
    with pytest.raises(ds.SqlError, match="outputs \\['k'\\], also its key"):
        ctx.sql("SELECT * FROM process(ev, 'keyed_out', key => k)")


def test_a_failing_handler_fails_the_query_and_the_context_stays_usable(ctx: ds.Context) -> None:
    @ds.process_function(output={"n": "BIGINT"})
    def explodes(act: ds.Activation) -> ds.ProcessResponse:
        raise KeyError("missing")

    q = ctx.execute_streaming("SELECT * FROM process(ev, 'explodes', key => k)")
    with pytest.raises(ds.QueryFailed) as info:
        q.wait(30)
    assert "process function explodes() raised KeyError for key k=1" in str(info.value)
    assert "Traceback" in str(info.value)
    with pytest.raises(ds.QueryFailed, match="explodes\\(\\) raised KeyError"):
        ctx.sql("SELECT * FROM process(ev, 'explodes', key => k)")
    assert ctx.sql("SELECT count(*) AS n FROM ev").column("n").to_pylist() == [3]


def test_windows_read_the_declared_output_time(ctx: ds.Context) -> None:
    @ds.process_function(output={"at": "TIMESTAMP", "n": "BIGINT"}, time="at")
    def echo(act: ds.Activation) -> ds.ProcessResponse:
        times = act.rows.column("ts").to_pylist()
        return ds.ProcessResponse(rows=[{"at": t, "n": 1} for t in times])

    sql = (
        "SELECT window_start, sum(n) AS n FROM tumble(("
        "SELECT * FROM process(ev, 'echo', key => k)), at, INTERVAL '2 seconds') "
        "GROUP BY window_start, window_end EMIT ON WINDOW CLOSE"
    )
    want = sorted(ctx.sql(sql).to_pylist(), key=lambda r: r["window_start"])
    assert [r["n"] for r in want] == [1, 2]
    got = ctx.execute_streaming(sql).to_arrow(timeout=30).to_pylist()
    assert sorted(got, key=lambda r: r["window_start"]) == want


@pytest.mark.parametrize(
    ("sql", "match"),
    [
        (
            "SELECT * FROM process((SELECT k, f, ts FROM ev), 'count_rows', key => f)",
            "key column 'f' is double",
        ),
        (
            "SELECT * FROM process((SELECT k, ts, ts AS again FROM ev), 'count_rows', key => k)",
            "time => column .*it has ts, again",
        ),
        (
            "SELECT * FROM process((SELECT k, ts FROM ev), 'count_rows', key => k, time => k)",
            "time column 'k' must be a TIMESTAMP",
        ),
    ],
)
def test_a_subquery_input_is_checked_alike_in_streaming_and_batch(
    ctx: ds.Context, sql: str, match: str
) -> None:
    with pytest.raises(ds.PlanError, match=match):
        ctx.execute_streaming(sql)
    with pytest.raises(ds.PlanError, match=match):
        ctx.sql(sql)


def test_a_windowed_aggregate_feeds_a_process_function(ctx: ds.Context) -> None:
    @ds.process_function(state={"total": "BIGINT"}, output={"total": "BIGINT"})
    def running_total(act: ds.Activation) -> ds.ProcessResponse:
        total, out = act.state.get("total", 0), []
        for c in act.rows.column("c").to_pylist():
            total += c
            out.append({"total": total})
        return ds.ProcessResponse(rows=out, set={"total": total})

    sql = (
        "SELECT * FROM process((SELECT k, window_end, count(*) AS c FROM tumble(ev, ts, "
        "INTERVAL '2 seconds') GROUP BY k, window_start, window_end EMIT ON WINDOW CLOSE), "
        "'running_total', key => k, time => window_end)"
    )
    want = sorted(ctx.sql(sql).to_pylist(), key=lambda r: (r["k"], r["total"]))
    assert want == [{"k": 1, "total": 1}, {"k": 1, "total": 2}, {"k": 2, "total": 1}]
    got = ctx.execute_streaming(sql).to_arrow(timeout=30).to_pylist()
    assert sorted(got, key=lambda r: (r["k"], r["total"])) == want


def test_create_function_declares_a_process_function_in_a_script_run_by_the_cli(
    tmp_path: Path,
) -> None:
    (tmp_path / "alerts.py").write_text(
        textwrap.dedent("""
        import datum_sql as ds

        @ds.process_function(state={"n": "BIGINT"}, output={"seen": "BIGINT"})
        def tally(act):
            n = act.state.get("n", 0)
            out = []
            for _ in range(act.rows.num_rows):
                n += 1
                out.append({"seen": n})
            return ds.ProcessResponse(rows=out, set={"n": n})
    """)
    )
    (tmp_path / "in.csv").write_text(
        "k,ts\n1,2024-01-01 00:00:01\n2,2024-01-01 00:00:02\n1,2024-01-01 00:00:03\n"
    )
    out = tmp_path / "out"
    (tmp_path / "job.sql").write_text(f"""
        CREATE FUNCTION counted LANGUAGE python AS 'alerts:tally';
        CREATE SOURCE ev (k BIGINT, ts TIMESTAMP, WATERMARK FOR ts AS ts - INTERVAL '1 second')
            WITH (connector = 'csv', path = '{tmp_path / "in.csv"}');
        CREATE SINK tallies WITH (connector = 'parquet', path = '{out}');
        INSERT INTO tallies SELECT k, seen FROM process(ev, 'counted', key => k);
    """)
    result = subprocess.run(
        [sys.executable, "-m", "datum_sql.cli", "run", "job.sql", "--state-dir", "state"],
        capture_output=True, text=True, timeout=120, cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    got = pads.dataset(str(out), format="parquet").to_table()
    assert sorted_rows(got) == [(1, 1), (1, 2), (2, 1)]


def test_create_function_of_a_plain_function_says_what_is_missing(
    ctx: ds.Context, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "plainfns.py").write_text("def handler(act):\n    return None\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ds.PlanError, match="plainfns:handler is not a process function"):
        ctx.execute("CREATE FUNCTION h LANGUAGE python AS 'plainfns:handler'")
    with pytest.raises(ds.PlanError, match="has no function 'nope'"):
        ctx.execute("CREATE FUNCTION h LANGUAGE python AS 'plainfns:nope'")
