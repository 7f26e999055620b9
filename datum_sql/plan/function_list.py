"""The SQL functions datum-sql accepts, by kind: one list for ``ctx.sql`` and streaming.

Scalar functions are DataFusion's, which evaluates every expression in both paths, plus
the spellings the dialect translates (``sign``, ``gen_random_uuid``: plan/engines.py),
less those the type check refuses in both (:data:`~datum_sql.plan.typecheck.REFUSED`). Aggregates are those the
streaming aggregate computes (plan/build.py); window functions those plan/over.py runs
over a frame; table functions the window TVFs (sql/dialect.py); the aggregates that take
no DISTINCT are plan/distinct.py's. docs/functions-list.md is
this list, written by :func:`markdown`; a test checks both, and runs every function in
both paths.
"""

from __future__ import annotations

import functools
import textwrap

from datum_sql.engine import udfs
from datum_sql.plan import build, list_order, over, over_functions
from datum_sql.plan.distinct import NO_DISTINCT
from datum_sql.plan.typecheck import REFUSED
from datum_sql.sql.dialect import AGGREGATE_ALIASES, WINDOW_FUNCTIONS

#: Scalar spellings of the dialect that DataFusion knows by another name.
DIALECT_SCALARS = ("gen_random_uuid", "sign")
#: Aggregates written otherwise than the function plan/build.py's table computes them
#: with (its keys are sqlglot's classes); None: not a spelling of the dialect.
_WRITTEN: dict[str, str | None] = {"Median": "median", "Stddev": "stddev", "Variance": "variance", "First": None,
            "Last": None}  # fmt: skip
#: Aggregates the streaming planner takes in another syntax than a plain call (grouping():
#: a constant per grouping set, plan/grouping_sets.py).
_OTHER_AGGREGATES = ("grouping", "percentile_cont", "var_samp")
KINDS = ("scalar", "aggregate", "window", "table")


@functools.cache
def function_list() -> dict[str, tuple[str, ...]]:
    """Function names by kind (:data:`KINDS`), sorted."""
    scalars = udfs.builtin_names("SCALAR") | set(DIALECT_SCALARS)
    written = (_WRITTEN.get(k, f) for k, f in build.AGGREGATES.items())
    aggregates = {name for name in written if name is not None}
    aggregates |= {alias for aliases in AGGREGATE_ALIASES.values() for alias in aliases}
    windows = set(over.AGGREGATES.values()) | set(over.POSITIONAL.values())
    return {
        "scalar": tuple(sorted(scalars - set(REFUSED))),
        "aggregate": tuple(sorted(aggregates | set(_OTHER_AGGREGATES))),
        "window": tuple(sorted(windows)),
        "table": tuple(sorted(WINDOW_FUNCTIONS)),
    }


def without_distinct() -> dict[str, str]:
    """The aggregates of the list that take no DISTINCT, by name (a spelling of another
    under its name): why (:data:`~datum_sql.plan.distinct.NO_DISTINCT`)."""
    spelled = {alias: name for name, aliases in AGGREGATE_ALIASES.items() for alias in aliases}
    out = {}
    for name in function_list()["aggregate"]:
        why = NO_DISTINCT.get(spelled.get(name, name))
        if why is not None:
            out[name] = why
    return out


def batch_only() -> tuple[str, ...]:
    """DataFusion's aggregate and window functions a streaming query refuses, naming the
    ones it has: ``ctx.sql`` runs them (docs/sql-reference.md)."""
    listed = set(function_list()["aggregate"]) | set(function_list()["window"])
    return tuple(sorted(udfs.builtin_names("AGGREGATE", "WINDOW") - listed - set(REFUSED)))


_HEADINGS = {
    "scalar": "Scalar functions",
    "aggregate": "Aggregate functions",
    "window": "Window functions (OVER)",
    "table": "Table functions (FROM)",
}


