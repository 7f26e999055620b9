"""FROM ... JOIN ... → a :class:`~logical.Join`: which join runs, on which keys and times.

- ``ASOF [LEFT] JOIN r ON l.k = r.k AND l.ts >= r.ts [AND l.ts - r.ts <= INTERVAL ...]``:
  an ASOF join (``>``/``<=``/``<`` too; ``r.ts - l.ts <= ...`` bounds the forward form).
- ``[LEFT] JOIN r ON l.k = r.k AND l.ts BETWEEN r.ts - INTERVAL a AND r.ts + INTERVAL b``
  (or the same bounds written with ``>=`` / ``<=``): an interval join of two streams.
- ``... AND l.ts BETWEEN r.ts [+ a] AND r.end [+ b]`` (either side holding ``end``, any of
  its columns): an interval join whose upper bound is each row's own ``end``.
- A comma join (``FROM a, b WHERE ...``) arrives here with its ``ON``, and an inner join
  with its ``WHERE`` comparisons added to its ``ON`` (:mod:`.where_to_on`). Those moved
  conditions may instead filter the joined rows after the join (``Side.after``): one an
  interval join cannot compile, or all of them when the right side is a bounded table and
  they do not bound both sides' watermarked times (a lookup join holds only the table).
- ``[LEFT] JOIN r ON l.k = r.k`` where ``r`` is a bounded table (a file, a DuckDB table,
  an Arrow table): a lookup join; the table is loaded once. When the table has no event
  time, an inner lookup join's other ON conditions filter the joined rows after it, as
  they would in WHERE.
- Anything else would keep every row of both streams forever; it is refused with a hint.

The time columns are any ordered columns (TIMESTAMP, DATE, integer, DECIMAL; both sides of
one kind), offsets in their unit (:mod:`~datum_sql.engine.eventtime`). When a column is its
source's event-time column, that source's watermark decides when a result is final and
when state can go; otherwise the end of that input does. An interval join's other ON
conditions become one residual filter on the candidate pairs (:mod:`.joinresidual`); a
lower bound above the upper one is an empty range, which matches nothing.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from decimal import Decimal
from fractions import Fraction
from typing import Any

import pyarrow as pa
from sqlglot import exp

from datum_sql.catalog import SourceEntry
from datum_sql.engine.eventtime import is_ordinal_type, ordinal_domain
from datum_sql.errors import PlanError
from datum_sql.plan import logical as lp
from datum_sql.plan import window_joins
from datum_sql.plan.conditions import conjuncts
from datum_sql.plan.intervals import offset_of
from datum_sql.plan.joinresidual import compile_residual
from datum_sql.plan.where_to_on import MOVED
from datum_sql.sql import statements as st
from datum_sql.sql.dialect import Datum

JOINED = "__join"


@dataclass
class Side:
    """One input of a join: its plan and the relations (aliases) its columns come from."""

    plan: lp.PlanNode
    relations: dict[str, st.Relation] = field(default_factory=dict)
    #: Conditions to filter the joined rows by (a comma join's comparisons that a lookup
    #: join does not evaluate), written over the FROM aliases.
    after: list[exp.Expr] = field(default_factory=list)

    def name_of(self, col: exp.Column) -> str:
        """The input column a qualified column reference reads on this side: a joined
        input names its columns ``alias.column``, a scan by the bare name."""
        return qualified(col.table, col.name) if len(self.relations) > 1 else col.name


def qualified(alias: str, column: str) -> str:
    return f"{alias}.{column}"


def plan_joins(select: exp.Select, left: Side, rights: list[tuple[exp.Join, Side]]) -> Side:
    """Join ``left`` with each right side in turn (left-deep); the result is one Side."""
    current = left
    for join, right in rights:
        current = _plan_join(join, current, right)
    return current


def _plan_join(join: exp.Join, left: Side, right: Side) -> Side:
    method = (join.args.get("method") or "").upper()
    side = (join.args.get("side") or "").upper()
    kind = (join.args.get("kind") or "").upper()
    if side not in ("", "LEFT") or kind not in ("", "INNER", "OUTER"):
        raise PlanError(
            f"{side or kind} JOIN is not supported in streaming; use [LEFT] JOIN or ASOF [LEFT] JOIN"
        )
    outer = side == "LEFT"
    if left.plan.updating or right.plan.updating:
        raise PlanError(lp.JOIN_OF_CHANGELOG)
    on = join.args.get("on")
    if on is None:
        raise PlanError(
            "a streaming join needs ON with equality keys (and a time condition for two streams)"
        )
    conds = conjuncts(on)
    if method != "ASOF":
        conds = window_joins.drop_implied_window_bound(conds, left, right)
        conds = window_joins.equal_times_as_range(conds, left, right)
    keys, rest = _equalities(conds, left, right)
    if not keys:
        _refuse_expression_keys(rest, left, right)
    lcols = _columns(left, identity=True)
    rcols = _columns(right, identity=False)
    schema = pa.schema(
        [left.plan.schema.field(c).with_name(o) for c, o in lcols]
        + [right.plan.schema.field(c).with_name(o).with_nullable(True) for c, o in rcols]
    )
    rel_map = {**left.relations, **right.relations}
    base = dict(
        left=left.plan, right=right.plan, outer=outer,
        left_keys=tuple(k[0] for k in keys), right_keys=tuple(k[1] for k in keys),
        left_columns=tuple(lcols), right_columns=tuple(rcols), out_schema=schema,
    )  # fmt: skip
    after = list(left.after)
    try:
        if method == "ASOF":
            config = _asof(rest, left, right)
            node: lp.Join = lp.Join(kind="asof", **_lagged(base, config), **_split(config))  # type: ignore[arg-type]
        elif rest:
            node, later = _ranged(base, rest, left, right, schema, keys)
            after += later
        else:
            node = _lookup(base, left, right)
    except PlanError:
        if not keys:  # the key meant may be an expression: say how to write it
            _refuse_expression_keys(rest, left, right)
        raise
    return Side(node, rel_map, after)


def _ranged(
    base: dict,
    rest: list[exp.Expr],
    left: Side,
    right: Side,
    schema: pa.Schema,
    keys: list[tuple[str, str]],
) -> tuple[lp.Join, list[exp.Expr]]:
    """The join of a condition beyond its keys, and the conditions to filter it by after:
    an interval join, or a lookup of a bounded table when every condition came from WHERE
    and they bound no watermarked time on both sides, or, when they make no interval join,
    of a table without event time by an inner join (whose ON means the same as WHERE)."""
    lookup = _bounded_table(right) and all(c.meta.get(MOVED) for c in rest)
    try:
        config, later = _interval(rest, left, right, schema)
    except PlanError as exc:
        inner_table = not base["outer"] and _bounded_table(right) and _untimed(right)
        if not (lookup or inner_table):
            if _bounded_table(right) and _untimed(right):  # LEFT lookup: ON takes keys only
                raise PlanError(
                    f"{exc}; a LEFT JOIN of a table (a lookup join) matches on its ON keys "
                    "only: filter the table in a subquery, LEFT JOIN (SELECT * FROM r WHERE "
                    "...) AS r ON l.k = r.k"
                ) from None
            raise
        return _lookup(base, left, right), rest
    if lookup and not (config["left_watermark"] and config["right_watermark"]):
        return _lookup(base, left, right), rest
    sparse = window_joins.sparse_side(config, left, right, keys)
    if sparse is not None:
        config["sparse_side"] = sparse
    return lp.Join(kind="interval", **_lagged(base, config), **_split(config)), later  # type: ignore[arg-type]


def _lagged(base: dict, config: dict) -> dict:
    """``base`` with each input whose time column trails its watermark read behind that
    lag (the lags taken out of ``config``)."""
    out = dict(base)
    for name in ("left", "right"):
        lag = config.pop(f"{name}_lag", 0)
        out[name] = lp.WatermarkLag(base[name], lag) if lag else base[name]
    return out


_OPTIONS = (
    "time_scale",
    "left_watermark",
    "right_watermark",
    "residual",
    "unit",
    "end_side",
    "end_column",
    "end_offset",
    "sparse_side",
)


def _split(config: dict) -> dict:
    """Join fields, with the operator-only options gathered under ``time_options``."""
    fields = {k: v for k, v in config.items() if k not in _OPTIONS}
    return fields | {"time_options": {k: config[k] for k in _OPTIONS if k in config}}


def _side_of(col: exp.Expr, left: Side, right: Side) -> str | None:
    if not isinstance(col, exp.Column):
        return None
    if col.table in right.relations:
        return "right"
    if col.table in left.relations:
        return "left"
    return None


def _refuse_expression_keys(conds: list[exp.Expr], left: Side, right: Side) -> None:
    """A join whose only equality of its two sides compares an expression (``f(a.k) =
    b.k``): keys are columns, so the hint is the subquery that names the expression."""
    for c in conds:
        if not isinstance(c, exp.EQ):
            continue
        sides = {
            _side_of(col, left, right) for part in (c.this, c.expression)
            for col in part.find_all(exp.Column)
        }  # fmt: skip
        if sides == {"left", "right"}:
            raise PlanError(
                f"join ON {_text(c)}: a streaming join's keys are columns, one of each side; "
                "compute the expression in a subquery and join on its column, e.g. "
                "(SELECT *, f(k) AS fk FROM t) AS a JOIN u AS b ON a.fk = b.k"
            )


def _equalities(
    conds: list[exp.Expr], left: Side, right: Side
) -> tuple[list[tuple[str, str]], list[exp.Expr]]:
    keys: list[tuple[str, str]] = []
    rest: list[exp.Expr] = []
    for c in conds:
        if isinstance(c, exp.EQ):
            a, b = _side_of(c.this, left, right), _side_of(c.expression, left, right)
            if {a, b} == {"left", "right"}:
                lcol, rcol = (c.this, c.expression) if a == "left" else (c.expression, c.this)
                keys.append((left.name_of(lcol), right.name_of(rcol)))
                continue
        rest.append(c)
    return keys, rest


def _columns(side: Side, *, identity: bool) -> list[tuple[str, str]]:
    """(input column, output column) pairs. The left input of a chained join already
    carries ``alias.column`` names; a scan carries bare names."""
    names = side.plan.schema.names
    if identity and len(side.relations) > 1:
        return [(n, n) for n in names]
    (alias,) = side.relations
    return [(n, qualified(alias, n)) for n in names]


@dataclass
class Order:
    """A join's ordering column on one side: its input name, type, and whether its source's
    watermark follows it (a scan of a source whose event-time column it is)."""

    name: str
    type: pa.DataType
    watermarked: bool
    #: How far the column may trail its input's watermark (``PlanNode.time_lags``).
    lag: int = 0


def _type_of(col: exp.Column, side: Side) -> pa.DataType | None:
    """A join side's column type: bound for a table, planned for a derived table."""
    rel = side.relations[col.table]
    if rel.kind == "subquery" and side.name_of(col) in side.plan.schema.names:
        return side.plan.schema.field(side.name_of(col)).type
    return rel.types.get(col.name)


