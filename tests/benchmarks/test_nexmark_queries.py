"""The Nexmark benchmarks run the golden tests' queries: every query that
``tests/golden/test_nexmark_golden.py`` streams has one benchmark, with the same datum-sql
and DuckDB texts (up to whitespace) over the same table names.

A query that starts to stream gets its golden test; this test then fails until it is
benchmarked too, and a text changed on one side only fails it as well.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
for path in (ROOT, ROOT / "tests" / "golden"):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))

from test_nexmark_golden import QUERIES  # noqa: E402

from benchmarks.registry import BENCHMARKS  # noqa: E402


def _same_text(sql: str) -> str:
    """One space between tokens, none inside parentheses: the layout of the text aside."""
    flat = " ".join(sql.split())
    return re.sub(r"\(\s+", "(", re.sub(r"\s+\)", ")", flat))


def _benchmarks_of(query: str) -> list[str]:
    return [name for name in BENCHMARKS if name.split("_")[0] == query]


@pytest.mark.parametrize("query", QUERIES)
def test_every_golden_query_is_benchmarked_with_its_golden_text(query: str) -> None:
    found = _benchmarks_of(query)
    assert len(found) == 1, f"{query}: benchmarks {found}; want one named {query}_..."
    bench, case = BENCHMARKS[found[0]], QUERIES[query]
    assert _same_text(bench.datum_sql) == _same_text(case.stream)
    assert _same_text(bench.duckdb_sql) == _same_text(case.batch)
    assert set(bench.inputs(1_000)) == {*case.streams, *case.lookup}


def test_the_layout_is_all_that_is_ignored() -> None:
    assert (
        _same_text("SELECT a FROM (\n  SELECT a FROM t\n) x") == "SELECT a FROM (SELECT a FROM t) x"
    )
    assert _same_text("SELECT a FROM bid") != _same_text("SELECT a FROM bids")
