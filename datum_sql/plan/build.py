"""Bound query AST → logical plan.

Each SELECT becomes: its FROM input (a scan, a subquery's plan), then what the SELECT does
to it. A stateless SELECT compiles to one :class:`~logical.Calc` whose SQL DataFusion
evaluates on every batch. An aggregating SELECT becomes three steps: a Calc computing the
group keys and aggregate arguments (``__k*``, ``__a*``; ``__b*``: the second argument of a
two-input aggregate, ``corr(y, x)``), the stateful :class:`~logical.Aggregate`, and a Calc
applying HAVING and the final SELECT list.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import NamedTuple

import pyarrow as pa
from sqlglot import exp

from datum_sql.catalog import SourceEntry
from datum_sql.engine import udafs
from datum_sql.errors import PlanError
from datum_sql.plan import (
    derived,
    eowc,
    gathered,
    grouping_sets,
    joins,
    lateral,
    over,
    process,
    pushdown,
    setops,
    subqueries,
    topn,
    where_to_on,
)
from datum_sql.plan import logical as lp
from datum_sql.plan.batch import check_types
from datum_sql.plan.compile import compile_select
from datum_sql.plan.engines import DataFusion
from datum_sql.plan.infer import aggregate_function_names, infer_schema
from datum_sql.plan.windows import DEFAULT_MAX_WINDOWS_PER_ROW, duration_text, window_subquery
from datum_sql.sql import statements as st
from datum_sql.sql.analyze import WINDOW_COLUMNS
from datum_sql.sql.dialect import Datum
from datum_sql.sql.views import EMIT_FINAL
from datum_sql.types import parse_duration

INPUT = "input"
TIME = "__ts"

#: SQL aggregate name → operator function name.
AGGREGATES = {
    "Count": "count",
    "Sum": "sum",
    "Avg": "avg",
    "Min": "min",
    "Max": "max",
    "FirstValue": "first_value",
    "LastValue": "last_value",
    "First": "first_value",
    "Last": "last_value",
    "ApproxQuantile": "approx_percentile",
    "Median": "approx_percentile",
    "Stddev": "stddev_samp",
    "StddevSamp": "stddev_samp",
    "StddevPop": "stddev_pop",
    "Variance": "var_samp",
    "VariancePop": "var_pop",
    "LogicalAnd": "bool_and",
    "LogicalOr": "bool_or",
    "BitwiseAndAgg": "bit_and",
    "BitwiseOrAgg": "bit_or",
    "BitwiseXorAgg": "bit_xor",
    "ArrayAgg": "array_agg",
    "GroupConcat": "string_agg",
    "Corr": "corr",
    "CovarSamp": "covar_samp",
    "CovarPop": "covar_pop",
    "RegrSlope": "regr_slope",
    "RegrIntercept": "regr_intercept",
    "RegrCount": "regr_count",
    "RegrR2": "regr_r2",
    "RegrAvgx": "regr_avgx",
    "RegrAvgy": "regr_avgy",
    "RegrSxx": "regr_sxx",
    "RegrSyy": "regr_syy",
    "RegrSxy": "regr_sxy",
}
#: Aggregates of two arguments, ``f(y, x)``: the operator reads both columns.
TWO_INPUT_AGGREGATES = (
    "corr", "covar_samp", "covar_pop", "regr_slope", "regr_intercept", "regr_count",
    "regr_r2", "regr_avgx", "regr_avgy", "regr_sxx", "regr_syy", "regr_sxy",
)  # fmt: skip
#: Operator function of ``f(DISTINCT x)``: a value set where duplicates matter, else ``f``;
#: every aggregate of one argument but first_value/last_value (plan/distinct.py refuses them).
DISTINCT_AGGREGATES = {
    "count": "count_distinct",
    "sum": "sum_distinct",
    "avg": "avg_distinct",
    "min": "min",
    "max": "max",
    "bool_and": "bool_and",
    "bool_or": "bool_or",
    "bit_and": "bit_and",
    "bit_or": "bit_or",
    "bit_xor": "bit_xor_distinct",
    "var_samp": "var_samp_distinct",
    "var_pop": "var_pop_distinct",
    "stddev_samp": "stddev_samp_distinct",
    "stddev_pop": "stddev_pop_distinct",
    "approx_percentile": "approx_percentile_distinct",
    "array_agg": "array_agg_distinct",
    "string_agg": "string_agg_distinct",
}
#: Aggregates whose result depends on row order: they need ORDER BY in the call.
ORDERED_AGGREGATES = ("array_agg", "string_agg")
STREAMING_AGGREGATES = (
    "count, sum, avg, min, max, stddev/stddev_samp/stddev_pop, "
    "variance/var_samp/var_pop, bool_and, bool_or, bit_and/bit_or/bit_xor, first_value, last_value, any_value, "
    "approx_distinct, median/approx_median, percentile_cont/quantile_cont ... WITHIN GROUP, "
    "approx_percentile, approx_percentile_cont, array_agg(x ORDER BY ...), "
    "string_agg(x, sep ORDER BY ...), corr(y, x), covar/covar_samp/covar_pop(y, x), "
    "regr_slope/regr_intercept/regr_count/regr_r2/regr_avgx/regr_avgy/regr_sxx/regr_syy/"
    "regr_sxy(y, x), each with FILTER (WHERE ...); those of one argument but first_value "
    "and last_value with DISTINCT"
)
#: Connectors whose data may carry ``ds.Watermark`` markers (Python iterators).
MARKER_CONNECTORS = ("arrow",)


@dataclass(frozen=True)
class Clauses:
    """The streaming clauses of the query being planned."""

    emit_on_close: bool = False
    allowed_lateness_us: int = 0
    #: The query as the user wrote it, named by errors.
    text: str = ""
    #: The SELECT being planned feeds a stateful step (an aggregate, a window, a join),
    #: which reads append-only rows: its windowed aggregates emit each window once, final.
    final_windows: bool = False


def build(
    query: st.Query, *, max_windows_per_row: int = DEFAULT_MAX_WINDOWS_PER_ROW
) -> lp.LogicalPlan:
    """The logical plan of a bound query, rooted at a sink write or a collect.

    It is type-checked first, as its batch form, which also refuses a hop() with more than
    ``max_windows_per_row`` windows per row before any window is spelled out.
    """
    check_types(query, max_windows_per_row)
    clauses = Clauses(query.emit_on_window_close, query.allowed_lateness_us, query.sql)
    body = plan_query(query.ast, clauses)
    if query.emit_on_window_close and not any(_closes_windows(n) for n in _walk(body)):
        if body.updating:
            raise PlanError(
                "EMIT ON WINDOW CLOSE needs a windowed aggregate: GROUP BY window_start, "
                "window_end over tumble(), hop(), cumulate() or session() (a query without aggregates "
                "emits its rows in event-time order)"
            )
        timed = plan_query(eowc.with_event_time(query.ast, MARKER_CONNECTORS), clauses)
        body = eowc.sort(timed, query.allowed_lateness_us)
    if query.late_output:
        body = _with_late_output(body, query.late_output)
    root: lp.PlanNode = lp.SinkWrite(body, query.sink.name) if query.sink else lp.Collect(body)
    settings = {
        "allowed_lateness_us": query.allowed_lateness_us,
        "late_output": query.late_output,
        "emit_on_window_close": query.emit_on_window_close,
    }
    return lp.LogicalPlan(root, settings)


def plan_query(node: exp.Expr, clauses: Clauses) -> lp.PlanNode:
    if isinstance(node, exp.Subquery):
        return plan_query(node.this, clauses)
    if isinstance(node, exp.Select):
        return plan_select(node, clauses)
    if isinstance(node, exp.Union):
        return setops.plan_union(node, clauses, plan_query)
    raise PlanError(
        f"{node.key.upper()} is not supported in a streaming query yet; "
        "run it as a batch query with ctx.sql()"
    )


def plan_select(select: exp.Select, clauses: Clauses) -> lp.PlanNode:
    top = topn.match(select)
    if top is not None:
        return plan_topn(top, clauses)
    if over.windows(select):
        return plan_over(select, clauses)
    _refuse_unsupported(select)
    from_ = select.args.get("from_")
    if from_ is None:
        raise PlanError("a streaming query needs a FROM clause naming a source")
    relation = from_.this
    rel: st.Relation = relation.meta["relation"]
    if select.meta.get(EMIT_FINAL):  # a view's EMIT ON WINDOW CLOSE
        clauses = dataclasses.replace(clauses, final_windows=True)
    stateful = bool(
        select.args.get("joins")
        or _aggregates(select)
        or select.args.get("group")
        or select.args.get("distinct")
        or rel.window is not None
    )
    # What this SELECT reads: final windows when it is stateful, or when what it feeds is
    # (a stateless SELECT passes its rows on as they are).
    inputs = dataclasses.replace(clauses, final_windows=stateful or clauses.final_windows)
    if select.args.get("joins"):
        return plan_join_select(select, clauses, inputs)
    source = plan_relation(relation, inputs)
    own = subqueries.Outer(source, rel.alias, lambda c: c.name if c.table == rel.alias else None)
    source, select = _plan_subqueries(select, own, clauses)
    if _aggregates(select) or select.args.get("group") or select.args.get("distinct"):
        return plan_aggregate(source, select, rel, clauses)
    if rel.window is not None:
        if rel.window.kind == "session":
            raise PlanError(
                "session() windows need GROUP BY window_start, window_end (and the session keys)"
            )
        return calc(source, select, rel, window=rel.window, context=clauses.text)
    return calc(source, select, rel, context=clauses.text)


def _plan_subqueries(
    select: exp.Select, outer: subqueries.Outer, clauses: Clauses
) -> tuple[lp.PlanNode, exp.Select]:
    """The SELECT's input with a SubqueryJoin per subquery of its WHERE (each planned over
    its bounded tables), and the SELECT reading their columns instead."""
    inner = dataclasses.replace(clauses, final_windows=False)
    return subqueries.plan_where(
        select,
        outer,
        lambda q: plan_query(q, inner),
        lambda plan, body, rel: calc(plan, body, rel, context=clauses.text),
    )


def plan_over(select: exp.Select, clauses: Clauses) -> lp.PlanNode:
    """A SELECT with OVER (...) window functions over the rows of its FROM."""
    _refuse_unsupported(select, where_subqueries=False, over_list=True)
    over.check(select)
    from_ = select.args.get("from_")
    if from_ is None:
        raise PlanError("a streaming query needs a FROM clause naming a source")
    rel: st.Relation = from_.this.meta["relation"]
    if rel.window is not None:
        raise PlanError(
            f"OVER (...) over {rel.window.kind}() rows is not supported; aggregate the windows "
            "in a derived table (GROUP BY window_start, window_end) and compute OVER (...) "
            "over its window_end"
        )
    source = plan_relation(from_.this, dataclasses.replace(clauses, final_windows=True))
    return _over(select, rel, source, clauses)


def _over(
    select: exp.Select, rel: st.Relation, input: lp.PlanNode, clauses: Clauses
) -> lp.PlanNode:
    return over.plan(
        select, rel, input, allowed_lateness_us=clauses.allowed_lateness_us,
        calc=lambda i, s, r: calc(i, s, r, context=clauses.text),
    )  # fmt: skip


def plan_topn(top: topn.TopNQuery, clauses: Clauses) -> lp.PlanNode:
    """A top-N: its ranked input, the TopN step, then the outer SELECT over its rows."""
    ranked = plan_query(top.input, topn.input_clauses(top, clauses))
    node = topn.node(top, ranked, clauses.allowed_lateness_us)
    outer = top.outer
    if over.windows(outer):
        _refuse_unsupported(outer, where_subqueries=False, over_list=True)
        over.check(outer)
        return _over(outer, top.outer_rel, node, clauses)
    _refuse_unsupported(outer, where_subqueries=False)
    if _aggregates(outer) or outer.args.get("group") or outer.args.get("distinct"):
        return plan_aggregate(node, outer, top.outer_rel, clauses)
    return calc(node, outer, top.outer_rel, context=clauses.text)


def plan_join_select(select: exp.Select, clauses: Clauses, inputs: Clauses) -> lp.PlanNode:
    """A SELECT over joins: the join, then the SELECT over its ``alias.column`` output."""
    select = where_to_on.join_conditions(select)
    sides = [select.args["from_"].this] + [j.this for j in select.args["joins"]]
    rels: list[st.Relation] = [n.meta["relation"] for n in sides]
    if any(r.window is not None for r in rels):
        raise PlanError(
            "a window function's rows cannot be joined directly: aggregate each side in a "
            "derived table or CTE (GROUP BY window_start, window_end) and join those on "
            "window_end"
        )
    select = select.copy()
    filters = pushdown.pushable(select, rels)

    def side(node: exp.Expr, rel: st.Relation) -> joins.Side:
        plan = plan_relation(node, inputs)
        if rel.alias in filters:
            plan = _filtered(plan, rel, filters[rel.alias], clauses.text)
        return joins.Side(plan, {rel.alias: rel})

    left = side(sides[0], rels[0])
    rights = [
        (j, n if r.kind == lateral.TABLE_FUNCTION else side(n, r))
        for j, n, r in zip(select.args["joins"], sides[1:], rels[1:], strict=True)
    ]
    joined = lateral.plan_joins(
        select, left, rights, joins.plan_joins, lambda i, s, r: calc(i, s, r, context=clauses.text)
    )
    if joined.after:  # conditions the joins left to a filter after them
        where = select.args.get("where")
        conds = ([where.this] if where is not None else []) + [c.copy() for c in joined.after]
        select.set("where", exp.Where(this=exp.and_(*conds)))
    own = subqueries.Outer(
        joined.plan,
        joins.JOINED,
        lambda c: joins.qualified(c.table, c.name) if c.table in joined.relations else None,
    )
    joined.plan, select = _plan_subqueries(select, own, clauses)

    def swap(n: exp.Expr) -> exp.Expr:
        if isinstance(n, exp.Column) and n.table in joined.relations:
            return exp.column(joins.qualified(n.table, n.name), joins.JOINED, quoted=True)
        return n

    body = select.copy()
    body.set("joins", None)
    names = []
    for e in body.expressions:
        new = e.transform(swap)
        if isinstance(e, exp.Column):
            new = exp.alias_(new, e.name, quoted=True)
        names.append(new)
    body.set("expressions", names)
    seen: dict[str, str] = {}
    for e, new in zip(select.expressions, names, strict=True):
        if new.alias in seen:
            raise PlanError(
                f"the join's SELECT list has column {new.alias!r} twice ({seen[new.alias]} and "
                f"{e.sql(dialect=Datum)}); list the columns you want and alias them"
            )
        seen[new.alias] = e.sql(dialect=Datum)
    for clause in ("where", "group", "having"):
        if body.args.get(clause):
            body.set(clause, body.args[clause].transform(swap))
    rel = st.Relation(alias=joins.JOINED, kind="subquery", columns=list(joined.plan.schema.names))
    table = exp.Table(
        this=exp.to_identifier(joins.JOINED),
        alias=exp.TableAlias(this=exp.to_identifier(joins.JOINED, quoted=True)),
    )
    table.meta["relation"] = rel
    body.set("from_", exp.From(this=table))
    if _aggregates(body) or body.args.get("group") or body.args.get("distinct"):
        return plan_aggregate(joined.plan, body, rel, clauses)
    return calc(joined.plan, body, rel, context=clauses.text)


def plan_relation(node: exp.Expr, clauses: Clauses) -> lp.PlanNode:
    rel: st.Relation | None = node.meta.get("relation")
    if rel is None:
        raise PlanError(f"internal: FROM item {node.sql()} was not bound")
    if rel.kind == "subquery":
        plan = plan_query(node.this, clauses)
        if rel.window is not None:
            plan = derived.check_window_input(rel.window, rel.alias, plan)
            for entry in derived.event_time_sources(node):
                _check_watermark_moves(entry, entry.event_time, _window_call(rel.window, rel.alias))
        return plan
    if rel.kind == lateral.TABLE_FUNCTION:
        return lateral.plan_call(node, rel, lambda i, s, r: calc(i, s, r, context=clauses.text))
    if rel.kind == "source" and isinstance(rel.entry, SourceEntry):
        if rel.window is not None:
            _check_window_time(rel.window, rel.entry)
        return scan(rel.entry)
    if rel.kind == "process":
        return process.plan_process(node, lambda n: _process_input(n, clauses))
    raise PlanError(
        f"{rel.kind} {rel.alias!r} cannot be read by a streaming query; "
        "query it in batch with ctx.sql()"
    )


def _process_input(node: exp.Expr, clauses: Clauses) -> lp.PlanNode:
    rel: st.Relation = node.meta["relation"]
    if rel.kind == "subquery":
        # a stateful input's final windows, as for any stateful step
        return plan_query(node.this, dataclasses.replace(clauses, final_windows=True))
    assert isinstance(rel.entry, SourceEntry)
    _check_watermark_moves(rel.entry, rel.entry.event_time, f"process({rel.entry.name}, ...)")
    return scan(rel.entry)


def _check_window_time(window: st.WindowSpec, entry: SourceEntry) -> None:
    """A window closes when its source's watermark passes its end: refuse windows no
    watermark would ever close (the rule of docs/windows.md, "What closes a window")."""
    col, call = window.time_column, _window_call(window, entry.name)
    if entry.event_time is not None and entry.event_time != col:
        raise PlanError(
            f"{call}: windows must use the source's event-time column {entry.event_time!r} "
            f"(its watermark decides when a window closes), not {col!r}"
        )
    _check_watermark_moves(entry, col, call)


def _window_call(window: st.WindowSpec, table: str) -> str:
    return f"{window.kind}({table}, {window.time_column}, ...)"


def _check_watermark_moves(entry: SourceEntry, col: str | None, call: str) -> None:
    declare = (
        f"declare it with WATERMARK FOR {col} AS {col} - INTERVAL '5 seconds' in CREATE SOURCE, "
        f"or event_time='{col}', watermark=ds.BoundedOutOfOrderness(seconds=5) in Python"
    )
    if entry.event_time is None:
        raise PlanError(
            f"{call}: source {entry.name!r} has no event time, so no watermark would ever close "
            f"its windows; {declare}"
        )
    if (
        entry.watermark_delay_us is None
        and not entry.bounded
        and entry.connector not in MARKER_CONNECTORS
    ):
        raise PlanError(
            f"{call}: source {entry.name!r} never ends and has no watermark policy for "
            f"{col!r}, so no watermark would ever close its windows; {declare}"
        )


def _closed_by(entry: SourceEntry) -> str:
    """What moves the watermark that closes windows over ``entry`` (for EXPLAIN)."""
    col = f"{entry.name}.{entry.event_time}"
    parts = []
    if entry.watermark_delay_us is not None:
        delay = entry.watermark_delay_us
        parts.append(f"max {col} - {duration_text(delay)}" if delay else f"max {col}")
    elif entry.connector in MARKER_CONNECTORS:
        parts.append(f"ds.Watermark markers of {entry.name}")
    if entry.bounded:
        parts.append(f"+inf at the end of {entry.name}")
    return "watermark " + " / ".join(parts)


def _closed_by_of(rel: st.Relation, from_item: exp.Expr) -> str | None:
    """What closes the windows over ``rel``: its source's watermark, or for a derived
    table the minimum of the watermarks of the sources under it."""
    if isinstance(rel.entry, SourceEntry):
        return _closed_by(rel.entry)
    parts = [_closed_by(e) for e in derived.event_time_sources(from_item)]
    return parts[0] if len(parts) == 1 else "min(" + ", ".join(parts) + ")" if parts else None


def _closed_by_lagged(rel: st.Relation, from_item: exp.Expr, input: lp.PlanNode) -> str | None:
    """:func:`_closed_by_of`, less the lag the window's input reads its time column at."""
    base = _closed_by_of(rel, from_item)
    if base is None or not isinstance(input, lp.WatermarkLag):
        return base
    return f"{base}, less {duration_text(input.lag_us)}"