def _order_column(col: exp.Expr, side: Side, what: str) -> Order:
    if not isinstance(col, exp.Column) or col.table not in side.relations:
        raise PlanError(f"{what}: {_text(col)} must be a column")
    plan, name = side.plan, side.name_of(col)
    t = _type_of(col, side)
    if t is None or not is_ordinal_type(t):
        raise PlanError(
            f"{what}: {_text(col)} is {t}; the ordering column must be a TIMESTAMP, DATE, "
            "integer or DECIMAL"
        )
    # watermarked when the side's plan carries event time in it: a source's event-time
    # column (read directly or through a filter), a derived table's window_end, ...
    watermarked = name in plan.time_lags
    return Order(name, t, watermarked, plan.time_lags.get(name, 0))


def _order_config(lo: Order, ro: Order, what: str, extra: Order | None = None) -> dict:
    """Config both join operators share: the time columns, the scale decimals are read at,
    and which input's watermark bounds its time column (the others become final at their
    end). ``extra``: another ordering column compared with them (an interval join's end)."""
    for a, b in [(lo, ro)] + ([] if extra is None else [(extra, ro)]):
        if ordinal_domain(a.type) != ordinal_domain(b.type):
            raise PlanError(
                f"{what}: cannot order {a.name} ({a.type}) against {b.name} ({b.type}); "
                "both time columns must be timestamps/dates, both integers or both decimals"
            )
    dl = ordinal_domain(lo.type)
    scale = None
    lw, rw = lo.watermarked, ro.watermarked
    if dl == "decimal":
        scales = [o.type.scale for o in (lo, ro, extra) if o is not None]  # type: ignore[attr-defined]
        scale = max(scales)
        # a watermark is in its column's own scale: only the widest scale's is usable
        lw &= lo.type.scale == scale  # type: ignore[attr-defined]
        rw &= ro.type.scale == scale  # type: ignore[attr-defined]
    units = {"time": "us", "integer": "", "decimal": f"e-{scale}"}
    return {
        "left_lag": lo.lag if lw else 0,
        "right_lag": ro.lag if rw else 0,
        "left_time": lo.name,
        "right_time": ro.name,
        "unit": units[dl],
        "time_scale": scale,
        "left_watermark": lw,
        "right_watermark": rw,
    }


