"""Logical plan → job graph: one job-graph node per plan node, ids in creation order."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import pyarrow as pa
import sqlglot
from sqlglot import exp

from datum_sql.engine.jobgraph import REJECTED_SCHEMA, JobGraph, Node
from datum_sql.errors import PlanError
from datum_sql.plan import lateral
from datum_sql.plan import logical as lp
from datum_sql.plan.engines import DataFusion
from datum_sql.plan.result_keys import COLLECT, number_result_keys
from datum_sql.plan.share import share_equal_operators


class _Lowering:
    def __init__(self) -> None:
        self.nodes: list[Node] = []
        self.scans: dict[str, str] = {}
        #: The node id of each plan node already lowered (by object): a plan node that
        #: feeds several consumers (a grouping set's copies of one input) runs once.
        self.lowered: dict[int, str] = {}

    def add(self, prefix: str, **kw: Any) -> str:
        node_id = f"{prefix}_{len(self.nodes)}"
        self.nodes.append(Node(id=node_id, **kw))
        return node_id

    def keys_of(self, node_id: str) -> tuple[tuple[str, ...], ...]:
        return next(n.upsert_keys for n in self.nodes if n.id == node_id)

    def lower(self, node: lp.PlanNode) -> str:
        method: Callable[[Any], str] | None = getattr(self, f"lower_{type(node).__name__}", None)
        if method is None:
            raise PlanError(f"no lowering for plan node {type(node).__name__}")
        if id(node) not in self.lowered:
            self.lowered[id(node)] = method(node)
        return self.lowered[id(node)]

    def lower_reread(self, node: lp.PlanNode) -> str:
        """Lower a side read again from its start on every (re)start (a lookup join's
        table, a subquery's): it gets source nodes of its own, never shared with a stream
        of the same table, whose position is restored (a shared one would either re-read
        the stream or leave the table short after a restart)."""
        scans, self.scans = self.scans, {}
        lowered, self.lowered = self.lowered, {}
        try:
            return self.lower(node)
        finally:
            self.scans, self.lowered = scans, lowered

    def lower_Scan(self, node: lp.Scan) -> str:
        # One source node per table, shared by every stream scan of it (a self-join or a
        # union with itself reads once); a re-read side has its own (lower_reread).
        if node.table in self.scans:
            return self.scans[node.table]
        nid = self.add(
            "source",
            role="source",
            kind=node.table,
            config={
                "event_time": node.event_time,
                "watermark_delay_us": node.watermark_delay_us,
                "idle_timeout_s": node.idle_timeout_s,
            },
            schema=node.schema,
        )
        self.scans[node.table] = nid
        if node.late_output:
            late_schema = node.schema
            time_type = (
                node.schema.field(node.event_time).type if node.event_time else pa.timestamp("us")
            )
            for name, t in (
                ("_late_reason", pa.string()),
                ("_late_watermark", time_type),
                ("_late_source", pa.string()),
            ):
                late_schema = late_schema.append(pa.field(name, t))
            self.add("late", role="sink", kind=node.late_output, inputs=(nid,), schema=late_schema,
                     config={"side": "late", "of": nid})  # fmt: skip
        if node.dead_letter:
            self.add("dead_letter", role="sink", kind=node.dead_letter, inputs=(nid,), schema=REJECTED_SCHEMA,
                     config={"side": "dead_letter", "of": nid})  # fmt: skip
        return nid

    def lower_Calc(self, node: lp.Calc) -> str:
        up = self.lower(node.input)
        keys = _renamed_keys(self.keys_of(up), node)
        if node.projection is not None:
            return self.add("project", role="operator", kind="project", inputs=(up,), schema=node.schema,
                            config={"columns": [list(p) for p in node.projection]}, upsert_keys=keys)  # fmt: skip
        config: dict[str, Any] = {"sql": node.sql}
        if node.query:
            config["query"] = node.query
        if node.program is not None:
            config["program"] = node.program
        return self.add("calc", role="operator", kind="calc", config=config,
                        inputs=(up,), schema=node.schema, upsert_keys=keys)  # fmt: skip

    def lower_Aggregate(self, node: lp.Aggregate) -> str:
        up = self.lower(node.input)
        config: dict[str, Any] = {
            "keys": list(node.keys),
            "aggregates": [
                {
                    "func": c.func,
                    "input": c.input,
                    "output": c.output,
                    **({"input2": c.input2} if c.input2 is not None else {}),
                    **({"params": dict(c.params)} if c.params else {}),
                }
                for c in node.calls
            ],
        }
        if node.order_column:
            config["order_column"] = node.order_column
        if node.always_groups:
            config["always_groups"] = [dict(g) for g in node.always_groups]
        if node.window is None:
            kind = "changelog_aggregate" if node.retracting else "group_aggregate"
        else:
            w = node.window
            kind = "session_aggregate" if w.kind == "session" else "window_aggregate"
            config["window"] = {
                "kind": w.kind,
                "time_column": w.time_column,
                "size_us": w.size_us,
                "slide_us": w.slide_us,
                "offset_us": w.offset_us,
            }
            config["emit"] = "window_close" if node.emit_on_close else "changelog"
            config["allowed_lateness_us"] = node.allowed_lateness_us
            config.setdefault("order_column", w.time_column)
        # A changelog row is identified by its group keys and, in a window, the window's
        # end, or its start where that tells the window too (tumble, hop; a key's live
        # sessions never share a start): not in cumulate, whose windows share starts. The
        # output leads with window_start, window_end (in a window), then the group keys.
        names = node.schema.names
        keys: tuple[tuple[str, ...], ...] = ()
        if node.window is None:
            keys = (tuple(names[: len(node.keys)]),)
        elif not node.emit_on_close:
            group = tuple(names[2 : 2 + len(node.keys)])
            by_start = () if node.window.kind == "cumulate" else ((names[0], *group),)
            keys = (*by_start, (names[1], *group))
        return self.add(kind.split("_")[0] + "_agg", role="operator", kind=kind, config=config,
                        inputs=(up,), schema=node.schema, upsert_keys=keys)  # fmt: skip

    def lower_Join(self, node: lp.Join) -> str:
        left = self.lower(node.left)
        right = self.lower_reread(node.right) if node.kind == "lookup" else self.lower(node.right)
        config: dict[str, Any] = {
            "left_keys": list(node.left_keys),
            "right_keys": list(node.right_keys),
            "left_columns": [list(c) for c in node.left_columns],
            "right_columns": [list(c) for c in node.right_columns],
            "kind": "left" if node.outer else "inner",
        }
        if node.kind == "asof":
            config.update(left_time=node.left_time, right_time=node.right_time, direction=node.direction,
                          strict=node.strict, tolerance_us=node.tolerance_us)  # fmt: skip
        elif node.kind == "interval":
            config.update(left_time=node.left_time, right_time=node.right_time,
                          lower_us=node.lower_us, upper_us=node.upper_us)  # fmt: skip
        config.update(node.time_options)
        return self.add(node.operator, role="operator", kind=node.operator, config=config,
                        inputs=(left, right), schema=node.schema)  # fmt: skip

    def lower_SubqueryJoin(self, node: lp.SubqueryJoin) -> str:
        up = self.lower(node.input)
        table = self.lower_reread(node.table)
        config = {
            "mode": node.mode,
            "left_keys": list(node.input_keys),
            "right_keys": list(node.table_keys),
            "column": node.column,
            "table_changelog": node.table.updating,
        }
        if node.residual is not None:
            r = node.residual
            config.update(
                residual=r.expression, residual_left=list(r.left), residual_right=list(r.right)
            )
        return self.add("subquery_join", role="operator", kind="subquery_join", config=config,
                        inputs=(up, table), schema=node.schema, upsert_keys=self.keys_of(up))  # fmt: skip

    def lower_TopN(self, node: lp.TopN) -> str:
        up = self.lower(node.input)
        config: dict[str, Any] = {
            "partition": list(node.partition),
            "order": [
                {"column": o.column, "descending": o.descending, "nulls_first": o.nulls_first}
                for o in node.order
            ],
            "lower": node.lower,
            "upper": node.upper,
            "rank_column": node.rank_column,
            "function": node.function,
            "drop": list(node.drop),
            "emit": "window_close" if node.window_end else "changelog",
        }
        if node.window_end:
            config.update(window_end=node.window_end, allowed_lateness_us=node.allowed_lateness_us)
        # ROW_NUMBER gives one row per partition and rank; one per partition when a single
        # rank is kept (deduplication). RANK/DENSE_RANK ranks are shared: no key.
        keys: tuple[tuple[str, ...], ...] = ()
        shown = set(node.schema.names)
        if (
            node.window_end is None
            and node.function == "row_number"
            and shown >= set(node.partition)
        ):
            if node.rank_column:
                keys += ((*node.partition, node.rank_column),)
            if node.lower == node.upper and node.partition:
                keys += (tuple(node.partition),)
        return self.add("top_n", role="operator", kind="top_n", config=config,
                        inputs=(up,), schema=node.schema, upsert_keys=keys)  # fmt: skip

    def lower_EventTimeSort(self, node: lp.EventTimeSort) -> str:
        up = self.lower(node.input)
        config = {"time_column": node.time_column, "allowed_lateness_us": node.allowed_lateness_us}
        return self.add("sort", role="operator", kind="event_time_sort", config=config,
                        inputs=(up,), schema=node.schema)  # fmt: skip

    def lower_Process(self, node: Any) -> str:
        up = self.lower(node.input)
        return self.add("process", role="operator", kind="process", config=node.lower_config(),
                        inputs=(up,), schema=node.schema)  # fmt: skip

    def lower_OverAggregate(self, node: lp.OverAggregate) -> str:
        up = self.lower(node.input)
        config: dict[str, Any] = {
            "partition": list(node.partition),
            "time_column": node.time_column,
            "frame": {"mode": node.mode, "preceding": node.preceding},
            "calls": [dataclasses.asdict(c) for c in node.calls],
        }
        if not node.updating:
            config["allowed_lateness_us"] = node.allowed_lateness_us
            return self.add("over", role="operator", kind="over_aggregate", config=config,
                            inputs=(up,), schema=node.schema)  # fmt: skip
        # over a changelog: every input column is passed on, so are the input's keys
        return self.add("over", role="operator", kind="over_changelog", config=config,
                        inputs=(up,), schema=node.schema, upsert_keys=self.keys_of(up))  # fmt: skip

    def lower_Union(self, node: lp.Union) -> str:
        ups = tuple(self.lower(i) for i in node.inputs)
        return self.add("union", role="operator", kind="union", config={}, inputs=ups,
                        schema=node.schema)  # fmt: skip

    def lower_WatermarkLag(self, node: lp.WatermarkLag) -> str:
        up = self.lower(node.input)
        return self.add("lag", role="operator", kind="watermark_lag", config={"lag_us": node.lag_us},
                        inputs=(up,), schema=node.schema, upsert_keys=self.keys_of(up))  # fmt: skip

    def lower_Values(self, node: lateral.Values) -> str:
        return self.add("values", role="source", kind=lateral.VALUES_SOURCE, schema=node.schema,
                        config={"values": True})  # fmt: skip

    def lower_Lateral(self, node: lateral.Lateral) -> str:
        up = self.lower(node.input)
        config = {
            "function": node.function,
            "arguments": list(node.arguments),
            "passed": [list(p) for p in node.passed],
            "outputs": [list(o) for o in node.outputs],
            "outer": node.outer,
        }
        return self.add("lateral", role="operator", kind="lateral_table_function", config=config,
                        inputs=(up,), schema=node.schema)  # fmt: skip

    def lower_SinkWrite(self, node: lp.SinkWrite) -> str:
        up = self.lower(node.input)
        return self.add("sink", role="sink", kind=node.table, inputs=(up,), schema=node.schema,
                        config={"updating": node.updating}, upsert_keys=self.keys_of(up))  # fmt: skip

    def lower_Collect(self, node: lp.Collect) -> str:
        up = self.lower(node.input)
        return self.add("collect", role="sink", kind=COLLECT, inputs=(up,), schema=node.schema,
                        config={"updating": node.updating}, upsert_keys=self.keys_of(up))  # fmt: skip


def _renamed_keys(keys: tuple[tuple[str, ...], ...], calc: lp.Calc) -> tuple[tuple[str, ...], ...]:
    """The upsert keys of a Calc's output: its input's keys whose columns it passes on
    (a filter keeps them: a row it drops is a key it removes), under their new names;
    none when every key loses a column (dropped or computed) or rows may multiply."""
    if not keys:
        return ()
    pairs = calc.projection if calc.projection is not None else _passed_columns(calc.sql)
    if pairs is None:
        return ()
    out: dict[str, str] = {}
    for src, dst in pairs:
        out.setdefault(src, dst)
    return tuple(tuple(out[c] for c in key) for key in keys if all(c in out for c in key))


def _passed_columns(sql: str) -> tuple[tuple[str, str], ...] | None:
    """(input, output) names of the plain columns a Calc's SELECT passes on unchanged."""
    select = sqlglot.parse_one(sql, read=DataFusion)
    if not isinstance(select, exp.Select) or any(
        select.args.get(k) for k in ("group", "distinct", "limit")
    ):
        return None
    if select.find(exp.Unnest, exp.Explode):
        return None
    pairs = []
    for e in select.expressions:
        col = e.this if isinstance(e, exp.Alias) else e
        if isinstance(col, exp.Column) and not isinstance(col.this, exp.Star):
            pairs.append((col.name, e.alias_or_name))
    return tuple(pairs)


#: Operators that keep state, and so take the query's state limit.
STATEFUL = (
    "group_aggregate",
    "changelog_aggregate",
    "window_aggregate",
    "session_aggregate",
    "asof_join",
    "interval_join",
    "sparse_interval_join",
    "lookup_join",
    "subquery_join",
    "top_n",
    "event_time_sort",
    "over_aggregate",
    "over_changelog",
)


def lower(plan: lp.LogicalPlan) -> JobGraph:
    lowering = _Lowering()
    lowering.lower(plan.root)
    limit = plan.settings.get("state_limit_rows")
    nodes = tuple(
        dataclasses.replace(n, config={**n.config, "state_limit_rows": limit})
        if limit and n.role == "operator" and n.kind in STATEFUL
        else n
        for n in share_equal_operators(number_result_keys(lowering.nodes))
    )
    return JobGraph(nodes, dict(plan.settings))
