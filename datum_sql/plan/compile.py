"""A stateless SELECT compiled once, at planning, into ``pyarrow.compute`` kernels.

:func:`compile_select` turns the Calc's bound SELECT (columns, literals, arithmetic,
comparisons, AND/OR/NOT, IS NULL, IN, BETWEEN, LIKE, CASE, COALESCE, casts between
numbers and to text, length, named_struct, ``to_char`` of a timestamp or date with a literal
pattern of fixed-width fields) into a :class:`~datum_sql.engine.expressions.Program`
that the Calc operator runs on every batch without planning anything. Only what has
exactly DataFusion's meaning for its operand types compiles (integers wrap on overflow and
divide toward zero; floats compare with NaN equal to itself and above every number); the
rest, and every program whose output types are not the ones DataFusion gives the same
SELECT, stays with DataFusion: each SELECT has one evaluation path, chosen here.
"""

from __future__ import annotations

from collections.abc import Callable

import pyarrow as pa
from sqlglot import exp

from datum_sql.engine.expressions import (
    TIME_FIELDS,
    Call,
    Column,
    Expr,
    Literal,
    Program,
    TimeField,
    evaluate,
)
from datum_sql.errors import DatumError
from datum_sql.plan.engines import chrono_format
from datum_sql.sql.types import arrow_type


class _NotCompiled(Exception):
    """The expression has no exact kernel translation: DataFusion evaluates the SELECT."""


_ARITH: dict[type[exp.Expr], str] = {
    exp.Add: "add",
    exp.Sub: "subtract",
    exp.Mul: "multiply",
    exp.Div: "divide",
}
_CMP: dict[type[exp.Expr], str] = {
    exp.EQ: "equal",
    exp.NEQ: "not_equal",
    exp.LT: "less",
    exp.LTE: "less_equal",
    exp.GT: "greater",
    exp.GTE: "greater_equal",
}
#: The comparison's answer when either float side is NaN (DataFusion orders NaN above
#: every number and equal to itself); ``a``/``b``: is that side NaN.
_NAN_RESULT: dict[str, Callable[[Expr, Expr], Expr]] = {
    "equal": lambda a, b: Call("and", (a, b)),
    "not_equal": lambda a, b: Call("not", (Call("and", (a, b)),)),
    "less": lambda a, b: Call("and", (Call("not", (a,)), b)),
    "less_equal": lambda a, b: b,
    "greater": lambda a, b: Call("and", (a, Call("not", (b,)))),
    "greater_equal": lambda a, b: a,
}
#: Up to this many values, a text ``x IN (...)`` is faster as comparisons OR-ed than as
#: is_in (the ``in`` kernel compares an integer column with a few values itself).
_FEW_VALUES = 16
#: Kernels that can fail on a value: not compiled inside CASE, whose untaken branches
#: DataFusion does not evaluate.
_MAY_FAIL = {"divide_integers", "remainder", "cast"}


def compile_select(
    select: exp.Select, alias: str, schema: pa.Schema, out: pa.Schema
) -> Program | None:
    """``select`` (reading one table aliased ``alias``, of ``schema``) as a Program whose
    output is ``out`` (the schema DataFusion plans for it), or None when any part of it
    has no exact kernel translation."""
    if any(select.args.get(k) for k in ("group", "having", "distinct", "order", "limit", "joins")):
        return None
    source = select.args["from_"].this
    if not isinstance(source, exp.Table) or source.name != "input" or select.find(exp.Unnest):
        return None
    compiler = _Compiler(alias, schema)
    try:
        where = select.args.get("where")
        cond = compiler.boolean(where.this) if where is not None else None
        columns: list[Expr] = []
        for e in select.expressions:
            if isinstance(e, exp.Star) or (isinstance(e, exp.Column) and e.is_star):
                columns.extend(Column(n) for n in schema.names)
            else:
                columns.append(compiler.expr(e.this if isinstance(e, exp.Alias) else e))
    except _NotCompiled:
        return None
    if len(columns) != len(out):
        return None
    try:
        types = [compiler.type_of(c) for c in columns]
    except _NotCompiled:
        return None
    if any(t != f.type for t, f in zip(types, out, strict=True)):
        return None
    program = Program(cond, tuple(columns), out)
    try:  # every kernel resolves for these types now, not on the first batch
        program.run(compiler.empty)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
        return None
    return program


