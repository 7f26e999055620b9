"""Bound query AST → logical plan.

Each SELECT becomes: its FROM input (a scan, a window, a join, a subquery's plan), then
what the SELECT does to it. Stateless SELECTs compile to one :class:`Calc` whose SQL
DataFusion evaluates on every batch.
"""

from __future__ import annotations

import dataclasses

from sqlglot import exp

from datum_sql.catalog import SourceEntry
from datum_sql.errors import PlanError
from datum_sql.plan import logical as lp
from datum_sql.plan.infer import infer_schema
from datum_sql.sql import statements as st
from datum_sql.types import parse_duration

#: The SQL dialect DataFusion understands best among sqlglot's generators.
DATAFUSION_DIALECT = "postgres"
INPUT = "input"


def build(query: st.Query) -> lp.LogicalPlan:
    """The logical plan of a bound query, rooted at a sink write or a collect."""
    body = plan_query(query.ast)
    if query.late_output:
        body = _with_late_output(body, query.late_output)
    root: lp.PlanNode = lp.SinkWrite(body, query.sink.name) if query.sink else lp.Collect(body)
    settings = {
        "allowed_lateness_us": query.allowed_lateness_us,
        "late_output": query.late_output,
        "emit_on_window_close": query.emit_on_window_close,
    }
    return lp.LogicalPlan(root, settings)


def plan_query(node: exp.Expression) -> lp.PlanNode:
    if isinstance(node, exp.Subquery):
        return plan_query(node.this)
    if isinstance(node, exp.Select):
        return plan_select(node)
    raise PlanError(
        f"{node.key.upper()} is not supported in a streaming query yet; "
        "run it as a batch query with ctx.sql()"
    )


def plan_select(select: exp.Select) -> lp.PlanNode:
    _refuse_unsupported(select)
    from_ = select.args.get("from_")
    if from_ is None:
        raise PlanError("a streaming query needs a FROM clause naming a source")
    source = plan_relation(from_.this)
    return calc(source, select, from_.this)


def plan_relation(node: exp.Expression) -> lp.PlanNode:
    rel: st.Relation | None = node.meta.get("relation")
    if rel is None:
        raise PlanError(f"internal: FROM item {node.sql()} was not bound")
    if rel.kind == "subquery":
        return plan_query(node.this)
    if rel.window is not None:
        raise PlanError(f"{rel.window.kind}() windows need GROUP BY window_start, window_end")
    if rel.kind == "source" and isinstance(rel.entry, SourceEntry):
        return scan(rel.entry)
    raise PlanError(
        f"{rel.kind} {rel.alias!r} cannot be read by a streaming query; "
        "query it in batch with ctx.sql()"
    )


def scan(e: SourceEntry) -> lp.Scan:
    assert e.schema is not None
    idle = e.options.get("idle_timeout")
    dead = e.options.get("dead_letter.sink") if e.options.get("bad_records") == "dead_letter" else None
    return lp.Scan(
        e.name,
        e.schema,
        e.event_time,
        e.watermark_delay_us,
        late_output=e.late_output,
        dead_letter=dead,
        idle_timeout_s=parse_duration(idle, what="idle_timeout").total_seconds() if idle else None,
    )


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


def calc(input: lp.PlanNode, select: exp.Select, relation: exp.Expression) -> lp.PlanNode:
    """A Calc evaluating ``select`` over ``input``, or ``input`` itself when it is a no-op."""
    alias = relation.meta["relation"].alias
    body = select.copy()
    body.set(
        "from_",
        exp.From(this=exp.Table(this=exp.to_identifier(INPUT), alias=exp.TableAlias(this=exp.to_identifier(alias, quoted=True)))),
    )
    if _is_identity(body, input):
        return input
    sql = body.sql(dialect=DATAFUSION_DIALECT)
    schema = infer_schema(sql, {INPUT: input.schema}, context=select.sql(dialect="risingwave"))
    return lp.Calc(input, sql, schema)


def _is_identity(select: exp.Select, input: lp.PlanNode) -> bool:
    if any(select.args.get(k) for k in ("where", "group", "having", "distinct", "order", "limit")):
        return False
    names = []
    for e in select.expressions:
        if not isinstance(e, exp.Column):
            return False
        names.append(e.name)
    return names == list(input.schema.names)


def _refuse_unsupported(select: exp.Select) -> None:
    if select.args.get("joins"):
        raise PlanError("joins are not supported in streaming queries yet")
    if select.args.get("group") or select.find(exp.AggFunc) or select.args.get("distinct"):
        raise PlanError("aggregates are not supported in streaming queries yet")
    if select.find(exp.Window):
        raise PlanError("OVER (...) window functions are not supported in streaming queries")
    if select.args.get("order"):
        raise PlanError(
            "ORDER BY cannot run on an unbounded stream: results come out in arrival order. "
            "Sort the final result with ctx.sql() or q.to_arrow() instead"
        )
    if select.args.get("limit") or select.args.get("offset"):
        raise PlanError("LIMIT/OFFSET are not supported in streaming queries; use ctx.sql() to peek")
