"""Columns nobody reads, cut from the plan: every join receives, holds and emits only the
columns that what follows it, its keys, its time columns and its residual ON filter read,
and sources that can produce only some columns (generators, Parquet files) skip the rest.

One pass from the root down works out which output columns of each node are read
(``_Needs``): the root reads everything; a :class:`~datum_sql.plan.logical.Calc` reads the
columns its projection or SQL names; a join reads its keys, its time columns (and an
interval join's per-row end) and the input columns of the outputs it keeps. Nodes that
pass their input's columns through (a watermark lag, an event-time sort, a subquery join)
hand the need down, adding their own keys and time column. Every other node (aggregates,
top-N, OVER, UNION ALL) reads all of its input: those keep their plans as built.

Then, from the leaves up, nodes drop the outputs nobody reads: a join its columns, a Calc
the SELECT items (when its SELECT is a plain list over ``input``; its compiled program
loses the same items), a scan the columns of its source. What always stays: a source's
event-time column (the watermark is computed from it), a changelog's ``_op``, every column
of a source with a ``late_output`` sink (late rows go there whole), and at least one column
of every node (a batch of no columns would lose its row count). Several scans of one table
share one source, so its columns are the union of what each reads.
"""

from __future__ import annotations

import dataclasses

import pyarrow as pa
import sqlglot
from sqlglot import exp

from datum_sql.engine.expressions import Program
from datum_sql.plan import logical as lp
from datum_sql.plan.engines import DataFusion

#: None: every column (the node cannot tell, or its reader reads them all).
Need = set[str] | None


def prune_columns(plan: lp.LogicalPlan) -> lp.LogicalPlan:
    """``plan`` with the columns nobody reads cut from its joins, Calcs and scans."""
    needs = _needs(plan.root)
    tables: dict[str, Need] = {}
    for node in _unique(plan.root):
        if isinstance(node, lp.Scan):
            _merge(tables, node.table, needs[id(node)])
    root = _Rewrite(needs, tables).node(plan.root)
    return plan if root is plan.root else dataclasses.replace(plan, root=root)


# -- what each node's readers read ----------------------------------------------------


def _needs(root: lp.PlanNode) -> dict[int, Need]:
    """The output columns of each node (by ``id``) that its readers read."""
    needs: dict[int, Need] = {id(root): None}
    for node in _parents_first(root):
        for child, need in _child_needs(node, needs.get(id(node))):
            if need is not None and lp.OP_COLUMN in child.schema.names:
                need = need | {lp.OP_COLUMN}
            _merge(needs, id(child), need)
    return needs


def _merge(needs: dict, key: object, need: Need) -> None:
    if key in needs and needs[key] is None:
        return
    if need is None:
        needs[key] = None
    else:
        needs[key] = needs.get(key, set()) | need


def _child_needs(node: lp.PlanNode, need: Need) -> list[tuple[lp.PlanNode, Need]]:
    if isinstance(node, lp.Calc):
        return [(node.input, _calc_reads(_narrow_calc(node, need)))]
    if isinstance(node, lp.Join):
        left, right = _join_columns(node, need)
        return [
            (node.left, _side_reads(node, "left", left)),
            (node.right, _side_reads(node, "right", right)),
        ]
    if isinstance(node, lp.WatermarkLag):
        return [(node.input, need)]
    if isinstance(node, lp.EventTimeSort):
        return [(node.input, None if need is None else need | {node.time_column})]
    if isinstance(node, lp.SubqueryJoin):
        return [(node.input, _subquery_reads(node, need)), (node.table, _table_reads(node))]
    return [(c, None) for c in node.children]


def _calc_reads(calc: lp.Calc) -> Need:
    """The input columns ``calc`` reads (None: all of them, or it cannot tell)."""
    if calc.projection is not None:
        return {source for source, _ in calc.projection}
    tree = _parse(calc.sql)
    if tree is None or any(True for _ in tree.find_all(exp.Star)):
        return None
    referenced = {c.name.lower() for c in tree.find_all(exp.Column)}
    # by name, ignoring case: reading one column too many is harmless, one too few is not
    return {name for name in calc.input.schema.names if name.lower() in referenced}