def _integer(t: pa.DataType) -> bool:
    return pa.types.is_signed_integer(t)


def _number(t: pa.DataType) -> bool:
    return _integer(t) or pa.types.is_float32(t) or pa.types.is_float64(t)


def _text(t: pa.DataType) -> bool:
    return t in (pa.string(), pa.large_string())


def _comparable(a: pa.DataType, b: pa.DataType) -> bool:
    if _number(a) and _number(b):
        return True
    if _text(a) and _text(b):
        return True
    same = pa.types.is_boolean(a) or pa.types.is_date32(a) or pa.types.is_timestamp(a)
    return same and a == b


class _Compiler:
    def __init__(self, alias: str, schema: pa.Schema) -> None:
        self.alias = alias
        self.schema = schema
        self.empty = pa.RecordBatch.from_pylist([], schema=schema)
        self._types: dict[Expr, pa.DataType] = {}

    def type_of(self, e: Expr) -> pa.DataType:
        """The Arrow type of ``e``, found by running its kernels on no rows."""
        t = self._types.get(e)
        if t is None:
            try:
                t = self._types[e] = evaluate(e, self.empty).type
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
                raise _NotCompiled from None
        return t

    def boolean(self, node: exp.Expr) -> Expr:
        e = self.expr(node)
        if not pa.types.is_boolean(self.type_of(e)):
            raise _NotCompiled
        return e

    def expr(self, node: exp.Expr) -> Expr:
        if node.args.get("negate"):  # x NOT LIKE p, x IS NOT NULL: the node, negated
            positive = node.copy()
            positive.set("negate", None)
            return Call("not", (self.boolean(positive),))
        if isinstance(node, exp.Paren):
            return self.expr(node.this)
        if isinstance(node, exp.Column):
            return self.column(node)
        if isinstance(node, exp.Literal | exp.Boolean) or (
            isinstance(node, exp.Neg) and isinstance(node.this, exp.Literal)
        ):
            return _literal(node)
        if isinstance(node, exp.Neg):
            a = self.expr(node.this)
            if not _number(self.type_of(a)):
                raise _NotCompiled
            return Call("negate", (a,))
        if type(node) in _ARITH:
            return self.arith(_ARITH[type(node)], node.this, node.expression)
        if isinstance(node, exp.Mod):
            a, b = self.expr(node.this), self.expr(node.expression)
            if not (_integer(self.type_of(a)) and _integer(self.type_of(b))):
                raise _NotCompiled
            return Call("remainder", (a, b))
        if type(node) in _CMP:
            return self.compare(_CMP[type(node)], self.expr(node.this), self.expr(node.expression))
        if isinstance(node, exp.Or):
            listed = self.value_list(node)
            if listed is not None:
                return listed
        if isinstance(node, exp.And | exp.Or):
            kernel = "and" if isinstance(node, exp.And) else "or"
            return Call(kernel, (self.boolean(node.this), self.boolean(node.expression)))
        if isinstance(node, exp.Not):
            return Call("not", (self.boolean(node.this),))
        if isinstance(node, exp.Is) and isinstance(node.expression, exp.Null):
            return Call("is_null", (self.expr(node.this),))
        if isinstance(node, exp.Between):
            x = self.expr(node.this)
            low = self.compare("greater_equal", x, self.expr(node.args["low"]))
            high = self.compare("less_equal", x, self.expr(node.args["high"]))
            return Call("and", (low, high))
        if isinstance(node, exp.In) and node.expressions and not node.args.get("query"):
            listed = self.value_list(node)
            if listed is not None:
                return listed
            x = self.expr(node.this)
            out: Expr | None = None
            for v in node.expressions:
                eq = self.compare("equal", x, self.expr(v))
                out = eq if out is None else Call("or", (out, eq))
            assert out is not None
            return out
        if isinstance(node, exp.Like) and not isinstance(node, exp.ILike):
            pattern = node.expression
            x = self.expr(node.this)
            if not (isinstance(pattern, exp.Literal) and pattern.is_string):
                raise _NotCompiled
            if not _text(self.type_of(x)) or "\\" in pattern.this:
                raise _NotCompiled
            return Call("like", (x,), pattern.this)
        if isinstance(node, exp.Cast) and not isinstance(node, exp.TryCast):
            return self.cast(node)
        if isinstance(node, exp.Coalesce):
            args = tuple(self.expr(a) for a in [node.this, *node.expressions])
            if len({self.type_of(a) for a in args}) != 1:
                raise _NotCompiled
            return Call("coalesce", args)
        if isinstance(node, exp.Length):
            x = self.expr(node.this)
            if self.type_of(x) != pa.string():
                raise _NotCompiled
            return Call("length", (x,))
        if isinstance(node, exp.Case) and node.this is None:
            return self.case(node)
        if isinstance(node, exp.Anonymous) and node.name.lower() == "named_struct":
            return self.struct(node.expressions)
        if isinstance(node, exp.TimeToStr):
            return self.to_char(node)
        raise _NotCompiled

    def column(self, node: exp.Column) -> Column:
        if node.table and node.table != self.alias:
            raise _NotCompiled
        ident = node.this
        name = ident.this if ident.quoted else ident.this.lower()
        if name not in self.schema.names:
            raise _NotCompiled
        return Column(name)

    def value_list(self, node: exp.Expr) -> Expr | None:
        """``x IN (literals)`` or ``x = a OR x = b ...`` over an integer or text column as one
        ``in`` kernel, or None for any other shape, and for a few values over text, which
        comparisons OR-ed together test faster than a hash lookup (over integers the
        kernel compares a few values itself)."""
        if isinstance(node, exp.In):
            column, values = node.this, list(node.expressions)
        else:
            leaves = _or_leaves(node)
            if not all(isinstance(e, exp.EQ) for e in leaves):
                return None
            column, values = leaves[0].this, [e.expression for e in leaves]
            if any(e.this != column for e in leaves):
                return None
        if (
            len(values) < 2
            or not isinstance(column, exp.Column)
            or not all(
                isinstance(v, exp.Literal)
                or (isinstance(v, exp.Neg) and isinstance(v.this, exp.Literal))
                for v in values
            )
        ):
            return None
        x = self.column(column)
        t = self.type_of(x)
        literals = [_literal(v) for v in values]
        kinds = {lit.type for lit in literals}
        few = len(values) <= _FEW_VALUES
        if (_integer(t) and kinds == {pa.int64()}) or (
            _text(t) and kinds == {pa.string()} and not few
        ):
            try:
                pa.array([lit.value for lit in literals], pa.int64() if _integer(t) else t).cast(t)
            except pa.ArrowInvalid:  # a value out of the column's range: compared widened
                return None
            return Call("in", (x,), tuple(lit.value for lit in literals))
        return None

    def arith(self, kernel: str, left: exp.Expr, right: exp.Expr) -> Expr:
        a, b = self.expr(left), self.expr(right)
        ta, tb = self.type_of(a), self.type_of(b)
        if not (_number(ta) and _number(tb)):
            raise _NotCompiled
        if kernel == "divide" and _integer(ta) and _integer(tb):
            kernel = "divide_integers"
        return Call(kernel, (a, b))

    def compare(self, kernel: str, a: Expr, b: Expr) -> Expr:
        ta, tb = self.type_of(a), self.type_of(b)
        if not _comparable(ta, tb):
            raise _NotCompiled
        plain = Call(kernel, (a, b))
        floats = [pa.types.is_floating(t) for t in (ta, tb)]
        if not any(floats):
            return plain
        nan_a = Call("is_nan", (a,)) if floats[0] else Literal(False, pa.bool_())
        nan_b = Call("is_nan", (b,)) if floats[1] else Literal(False, pa.bool_())
        either = Call("or", (nan_a, nan_b))
        return Call("if_else", (either, _NAN_RESULT[kernel](nan_a, nan_b), plain))

    def cast(self, node: exp.Cast) -> Expr:
        x = self.expr(node.this)
        source = self.type_of(x)
        try:
            target = arrow_type(node.to)
        except DatumError:
            raise _NotCompiled from None
        if source == target:
            return x
        exact = (_integer(source) and (_number(target) or target == pa.string())) or (
            pa.types.is_floating(source) and pa.types.is_float64(target)
        )
        if not exact:
            raise _NotCompiled
        return Call("cast", (x,), target)

    def case(self, node: exp.Case) -> Expr:
        args: list[Expr] = []
        for branch in node.args["ifs"]:
            args.append(self.boolean(branch.this))
            args.append(self.expr(branch.args["true"]))
        default = node.args.get("default")
        if default is not None:
            args.append(self.expr(default))
        values = args[1::2] + ([args[-1]] if default is not None else [])
        if len({self.type_of(v) for v in values}) != 1 or any(_may_fail(a) for a in args):
            raise _NotCompiled
        return Call("case", tuple(args), len(node.args["ifs"]))

    def to_char(self, node: exp.TimeToStr) -> Expr:
        """``to_char(x, 'template')``: the template's chrono format (as the DataFusion dialect
        writes it) as fixed-width fields, over a timestamp without a time zone or in UTC, or
        over a date when every field is a date's."""
        fmt = node.args.get("format")
        if not isinstance(fmt, exp.Literal) or not fmt.is_string:
            raise _NotCompiled
        if any(node.args.get(k) for k in ("culture", "zone")):
            raise _NotCompiled
        try:
            parts = _time_fields(chrono_format(fmt.this, function="to_char"))
        except DatumError:
            raise _NotCompiled from None
        x = self.expr(node.this)
        t = self.type_of(x)
        if pa.types.is_timestamp(t) and t.tz in (None, "UTC"):
            return Call("to_char", (x,), parts)
        date_only = all(isinstance(p, str) or p.field in _DATE_FIELDS for p in parts)
        if pa.types.is_date32(t) and date_only:
            return Call("to_char", (x,), parts)
        raise _NotCompiled

    def struct(self, parts: list[exp.Expr]) -> Expr:
        names = parts[0::2]
        if len(parts) % 2 or not all(isinstance(n, exp.Literal) and n.is_string for n in names):
            raise _NotCompiled
        values = tuple(self.expr(v) for v in parts[1::2])
        return Call("struct", values, tuple(n.this for n in names))