def scan(e: SourceEntry) -> lp.Scan:
    assert e.schema is not None
    idle = e.options.get("idle_timeout")
    # Connectors read the policy case-insensitively; so must the wiring of its sink.
    policy = str(e.options.get("bad_records", "fail")).lower()
    dead = e.options.get("dead_letter.sink") if policy == "dead_letter" else None
    return lp.Scan(
        e.name,
        e.schema,
        e.event_time,
        e.watermark_delay_us,
        late_output=e.late_output,
        dead_letter=dead,
        idle_timeout_s=parse_duration(idle, what="idle_timeout").total_seconds() if idle else None,
    )


# -- stateless ------------------------------------------------------------------------------


def _filtered(
    plan: lp.PlanNode, rel: st.Relation, conds: list[exp.Expr], context: str
) -> lp.PlanNode:
    """``plan`` (the rows of ``rel``) keeping the rows that pass every one of ``conds``."""
    names = [n for n in plan.schema.names if n != lp.OP_COLUMN]
    select = exp.select(*(exp.column(n, rel.alias, quoted=True) for n in names))
    select.set("where", exp.Where(this=exp.and_(*(c.copy() for c in conds))))
    return calc(plan, select, rel, context=context)


def calc(
    input: lp.PlanNode,
    select: exp.Select,
    rel: st.Relation,
    *,
    context: str,
    window: st.WindowSpec | None = None,
) -> lp.PlanNode:
    """A Calc evaluating ``select`` over ``input``, or ``input`` itself when it is a no-op."""
    body = select.copy()
    table: exp.Expr = exp.Table(this=exp.to_identifier(INPUT))
    if window is not None:
        table = window_subquery(window, table)
    table.set("alias", exp.TableAlias(this=exp.to_identifier(rel.alias, quoted=True)))
    body.set("from_", exp.From(this=table))
    if input.updating:
        body.select(exp.column(lp.OP_COLUMN, rel.alias, quoted=True), copy=False)
    if window is None and _is_identity(body, input):
        return input
    sql = body.sql(dialect=DataFusion)
    schema = infer_schema(sql, {INPUT: input.schema}, context=context, stateless=True)
    projection = _projection(body) if window is None else None
    passes = derived.passed_time_columns(body, input, window=window)
    program = None
    if window is None and projection is None:
        program = compile_select(body, rel.alias, input.schema, schema)
    return lp.Calc(input, sql, schema, projection, query=context, passes_time=passes,
                   program=program)  # fmt: skip