def _units(node: exp.Expr, domain: str, scale: int | None, what: str) -> Fraction:
    """An offset literal in the ordering column's units: microseconds for an INTERVAL
    (timestamps, dates), the number itself for integers, unscaled units for decimals."""
    if domain == "time":
        return Fraction(offset_of(node))
    neg = isinstance(node, exp.Neg)
    lit = node.this if neg else node
    if not (isinstance(lit, exp.Literal) and not lit.is_string):
        raise PlanError(f"{what}: the offset {_text(node)} must be a number for an {domain} column")
    value = Fraction(Decimal(lit.this)) * (10 ** (scale or 0))
    return -value if neg else value


_FLIP: dict[Any, Any] = {exp.GTE: exp.LTE, exp.GT: exp.LT, exp.LTE: exp.GTE, exp.LT: exp.GT}
_ASOF_HINT = "write ON l.key = r.key AND l.ts >= r.ts [AND l.ts - r.ts <= INTERVAL '...']"


def _asof(conds: list[exp.Expr], left: Side, right: Side) -> dict:
    inequality = None
    tolerance = None
    for c in conds:
        if type(c) not in _FLIP:
            raise PlanError(f"ASOF JOIN: unsupported condition {_text(c)}; {_ASOF_HINT}")
        a, b = c.this, c.expression
        if not isinstance(a, exp.Sub) and isinstance(b, exp.Interval | exp.Literal | exp.Neg):
            raise PlanError(
                f"ASOF JOIN: {_text(c)} filters one table, which ON cannot do here: filter the "
                f"table in a subquery, or the joined rows in WHERE; {_ASOF_HINT}"
            )
        if isinstance(a, exp.Sub):
            tolerance = c
            continue
        sa, sb = _side_of(a, left, right), _side_of(b, left, right)
        if {sa, sb} != {"left", "right"}:
            raise PlanError(
                f"ASOF JOIN: {_text(c)} must compare a left column with a right column; {_ASOF_HINT}"
            )
        if inequality is not None:
            raise PlanError(
                f"ASOF JOIN takes one inequality between the time columns; {_ASOF_HINT}"
            )
        inequality = c if sa == "left" else _FLIP[type(c)](this=b, expression=a)
    if inequality is None:
        raise PlanError(f"ASOF JOIN needs an inequality between the time columns; {_ASOF_HINT}")
    lo = _order_column(inequality.this, left, "ASOF JOIN")
    ro = _order_column(inequality.expression, right, "ASOF JOIN")
    config = _order_config(lo, ro, "ASOF JOIN")
    direction = "backward" if isinstance(inequality, exp.GTE | exp.GT) else "forward"
    strict = isinstance(inequality, exp.GT | exp.LT)
    tol = None
    if tolerance is not None:
        domain = ordinal_domain(lo.type)
        tol = _tolerance(tolerance, inequality, direction, domain, config["time_scale"])
    return {**config, "direction": direction, "strict": strict, "tolerance_us": tol}


