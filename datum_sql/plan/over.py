"""Over-window aggregates: ``agg(x) OVER (PARTITION BY p ORDER BY o <frame>)`` in a SELECT
list. Over append-only rows ordered by event time, with functions that look only backward,
each row is final when the watermark passes it; otherwise (an updating input, ``o`` not
event time, or a function reading later rows or the partition's size: lead, rank, ...) the
result is a changelog, each arrival re-evaluating its partition.

A SELECT with window functions becomes three steps: a Calc passing its input's columns on
and computing the PARTITION BY keys and arguments that are not plain columns (WHERE
applies here, before the windows, as in SQL), the stateful :class:`~logical.OverAggregate`
appending one column per window function, and a Calc evaluating the SELECT list with each
window function replaced by its column. Every window function of a SELECT shares one
PARTITION BY and ORDER BY, and the aggregates one frame; the positional functions take
none. What no streaming operator computes is refused, saying what works.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import pyarrow as pa
from sqlglot import exp

from datum_sql.errors import PlanError
from datum_sql.plan import logical as lp
from datum_sql.plan.infer import infer_schema
from datum_sql.plan.intervals import offset_of
from datum_sql.sql import statements as st
from datum_sql.sql.dialect import Datum

INPUT = "input"
_HIDDEN = "__over_"
#: sqlglot class → operator function of the framed aggregates.
AGGREGATES: dict[type[exp.Expr], str] = {
    exp.Count: "count",
    exp.Sum: "sum",
    exp.Avg: "avg",
    exp.LogicalAnd: "bool_and",
    exp.LogicalOr: "bool_or",
    exp.Variance: "var_samp",
    exp.VariancePop: "var_pop",
    exp.Stddev: "stddev_samp",
    exp.StddevSamp: "stddev_samp",
    exp.StddevPop: "stddev_pop",
    exp.Min: "min",
    exp.Max: "max",
    exp.FirstValue: "first_value",
    exp.LastValue: "last_value",
    exp.NthValue: "nth_value",
}
#: The operator functions of the variances and standard deviations (numeric input only).
MOMENTS = ("var_samp", "var_pop", "stddev_samp", "stddev_pop")
#: Functions of a row's position in its partition: no frame.
POSITIONAL: dict[type[exp.Expr], str] = {
    exp.Lag: "lag", exp.RowNumber: "row_number", exp.Lead: "lead", exp.Rank: "rank",
    exp.DenseRank: "dense_rank", exp.PercentRank: "percent_rank", exp.CumeDist: "cume_dist",
    exp.Ntile: "ntile",
}  # fmt: skip
#: Functions that read rows after the current one or the partition's size (the operator's
#: WHOLE_PARTITION): their result is a changelog, as no watermark makes it final.
UPDATING = ("lead", "rank", "dense_rank", "percent_rank", "cume_dist", "ntile", "nth_value")
SUPPORTED = (
    "count, sum, avg, bool_and, bool_or, var_samp, var_pop, stddev_samp, stddev_pop, min, max, "
    "first_value, last_value, nth_value over a frame; lag, lead, row_number, rank, dense_rank, percent_rank, cume_dist, ntile"
)
SHAPE = (
    "agg(x) OVER (PARTITION BY k ORDER BY <event time> ROWS BETWEEN n PRECEDING AND "
    "CURRENT ROW) (or RANGE BETWEEN INTERVAL '...' PRECEDING, or UNBOUNDED PRECEDING)"
)


def windows(select: exp.Select) -> list[exp.Window]:
    """The window functions of ``select``'s own SELECT list."""
    return [w for e in select.expressions for w in e.find_all(exp.Window)]


@dataclass(frozen=True)
class _Frame:
    mode: str
    preceding: int | None
    text: str


def check(select: exp.Select) -> None:
    """Refuse, before planning the input, what no over-window SELECT can be."""
    _refuse_shape(select, windows(select))