def _projection(select: exp.Select) -> tuple[tuple[str, str], ...] | None:
    """(input, output) column pairs when ``select`` only picks and renames columns."""
    if any(select.args.get(k) for k in ("where", "group", "having", "distinct", "order", "limit")):
        return None
    pairs = []
    for e in select.expressions:
        col = e.this if isinstance(e, exp.Alias) else e
        if not isinstance(col, exp.Column) or isinstance(col.this, exp.Star):
            return None
        pairs.append((col.name, e.alias_or_name))
    return tuple(pairs)


def _is_identity(select: exp.Select, input: lp.PlanNode) -> bool:
    if any(select.args.get(k) for k in ("where", "group", "having", "distinct", "order", "limit")):
        return False
    names = []
    for e in select.expressions:
        if not isinstance(e, exp.Column):
            return False
        names.append(e.name)
    return names == list(input.schema.names)


# -- aggregates -----------------------------------------------------------------------------


def _aggregates(select: exp.Select) -> list[exp.Expr]:
    """The outermost aggregate calls of the SELECT list and HAVING, each with its
    ``FILTER (WHERE ...)`` / ``WITHIN GROUP (ORDER BY ...)`` when it has one."""
    found: list[exp.Expr] = []
    for part in [*select.expressions, select.args.get("having")]:
        if part is None:
            continue
        for agg in part.find_all(exp.AggFunc):
            if isinstance(agg, exp.Grouping):  # a constant per grouping set
                continue
            if not any(isinstance(p, exp.AggFunc) for p in _ancestors(agg, part)):
                call: exp.Expr = agg
                while isinstance(call.parent, exp.Filter | exp.WithinGroup):
                    call = call.parent
                found.append(call)
    return found