def _join_columns(
    join: lp.Join, need: Need
) -> tuple[tuple[tuple[str, str], ...], tuple[tuple[str, str], ...]]:
    """The (input, output) column pairs of each side that the join keeps emitting."""
    if need is None:
        return join.left_columns, join.right_columns
    wanted = need | set(join.residual_columns)
    left = tuple(p for p in join.left_columns if p[1] in wanted)
    right = tuple(p for p in join.right_columns if p[1] in wanted)
    if not left and not right:  # one column keeps the row count
        left = join.left_columns[:1]
        right = () if left else join.right_columns[:1]
    return left, right


def _side_reads(join: lp.Join, side: str, columns: tuple[tuple[str, str], ...]) -> Need:
    keys = join.left_keys if side == "left" else join.right_keys
    time = join.left_time if side == "left" else join.right_time
    reads = {*keys, *(c for c, _ in columns)}
    if join.kind != "lookup" and time:
        reads.add(time)
    if join.time_options.get("end_side") == side:
        reads.add(join.time_options["end_column"])
    return reads


def _subquery_reads(node: lp.SubqueryJoin, need: Need) -> Need:
    if need is None:
        return None
    residual = node.residual.left if node.residual is not None else ()
    return (need - {node.column}) | set(node.input_keys) | set(residual)


def _table_reads(node: lp.SubqueryJoin) -> Need:
    if node.mode == "scalar":  # its value is the table's first column
        return None
    residual = node.residual.right if node.residual is not None else ()
    return set(node.table_keys) | set(residual)


# -- nodes narrowed to what is read -----------------------------------------------------


class _Rewrite:
    def __init__(self, needs: dict[int, Need], tables: dict[str, Need]) -> None:
        self.needs = needs
        self.tables = tables
        self.done: dict[int, lp.PlanNode] = {}

    def node(self, node: lp.PlanNode) -> lp.PlanNode:
        if id(node) not in self.done:
            need = self.needs.get(id(node))
            self.done[id(node)] = self._narrowed(self._with_children(node), need)
        return self.done[id(node)]

    def _with_children(self, node: lp.PlanNode) -> lp.PlanNode:
        changes: dict[str, object] = {}
        for f in dataclasses.fields(node):
            value = getattr(node, f.name)
            if isinstance(value, lp.PlanNode):
                new = self.node(value)
                if new is not value:
                    changes[f.name] = new
            elif (
                isinstance(value, tuple)
                and value
                and all(isinstance(v, lp.PlanNode) for v in value)
            ):
                news = tuple(self.node(v) for v in value)
                if any(a is not b for a, b in zip(news, value)):
                    changes[f.name] = news
        return dataclasses.replace(node, **changes) if changes else node  # type: ignore[arg-type]

    def _narrowed(self, node: lp.PlanNode, need: Need) -> lp.PlanNode:
        if isinstance(node, lp.Scan):
            return _narrow_scan(node, self.tables.get(node.table))
        if isinstance(node, lp.Calc):
            return _narrow_calc(node, need)
        if isinstance(node, lp.Join):
            return _narrow_join(node, need)
        if isinstance(node, lp.SubqueryJoin):
            return _subquery_schema(node)
        return node


def _narrow_scan(scan: lp.Scan, need: Need) -> lp.Scan:
    if need is None or scan.late_output:
        return scan
    columns = set(need)
    if scan.event_time:
        columns.add(scan.event_time)
    fields = [f for f in scan.source_schema if f.name in columns]
    if not fields:  # a batch of no columns would lose its row count
        fields = [_cheapest(scan.source_schema)]
    if len(fields) == len(scan.source_schema):
        return scan
    return dataclasses.replace(scan, source_schema=pa.schema(fields))


def _cheapest(schema: pa.Schema) -> pa.Field:
    """The column cheapest to produce: the first fixed-width one, else the first."""
    return next((f for f in schema if _fixed_width(f.type)), schema.field(0))


def _fixed_width(t: pa.DataType) -> bool:
    try:
        return t.bit_width > 0
    except ValueError:
        return False


def _narrow_join(join: lp.Join, need: Need) -> lp.Join:
    left, right = _join_columns(join, need)
    if left == join.left_columns and right == join.right_columns:
        return join
    kept = {o for _, o in left} | {o for _, o in right}
    schema = pa.schema([f for f in join.out_schema if f.name in kept])
    return dataclasses.replace(join, left_columns=left, right_columns=right, out_schema=schema)