def _tolerance(
    cond: exp.Expr, inequality: exp.Expr, direction: str, domain: str, scale: int | None
) -> int:
    want = (
        (inequality.this, inequality.expression)
        if direction == "backward"
        else (inequality.expression, inequality.this)
    )
    sub = cond.this
    ok = (
        isinstance(cond, exp.LTE)
        and isinstance(sub, exp.Sub)
        and sub.this == want[0]
        and sub.expression == want[1]
    )
    if not ok:
        first, second = (_text(w) for w in want)
        bound = "INTERVAL '...'" if domain == "time" else "<number>"
        raise PlanError(
            f"ASOF JOIN tolerance must read {first} - {second} <= {bound}, got {_text(cond)}"
        )
    units = _units(cond.expression, domain, scale, "ASOF JOIN tolerance")
    if units < 0:
        raise PlanError("ASOF JOIN tolerance must not be negative")
    return math.floor(units)


_INTERVAL_HINT = (
    "write ON l.k = r.k AND l.ts BETWEEN r.ts - INTERVAL 'a' AND r.ts + INTERVAL 'b', or "
    "AND l.ts BETWEEN r.ts AND r.end_column (r.ts the event time of r)"
)


@dataclass
class _Bound:
    """``l.time op r.time + offset`` (op is >=, >, <=, <), offset in literal form."""

    lower: bool
    strict: bool
    offset: exp.Expr | None  # None: zero; a literal, possibly negated (Neg)
    negate: bool
    lcol: exp.Column
    rcol: exp.Column