def _refuse_unknown_aggregates(select: exp.Select) -> None:
    """A function sqlglot does not know as an aggregate (``approx_median``) would run per
    batch in a Calc: refuse it like any other aggregate streaming lacks."""
    names = aggregate_function_names()
    for part in [*select.expressions, select.args.get("having"), select.args.get("where")]:
        for fn in part.find_all(exp.Anonymous) if part is not None else []:
            if fn.name.lower() in names:
                raise PlanError(
                    f"aggregate {fn.name.lower()}() is not supported in streaming; available: "
                    f"{STREAMING_AGGREGATES}"
                )


def _ancestors(node: exp.Expr, stop: exp.Expr) -> list[exp.Expr]:
    out = []
    p = node.parent
    while p is not None and p is not stop.parent:
        out.append(p)
        p = p.parent
    return out


def plan_aggregate(
    input: lp.PlanNode, select: exp.Select, rel: st.Relation, clauses: Clauses
) -> lp.PlanNode:
    window = rel.window
    group = list(select.args["group"].expressions) if select.args.get("group") else []
    if select.args.get("distinct"):
        if group or _aggregates(select):
            raise PlanError(
                "SELECT DISTINCT with GROUP BY or aggregates is not supported; use one of them"
            )
        group = [e.unalias() if isinstance(e, exp.Alias) else e for e in select.expressions]
    group, sets = grouping_sets.expand(group)
    window_keys = [g for g in group if _is_window_column(g, rel)]
    keys = [g for g in group if not _is_window_column(g, rel)]
    if window is not None:
        _check_window_grouping(window, {c.name for c in window_keys})
        windowed = {i for i, g in enumerate(group) if _is_window_column(g, rel)}
        if any(not windowed <= s for s in sets):
            raise PlanError(
                f"a query over {window.kind}() must GROUP BY its window columns in every "
                "grouping set (GROUP BY window_start, window_end, ROLLUP(...)); to aggregate "
                "across windows, aggregate the windowed result in an outer query"
            )
    if window is None and window_keys:
        raise PlanError(
            "window_start/window_end exist only over tumble(), hop(), cumulate() or session()"
        )
    several = len(sets) > 1
    time_key = _time_key(keys, input, rel) if window is None and not several else None
    if time_key is not None:
        # GROUP BY a time column: one group per value, complete once the watermark (less
        # the column's lag) passes it, run as a window of one microsecond on that column.
        keys.remove(time_key)
        window = st.WindowSpec("tumble", time_key.name, 1)
        input = lp.lagged(input, time_key.name)

    # 1. pre-projection: keys, aggregate arguments, event time; WHERE applies here.
    pre = exp.select().from_(select.args["from_"].this.copy())
    if select.args.get("where"):
        pre.set("where", select.args["where"].copy())
    alias = rel.alias
    if window is not None:
        pre.select(
            exp.alias_(exp.column(window.time_column, alias, quoted=True), TIME, quoted=True),
            copy=False,
        )
    key_names: list[str] = []
    for i, key in enumerate(keys):
        name = f"__k{i}"
        key_names.append(name)
        pre.select(exp.alias_(key.copy(), name, quoted=True), copy=False)
    calls: list[lp.AggregateCall] = []
    call_of: dict[str, str] = {}
    order_column = None
    for agg in _aggregates(select):
        text = agg.sql()
        if text in call_of:
            continue
        func, arg, params, arg2 = _filtered_call(agg)
        if func == "python" and input.updating:
            _check_retracts(params)
        out = f"__agg{len(calls)}"
        call_of[text] = out
        arg_name = arg2_name = None
        if arg is not None:
            arg_name = f"__a{len(calls)}"
            pre.select(exp.alias_(arg.copy(), arg_name, quoted=True), copy=False)
        if arg2 is not None:
            arg2_name = f"__b{len(calls)}"
            pre.select(exp.alias_(arg2.copy(), arg2_name, quoted=True), copy=False)
        if func in ("first_value", "last_value"):
            if input.updating:
                raise PlanError(
                    f"{func}() cannot aggregate a changelog (the result of an unbounded "
                    "GROUP BY or top-N): a retracted row may be the one it picked, and what "
                    f"came before it is gone; aggregate the source rows, or use min()/max() "
                    "of the changelog's columns"
                )
            if window is None and order_column is None:
                time_col = _event_time_of(rel)
                if time_col is None:
                    raise PlanError(
                        f"{func}() is by event time: the source needs WATERMARK FOR / event_time="
                    )
                pre.select(
                    exp.alias_(exp.column(time_col, alias, quoted=True), TIME, quoted=True),
                    copy=False,
                )
            order_column = TIME
        calls.append(lp.AggregateCall(func, arg_name, out, params, arg2_name))
    pre_node = calc(input, pre, rel, context=clauses.text)
    agg_keys = key_names
    always: tuple[tuple[tuple[str, int], ...], ...] = ()
    if several:
        name_of = {g.sql(): n for g, n in zip(keys, key_names, strict=True)}
        kept = [
            frozenset(
                name_of[g.sql()] for i, g in enumerate(group) if i in s and g.sql() in name_of
            )
            for s in sets
        ]
        pre_rel = st.Relation(alias="__pre", kind="subquery", columns=list(pre_node.schema.names))
        pre_node = grouping_sets.branches(
            pre_node, key_names, kept, lambda n, s: calc(n, s, pre_rel, context=clauses.text)
        )
        agg_keys = [*key_names, grouping_sets.GID]
        if window is None:  # a set grouping by no key has its row over no rows
            always = tuple(((grouping_sets.GID, i),) for i, s in enumerate(kept) if not s)

    # 2. the aggregate, typed by asking DataFusion for the same GROUP BY over empty input.
    emit_on_close = (clauses.emit_on_close or clauses.final_windows) and window is not None
    if time_key is not None and emit_on_close:  # its final rows wait for the watermark
        from_item = select.args["from_"].this
        entries = (
            [rel.entry]
            if isinstance(rel.entry, SourceEntry)
            else derived.event_time_sources(from_item)
        )
        for entry in entries:
            _check_watermark_moves(
                entry, entry.event_time, f"GROUP BY {time_key.sql(dialect=Datum)}"
            )
    out_schema = _aggregate_schema(pre_node, agg_keys, calls, windowed=window is not None,
                                   changelog=not emit_on_close)  # fmt: skip
    agg_node = lp.Aggregate(
        pre_node,
        tuple(agg_keys),
        tuple(calls),
        out_schema,
        window=lp.WindowSpec(window.kind, TIME, window.size_us, window.slide_us, window.offset_us)
        if window
        else None,
        emit_on_close=emit_on_close,
        allowed_lateness_us=clauses.allowed_lateness_us,
        order_column=order_column,
        always_groups=always,
        closed_by=_closed_by_lagged(rel, select.args["from_"].this, input)
        if window is not None
        else None,
    )

    # 3. post-projection: the SELECT list and HAVING over the aggregate's columns.
    post = select.copy()
    post.set("where", None)
    post.set("group", None)
    post.set("distinct", None)
    replace = {k.sql(): name for k, name in zip(keys, key_names, strict=True)}
    if time_key is not None:
        replace[time_key.sql()] = "window_start"
    replace.update(call_of)
    gid = exp.column(grouping_sets.GID, "__agg", quoted=True) if several else None

    def rewrite(e: exp.Expr) -> exp.Expr:
        return _rewrite(grouping_sets.replace_grouping(e, group, sets, gid), replace, rel)

    post.set("expressions", [rewrite(e) for e in post.expressions])
    if post.args.get("having"):
        post.set("where", exp.Where(this=rewrite(post.args["having"].this)))
        post.set("having", None)
    post_rel = st.Relation(alias="__agg", kind="subquery", columns=list(out_schema.names))
    return calc(agg_node, post, post_rel, context=clauses.text)