def _subquery_schema(node: lp.SubqueryJoin) -> lp.SubqueryJoin:
    """``node`` with its output the (perhaps narrowed) input's columns plus its mark."""
    schema = node.input.schema
    mark = node.out_schema.field(node.column)
    if lp.OP_COLUMN in schema.names:  # a changelog's _op stays last
        schema = schema.insert(schema.get_field_index(lp.OP_COLUMN), mark)
    else:
        schema = schema.append(mark)
    return node if schema.equals(node.out_schema) else dataclasses.replace(node, out_schema=schema)


def _narrow_calc(calc: lp.Calc, need: Need) -> lp.Calc:
    """``calc`` computing only the outputs in ``need`` (and ``_op``), when its SELECT is a
    plain list of items over ``input``; else ``calc`` itself."""
    if need is None:
        return calc
    names = calc.out_schema.names
    kept = [i for i, n in enumerate(names) if n in need or n == lp.OP_COLUMN]
    if len(kept) == len(names):
        return calc
    select = _plain_select(calc)
    if select is None:
        return calc
    if not kept:  # a batch of no columns would lose its row count
        kept = [0]
    items = select.expressions
    select.set("expressions", [items[i] for i in kept])
    schema = pa.schema([calc.out_schema.field(i) for i in kept])
    projection = None
    if calc.projection is not None:
        projection = tuple(calc.projection[i] for i in kept)
    program = None
    if calc.program is not None:
        p = calc.program
        program = Program(p.where, tuple(p.columns[i] for i in kept), schema)
    return dataclasses.replace(
        calc,
        sql=select.sql(dialect=DataFusion),
        out_schema=schema,
        projection=projection,
        program=program,
        passes_time=tuple((c, lag) for c, lag in calc.passes_time if c in schema.names),
    )


def _plain_select(calc: lp.Calc) -> exp.Select | None:
    """The Calc's SELECT when each of its items is one output column, computed from the
    row alone (no star, aggregate, window function, unnest, DISTINCT, ...), reading the
    table ``input`` itself (not a window over it)."""
    select = _parse(calc.sql)
    if not isinstance(select, exp.Select):
        return None
    if any(select.args.get(k) for k in ("group", "having", "distinct", "order", "limit", "joins")):
        return None
    source = select.args.get("from_")
    if source is None or not isinstance(source.this, exp.Table) or source.this.name != "input":
        return None
    alias = source.this.alias_or_name
    items: list[exp.Expr] = []
    for e in select.expressions:
        if _bare_star(e):  # spelled out: each input column is an item of its own
            items += [exp.column(n, alias, quoted=True) for n in calc.input.schema.names]
        elif e.find(exp.Star, exp.AggFunc, exp.Window, exp.Unnest, exp.Explode, exp.Select):
            return None
        else:
            items.append(e)
    if [e.alias_or_name for e in items] != list(calc.out_schema.names):
        return None
    if calc.program is not None and len(calc.program.columns) != len(items):
        return None
    select.set("expressions", items)
    return select


def _bare_star(e: exp.Expr) -> bool:
    """``*`` or ``alias.*`` without EXCLUDE / REPLACE / RENAME."""
    star = e.this if isinstance(e, exp.Column) else e
    return isinstance(star, exp.Star) and not any(star.args.values())


def _parse(sql: str) -> exp.Expr | None:
    try:
        return sqlglot.parse_one(sql, dialect=DataFusion)
    except sqlglot.errors.ParseError:
        return None


# -- walking the plan -----------------------------------------------------------------


def _unique(root: lp.PlanNode) -> list[lp.PlanNode]:
    out, seen, todo = [], set(), [root]
    while todo:
        n = todo.pop()
        if id(n) in seen:
            continue
        seen.add(id(n))
        out.append(n)
        todo.extend(n.children)
    return out


def _parents_first(root: lp.PlanNode) -> list[lp.PlanNode]:
    """Every node once, each after all the nodes that read it (a reversed post-order)."""
    order: list[lp.PlanNode] = []
    seen: set[int] = set()
    stack: list[tuple[lp.PlanNode, bool]] = [(root, False)]
    while stack:
        node, expanded = stack.pop()
        if expanded:
            order.append(node)
            continue
        if id(node) in seen:
            continue
        seen.add(id(node))
        stack.append((node, True))
        stack.extend((c, False) for c in node.children)
    return order[::-1]
