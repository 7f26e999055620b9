"""The HTML (and text) of every object datum-sql displays in a notebook: result tables,
query handles, status, SHOW, EXPLAIN, verify results, explain_progress. Each is parsed
(well-formed), checked for its key content, and for escaping of user strings."""

from __future__ import annotations

import ast
import datetime as dt
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from nbtest_support import classes, events, parse_html, shell

import datum_sql as ds
from datum_sql.notebook import display

EVIL = "<script>alert('x')</script>"
PACKAGE = Path(ds.__file__).parent


@pytest.fixture
def ctx() -> Any:
    with ds.Context(state_dir=None, checkpoint_interval=None) as c:
        yield c


def _escaped(html: str) -> None:
    assert "<script>" not in html
    assert "&lt;script&gt;" in html


def test_result_table_html_escapes_values_and_names_types_and_counts() -> None:
    table = pa.table({"name": [EVIL, "bob", None], "n": [1, 22, 333]})
    html = display.table_html(table, max_rows=2)
    checker = parse_html(html)
    _escaped(html)
    text = " ".join(checker.text)
    assert "name" in text and "int64" in text and "string" in text
    assert "3 rows, 2 columns (first 2 shown)" in text
    assert "bob" in text and "333" not in text  # only the first two rows
    assert "datum-table" in classes(checker)
    plain = display.table_text(table)
    assert "NULL" in plain and "(3 rows)" in plain


def test_html_and_text_tables_write_a_value_the_same_way() -> None:
    table = pa.table(
        {
            "x": pa.array([2.0, 0.1 + 0.2], pa.float64()),
            "b": pa.array([b"\x01\xff", None], pa.binary()),
            "t": pa.array([dt.datetime(2024, 1, 2, 3, 4, 5), None], pa.timestamp("us")),
        }
    )
    cells = ["2", "\\x01ff", "2024-01-02 03:04:05", "0.3", "NULL", "NULL"]
    html_cells = [c.strip() for c in parse_html(display.table_html(table)).text]
    text_rows = display.table_text(table).splitlines()[2:4]
    assert [c for c in html_cells if c in cells] == cells
    assert [c for row in text_rows for c in re.split(r"\s{2,}", row.strip())] == cells


def test_ctx_sql_stays_a_pyarrow_table_and_renders_through_the_ipython_formatter(ctx: Any) -> None:
    ip = shell()
    ctx.register_arrow("people", pa.table({"name": [EVIL, "ann"], "age": [30, 41]}))
    result = ctx.sql("SELECT name, age FROM people ORDER BY age")
    assert type(result) is pa.Table
    data, _ = ip.display_formatter.format(result)
    html = data["text/html"]
    parse_html(html)
    _escaped(html)
    assert "ann" in html and "41" in html
    # other dicts and strings are left to IPython's defaults
    data, _ = ip.display_formatter.format({"a": 1})
    assert "text/html" not in data
    data, _ = ip.display_formatter.format("just text")
    assert "text/html" not in data


def test_show_sources_html_lists_the_sources(ctx: Any) -> None:
    ip = shell()
    ctx.register_arrow("trades", pa.table({"sym": ["A"], "px": [1.5]}))
    ctx.execute("CREATE SOURCE bids WITH (connector = 'nexmark', stream = 'bid', rows = '10')")
    shown = ctx.execute("SHOW SOURCES")
    html = ip.display_formatter.format(shown)[0]["text/html"]
    checker = parse_html(html)
    text = " ".join(checker.text)
    assert "trades" in text and "bids" in text and "nexmark" in text


def _windowed(ctx: Any) -> Any:
    ctx.register_arrow(
        "ev", events([0, 1, 12, 3, 25], keys=[EVIL, "b", "a", "b", "a"]),
        event_time="ts", watermark=ds.BoundedOutOfOrderness(seconds=5), batch_size=1,
    )  # fmt: skip
    return ctx.execute_streaming(
        "SELECT window_start, k, count(*) AS n FROM tumble(ev, ts, INTERVAL '10 seconds') "
        "GROUP BY window_start, window_end, k EMIT ON WINDOW CLOSE"
    )


def test_query_handle_and_status_html(ctx: Any) -> None:
    q = _windowed(ctx)
    q.wait(30)
    html = q._repr_html_()
    checker = parse_html(html)
    _escaped(html)
    text = " ".join(checker.text)
    assert {"datum-status", "datum-operators", "datum-table"} <= classes(checker)
    for fact in ("finished", "ev", "5 rows in", "1 late", "window_aggregate", "newest rows"):
        assert fact in text, fact
    # the status dict itself (still a dict) renders through the IPython formatter
    status = q.status()
    assert type(status) is dict
    data, _ = shell().display_formatter.format(status)
    status_html = data["text/html"]
    checker = parse_html(status_html)
    assert "datum-status" in classes(checker) and "ev" in " ".join(checker.text)
    assert "ev" in display.status_text(status) and "window_aggregate" in display.status_text(status)