def plan(
    select: exp.Select,
    rel: st.Relation,
    input: lp.PlanNode,
    *,
    allowed_lateness_us: int,
    calc: Callable[[lp.PlanNode, exp.Select, st.Relation], lp.PlanNode],
) -> lp.PlanNode:
    """The three steps of an over-window SELECT reading ``input`` (FROM ``rel``)."""
    found = windows(select)
    check(select)
    first = found[0]
    partition = list(first.args.get("partition_by") or [])
    time = _order_column(first, rel, input)
    frame = _frame_of(found, input.schema.field(time).type)
    alias = rel.alias

    # 1. pre: the input's columns, then hidden columns for keys and arguments
    names = [n for n in input.schema.names if n != lp.OP_COLUMN]
    pre = exp.select(*(exp.column(n, alias, quoted=True) for n in names))
    pre.from_(select.args["from_"].this.copy(), copy=False)
    if select.args.get("where"):
        pre.set("where", select.args["where"].copy())
    hidden: dict[str, str] = {}

    def column_for(e: exp.Expr) -> str:
        if isinstance(e, exp.Column) and e.table == alias and e.name in names:
            return e.name
        text = e.sql()
        if text not in hidden:
            hidden[text] = f"{_HIDDEN}{len(hidden)}"
            pre.select(exp.alias_(e.copy(), hidden[text], quoted=True), copy=False)
        return hidden[text]

    keys = [column_for(p) for p in partition]
    calls: list[lp.OverCall] = []
    output_of: dict[str, str] = {}
    for w in found:
        if w.sql() not in output_of:
            calls.append(_call(w, f"{_HIDDEN}out{len(calls)}", column_for))
            output_of[w.sql()] = calls[-1].output
    pre_node = calc(input, pre, rel)
    for c, w in zip(calls, {w.sql(): w for w in found}.values(), strict=True):
        _check_argument(c, w, pre_node.schema)

    # 2. the OverAggregate, typed by asking DataFusion for the same window functions
    over_sql = [f'{_sql_of(c, keys, time)} AS "{c.output}"' for c in calls]
    inferred = infer_schema(
        f"SELECT *, {', '.join(over_sql)} FROM {INPUT}", {INPUT: pre_node.schema}, context="OVER"
    )
    fields = [f for f in pre_node.schema if f.name != lp.OP_COLUMN]
    fields += [inferred.field(c.output).with_nullable(True) for c in calls]
    # no watermark makes the rows final: ORDER BY is not event time, or a call reads rows
    # after the current one; then a changelog, the partitions re-evaluated as rows arrive
    changelog = time not in pre_node.time_columns or any(c.func in UPDATING for c in calls)
    if pre_node.updating:
        fields.append(pre_node.schema.field(lp.OP_COLUMN))
    elif changelog:
        fields.append(pa.field(lp.OP_COLUMN, pa.string(), False))
    node = lp.OverAggregate(
        pre_node, tuple(keys), time, frame.mode, frame.preceding, tuple(calls), pa.schema(fields),
        allowed_lateness_us=allowed_lateness_us, changelog=changelog,
    )  # fmt: skip

    # 3. post: the SELECT list over the appended columns
    post = select.copy()
    post.set("where", None)

    def swap(n: exp.Expr) -> exp.Expr:
        if isinstance(n, exp.Window):
            return exp.column(output_of[n.sql()], alias, quoted=True)
        return n

    items = []
    for original, e in zip(select.expressions, post.expressions, strict=True):
        new = e.transform(swap)
        if isinstance(original, exp.Window):
            new = exp.alias_(new, original.sql(dialect="postgres").lower(), quoted=True)
        items.append(new)
    post.set("expressions", items)
    return calc(node, post, rel)


def _refuse_shape(select: exp.Select, found: list[exp.Window]) -> None:
    if select.args.get("joins"):
        raise PlanError(
            "OVER (...) over a join is not supported in streaming; join in a derived table "
            f"whose rows keep an event-time column, and compute the window over it: {SHAPE}"
        )
    if select.args.get("group") or select.args.get("distinct") or _plain_aggregates(select):
        raise PlanError(
            "a streaming SELECT cannot hold both GROUP BY (or aggregates, DISTINCT) and "
            "OVER (...) window functions; aggregate in a derived table and compute the window "
            "over it"
        )
    for w in found:
        if any(True for _ in w.this.find_all(exp.Window)):
            raise PlanError("window functions cannot be nested")
        if (
            w.args.get("alias") is not None
            and not w.args.get("partition_by")
            and not w.args.get("order")
        ):
            raise PlanError(
                f"named windows (OVER {w.args['alias'].name}) are not supported in streaming; "
                "write the window inline: OVER (PARTITION BY ... ORDER BY ...)"
            )
    shown = {_window_sql(w, with_frame=False) for w in found}
    if len(shown) > 1:
        raise PlanError(
            "every window function of a streaming SELECT needs the same PARTITION BY and "
            f"ORDER BY; this one has {len(shown)}: " + "; ".join(sorted(shown)) + ". Compute "
            "the others in a derived table over this one"
        )


def _plain_aggregates(select: exp.Select) -> bool:
    for e in select.expressions:
        for agg in e.find_all(exp.AggFunc):
            if not any(isinstance(p, exp.Window) for p in _ancestors(agg, e)):
                return True
    return False


def _ancestors(node: exp.Expr, stop: exp.Expr) -> list[exp.Expr]:
    out = []
    p = node.parent
    while p is not None and p is not stop.parent:
        out.append(p)
        p = p.parent
    return out


