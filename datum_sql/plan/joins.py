"""FROM ... JOIN ... → a :class:`~logical.Join`: which join runs, on which keys and times.

- ``ASOF [LEFT] JOIN r ON l.k = r.k AND l.ts >= r.ts [AND l.ts - r.ts <= INTERVAL ...]``:
  an ASOF join (``>``/``<=``/``<`` too; ``r.ts - l.ts <= ...`` bounds the forward form).
- ``[LEFT] JOIN r ON l.k = r.k AND l.ts BETWEEN r.ts - INTERVAL a AND r.ts + INTERVAL b``
  (or the same bounds written with ``>=`` / ``<=``): an interval join of two streams.
- ``[LEFT] JOIN r ON l.k = r.k`` where ``r`` is a bounded table (a file, a DuckDB table,
  an Arrow table): a lookup join; the table is loaded once.
- Anything else would keep every row of both streams forever; it is refused with a hint.

The time columns must be the sources' event-time columns: their watermarks decide when a
result is final and when state can go.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
from sqlglot import exp

from datum_sql.catalog import SourceEntry
from datum_sql.errors import PlanError
from datum_sql.plan import logical as lp
from datum_sql.plan.intervals import offset_of
from datum_sql.sql import statements as st

JOINED = "__join"


@dataclass
class Side:
    """One input of a join: its plan and the relations (aliases) its columns come from."""

    plan: lp.PlanNode
    relations: dict[str, st.Relation] = field(default_factory=dict)

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
    on = join.args.get("on")
    if on is None:
        raise PlanError(
            "a streaming join needs ON with equality keys (and a time condition for two streams)"
        )
    conds = _conjuncts(on)
    keys, rest = _equalities(conds, left, right)
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
    if method == "ASOF":
        node: lp.Join = lp.Join(kind="asof", **base, **_asof(rest, left, right))  # type: ignore[arg-type]
    elif rest:
        node = lp.Join(kind="interval", **base, **_interval(rest, left, right))  # type: ignore[arg-type]
    else:
        node = _lookup(base, left, right)
    return Side(node, rel_map)


def _conjuncts(node: exp.Expr) -> list[exp.Expr]:
    if isinstance(node, exp.And):
        return _conjuncts(node.this) + _conjuncts(node.expression)
    if isinstance(node, exp.Paren):
        return _conjuncts(node.this)
    return [node]


def _side_of(col: exp.Expr, left: Side, right: Side) -> str | None:
    if not isinstance(col, exp.Column):
        return None
    if col.table in right.relations:
        return "right"
    if col.table in left.relations:
        return "left"
    return None


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


def _event_time(col: exp.Column, side: Side, what: str) -> str:
    rel = side.relations.get(col.table)
    entry = rel.entry if rel is not None else None
    if not isinstance(entry, SourceEntry):
        raise PlanError(f"{what}: {col.sql()} must be a column of a source table")
    if entry.event_time is not None and entry.event_time != col.name:
        raise PlanError(
            f"{what}: {col.sql()} is not the event-time column of {entry.name} ({entry.event_time}); "
            "the join's time condition must use event time, whose watermark says when a result is final"
        )
    if not pa.types.is_timestamp(rel.types[col.name]):  # type: ignore[union-attr]
        raise PlanError(f"{what}: {col.sql()} must be a TIMESTAMP")
    return side.name_of(col)


_FLIP: dict[Any, Any] = {exp.GTE: exp.LTE, exp.GT: exp.LT, exp.LTE: exp.GTE, exp.LT: exp.GT}
_ASOF_HINT = "write ON l.key = r.key AND l.ts >= r.ts [AND l.ts - r.ts <= INTERVAL '...']"


def _asof(conds: list[exp.Expr], left: Side, right: Side) -> dict:
    inequality = None
    tolerance = None
    for c in conds:
        if type(c) not in _FLIP:
            raise PlanError(f"ASOF JOIN: unsupported condition {c.sql()}; {_ASOF_HINT}")
        a, b = c.this, c.expression
        if isinstance(a, exp.Sub) or isinstance(b, exp.Interval | exp.Literal):
            tolerance = c
            continue
        sa, sb = _side_of(a, left, right), _side_of(b, left, right)
        if {sa, sb} != {"left", "right"}:
            raise PlanError(
                f"ASOF JOIN: {c.sql()} must compare a left column with a right column; {_ASOF_HINT}"
            )
        if inequality is not None:
            raise PlanError(
                f"ASOF JOIN takes one inequality between the time columns; {_ASOF_HINT}"
            )
        inequality = c if sa == "left" else _FLIP[type(c)](this=b, expression=a)
    if inequality is None:
        raise PlanError(f"ASOF JOIN needs an inequality between the time columns; {_ASOF_HINT}")
    ltime = _event_time(inequality.this, left, "ASOF JOIN")
    rtime = _event_time(inequality.expression, right, "ASOF JOIN")
    direction = "backward" if isinstance(inequality, exp.GTE | exp.GT) else "forward"
    strict = isinstance(inequality, exp.GT | exp.LT)
    tol = _tolerance(tolerance, inequality, direction) if tolerance is not None else None
    return {
        "left_time": ltime,
        "right_time": rtime,
        "direction": direction,
        "strict": strict,
        "tolerance_us": tol,
    }


def _tolerance(cond: exp.Expr, inequality: exp.Expr, direction: str) -> int:
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
        first, second = (w.sql() for w in want)
        raise PlanError(
            f"ASOF JOIN tolerance must read {first} - {second} <= INTERVAL '...', got {cond.sql()}"
        )
    micros = offset_of(cond.expression)
    if micros < 0:
        raise PlanError("ASOF JOIN tolerance must not be negative")
    return micros


_INTERVAL_HINT = "write ON l.k = r.k AND l.ts BETWEEN r.ts - INTERVAL 'a' AND r.ts + INTERVAL 'b'"


def _interval(conds: list[exp.Expr], left: Side, right: Side) -> dict:
    """Bounds as lower <= l.ts - r.ts <= upper, from BETWEEN or a pair of >= / <=."""
    bounds: list[tuple[str, int]] = []  # ("lower"|"upper", micros) of l.ts - r.ts
    times: set[tuple[str, str]] = set()
    for c in conds:
        if isinstance(c, exp.Between):
            pieces: list[tuple[Any, exp.Expr, exp.Expr]] = [
                (exp.GTE, c.this, c.args["low"]),
                (exp.LTE, c.this, c.args["high"]),
            ]
        elif type(c) in _FLIP:
            pieces = [(type(c), c.this, c.expression)]
        else:
            raise PlanError(f"join condition {c.sql()} is not supported; {_INTERVAL_HINT}")
        for op, a, b in pieces:
            bound, ltime, rtime = _bound(op, a, b, left, right)
            bounds.append(bound)
            times.add((ltime, rtime))
    lowers = [v for k, v in bounds if k == "lower"]
    uppers = [v for k, v in bounds if k == "upper"]
    if len(times) != 1 or not lowers or not uppers:
        raise PlanError(
            f"an interval join needs a lower and an upper bound on the same time columns; {_INTERVAL_HINT}"
        )
    (ltime, rtime), lower, upper = times.pop(), max(lowers), min(uppers)
    if lower > upper:
        raise PlanError("interval join bounds are empty: the lower bound is above the upper one")
    return {"left_time": ltime, "right_time": rtime, "lower_us": lower, "upper_us": upper}


def _bound(
    op: type, a: exp.Expr, b: exp.Expr, left: Side, right: Side
) -> tuple[tuple[str, int], str, str]:
    """One comparison ``a op b`` where one side is a time column and the other a time
    column plus or minus an interval, as a bound on l.ts - r.ts."""
    base_a, off_a = _time_plus(a)
    base_b, off_b = _time_plus(b)
    sa, sb = _side_of(base_a, left, right), _side_of(base_b, left, right)
    if {sa, sb} != {"left", "right"}:
        raise PlanError(
            f"join condition must compare a left time with a right time; {_INTERVAL_HINT}"
        )
    if sa == "right":  # put the left time first: a op b  <=>  b flip(op) a
        base_a, off_a, base_b, off_b, op = base_b, off_b, base_a, off_a, _FLIP[op]
    ltime = _event_time(base_a, left, "interval join")  # type: ignore[arg-type]
    rtime = _event_time(base_b, right, "interval join")  # type: ignore[arg-type]
    diff = off_b - off_a  # l.ts op r.ts + diff
    if op in (exp.GT, exp.LT):
        diff += 1 if op is exp.GT else -1  # strict bounds on microsecond timestamps
    kind = "lower" if op in (exp.GTE, exp.GT) else "upper"
    return (kind, diff), ltime, rtime


def _time_plus(node: exp.Expr) -> tuple[exp.Expr, int]:
    if isinstance(node, exp.Add):
        return node.this, offset_of(node.expression)
    if isinstance(node, exp.Sub):
        return node.this, -offset_of(node.expression)
    return node, 0


def _lookup(base: dict, left: Side, right: Side) -> lp.Join:
    rels = list(right.relations.values())
    entry = rels[0].entry if len(rels) == 1 else None
    if not (isinstance(entry, SourceEntry) and entry.bounded):
        raise PlanError(
            "a join of two unbounded streams needs a time condition, or it would keep every row "
            "forever: use an interval join (AND l.ts BETWEEN r.ts - INTERVAL ... AND r.ts + "
            "INTERVAL ...) or an ASOF JOIN; a plain JOIN works when the right side is a bounded "
            "table (a file, a DuckDB table, an Arrow table)"
        )
    if not base["left_keys"]:
        raise PlanError("a lookup join needs equality keys: ON stream.k = table.k")
    return lp.Join(kind="lookup", **base)