def _time_key(keys: list[exp.Expr], input: lp.PlanNode, rel: st.Relation) -> exp.Column | None:
    """The GROUP BY key that is a column carrying event time (the least lagging of them),
    when the input is append-only and the column's values are whole microseconds."""
    if input.updating:
        return None
    lags = input.time_lags
    found = []
    for key in keys:
        if not (isinstance(key, exp.Column) and key.table in ("", rel.alias)):
            continue
        name = key.name
        if name not in lags or name not in input.schema.names:
            continue
        t = input.schema.field(name).type
        if pa.types.is_timestamp(t) and t.unit != "ns":  # type: ignore[attr-defined]
            found.append((lags[name], key))
    return min(found, key=lambda f: f[0])[1] if found else None


def _check_window_grouping(window: st.WindowSpec, grouped: set[str]) -> None:
    """A windowed GROUP BY names the window: both bounds, or the one that alone tells the
    window apart (either for tumble and hop; window_end for cumulate, whose windows share
    starts; both for session, whose windows per key may share neither)."""
    enough = {
        "tumble": ({"window_start"}, {"window_end"}),
        "hop": ({"window_start"}, {"window_end"}),
        "cumulate": ({"window_end"},),
        "session": (),
    }[window.kind]
    if grouped == set(WINDOW_COLUMNS) or grouped in enough:
        return
    which = " or ".join(["window_start, window_end", *(next(iter(e)) for e in enough)])
    why = (
        "; cumulate() windows share their window_start, so it alone does not tell them apart"
        if window.kind == "cumulate" and grouped == {"window_start"}
        else ""
    )
    raise PlanError(
        f"a query over {window.kind}() must GROUP BY {which} (plus any keys){why}; to keep "
        "the window columns without aggregating, drop GROUP BY"
    )