def _window_sql(w: exp.Window, *, with_frame: bool) -> str:
    parts = []
    if w.args.get("partition_by"):
        parts.append("PARTITION BY " + ", ".join(_plain(p) for p in w.args["partition_by"]))
    if w.args.get("order"):
        parts.append(_plain(w.args["order"]).strip())
    if with_frame and w.args.get("spec") is not None:
        parts.append(w.args["spec"].sql(dialect=Datum))
    return "OVER (" + " ".join(parts) + ")"


def _plain(e: exp.Expr) -> str:
    """``e`` as the user wrote it, without the qualifiers the binder added."""
    bare = e.copy().transform(lambda n: exp.column(n.name) if isinstance(n, exp.Column) else n)
    return bare.sql(dialect=Datum, normalize_functions="lower")


def _order_column(w: exp.Window, rel: st.Relation, input: lp.PlanNode) -> str:
    order = w.args.get("order")
    keys = order.expressions if isinstance(order, exp.Order) else []
    times = ", ".join(input.time_columns) or "none"
    if not keys:
        raise PlanError(
            f"{_plain(w)}: without ORDER BY a window function aggregates its whole partition, "
            "which never ends on a stream; write GROUP BY (an unbounded aggregate, updated "
            "as rows arrive), or ORDER BY the event-time column with a frame: " + SHAPE
        )
    key = keys[0]
    col = key.this
    own = isinstance(col, exp.Column) and col.table in ("", rel.alias)
    # ORDER BY another column than event time: a changelog, each arrival re-evaluating its
    # partition
    if not (own and col.name in input.schema.names and col.name != lp.OP_COLUMN):
        raise PlanError(
            f"{_plain(w)}: in streaming, OVER (...) orders by one column of its input "
            f"(event time here: {times}); ORDER BY {_plain(col)} is not one. Compute it in a "
            "derived table and order by its column"
        )
    if key.args.get("desc"):
        raise PlanError(
            f"{_plain(w)}: ORDER BY {col.name} DESC would make each frame wait for rows not "
            f"yet arrived; write ORDER BY {col.name} (ascending)"
        )
    if len(keys) > 1:
        raise PlanError(
            f"{_plain(w)}: in streaming, OVER (...) orders by the event-time column alone "
            f"(ORDER BY {col.name}; rows with equal times are ordered by arrival)"
        )
    return str(col.name)


def _frame_of(found: list[exp.Window], time_type: pa.DataType) -> _Frame:
    """The one frame of the SELECT's aggregates (lag/row_number take none)."""
    frames = {_frame(w, time_type) for w in found if type(w.this) not in POSITIONAL}
    if len(frames) > 1:
        raise PlanError(
            "every aggregate OVER (...) of a streaming SELECT needs the same frame; this one "
            f"has {len(frames)}: " + "; ".join(sorted(f.text for f in frames)) + ". Compute "
            "the others in a derived table over this one"
        )
    return frames.pop() if frames else _Frame("rows", None, "")


def _frame(w: exp.Window, time_type: pa.DataType) -> _Frame:
    spec = w.args.get("spec")
    if spec is None:  # SQL's default with ORDER BY
        return _Frame("range", None, "RANGE BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW")
    text = spec.sql(dialect=Datum)
    kind = str(spec.args.get("kind") or "").upper()
    start, side = spec.args.get("start"), str(spec.args.get("start_side") or "").upper()
    end, end_side = spec.args.get("end"), spec.args.get("end_side")
    if kind not in ("ROWS", "RANGE"):
        raise PlanError(f"{_plain(w)}: {kind} frames are not supported in streaming; {SHAPE}")
    if spec.args.get("exclude"):
        raise PlanError(f"{_plain(w)}: EXCLUDE in a frame is not supported in streaming")
    ends_now = end is None or (
        isinstance(end, str) and end.upper() == "CURRENT ROW" and not end_side
    )
    if not ends_now or side == "FOLLOWING":
        raise PlanError(
            f"{_plain(w)}: in streaming a frame ends at CURRENT ROW (a frame reaching rows "
            f"after the current one would wait for rows not yet arrived); {SHAPE}"
        )
    mode = kind.lower()
    if isinstance(start, str) and start.upper() == "CURRENT ROW":
        return _Frame(mode, 0, text)
    if isinstance(start, str) and start.upper() == "UNBOUNDED":
        return _Frame(mode, None, text)
    if mode == "rows":
        if not (isinstance(start, exp.Literal) and not start.is_string and start.this.isdigit()):
            raise PlanError(f"{_plain(w)}: ROWS n PRECEDING needs a non-negative integer n")
        return _Frame(mode, int(start.this), text)
    if pa.types.is_timestamp(time_type) or pa.types.is_date(time_type):
        if not isinstance(start, exp.Interval):
            raise PlanError(
                f"{_plain(w)}: RANGE over the timestamp column needs an INTERVAL, as in "
                "RANGE BETWEEN INTERVAL '10' SECOND PRECEDING AND CURRENT ROW"
            )
        return _Frame(mode, offset_of(start), text)
    if not pa.types.is_integer(time_type):
        raise PlanError(
            f"{_plain(w)}: RANGE ... PRECEDING needs an ORDER BY column of a timestamp, date or "
            f"integer type, not {time_type}; write a ROWS frame"
        )
    if isinstance(start, exp.Literal) and not start.is_string and start.this.isdigit():
        return _Frame(mode, int(start.this), text)
    raise PlanError(f"{_plain(w)}: RANGE n PRECEDING over {time_type} needs an integer n")


