"""The documented SQL function list is the planner's (datum_sql/plan/function_list.py),
and every function on it runs in ``ctx.sql`` and in a streaming query with equal results.

The example calls are data: tests/fixtures/functions/examples.tsv, one line per function
(kind, name, example). A scalar's or an aggregate's example is an expression over the
table ``f`` below, or a whole query (over ``w``, whose rows have an event time).
"""

from __future__ import annotations

import datetime as dt
import math
import re
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import datum_sql as ds
from datum_sql.engine.operators.over import MOMENTS
from datum_sql.plan.function_list import REFUSED, function_list, markdown

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "tests" / "fixtures" / "functions" / "examples.tsv"
TS = pa.timestamp("us")
F = pa.table({
    "id": pa.array([1, 2, 3], pa.int64()),
    "i": pa.array([4, -2, None], pa.int64()),
    "x": pa.array([2.25, 0.5, None], pa.float64()),
    "s": pa.array(["Hello World", "a,b,c", None], pa.string()),
    "b": pa.array([True, False, None], pa.bool_()),
    "ts": pa.array([dt.datetime(2024, 3, 2, 15, 4, 5), dt.datetime(2024, 12, 25), None], TS),
    "d": pa.array([dt.date(2024, 3, 2), dt.date(2024, 12, 25), None], pa.date32()),
    "l": pa.array([[1, 2, 2], [3], None], pa.list_(pa.int64())),
})  # fmt: skip
#: Rows in event-time order for window and table functions: two keys, five seconds.
W = pa.table({
    "k": ["a", "b", "a", "a", "b"],
    "v": pa.array([1, 2, 3, 4, 5], pa.int64()),
    "ts": pa.array([dt.datetime(2024, 1, 1, 0, 0, s) for s in (0, 1, 2, 3, 4)], TS),
})  # fmt: skip


def _examples() -> dict[tuple[str, str], str]:
    out: dict[tuple[str, str], str] = {}
    for n, line in enumerate(EXAMPLES.read_text().splitlines(), 1):
        if not line.strip() or line.startswith("#"):
            continue
        kind, name, example = line.split("\t")
        assert (kind, name) not in out, f"examples.tsv:{n}: {kind} {name} twice"
        out[(kind, name)] = example
    return out


EXAMPLE = _examples()
LISTED = [(kind, name) for kind, names in function_list().items() for name in names]


def _query(kind: str, example: str) -> str:
    if example.upper().startswith("SELECT "):
        return example
    if kind == "scalar":
        return f"SELECT id, {example} AS v FROM f"
    if kind == "aggregate":
        return f"SELECT {example} AS v FROM f"
    return example


#: Window functions whose floats agree to rounding only: a streaming query computes a
#: frame's variance from sums of shifted values and their squares, DataFusion by adding
#: and retracting rows one at a time (its 0.25 is 0.25000000000000044), so they compare
#: to 12 significant digits.
ROUNDED = {("window", name) for name in MOMENTS}


def _rows(table: pa.Table, *, rounded: bool = False) -> list[tuple[Any, ...]]:
    """The rows in a comparable order, NaN equal to NaN (floats to 12 digits if
    ``rounded``)."""

    def value(v: Any) -> Any:
        if isinstance(v, float) and math.isnan(v):
            return "NaN"
        if isinstance(v, float) and rounded:
            return float(f"{v:.12g}")
        if isinstance(v, list):
            return [value(x) for x in v]
        return v

    return sorted((tuple(value(v) for v in r.values()) for r in table.to_pylist()), key=repr)


@pytest.fixture(scope="module")
def ctx() -> ds.Context:
    ctx = ds.Context(state_dir=None, checkpoint_interval=None)
    ctx.register_arrow("f", F)
    ctx.register_arrow("w", W, event_time="ts", watermark=ds.BoundedOutOfOrderness())
    return ctx


def test_the_docs_page_is_the_generated_list() -> None:
    page = ROOT / "docs" / "functions-list.md"
    assert page.read_text() == markdown(), "regenerate: python -m datum_sql.plan.function_list"


def test_every_listed_function_has_one_example() -> None:
    assert sorted(EXAMPLE) == sorted(LISTED)


@pytest.mark.parametrize(("kind", "name"), LISTED, ids=[f"{k}:{n}" for k, n in LISTED])
def test_function_runs_alike_in_batch_and_streaming(ctx: ds.Context, kind: str, name: str) -> None:
    example = EXAMPLE[(kind, name)]
    called = re.search(rf"\b{re.escape(name)}\s*\(", example, re.IGNORECASE)
    assert called, f"the example of {name} does not call it: {example}"
    sql = _query(kind, example)
    batch = ctx.sql(sql)
    streamed = ctx.execute_streaming(sql).to_arrow(timeout=60)
    assert batch.num_rows > 0
    assert streamed.column_names == batch.column_names
    rounded = (kind, name) in ROUNDED
    assert _rows(streamed, rounded=rounded) == _rows(batch, rounded=rounded), sql


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_refused_functions_are_refused_alike(ctx: ds.Context, name: str) -> None:
    sql = f"SELECT id, {name}() AS v FROM f"
    messages = []
    for run in (lambda: ctx.sql(sql), lambda: ctx.execute_streaming(sql)):
        with pytest.raises(ds.PlanError) as caught:
            run()
        messages.append(str(caught.value))
    assert messages[0] == messages[1]
    assert f"{name}() is not supported" in messages[0]


#: The approximate aggregates and any_value, computed exactly (as median, percentile_cont,
#: count(DISTINCT) and min): over a changelog, whose groups take rows back, and in windows
#: (quantiles whose interpolation fractions, quarters, are exact in binary).
_EXACT_ALIASES = (
    "any_value(k) AS a, approx_distinct(k) AS d, approx_percentile_cont(t, 0.25) AS p, "
    "approx_percentile_cont(0.75) WITHIN GROUP (ORDER BY t) AS w, quantile_cont(t, 0.5) AS q"
)


@pytest.mark.parametrize(
    "sql",
    [
        f"SELECT n, {_EXACT_ALIASES} FROM "
        "(SELECT k, count(*) AS n, CAST(sum(v) AS DOUBLE) AS t FROM many GROUP BY k) GROUP BY n",
        "SELECT window_start, any_value(k) AS a, approx_distinct(k) AS d, "
        "quantile_cont(0.25) WITHIN GROUP (ORDER BY v) AS q, approx_percentile_cont(v, 0.5) AS p "
        "FROM tumble(many, ts, INTERVAL '10' SECOND) GROUP BY window_start, window_end",
    ],
    ids=["over a changelog", "windowed"],
)
def test_exact_spellings_of_approximate_aggregates_match_batch(sql: str) -> None:
    keys = [f"k{(n * 7) % 11}" for n in range(60)]
    many = pa.table({
        "k": keys,
        "v": pa.array([(n * 13) % 17 for n in range(60)], pa.int64()),
        "ts": pa.array([dt.datetime(2024, 1, 1) + dt.timedelta(seconds=n) for n in range(60)], TS),
    })  # fmt: skip
    ctx = ds.Context(state_dir=None, checkpoint_interval=None)
    ctx.register_arrow("many", many.to_batches(max_chunksize=4), event_time="ts")
    streamed = ctx.execute_streaming(sql).to_arrow(timeout=60)
    ctx.register_arrow("many", many, event_time="ts")
    batch = ctx.sql(sql)
    assert batch.num_rows > 1
    assert _rows(streamed) == _rows(batch), sql