def markdown() -> str:
    """docs/functions-list.md: every function by kind, one line of names per kind."""
    lines = [
        "# SQL functions",
        "",
        "Every function below works in `ctx.sql` and in a streaming query with the same result",
        "(a test runs each in both). This page is generated from the planner",
        "(`datum_sql/plan/function_list.py`): `python -m datum_sql.plan.function_list` prints it.",
        "How the functions that differ from PostgreSQL behave is in [functions](functions.md);",
        "aggregates and windows in [windows](windows.md).",
        "",
        "```python",
        "import pyarrow as pa",
        "",
        "import datum_sql as ds",
        "from datum_sql.plan.function_list import function_list",
        "",
        "ctx = ds.Context(state_dir=None)",
        'ctx.register_arrow("t", pa.table({"x": [1.5, -2.25], "s": ["a,b", "c"]}))',
        "sql = \"SELECT abs(x) AS a, round(x) AS r, split_part(s, ',', 1) AS p FROM t\"",
        "batch = ctx.sql(sql).to_pylist()",
        "assert batch == ctx.execute_streaming(sql).to_arrow(timeout=30).to_pylist()",
        'assert batch == [{"a": 1.5, "r": 2.0, "p": "a"}, {"a": 2.25, "r": -2.0, "p": "c"}]',
        'assert {"abs", "round", "split_part"} <= set(function_list()["scalar"])',
        "```",
    ]
    for kind, names in function_list().items():
        lines += ["", f"## {_HEADINGS[kind]} ({len(names)})", ""]
        lines += textwrap.wrap(", ".join(f"`{n}`" for n in names), 95, break_on_hyphens=False)
        if kind == "aggregate":
            lines += _aggregate_lines(names)
        if kind == "window":
            lines += _over_lines()
    lines += ["", "Refused in both, with the reason:", ""]
    lines += [f"- `{name}`: {why}" for name, why in sorted(REFUSED.items())]
    lines += [
        "",
        "Only in `ctx.sql`: DataFusion's other aggregate and window functions. A streaming query",
        "refuses them, naming those it has (see [SQL reference](sql-reference.md#aggregates-and-group-by));",
        "the window functions it runs are listed above:",
        "",
    ]
    only = batch_only()
    if only:
        lines += textwrap.wrap(", ".join(f"`{n}`" for n in only), 95, break_on_hyphens=False)
    else:
        lines.append("none: every other one DataFusion has runs in both, or is refused in both.")
    return "\n".join(lines) + "\n"


def _over_lines() -> list[str]:
    """The aggregates refused as window functions in both, by reason
    (:mod:`datum_sql.plan.over_functions`)."""
    by_reason: dict[str, list[str]] = {}
    for name, why in over_functions.REFUSED.values():
        if name not in by_reason.setdefault(why, []):
            by_reason[why].append(name)
    by_reason[over_functions.PYTHON_WHY] = ["Python aggregate functions"]
    by_reason[over_functions.FILTER_WHY] = ["f(x) FILTER (WHERE ...)"]
    by_reason[over_functions.DISTINCT_WHY] = ["f(DISTINCT x)"]
    lines = ["", "Refused as window functions, `f(x) OVER (...)`, in both, with the reason:", ""]
    for why, group in by_reason.items():
        names = ", ".join(n if n.startswith("Python") else f"`{n}`" for n in group)
        lines += textwrap.wrap(
            f"- {names}: {why}", 95, subsequent_indent="  ", break_on_hyphens=False
        )
    shape = (
        "A window's shape can still differ: a streaming query refuses OVER without ORDER BY "
        "(its partition never ends) and frames that end after the current row, which "
        "`ctx.sql` runs (see [windows](windows.md))."
    )
    return [*lines, "", *textwrap.wrap(shape, 95, break_on_hyphens=False)]


def _aggregate_lines(names: tuple[str, ...]) -> list[str]:
    """That array_agg/string_agg need ORDER BY or DISTINCT; which aggregates take
    ``f(DISTINCT x)``, and why the others do not."""
    refused = without_distinct()
    takes = [n for n in names if n not in refused]
    by_reason: dict[str, list[str]] = {}
    for name, why in refused.items():
        by_reason.setdefault(why, []).append(name)
    unordered = (
        "`array_agg` and `string_agg` take ORDER BY inside the call, as in "
        "`array_agg(x ORDER BY ts)`, and need it (or DISTINCT) in both: without, "
        f"{list_order.WHY}."
    )
    intro = (
        f"With DISTINCT, `f(DISTINCT x)`, the aggregate of the distinct values ({len(takes)}; "
        "`array_agg` and `string_agg` list them in value order, ascending without ORDER BY, "
        "whose one key must be the argument):"
    )
    lines = ["", *textwrap.wrap(unordered, 95, break_on_hyphens=False)]
    lines += ["", *textwrap.wrap(intro, 95, break_on_hyphens=False), ""]
    lines += textwrap.wrap(", ".join(f"`{n}`" for n in takes), 95, break_on_hyphens=False)
    lines += ["", "Refused with DISTINCT in both, with the reason (so are Python aggregates):", ""]
    for why, group in by_reason.items():
        item = f"- {', '.join(f'`{n}`' for n in group)}: {why}"
        lines += textwrap.wrap(item, 95, subsequent_indent="  ", break_on_hyphens=False)
    return lines


if __name__ == "__main__":
    print(markdown(), end="")