def _is_window_column(node: exp.Expr, rel: st.Relation) -> bool:
    return rel.window is not None and isinstance(node, exp.Column) and node.name in WINDOW_COLUMNS


def _event_time_of(rel: st.Relation) -> str | None:
    return rel.entry.event_time if isinstance(rel.entry, SourceEntry) else None


class Call(NamedTuple):
    """An aggregate call as the operator computes it: its function, the argument
    expression(s) the pre-projection computes, and its literal parameters."""

    func: str
    arg: exp.Expr | None
    params: tuple[tuple[str, float | str], ...] = ()
    #: The second argument of a two-input aggregate (:data:`TWO_INPUT_AGGREGATES`).
    arg2: exp.Expr | None = None


def _filtered_call(node: exp.Expr) -> Call:
    """An aggregate call; ``agg(x) FILTER (WHERE c)`` aggregates ``CASE WHEN c THEN x END``,
    which every aggregate but first/last_value skips when NULL, as FILTER skips the row."""
    if not isinstance(node, exp.Filter):
        return _aggregate_call(node)
    where = node.expression
    cond = where.this if isinstance(where, exp.Where) else where
    func, arg, params, arg2 = _aggregate_call(node.this)
    if func in ("first_value", "last_value"):
        raise PlanError(
            f"{func}(...) FILTER (WHERE ...) is not supported in streaming ({func} keeps NULL "
            "values, which is how the filter skips rows); filter the rows with WHERE instead"
        )
    if func == "count_star":
        func, arg = "count", exp.Literal.number(1)
    assert arg is not None

    def when(a: exp.Expr | None) -> exp.Expr | None:
        return None if a is None else exp.Case(ifs=[exp.If(this=cond.copy(), true=a.copy())])

    return Call(func, when(arg), params, when(arg2))


def _aggregate_call(agg: exp.Expr) -> Call:
    if isinstance(agg, exp.WithinGroup):
        return _within_group_call(agg)
    if isinstance(agg, exp.AnonymousAggFunc):
        return _python_call(agg)
    name = type(agg).__name__
    func = AGGREGATES.get(name)
    if func is None or not isinstance(agg, exp.AggFunc):
        sql_name = agg.sql_name() if isinstance(agg, exp.Func) else name
        raise PlanError(
            f"aggregate {sql_name.lower()}() is not supported in streaming; available: "
            f"{STREAMING_AGGREGATES}"
        )
    arg = agg.this
    params: tuple[tuple[str, float | str], ...] = (("q", 0.5),) if name == "Median" else ()
    if func in ORDERED_AGGREGATES:
        return _ordered_call(agg, func)
    if func in TWO_INPUT_AGGREGATES:
        return _two_input_call(agg, func)
    if name == "ApproxQuantile":
        q = agg.args.get("quantile")
        if not isinstance(q, exp.Literal):
            raise PlanError("approx_percentile(col, q) needs a literal q between 0 and 1")
        params = (("q", float(q.this)),)
    if isinstance(arg, exp.Distinct):  # of one argument (plan/distinct.py refuses more)
        return Call(DISTINCT_AGGREGATES[func], arg.expressions[0], params)
    if isinstance(arg, exp.Order):  # first_value(x ORDER BY t)
        raise PlanError(f"{func}() orders by event time; write {func}(col) without ORDER BY")
    if func == "count" and (arg is None or isinstance(arg, exp.Star)):
        return Call("count_star", None, params)
    return Call(func, arg, params)


