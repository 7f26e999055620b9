"""Top-N queries: ``SELECT ... FROM (SELECT ..., ROW_NUMBER() OVER (PARTITION BY p ORDER BY
o) AS rn FROM ...) WHERE rn <= N`` (or RANK(), DENSE_RANK()) becomes one
:class:`~logical.TopN` step.

:func:`match` recognises the shape on the bound AST and splits it into three parts: the
ranked SELECT without its window function (plus hidden columns for PARTITION BY / ORDER BY
expressions it does not output), the rank range the outer WHERE keeps, and the outer
SELECT over the ranked rows. The ranking is a window top-N — final rows once each window
closes — when PARTITION BY holds the ``window_end`` of a window the input carries through;
otherwise a changelog of rows entering and leaving the top N.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TypeVar

import pyarrow as pa
from sqlglot import exp

from datum_sql.errors import PlanError
from datum_sql.plan import logical as lp
from datum_sql.sql import statements as st
from datum_sql.sql.analyze import WINDOW_COLUMNS
from datum_sql.sql.dialect import Datum

SHAPE = (
    "SELECT ... FROM (SELECT ..., ROW_NUMBER() OVER (PARTITION BY ... ORDER BY ...) AS rn "
    "FROM ...) WHERE rn <= N"
)
_HIDDEN = "__topn_"
#: Ranking functions a top-N computes, by sqlglot class.
FUNCTIONS: dict[type[exp.Expr], str] = {
    exp.RowNumber: "row_number",
    exp.Rank: "rank",
    exp.DenseRank: "dense_rank",
}
#: Window functions of a row's rank: a derived table holding one is a top-N.
_RANKINGS = (*FUNCTIONS, exp.PercentRank, exp.CumeDist, exp.Ntile)
C = TypeVar("C")


@dataclass
class TopNQuery:
    """A top-N query split into what the planner builds, step by step."""

    #: The ranked SELECT without its window function, plus the hidden columns.
    input: exp.Select
    #: The outer SELECT, its WHERE without the rank bounds, reading ``outer_rel``.
    outer: exp.Select
    outer_rel: st.Relation
    partition: list[str]
    order: list[lp.OrderKey]
    lower: int
    upper: int
    rank_alias: str
    rank_used: bool
    hidden: list[str]
    window_end: str | None
    #: "row_number", "rank" or "dense_rank"
    function: str = "row_number"


def match(select: exp.Select) -> TopNQuery | None:
    """The top-N ``select`` is, or None when its FROM is no ranked derived table."""
    from_ = select.args.get("from_")
    if from_ is None or select.args.get("joins"):
        return None
    node = from_.this
    rel: st.Relation | None = node.meta.get("relation")
    if rel is None or rel.kind != "subquery" or not isinstance(node.this, exp.Select):
        return None
    inner: exp.Select = node.this
    ranked = [e for e in inner.expressions if e.find(exp.Window)]
    if not any(isinstance(w.this, _RANKINGS) for e in ranked for w in e.find_all(exp.Window)):
        return None  # no ranking: over-window aggregates, planned with the derived table
    item = _rank_item(inner, ranked)
    window: exp.Window = item.this
    alias = item.alias
    outputs = {_unalias(e).sql(): e.alias_or_name for e in inner.expressions if e is not item}
    hidden: list[str] = []
    extra: list[exp.Expr] = []

    def column_for(e: exp.Expr, what: str) -> str:
        name = outputs.get(e.sql())
        if name is not None:
            return name
        name = f"{_HIDDEN}{what}{len(hidden)}"
        hidden.append(name)
        extra.append(exp.alias_(e.copy(), name, quoted=True))
        return name

    partition = [column_for(p, "p") for p in window.args.get("partition_by") or []]
    order_by = window.args.get("order")
    if order_by is None or not order_by.expressions:
        raise PlanError(
            f"{_name(window)} OVER (...) needs ORDER BY in streaming, which ranks by it: {SHAPE}"
        )
    order = [
        lp.OrderKey(
            column_for(o.this, "o"),
            descending=bool(o.args.get("desc")),
            nulls_first=bool(o.args.get("nulls_first")),
        )
        for o in order_by.expressions
    ]
    ranked_input = inner.copy()
    ranked_input.set("expressions", [e.copy() for e in inner.expressions if e is not item] + extra)
    lower, upper, residual = _rank_bounds(select, rel.alias, alias)
    outer = select.copy()
    outer.set("where", exp.Where(this=exp.and_(*residual)) if residual else None)
    table = exp.Table(
        this=exp.to_identifier(rel.alias),
        alias=exp.TableAlias(this=exp.to_identifier(rel.alias, quoted=True)),
    )
    table.meta["relation"] = rel
    outer.set("from_", exp.From(this=table))
    rank_used = any(_is_rank(c, rel.alias, alias) for c in outer.find_all(exp.Column))
    bounds = window_bounds(ranked_input)
    ends = [p for p in partition if bounds.get(p) == "window_end"]
    return TopNQuery(
        ranked_input, outer, rel, partition, order, lower, upper, alias, rank_used, hidden,
        ends[0] if ends else None, FUNCTIONS[type(window.this)],
    )  # fmt: skip


def refuse_window_functions(select: exp.Select, *, select_list: bool = True) -> None:
    """Window functions in ``select`` itself (its FROM items are planned on their own, and
    a ranked derived table there is a top-N): refused, pointing at the top-N shape. Those
    of the SELECT list are checked too unless ``select_list`` is False (an over-window
    SELECT plans them)."""
    own = [select.args.get(k) for k in ("where", "group", "having", "qualify", "order")]
    for part in [
        *(select.expressions if select_list else []),
        *own,
        *(j.args.get("on") for j in select.args.get("joins") or []),
    ]:
        if part is not None and part.find(exp.Window):
            raise PlanError(
                "window functions run in streaming in a SELECT list (over-window aggregates "
                "ordered by event time), or as a top-N, the ranked derived table read by the "
                f"outer query's FROM: {SHAPE}; to filter on one, compute it in a derived table"
            )


def input_clauses(top: TopNQuery, clauses: C) -> C:
    """A window top-N ranks each window's final rows: a windowed aggregate under it emits
    on window close whatever the query says (its output is the same, only final)."""
    if top.window_end is None:
        return clauses
    return dataclasses.replace(clauses, emit_on_close=True)  # type: ignore[type-var]


def node(top: TopNQuery, input: lp.PlanNode, allowed_lateness_us: int) -> lp.TopN:
    """The TopN step over the planned ranked input."""
    # over a changelog, the input's _op is the changelog's, not a column of its rows
    fields = [f for f in input.schema if f.name not in (*top.hidden, lp.OP_COLUMN)]
    if top.rank_used:
        fields.append(pa.field(top.rank_alias, pa.int64(), False))
    if top.window_end is None:
        fields.append(pa.field(lp.OP_COLUMN, pa.string(), False))
    return lp.TopN(
        input, tuple(top.partition), tuple(top.order), top.lower, top.upper, pa.schema(fields),
        rank_column=top.rank_alias if top.rank_used else None, drop=tuple(top.hidden),
        window_end=top.window_end, allowed_lateness_us=allowed_lateness_us,
        function=top.function,
    )  # fmt: skip


def window_bounds(select: exp.Select) -> dict[str, str]:
    """Output columns of ``select`` that are a window's ``window_start`` / ``window_end``
    (a window table function's, or carried through derived tables), by output name."""
    from_ = select.args.get("from_")
    if from_ is None or select.args.get("joins"):
        return {}
    node = from_.this
    rel: st.Relation | None = node.meta.get("relation")
    if rel is None:
        return {}
    inner: dict[str, str]
    if rel.window is not None and (rel.window.kind != "session" or select.args.get("group")):
        inner = {c: c for c in WINDOW_COLUMNS}
    elif rel.kind == "subquery" and isinstance(node.this, exp.Select):
        inner = window_bounds(node.this)
    else:
        return {}
    out = {}
    for e in select.expressions:
        col = _unalias(e)
        if isinstance(col, exp.Column) and col.table == rel.alias and col.name in inner:
            out[e.alias_or_name] = inner[col.name]
    return out


def _rank_item(inner: exp.Select, ranked: list[exp.Expr]) -> exp.Alias:
    """The one ``ROW_NUMBER() OVER (...) AS rn`` item of the ranked SELECT."""
    item = ranked[0]
    window = item.this if isinstance(item, exp.Alias) else None
    if len(ranked) > 1 or not isinstance(item, exp.Alias) or not isinstance(window, exp.Window):
        raise PlanError(
            "a streaming SELECT can hold one window function, ROW_NUMBER() OVER (...) AS rn, "
            f"as its own SELECT item, filtered by the outer query: {SHAPE}"
        )
    func = window.this
    if type(func) not in FUNCTIONS:
        name = func.sql(dialect=Datum, normalize_functions="lower")
        raise PlanError(
            f"{name} OVER (...) is not supported in streaming; ROW_NUMBER(), RANK() and "
            f"DENSE_RANK() are, as a top-N: {SHAPE}"
        )
    if window.args.get("spec") is not None:
        raise PlanError(f"{_name(window)} OVER (...) takes no frame (ROWS/RANGE ...) in streaming")
    for clause in ("where", "group", "having"):
        part = inner.args.get(clause)
        if part is not None and part.find(exp.Window):
            raise PlanError(
                f"window functions cannot appear in {clause.upper()}; filter on rn in the "
                f"outer query: {SHAPE}"
            )
    return item


def _rank_bounds(select: exp.Select, table: str, alias: str) -> tuple[int, int, list[exp.Expr]]:
    """(lower, upper) rank kept by the outer WHERE, and its other conjuncts."""
    where = select.args.get("where")
    conjuncts = list(where.this.flatten()) if isinstance(where, exp.Where) and isinstance(
        where.this, exp.And
    ) else ([where.this] if where is not None else [])  # fmt: skip
    lower, upper = 1, None
    residual = []
    for c in conjuncts:
        if not any(_is_rank(col, table, alias) for col in c.find_all(exp.Column)):
            residual.append(c.copy())
            continue
        for lo, hi in _bound(c, table, alias):
            if lo is not None:
                lower = max(lower, lo)
            if hi is not None:
                upper = hi if upper is None else min(upper, hi)
    if upper is None:
        raise PlanError(
            f"ROW_NUMBER() in streaming needs the outer query to keep the first N rows, "
            f"WHERE {alias} <= N (or {alias} = 1 to deduplicate): {SHAPE}"
        )
    if upper < lower:
        raise PlanError(f"the filter on {alias} keeps no row (from {lower} to {upper})")
    return lower, upper, residual


def _bound(c: exp.Expr, table: str, alias: str) -> list[tuple[int | None, int | None]]:
    """The rank bounds one conjunct sets, or a PlanError for a filter on rn we cannot keep."""
    if isinstance(c, exp.Between) and _is_rank(c.this, table, alias):
        lo, hi = _integer(c.args.get("low")), _integer(c.args.get("high"))
        if lo is not None and hi is not None:
            return [(max(lo, 1), hi)]
    ops: dict[type[exp.Expr], str] = {
        exp.LTE: "<=",
        exp.LT: "<",
        exp.EQ: "=",
        exp.GTE: ">=",
        exp.GT: ">",
    }
    flip = {"<=": ">=", "<": ">", "=": "=", ">=": "<=", ">": "<"}
    op = ops.get(type(c))
    if op is not None:
        left, right = c.this, c.expression
        if _is_rank(right, table, alias):
            left, right, op = right, left, flip[op]
        n = _integer(right)
        if _is_rank(left, table, alias) and n is not None:
            return [{"<=": (None, n), "<": (None, n - 1), "=": (max(n, 1), n),
                     ">=": (n, None), ">": (n + 1, None)}[op]]  # fmt: skip
    raise PlanError(
        f"the filter {_unqualified(c)} on {alias} is not a top-N bound; write {alias} <= N, "
        f"{alias} < N, {alias} = N or {alias} BETWEEN M AND N (integers)"
    )


def _name(window: exp.Window) -> str:
    return FUNCTIONS.get(type(window.this), "row_number").upper() + "()"


def _unqualified(e: exp.Expr) -> str:
    """``e`` as the user wrote it, without the qualifiers the binder added."""
    plain = e.copy().transform(lambda n: exp.column(n.name) if isinstance(n, exp.Column) else n)
    return plain.sql(dialect=Datum)


def _integer(e: exp.Expr | None) -> int | None:
    if isinstance(e, exp.Literal) and not e.is_string and e.this.lstrip("-").isdigit():
        return int(e.this)
    return None


def _is_rank(e: exp.Expr, table: str, alias: str) -> bool:
    return isinstance(e, exp.Column) and e.name == alias and e.table in ("", table)


def _unalias(e: exp.Expr) -> exp.Expr:
    return e.this if isinstance(e, exp.Alias) else e