def _interval(
    conds: list[exp.Expr], left: Side, right: Side, schema: pa.Schema
) -> tuple[dict, list[exp.Expr]]:
    """The time bounds ``lower <= l.t - r.t <= upper`` (from BETWEEN or >, >=, <, <= pairs,
    strict or not) on one pair of ordering columns; every other condition is a residual
    filter on the candidate pairs (or, moved from WHERE and not compilable, returned to
    filter the joined rows after)."""
    parsed: list[tuple[exp.Expr, list[_Bound] | None]] = []
    both_sides: dict[tuple[str, str], set[bool]] = {}
    for c in conds:
        found = [_bound(op, a, b, left, right) for op, a, b in _pieces(c)]
        ok = [b for b in found if b is not None]
        parsed.append((c, ok if ok and len(ok) == len(found) else None))
        for b in ok if len(ok) == len(found) else []:
            both_sides.setdefault(_pair(b), set()).add(b.lower)
    pairs = [k for k, v in both_sides.items() if v == {True, False}]
    if not pairs:
        ranged = _column_bounded(parsed, left, right, schema)
        if ranged is not None:
            return ranged
        _refuse_unordered(conds, left, right)
        raise PlanError(
            "an interval join needs a lower and an upper bound on the same time columns, or "
            f"between a column of one side and two of the other; {_INTERVAL_HINT}"
        )
    chosen = pairs[0]
    picked: list[_Bound] = []
    others: list[exp.Expr] = []
    for c, bs in parsed:
        if bs is not None and all(_pair(b) == chosen for b in bs):
            picked += bs
        else:
            others.append(c)
    first = picked[0]
    lo = _order_column(first.lcol, left, "interval join")
    ro = _order_column(first.rcol, right, "interval join")
    config = _order_config(lo, ro, "interval join")
    domain, scale = ordinal_domain(lo.type), config["time_scale"]
    lowers, uppers = [], []
    for b in picked:
        v = Fraction(0) if b.offset is None else _units(b.offset, domain, scale, "interval join")
        v = -v if b.negate else v
        if b.lower:  # l - r >= v (> v): the least whole unit above
            lowers.append(math.floor(v) + 1 if b.strict else math.ceil(v))
        else:
            uppers.append(math.ceil(v) - 1 if b.strict else math.floor(v))
    residual, later = _residual(others, left, right, schema)
    config |= {"lower_us": max(lowers), "upper_us": min(uppers)} | residual
    return config, later


def _residual(
    conds: list[exp.Expr], left: Side, right: Side, schema: pa.Schema
) -> tuple[dict, list[exp.Expr]]:
    """The residual filter of ``conds`` with the output columns it reads (join config:
    empty when there is none), and those moved from WHERE that it cannot compile (they
    filter the joined rows after the join)."""

    def compile_(cs: list[exp.Expr]) -> Any:
        return compile_residual(cs, lambda col: _output_name(col, left, right), schema)

    later = []
    for c in conds:
        if c.meta.get(MOVED):
            try:
                compile_([c])
            except PlanError:
                later.append(c)
    gone = {id(c) for c in later}
    kept = [c for c in conds if id(c) not in gone]
    residual = compile_(kept)
    if residual is None:
        return {}, later
    read = (_output_name(col, left, right) for c in kept for col in c.find_all(exp.Column))
    return {"residual": residual, "residual_columns": tuple(dict.fromkeys(read))}, later


