"""The benchmark harness itself: children, records, the equality check, the report.

One tiny benchmark runs through the real path (``python -m benchmarks``: every engine in
its own child process, a child comparing the results, a record per engine in the results
file); a deliberately different result must come out DIFFERENT, with no ratio for it.
The run is a subprocess of its own: a child's ru_maxrss starts from its parent's RSS, and
the pytest process may be large.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks import compare, report  # noqa: E402
from benchmarks.child import ChildFailed, check_own_rss  # noqa: E402
from benchmarks.environment import machine  # noqa: E402
from benchmarks.harness import Session, _ratios, _record  # noqa: E402
from benchmarks.registry import get  # noqa: E402

EVENTS = 20_000


@pytest.fixture(scope="module")
def ran(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, list[dict]]:
    """``python -m benchmarks q2_filter`` at 20k events, one run: its output and records."""
    path = tmp_path_factory.mktemp("bench") / "results.jsonl"
    cmd = [sys.executable, "-m", "benchmarks", "q2_filter", "--events", str(EVENTS), "--runs",
           "1", "--results", str(path)]  # fmt: skip
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout, [json.loads(line) for line in path.read_text().splitlines()]


def test_every_engine_runs_in_its_own_process_and_agrees(ran: tuple[str, list[dict]]) -> None:
    out, records = ran
    assert [r["engine"] for r in records] == ["datum-sql", "duckdb", "polars"]
    assert "DIFFERENT" not in out and "FAILED" not in out
    for r in records:
        assert r["error"] is None, r["error"]
        assert r["equal"] is True
        assert r["events"] == r["input_rows"] == EVENTS
        assert r["rows_out"] == records[1]["rows_out"] > 0
        assert r["runs"] == 1 and len(r["seconds"]) == 1 and r["median_s"] > 0
        # each child's own memory: more than its input, at least its RSS after the input
        assert r["peak_rss_mb"] >= r["rss_input_mb"] > r["input_mb"] > 0
    assert records[0]["ratio"] == pytest.approx(records[1]["median_s"] / records[0]["median_s"])


def test_each_record_says_what_it_ran_under(ran: tuple[str, list[dict]]) -> None:
    _, records = ran
    assert len({r["run_id"] for r in records}) == 1
    for r in records:
        assert r["benchmark"] == "q2_filter" and r["quick"] is False
        assert len(r["load_before"]) == 3 and r["cpu_count"] >= 1 and r["commit"]
        assert set(r["versions"]) >= {"python", "pyarrow", "datafusion", "duckdb", "polars",
                                      "datum-sql"}  # fmt: skip


def _table(prices: list[int]) -> pa.Table:
    return pa.table({"auction": [1, 2, 3], "price": prices})


def test_a_different_result_is_detected_and_gets_no_ratio(tmp_path: Path) -> None:
    files = {}
    for name, table in {
        "reference": _table([10, 20, 30]),
        # the same rows, in another row and column order
        "same": pa.table({"price": [30, 10, 20], "auction": [3, 1, 2]}),
        "different": _table([10, 20, 31]),
    }.items():
        files[name] = str(tmp_path / f"{name}.arrow")
        compare.write(table, files[name])
    runs = {
        "duckdb": [_run(files["reference"], 1.0)],
        "polars": [_run(files["same"], 0.5)],
        "datum-sql": [_run(files["different"], 0.25)],
    }
    found = compare.compare_files(files["reference"], [files["same"], files["different"]])
    same, different = found["verdicts"]
    verdicts = {"polars": [same], "datum-sql": [different]}
    assert same["equal"] is True
    (diff,) = verdicts["datum-sql"]
    assert diff["equal"] is False and diff["missing"] == 1 and diff["extra"] == 1
    assert "(3, 31)" in diff["extra_examples"][0]

    session = Session(machine(), runs=1, results_path=tmp_path / "r.jsonl")
    bench = get("q2_filter")
    records = [
        _record(bench, 3, e, runs[e], verdicts.get(e), None, session, [0.0] * 3, [0.0] * 3)
        for e in ("datum-sql", "duckdb", "polars")
    ]
    _ratios(records, "duckdb")
    datum, _, polars = records
    assert datum["equal"] is False and datum["ratio"] is None
    assert polars["equal"] is True and polars["ratio"] == pytest.approx(2.0)
    text = report.render(records)
    assert "**DIFFERENT** (datum-sql: 1 reference rows missing" in text
    assert "| n/a | 2.00x |" in text


def _run(out: str, seconds: float) -> dict:
    return {"out": out, "compared": True, "seconds": seconds, "cpu_s": seconds, "rows_out": 3,
            "input_rows": 3, "input_bytes": 48, "rss_input_mb": 100.0, "peak_rss_mb": 110.0,
            "notes": []}  # fmt: skip


def test_columns_or_types_that_do_not_match_are_unequal() -> None:
    ref = compare.canonical(_table([10, 20, 30]))
    renamed = compare.canonical(pa.table({"auction": [1, 2, 3], "cost": [10, 20, 30]}))
    assert compare.compare(renamed, ref)["reason"].startswith("columns differ")
    as_text = compare.canonical(pa.table({"auction": [1, 2, 3], "price": ["10", "20", "30"]}))
    assert "column types differ" in compare.compare(as_text, ref)["reason"]


def test_a_peak_rss_carried_from_the_parent_fails_loudly() -> None:
    check_own_rss("x", {"peak_rss_mb": 300.0, "vm_hwm_mb": 295.0})
    with pytest.raises(ChildFailed, match="exceeds the child's own peak"):
        check_own_rss("x", {"peak_rss_mb": 900.0, "vm_hwm_mb": 300.0})


def test_the_report_shows_the_run(ran: tuple[str, list[dict]], tmp_path: Path) -> None:
    _, records = ran
    readme = tmp_path / "README.md"
    readme.write_text(f"intro\n{report.BEGIN}\nold\n{report.END}\nend\n")
    report.rewrite(readme, report.render(records))
    text = readme.read_text()
    assert text.startswith("intro\n") and text.endswith("end\n") and "old" not in text
    assert "| `q2_filter` | 20,000 |" in text and "(datum-sql, polars = duckdb)" in text


def test_the_orchestrating_process_imports_no_engine() -> None:
    """A child's ru_maxrss starts from its parent's RSS: the parent must stay small."""
    code = (
        "import sys, benchmarks.__main__, benchmarks.harness, benchmarks.registry; "
        "print(sorted(m for m in ('pyarrow', 'datum_sql', 'duckdb', 'polars') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                         check=True)  # fmt: skip
    assert out.stdout.strip() == "[]"


def test_the_report_names_the_benchmarks_below_a_quarter_of_duckdb(tmp_path: Path) -> None:
    out = str(tmp_path / "same.arrow")
    compare.write(_table([10, 20, 30]), out)
    session = Session(machine(), runs=1, results_path=tmp_path / "r.jsonl")
    bench = get("q2_filter")
    equal = {"equal": True}
    records = [
        _record(bench, 3, "datum-sql", [_run(out, 0.5)], [equal], None, session, [0.0] * 3,
                [0.0] * 3),
        _record(bench, 3, "duckdb", [_run(out, 0.1)], [equal], None, session, [0.0] * 3,
                [0.0] * 3),
    ]  # fmt: skip
    _ratios(records, "duckdb")
    assert "Below 0.25 of DuckDB's events/s: `q2_filter` (0.20x)." in report.render(records)
    records[0]["ratio"] = 0.25
    assert "Below 0.25" not in report.render(records)


def test_the_clock_starts_on_a_collected_heap(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Garbage the set-up left (its imports') is collected before the clock, not inside it."""
    import weakref

    from benchmarks import engines

    class Node:
        other: Node

    seen: list[bool] = []

    def prepare(bench: object, events: int, params: object) -> engines.Prepared:
        a, b = Node(), Node()
        a.other, b.other = b, a  # a cycle: only a collection frees it
        left = weakref.ref(a)
        del a, b

        def run() -> pa.Table:
            seen.append(left() is None)
            return pa.table({"x": [1]})

        return engines.Prepared(run, 1, 1)

    monkeypatch.setattr(engines, "_preparer", lambda bench, engine: prepare)
    engines.run("q2_filter", "datum-sql", 1, str(tmp_path / "out.arrow"))
    assert seen == [True]


