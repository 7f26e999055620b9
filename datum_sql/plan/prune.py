"""Which columns of each source a query reads: scans narrowed to them, so sources that can
produce only those columns (generators, Parquet files) skip the others.

A scan is narrowed only when every node reading it is a :class:`~datum_sql.plan.logical.Calc`
(the planner puts one in front of aggregates, windows and most joins): a Calc names its
inputs, in its projection or as column references in its SQL. Any other reader (a join, a
top-N, the result itself) or a ``*`` keeps every column, as does a source with a
``late_output`` sink (late rows go there whole). The event-time column always stays: the
watermark is computed from it. Several scans of one table share one source, so its columns
are the union of what each reads.
"""

from __future__ import annotations

import dataclasses

import pyarrow as pa
import sqlglot
from sqlglot import exp

from datum_sql.plan import logical as lp
from datum_sql.plan.engines import DataFusion


def prune_scans(plan: lp.LogicalPlan) -> lp.LogicalPlan:
    """``plan`` with every narrowable scan's schema cut to the columns its readers use."""
    wanted: dict[str, set[str] | None] = {}
    for parent in _walk(plan.root):
        for child in parent.children:
            if isinstance(child, lp.Scan):
                _want(wanted, child, _read_by(parent, child.schema))
    narrowed: dict[str, pa.Schema] = {}
    for scan in (n for n in _walk(plan.root) if isinstance(n, lp.Scan)):
        columns = wanted.get(scan.table)
        if columns is None or scan.late_output:
            continue
        if scan.event_time:
            columns.add(scan.event_time)
        schema = pa.schema([f for f in scan.source_schema if f.name in columns])
        if len(schema) < len(scan.source_schema):
            narrowed[scan.table] = schema
    if not narrowed:
        return plan
    root = _rewrite(plan.root, narrowed, {})
    return dataclasses.replace(plan, root=root)


def _want(wanted: dict[str, set[str] | None], scan: lp.Scan, columns: set[str] | None) -> None:
    if scan.table in wanted and wanted[scan.table] is None:
        return
    if columns is None:
        wanted[scan.table] = None
    else:
        wanted.setdefault(scan.table, set()).update(columns)  # type: ignore[union-attr]


def _read_by(parent: lp.PlanNode, schema: pa.Schema) -> set[str] | None:
    """The columns of ``schema`` that ``parent`` reads (None: all, or it cannot tell)."""
    if not isinstance(parent, lp.Calc):
        return None
    if parent.projection is not None:
        return {source for source, _ in parent.projection}
    try:
        tree = sqlglot.parse_one(parent.sql, dialect=DataFusion)
    except sqlglot.errors.ParseError:
        return None
    if any(True for _ in tree.find_all(exp.Star)):
        return None
    referenced = {c.name.lower() for c in tree.find_all(exp.Column)}
    # by name, ignoring case: reading one column too many is harmless, one too few is not
    return {name for name in schema.names if name.lower() in referenced}


def _walk(node: lp.PlanNode) -> list[lp.PlanNode]:
    out, todo = [], [node]
    while todo:
        n = todo.pop()
        out.append(n)
        todo.extend(n.children)
    return out


def _rewrite(
    node: lp.PlanNode, narrowed: dict[str, pa.Schema], done: dict[int, lp.PlanNode]
) -> lp.PlanNode:
    if id(node) in done:
        return done[id(node)]
    if isinstance(node, lp.Scan):
        schema = narrowed.get(node.table)
        new: lp.PlanNode = (
            node if schema is None else dataclasses.replace(node, source_schema=schema)
        )
    else:
        changes: dict[str, object] = {}
        for f in dataclasses.fields(node):
            value = getattr(node, f.name)
            if isinstance(value, lp.PlanNode):
                changes[f.name] = _rewrite(value, narrowed, done)
            elif (
                isinstance(value, tuple)
                and value
                and all(isinstance(v, lp.PlanNode) for v in value)
            ):
                changes[f.name] = tuple(_rewrite(v, narrowed, done) for v in value)
        changed = any(_differs(changes[k], getattr(node, k)) for k in changes)
        new = dataclasses.replace(node, **changes) if changed else node
    done[id(node)] = new
    return new


def _differs(new: object, old: object) -> bool:
    if isinstance(new, tuple) and isinstance(old, tuple):
        return any(a is not b for a, b in zip(new, old))
    return new is not old