def _column_bounded(
    parsed: list[tuple[exp.Expr, list[_Bound] | None]], left: Side, right: Side, schema: pa.Schema
) -> tuple[dict, list[exp.Expr]] | None:
    """``q.t BETWEEN p.start + a AND p.end + b`` (or the same bounds as two comparisons,
    strict or not, either side being ``p``): an interval join whose upper bound is each
    ``p`` row's own ``end`` column. None when no two bounds have that shape."""
    found = _ranged_pair(parsed)
    if found is None:
        return None
    (start, end), p_left = found
    p, q = (left, right) if p_left else (right, left)
    p_start, p_end = (start.lcol, end.lcol) if p_left else (start.rcol, end.rcol)
    q_col = start.rcol if p_left else start.lcol
    what = "interval join"
    so, eo = _order_column(p_start, p, what), _order_column(p_end, p, what)
    qo = _order_column(q_col, q, what)
    config = (
        _order_config(so, qo, what, extra=eo) if p_left else _order_config(qo, so, what, extra=eo)
    )
    domain, scale = ordinal_domain(qo.type), config["time_scale"]
    # q.t >= p.start + c1 and q.t <= p.end + c2, in whole units
    c1 = _offset(start, domain, scale)
    c2 = _offset(end, domain, scale)
    if p_left:  # l.start <= r.t - c1 / l.end >= r.t - c2 (the bound as parsed: l op r + v)
        c1, c2 = -c1, -c2
    first = math.floor(c1) + 1 if start.strict else math.ceil(c1)
    last = math.ceil(c2) - 1 if end.strict else math.floor(c2)
    config |= {
        "lower_us": None if p_left else first,
        "upper_us": -first if p_left else None,
        "end_side": "left" if p_left else "right",
        "end_column": eo.name,
        "end_offset": last,
    }
    used = {id(start), id(end)}
    others = [c for c, bs in parsed if not (bs is not None and {id(b) for b in bs} <= used)]
    residual, later = _residual(others, left, right, schema)
    return config | residual, later


def _ranged_pair(
    parsed: list[tuple[exp.Expr, list[_Bound] | None]],
) -> tuple[tuple[_Bound, _Bound], bool] | None:
    """(start bound, end bound) and whether ``p`` (the side with two columns) is the left:
    two bounds sharing the other side's column, on two columns of ``p``, one from below
    and one from above."""
    bounds = [b for _, bs in parsed if bs is not None for b in bs]
    for s in bounds:
        for e in bounds:
            if s is e:
                continue
            # p left: l.start <= r.t + v (not lower), l.end >= r.t + v (lower)
            if s.rcol == e.rcol and s.lcol != e.lcol and not s.lower and e.lower:
                return (s, e), True
            # p right: l.t >= r.start + v (lower), l.t <= r.end + v (not lower)
            if s.lcol == e.lcol and s.rcol != e.rcol and s.lower and not e.lower:
                return (s, e), False
    return None


def _offset(b: _Bound, domain: str, scale: int | None) -> Fraction:
    v = Fraction(0) if b.offset is None else _units(b.offset, domain, scale, "interval join")
    return -v if b.negate else v


def _refuse_unordered(conds: list[exp.Expr], left: Side, right: Side) -> None:
    """A range between a left and a right column whose type has no tracked order (a
    DOUBLE, a string) says so, rather than that the bounds are missing."""
    for c in conds:
        for _, a, b in _pieces(c):
            bases = [_plus(a)[0], _plus(b)[0]]
            if {_side_of(x, left, right) for x in bases} != {"left", "right"}:
                continue
            for x in bases:
                side = left if _side_of(x, left, right) == "left" else right
                t = side.relations[x.table].types.get(x.name)  # type: ignore[attr-defined]
                if t is not None and not is_ordinal_type(t):
                    raise PlanError(
                        f"interval join: {_text(x)} is {t}; the ordering column must be a "
                        "TIMESTAMP, DATE, integer or DECIMAL (ctx.sql() runs the join in batch)"
                    )