def _two_input_call(agg: exp.Expr, func: str) -> Call:
    """``f(y, x)``: the operator reads both columns (y the first argument, as in SQL)."""
    y, x = agg.this, agg.args.get("expression")
    if y is None or x is None:  # (with DISTINCT: refused by plan/distinct.py)
        raise PlanError(f"{func}() takes two arguments, as in {func}(y, x)")
    return Call(func, y, (), x)


def _python_call(agg: exp.AnonymousAggFunc) -> Call:
    """A registered Python aggregate: the operator reads one struct column holding the
    arguments (``{a0: x, a1: y, ...}``); ``FILTER`` makes it NULL for the rows it skips."""
    name = agg.name.lower()
    args = list(agg.expressions)
    if any(isinstance(a, exp.Distinct | exp.Order) for a in args):
        raise PlanError(
            f"{name}(DISTINCT ...) and {name}(... ORDER BY ...) are not supported for Python "
            f"aggregate functions; deduplicate in a subquery, or write {name}(args)"
        )
    fields: list[exp.Expr] = []
    for i, a in enumerate(args):
        fields += [exp.Literal.string(f"a{i}"), a.copy()]
    return Call(
        "python", exp.Anonymous(this="named_struct", expressions=fields), (("function", name),)
    )


def _check_retracts(params: tuple[tuple[str, float | str], ...]) -> None:
    """A Python aggregate over a changelog needs ``retract``."""
    name = str(dict(params)["function"])
    udaf = udafs.registered().get(name)
    if udaf is not None and not udaf.retracts:
        raise PlanError(
            f"aggregate function {name}() reads a changelog (the result of an unbounded GROUP "
            "BY, a top-N, ...), whose retractions take rows back out, but it has no "
            f"retract(state, *args) method; add one to {type(udaf.impl).__name__}, or "
            "aggregate the source rows"
        )


def _ordered_call(agg: exp.Expr, func: str) -> Call:
    """``array_agg(x ORDER BY k...)`` / ``string_agg(x, sep ORDER BY k...)``: the operator
    reads one struct column ``{v: x, o0: k0, ...}`` and the direction and NULL placement of
    each key from the params (see ``agg_ordered``). A call with neither ORDER BY nor
    DISTINCT was refused by the type check, in both paths (plan/list_order.py)."""
    arg = agg.this
    shape = (
        "array_agg(x ORDER BY col)" if func == "array_agg" else ("string_agg(x, ',' ORDER BY col)")
    )
    if isinstance(arg, exp.Distinct) or (
        isinstance(arg, exp.Order) and isinstance(arg.this, exp.Distinct)
    ):
        return _distinct_list_call(agg, func)
    assert isinstance(arg, exp.Order), "list_order.refuse lets no unordered list through"
    params: list[tuple[str, float | str]] = []
    fields: list[exp.Expr] = [exp.Literal.string("v"), arg.this.copy()]
    for j, key in enumerate(arg.expressions):
        desc = bool(key.args.get("desc"))
        nulls_first = key.args.get("nulls_first")
        if nulls_first is None:  # PostgreSQL's default: NULLs are larger than any value
            nulls_first = desc
        params += [(f"desc{j}", float(desc)), (f"nulls_first{j}", float(bool(nulls_first)))]
        fields += [exp.Literal.string(f"o{j}"), key.this.copy()]
    if func == "string_agg":
        sep = agg.args.get("separator")
        if not isinstance(sep, exp.Literal) or not sep.is_string:
            raise PlanError(f"string_agg() needs a text literal separator, as in {shape}")
        params.append(("separator", sep.this))
    return Call(func, exp.Anonymous(this="named_struct", expressions=fields), tuple(params))


def _distinct_list_call(agg: exp.Expr, func: str) -> Call:
    """``array_agg(DISTINCT x [ORDER BY x ...])`` / ``string_agg(DISTINCT x, sep [ORDER BY
    x ...])``: the distinct values in value order, ascending without ORDER BY, the first
    key's direction and NULL placement with (plan/distinct.py refuses other keys). array_agg
    reads ``{v: x}``, which a FILTER makes NULL, to tell a skipped row from a NULL value
    (see ``agg_distinct_lists``)."""
    arg = agg.this
    keys = arg.expressions if isinstance(arg, exp.Order) else []
    value = (arg.this if isinstance(arg, exp.Order) else arg).expressions[0]
    desc = bool(keys and keys[0].args.get("desc"))
    nulls_first = keys[0].args.get("nulls_first") if keys else None
    params: list[tuple[str, float | str]] = [
        ("desc", float(desc)),
        ("nulls_first", float(desc if nulls_first is None else bool(nulls_first))),
    ]
    if func == "string_agg":
        sep = agg.args.get("separator")
        if not isinstance(sep, exp.Literal) or not sep.is_string:
            raise PlanError(
                "string_agg() needs a text literal separator, as in string_agg(DISTINCT x, ',')"
            )
        return Call("string_agg_distinct", value, (*params, ("separator", sep.this)))
    struct = exp.Anonymous(this="named_struct", expressions=[exp.Literal.string("v"), value.copy()])
    return Call("array_agg_distinct", struct, tuple(params))