def test_status_html_escapes_an_error_message() -> None:
    status = {
        "name": "q<1>", "state": "failed", "error": f"boom {EVIL}", "elapsed_s": 1.0,
        "rows_in": 0, "rows_out": 0, "late_rows": 0,
        "sources": {"s<x>": {"rows": 0, "watermark": "-inf"}}, "operators": {}, "sinks": {},
        "watermark": "-inf", "last_checkpoint": {"id": 3, "time": "2026-01-01 00:00:00"},
        "recovered_from": None,
    }  # fmt: skip
    html = display.status_html(status)
    checker = parse_html(html)
    _escaped(html)
    text = " ".join(checker.text)
    assert "q<1>" in text and "s<x>" in text and "last checkpoint #3" in text
    assert "datum-error" in classes(checker)


def test_explain_html_draws_the_job_graph(ctx: Any) -> None:
    ctx.register_arrow("t<x>", pa.table({"a": [1, 2]}))
    text = ctx.explain('SELECT a + 1 AS b FROM "t<x>" WHERE a > 1')
    assert isinstance(text, str)
    data, _ = shell().display_formatter.format(text)
    html = data["text/html"]
    checker = parse_html(html)
    assert "svg" in [t for t, _ in checker.tags]
    assert "t&lt;x&gt;" in html and "<x>" not in html.replace("<x>", "", 0).split("</style>", 1)[1]
    svg = html[html.index("<svg") : html.index("</svg>") + len("</svg>")]
    root = ET.fromstring(svg)
    nodes = [g for g in root.iter("{http://www.w3.org/2000/svg}g")]
    assert len(nodes) == 3  # source, calc, results


def test_magic_explain_view_and_running_query_explain(ctx: Any) -> None:
    q = _windowed(ctx)
    q.wait(30)
    view = q.explain()
    assert "5 rows read, 1 late" in str(view) and "4 rows written" in str(view)
    html = view._repr_html_()
    parse_html(html)
    assert "4 in → 4 out" in html
    root = ET.fromstring(view.svg())
    counts = [
        t.text
        for t in root.iter("{http://www.w3.org/2000/svg}text")
        if t.get("class") == "datum-count"
    ]
    assert "5 rows read, 1 late" in counts


def test_verify_result_html(ctx: Any) -> None:
    ctx.register_arrow(
        "ev", events([0, 12, 3], keys=[EVIL, "a", EVIL]),
        event_time="ts", watermark=ds.BoundedOutOfOrderness(seconds=2), batch_size=1,
    )  # fmt: skip
    result = ctx.verify("SELECT k, count(*) AS n FROM ev GROUP BY k")
    assert not result
    html = result._repr_html_()
    checker = parse_html(html)
    _escaped(html)
    text = " ".join(checker.text)
    assert "batch only" in text and "stream only" in text and "late rows" in text
    assert "DIFFERENT" in str(result)


def test_explain_progress_html(ctx: Any) -> None:
    q = _windowed(ctx)
    q.wait(30)
    report = q.explain_progress()
    html = report._repr_html_()
    checker = parse_html(html)
    text = " ".join(checker.text)
    assert {"datum-sources", "datum-operators"} <= classes(checker)
    assert "ev" in text and "window_agg" in text and "1 late row from ev" in text


def test_importing_datum_sql_outside_ipython_loads_no_optional_dependency() -> None:
    code = (
        "import sys, datum_sql; "
        "print(sorted(m for m in ('IPython', 'matplotlib', 'polars') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


OPTIONAL = ("IPython", "matplotlib", "polars", "nbconvert", "traitlets")


@pytest.mark.parametrize(
    "path", sorted(PACKAGE.rglob("*.py")), ids=lambda p: str(p.relative_to(PACKAGE))
)
def test_notebook_dependencies_are_imported_only_in_notebook_modules(path: Path) -> None:
    rel = path.relative_to(PACKAGE).as_posix()
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        names = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module]
        for name in names:
            if name.split(".")[0] in OPTIONAL:
                assert rel.startswith("notebook/"), f"{rel} imports optional {name}"


def test_import_inside_an_ipython_shell_registers_the_formatters() -> None:
    ip = shell()
    formatter = ip.display_formatter.formatters["text/html"]
    formatter.pop(pa.Table)
    assert "text/html" not in ip.display_formatter.format(pa.table({"a": [1]}))[0]
    ds._register_display()  # what `import datum_sql` runs
    assert "datum-table" in ip.display_formatter.format(pa.table({"a": [1]}))[0]["text/html"]