def _pair(b: _Bound) -> tuple[str, str]:
    return _text(b.lcol), _text(b.rcol)


def _output_name(col: exp.Column, left: Side, right: Side) -> str:
    if col.table in left.relations or col.table in right.relations:
        return qualified(col.table, col.name)
    raise PlanError(f"join condition: {_text(col)} must name a column of a joined table (t.col)")


def _pieces(c: exp.Expr) -> list[tuple[Any, exp.Expr, exp.Expr]]:
    if isinstance(c, exp.Between) and not c.args.get("symmetric"):
        return [(exp.GTE, c.this, c.args["low"]), (exp.LTE, c.this, c.args["high"])]
    if type(c) in _FLIP:
        return [(type(c), c.this, c.expression)]
    return []


def _bound(op: type, a: exp.Expr, b: exp.Expr, left: Side, right: Side) -> _Bound | None:
    """``a op b`` as a bound when one side is a left column and the other a right column,
    each plus or minus a literal offset; None when it is not of that shape."""
    base_a, off_a, neg_a = _plus(a)
    base_b, off_b, neg_b = _plus(b)
    if off_a is not None and off_b is not None:
        return None
    sa, sb = _side_of(base_a, left, right), _side_of(base_b, left, right)
    if {sa, sb} != {"left", "right"}:
        return None
    for base, side in (
        (base_a, left if sa == "left" else right),
        (base_b, left if sb == "left" else right),
    ):
        t = _type_of(base, side)  # type: ignore[arg-type]
        if t is None or not is_ordinal_type(t):
            return None
    if sa == "right":  # put the left column first: a op b  <=>  b flip(op) a
        base_a, off_a, neg_a, base_b, off_b, neg_b = base_b, off_b, neg_b, base_a, off_a, neg_a
        op = _FLIP[op]
    # l + x op r  <=>  l op r - x ;  l op r + y
    offset, negate = (off_b, neg_b) if off_b is not None else (off_a, not neg_a)
    lower = op in (exp.GTE, exp.GT)
    return _Bound(lower, op in (exp.GT, exp.LT), offset, negate, base_a, base_b)  # type: ignore[arg-type]


def _plus(node: exp.Expr) -> tuple[exp.Expr, exp.Expr | None, bool]:
    """(base, offset literal or None, whether the offset is subtracted)."""
    if isinstance(node, exp.Add | exp.Sub) and _is_offset(node.expression):
        return node.this, node.expression, isinstance(node, exp.Sub)
    if isinstance(node, exp.Paren):
        return _plus(node.this)
    return node, None, False


def _is_offset(node: exp.Expr) -> bool:
    lit = node.this if isinstance(node, exp.Neg) else node
    return isinstance(lit, exp.Interval) or (isinstance(lit, exp.Literal) and not lit.is_string)


def _bounded_table(side: Side) -> bool:
    rels = list(side.relations.values())
    entry = rels[0].entry if len(rels) == 1 else None
    return isinstance(entry, SourceEntry) and bool(entry.bounded)


def _untimed(side: Side) -> bool:
    rels = list(side.relations.values())
    return len(rels) == 1 and getattr(rels[0].entry, "event_time", None) is None


def _lookup(base: dict, left: Side, right: Side) -> lp.Join:
    if not _bounded_table(right):
        raise PlanError(
            "a join of two unbounded streams needs a time condition, or it would keep every row "
            "forever: use an interval join (AND l.ts BETWEEN r.ts - INTERVAL ... AND r.ts + "
            "INTERVAL ...) or an ASOF JOIN, or join windowed results on their window bounds "
            "(AND a.window_start = b.window_start); a plain JOIN works when the right side is a "
            "bounded table (a file, a DuckDB table, an Arrow table)"
        )
    if not base["left_keys"]:
        raise PlanError("a lookup join needs equality keys: ON stream.k = table.k")
    return lp.Join(kind="lookup", **base)


def _text(node: exp.Expr) -> str:
    """A piece of the query as the user would write it, for errors: plain names unquoted."""
    out = node.copy()
    for ident in out.find_all(exp.Identifier):
        if ident.this.isidentifier() and ident.this == ident.this.lower():
            ident.set("quoted", False)
    return out.sql(dialect=Datum, normalize_functions="lower")