@pytest.mark.parametrize("workload", ["tumble_1s_state", "groupby_100k_state"])
def test_a_state_workload_runs_in_a_child_and_reports_its_state(workload: str) -> None:
    """Each state workload reads every generated bid on time (run_state refuses less) and
    reports the operator's state rows; the GROUP BY's final state has one row per key. The
    child is started from a small process of its own (its ru_maxrss starts from its
    parent's RSS, and the pytest process may be large)."""
    code = ("import json, sys; from benchmarks.child import call; "
            "print(json.dumps(call('benchmarks.window_state:run_state', json.loads(sys.argv[1]))))")  # fmt: skip
    args = json.dumps({"workload": workload, "events": EVENTS})
    proc = subprocess.run([sys.executable, "-c", code, args], cwd=ROOT, capture_output=True,
                          text=True, timeout=600)  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    run = json.loads(proc.stdout.strip().splitlines()[-1])
    assert run["peak_rss_mb"] > 0 and run["seconds"] > 0
    assert 0 < run["max_state_rows"] <= EVENTS
    if workload == "groupby_100k_state":
        import datum_sql as ds

        ctx = ds.Context(state_dir=None)
        ctx.execute(f"CREATE SOURCE bids (price BIGINT) WITH (connector = 'nexmark', "
                    f"stream = 'bid', rows = '{EVENTS}', seed = '1')")  # fmt: skip
        keys = ctx.sql("SELECT count(DISTINCT price % 100000) AS n FROM bids")["n"][0].as_py()
        assert run["rows_out"] == run["max_state_rows"] == keys