def _call(w: exp.Window, output: str, column_for: Callable[[exp.Expr], str]) -> lp.OverCall:
    fn = w.this
    if isinstance(fn, (exp.Lag, exp.Lead)):
        name, default = POSITIONAL[type(fn)], fn.args.get("default")
        return lp.OverCall(
            name, column_for(fn.this), output, _literal(fn.args.get("offset"), w, name, 1),
            column_for(default) if default is not None else None,
        )  # fmt: skip
    if isinstance(fn, exp.Ntile):
        return lp.OverCall("ntile", None, output, _literal(fn.this, w, "ntile", None))
    if isinstance(fn, exp.NthValue):
        return lp.OverCall(
            "nth_value",
            column_for(fn.this),
            output,
            _literal(fn.args.get("offset"), w, "nth_value", None),
        )
    if type(fn) in POSITIONAL:
        return lp.OverCall(POSITIONAL[type(fn)], None, output)
    func = AGGREGATES.get(type(fn))
    if func is None:
        name = fn.sql(dialect=Datum, normalize_functions="lower").split("(")[0]
        raise PlanError(
            f"{name}() OVER (...) is not supported in streaming; supported: {SUPPORTED} "
            "(ROW_NUMBER()/RANK()/DENSE_RANK() ... WHERE rn <= N run as a top-N)"
        )
    arg = fn.this  # DISTINCT: refused by the type check (plan/over_functions.py)
    if func == "count" and (arg is None or isinstance(arg, exp.Star)):
        return lp.OverCall("count_star", None, output)
    return lp.OverCall(func, column_for(arg), output)


def _literal(e: exp.Expr | None, w: exp.Window, name: str, default: int | None) -> int:
    """The literal non-negative integer argument ``e`` of ``name`` (``default`` if absent)."""
    if e is None and default is not None:
        return default
    if not (isinstance(e, exp.Literal) and not e.is_string and e.this.isdigit()):
        raise PlanError(f"{_plain(w)}: {name}() needs a literal, non-negative integer argument")
    return int(e.this)


def _check_argument(c: lp.OverCall, w: exp.Window, schema: pa.Schema) -> None:
    """Refuse an argument type the operator cannot aggregate (before any row runs)."""
    t = schema.field(c.input).type if c.input else None
    if t is None:
        return
    if pa.types.is_dictionary(t):
        t = t.value_type
    if c.func in ("sum", "avg", *MOMENTS) and not (
        pa.types.is_integer(t) or pa.types.is_floating(t)
    ):
        raise PlanError(
            f"{_plain(w)}: {c.func}() over a frame takes an integer or a float, not {t}; "
            f"CAST the argument, as in {c.func}(CAST(x AS DOUBLE))"
        )
    if c.func in ("min", "max") and pa.types.is_nested(t):
        raise PlanError(f"{_plain(w)}: {c.func}() over a frame cannot order {t} values")
    if c.func in ("bool_and", "bool_or") and not pa.types.is_boolean(t):
        raise PlanError(f"{_plain(w)}: {c.func}() takes a boolean, not {t}")


def _sql_of(c: lp.OverCall, keys: list[str], time: str) -> str:
    """The DataFusion SQL of one call over the pre step's columns (typing its output)."""
    arg = f'"{c.input}"' if c.input else ""
    over = [f"PARTITION BY {', '.join(chr(34) + k + chr(34) for k in keys)}"] if keys else []
    over.append(f'ORDER BY "{time}"')
    if c.func in ("lag", "lead"):
        default = f', "{c.default}"' if c.default else ""
        return f"{c.func}({arg}, {c.offset}{default}) OVER ({' '.join(over)})"
    if c.func in ("ntile", "nth_value"):
        return f"{c.func}({arg + ', ' if arg else ''}{c.offset}) OVER ({' '.join(over)})"
    if c.input is None and c.func != "count_star":
        return f"{c.func}() OVER ({' '.join(over)})"
    fn = "count(*)" if c.func == "count_star" else f"{c.func}({arg})"
    return f"{fn} OVER ({' '.join(over)})"