def _within_group_call(node: exp.WithinGroup) -> Call:
    """``percentile_cont(q) WITHIN GROUP (ORDER BY col)``: approx_percentile(col, q)."""
    inner = node.this
    if not isinstance(inner, exp.PercentileCont):
        raise PlanError(
            f"{inner.sql(dialect=Datum, normalize_functions='lower')} WITHIN GROUP (...) is "
            "not supported in streaming; "
            "percentile_cont(q) WITHIN GROUP (ORDER BY col) is, as is approx_percentile(col, q)"
        )
    arg, q = gathered.within_group(node)
    return Call("approx_percentile", arg, (("q", q),))


def _aggregate_schema(
    pre: lp.PlanNode,
    keys: list[str],
    calls: list[lp.AggregateCall],
    *,
    windowed: bool,
    changelog: bool,
) -> pa.Schema:
    """The aggregate's output schema, typed as DataFusion types the same GROUP BY."""
    exprs = []
    for c in calls:
        arg = f'"{c.input}"' if c.input else "*"
        expr = {
            "count_star": "count(*)",
            "count_distinct": f"count(DISTINCT {arg})",
            "first_value": f'first_value({arg} ORDER BY "{TIME}")',
            "last_value": f'last_value({arg} ORDER BY "{TIME}")',
            "approx_percentile": f"CAST(percentile_cont({arg}, 0.5) AS DOUBLE)",
            "approx_percentile_distinct": f"CAST(percentile_cont({arg}, 0.5) AS DOUBLE)",
            "array_agg": f"array_agg({arg}['v'])",
            "string_agg": f"string_agg({arg}['v'], ',')",
            # typed as ctx.sql computes them (plan/gathered.py)
            "array_agg_distinct": f"array_sort(array_agg(DISTINCT {arg}['v']))",
            "string_agg_distinct": f"array_to_string(array_agg(DISTINCT {arg}), ',')",
        }.get(c.func)
        if expr is None and c.func.endswith("_distinct"):
            expr = f"{c.func.removesuffix('_distinct')}(DISTINCT {arg})"
        if expr is None:
            expr = f"{c.func}({arg})"
        if c.input2 is not None:
            expr = f'{c.func}({arg}, "{c.input2}")'
        if c.func == "python":  # the arguments, as the struct column holds them
            n = pre.schema.field(c.input).type.num_fields
            fields = ", ".join(f"{arg}['a{i}']" for i in range(n))
            expr = f"{dict(c.params)['function']}({fields})"
        exprs.append(f'{expr} AS "{c.output}"')
    group = [f'"{k}"' for k in keys]
    if windowed:
        exprs = [f'"{TIME}" AS window_start', f'"{TIME}" AS window_end', *group, *exprs]
        group = [f'"{TIME}"', *group]
    else:
        exprs = [*group, *exprs]
    group_by = f" GROUP BY {', '.join(group)}" if group else ""
    schema = infer_schema(
        f"SELECT {', '.join(exprs)} FROM {INPUT}{group_by}",
        {INPUT: pre.schema},
        context="aggregate",
    )
    # An aggregate over no non-NULL value is NULL in a group's first rows, whatever DataFusion says.
    out = pa.schema([f.with_nullable(True) if f.name.startswith("__agg") else f for f in schema])
    return out.append(pa.field(lp.OP_COLUMN, pa.string(), False)) if changelog else out


def _rewrite(node: exp.Expr, replace: dict[str, str], rel: st.Relation) -> exp.Expr:
    """Replace group keys and aggregates by the aggregate's output columns."""

    def swap(n: exp.Expr) -> exp.Expr:
        text = n.sql()
        if text in replace and (isinstance(n, exp.AggFunc) or not isinstance(n, exp.Alias)):
            return exp.column(replace[text], "__agg", quoted=True)
        if isinstance(n, exp.Column) and n.name in WINDOW_COLUMNS and rel.window is not None:
            return exp.column(n.name, "__agg", quoted=True)
        if isinstance(n, exp.Column) and n.table == rel.alias:
            raise PlanError(
                f"column {n.sql(dialect=Datum)} must appear in GROUP BY or be used in an aggregate"
            )
        return n

    out = node.copy().transform(swap)
    if (
        not isinstance(node, exp.Alias)
        and isinstance(node, exp.Column | exp.AggFunc)
        and not isinstance(out, exp.Alias)
    ):
        out = exp.alias_(
            out,
            node.alias_or_name
            if isinstance(node, exp.Column)
            else node.sql(dialect="postgres").lower(),
            quoted=True,
        )
    return out


# -- helpers --------------------------------------------------------------------------------


def _closes_windows(node: lp.PlanNode) -> bool:
    """A step that emits each window's final rows when it closes."""
    if isinstance(node, lp.TopN):
        return node.window_end is not None
    return isinstance(node, lp.Aggregate) and node.window is not None


def _walk(node: lp.PlanNode) -> list[lp.PlanNode]:
    out = [node]
    for c in node.children:
        out.extend(_walk(c))
    return out


def _with_late_output(node: lp.PlanNode, sink: str) -> lp.PlanNode:
    """The same plan with every event-time scan routing its late rows to ``sink``."""
    if isinstance(node, lp.Scan):
        if node.event_time is None:
            return node
        return dataclasses.replace(node, late_output=sink)
    changes = {
        f.name: _with_late_output(getattr(node, f.name), sink)
        for f in dataclasses.fields(node)
        if isinstance(getattr(node, f.name), lp.PlanNode)
    }
    return dataclasses.replace(node, **changes) if changes else node


def _refuse_unsupported(
    select: exp.Select, *, where_subqueries: bool = True, over_list: bool = False
) -> None:
    """Refuse what no streaming SELECT runs; ``over_list``: window functions in its
    SELECT list are planned as over-window aggregates (elsewhere they stay refused)."""
    subqueries.refuse_outside_where(select, where=where_subqueries)
    _refuse_unknown_aggregates(select)
    topn.refuse_window_functions(select, select_list=not over_list)
    if select.args.get("order"):
        raise PlanError(
            "ORDER BY cannot run on an unbounded stream: results come out in arrival order. "
            "Sort the final result with ctx.sql() or q.to_arrow() instead"
        )
    if select.args.get("limit") or select.args.get("offset"):
        raise PlanError(
            "LIMIT/OFFSET are not supported in streaming queries; use ctx.sql() to peek"
        )