#: chrono fields that read only a date.
_DATE_FIELDS = frozenset("Yymdjba")


def _time_fields(chrono: str) -> tuple[str | TimeField, ...]:
    """A chrono format as literal text and fixed-width fields, or _NotCompiled when any
    field has no exact fixed-width kernel (no padding, names of varying length, ISO weeks)."""
    parts: list[str | TimeField] = []
    text = ""
    i = 0
    while i < len(chrono):
        c = chrono[i]
        if c != "%":
            text += c
            i += 1
            continue
        spec = (
            chrono[i + 1 : i + 3] if chrono[i + 1 : i + 2] in ("3", "6") else chrono[i + 1 : i + 2]
        )
        i += 1 + len(spec)
        if spec == "%":
            text += "%"
            continue
        if spec not in TIME_FIELDS:  # also a lone % at the end
            raise _NotCompiled
        if text:
            parts.append(text)
            text = ""
        parts.append(TimeField(spec))
    if text:
        parts.append(text)
    return tuple(parts)


def _or_leaves(node: exp.Expr) -> list[exp.Expr]:
    while isinstance(node, exp.Paren):
        node = node.this
    if isinstance(node, exp.Or):
        return [*_or_leaves(node.this), *_or_leaves(node.expression)]
    return [node]


def _may_fail(e: Expr) -> bool:
    return isinstance(e, Call) and (e.function in _MAY_FAIL or any(_may_fail(a) for a in e.args))


def _literal(node: exp.Expr) -> Literal:
    if isinstance(node, exp.Boolean):
        return Literal(bool(node.this), pa.bool_())
    negative = isinstance(node, exp.Neg)
    lit = node.this if negative else node
    assert isinstance(lit, exp.Literal)
    if lit.is_string:
        if negative:
            raise _NotCompiled
        return Literal(lit.this, pa.string())
    text = ("-" if negative else "") + lit.this
    try:
        value = int(text)
    except ValueError:
        return Literal(float(text), pa.float64())
    if not -(2**63) <= value < 2**63:
        raise _NotCompiled
    return Literal(value, pa.int64())
