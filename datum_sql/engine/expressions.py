"""Typed scalar expressions evaluated on a record batch by ``pyarrow.compute`` kernels.

The planner compiles a stateless SELECT into a :class:`Program` once (see
:mod:`datum_sql.plan.compile`); the Calc operator then runs the program's kernels on each
batch, eagerly, with no planning per batch. Each kernel here has DataFusion's meaning for
the types the compiler lets through (integer arithmetic wraps, integer division truncates
toward zero, SQL's three-valued AND/OR, NULL in gives NULL out); the compiler sends every
other expression to DataFusion, and tests compare the two on a table of expressions.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeAlias

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

Value: TypeAlias = "pa.Array | pa.Scalar"


@dataclass(frozen=True)
class Column:
    """The input column ``name``."""

    name: str

    def __str__(self) -> str:
        return f"${self.name}"


@dataclass(frozen=True)
class Literal:
    """A constant of Arrow type ``type``."""

    value: Any
    type: pa.DataType

    def __str__(self) -> str:
        return repr(self.value)


@dataclass(frozen=True)
class Call:
    """Kernel ``function`` (a key of :data:`KERNELS`) applied to ``args``; ``option`` is the
    kernel's one parameter (a cast's target type, a LIKE pattern, struct field names)."""

    function: str
    args: tuple[Expr, ...]
    option: Any = None

    def __str__(self) -> str:
        extra = [] if self.option is None else [repr(self.option)]
        return f"{self.function}({', '.join([*map(str, self.args), *extra])})"


Expr = Column | Literal | Call


def _remainder(a: Value, b: Value) -> Value:
    # a - trunc(a / |b|) * |b|: the sign of the dividend, as DataFusion's (Rust's) integer
    # %, and MIN % -1 is 0; a zero divisor fails, as it does there.
    if isinstance(a, pa.Array) and a.type == pa.int64() and isinstance(b, pa.Scalar):
        d = b.as_py() if b.type == pa.int64() else None
        if d is not None and d > 0:
            return _remainder_by(a, d)
    b = pc.abs(b)
    return pc.subtract(a, pc.multiply(pc.divide(a, b), b))


def _remainder_by(a: pa.Array, d: int) -> pa.Array:
    """``a % d`` for a constant ``d > 0`` (numpy divides by a constant several times faster
    than Arrow): the floor remainder, made the dividend's sign where ``a`` is negative.
    Products that overflow wrap, and the remainder is exact modulo 2**64 all the same."""
    valid = None if a.null_count == 0 else np.asarray(a.is_valid())
    x = a.to_numpy(zero_copy_only=False) if valid is None else a.fill_null(0).to_numpy()
    r = x - (x // d) * d
    if len(x) and x.min() < 0:
        r = np.where((r != 0) & (x < 0), r - d, r)
    return pa.array(r, pa.int64(), mask=None if valid is None else ~valid)


def _in(values: tuple[Any, ...], x: Value) -> Value:
    # SQL: NULL IN (...) is NULL (is_in alone says false).
    found = pc.is_in(x, value_set=pa.array(values).cast(x.type))
    if isinstance(x, pa.Scalar) or x.null_count == 0:
        return found
    return pc.if_else(pc.is_valid(x), found, pa.scalar(None, pa.bool_()))


def _case(option: Any, *args: Value) -> Value:
    # args: cond1, value1, cond2, value2, ..., [else]; a NULL condition is not taken.
    conds = [pc.fill_null(c, False) for c in args[0 : 2 * option : 2]]
    values = list(args[1 : 2 * option : 2]) + list(args[2 * option :])
    return pc.case_when(pc.make_struct(*conds), *values)


KERNELS: dict[str, Callable[..., Value]] = {
    "add": lambda _, a, b: pc.add(a, b),
    "subtract": lambda _, a, b: pc.subtract(a, b),
    "multiply": lambda _, a, b: pc.multiply(a, b),
    # Integers: truncates toward zero; fails on a zero divisor and on MIN / -1.
    "divide_integers": lambda _, a, b: pc.divide_checked(a, b),
    "divide": lambda _, a, b: pc.divide(a, b),
    "remainder": lambda _, a, b: _remainder(a, b),
    "negate": lambda _, a: pc.negate(a),
    "equal": lambda _, a, b: pc.equal(a, b),
    "not_equal": lambda _, a, b: pc.not_equal(a, b),
    "less": lambda _, a, b: pc.less(a, b),
    "less_equal": lambda _, a, b: pc.less_equal(a, b),
    "greater": lambda _, a, b: pc.greater(a, b),
    "greater_equal": lambda _, a, b: pc.greater_equal(a, b),
    "and": lambda _, a, b: pc.and_kleene(a, b),
    "or": lambda _, a, b: pc.or_kleene(a, b),
    "not": lambda _, a: pc.invert(a),
    "is_null": lambda _, a: pc.is_null(a),
    "is_nan": lambda _, a: pc.is_nan(a),
    "if_else": lambda _, c, a, b: pc.if_else(c, a, b),
    "cast": lambda to, a: pc.cast(a, to),
    "coalesce": lambda _, *a: pc.coalesce(*a),
    "like": lambda pattern, a: pc.match_like(a, pattern),
    "in": _in,
    "length": lambda _, a: pc.utf8_length(a),
    "case": _case,
    "struct": lambda names, *a: pc.make_struct(*a, field_names=names),
}


def evaluate(expr: Expr, batch: pa.RecordBatch) -> Value:
    """``expr`` over ``batch``: an array of its length, or a scalar when it reads no column."""
    if isinstance(expr, Column):
        return batch.column(expr.name)
    if isinstance(expr, Literal):
        return pa.scalar(expr.value, expr.type)
    return KERNELS[expr.function](expr.option, *(evaluate(a, batch) for a in expr.args))


def as_array(value: Value, length: int) -> pa.Array:
    """``value`` as an array of ``length`` rows (a scalar repeated)."""
    if isinstance(value, pa.Array):
        return value
    if isinstance(value, pa.ChunkedArray):
        return value.combine_chunks()
    if not value.is_valid:
        return pa.nulls(length, value.type)
    return pa.nulls(length, value.type).fill_null(value)


@dataclass(frozen=True)
class Program:
    """A stateless SELECT: keep the rows where ``where`` is true, then compute ``columns``
    (one expression per output field of ``schema``) over them."""

    where: Expr | None
    columns: tuple[Expr, ...]
    schema: pa.Schema
    _read: list[str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        read = {c.name for e in (self.where, *self.columns) if e is not None for c in _columns(e)}
        object.__setattr__(self, "_read", sorted(read))

    def run(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        if self.where is not None:
            # Only the columns read are filtered: the others would be copied for nothing.
            batch = batch.select(self._read)
            mask = evaluate(self.where, batch)
            if isinstance(mask, pa.Scalar):
                if not mask.as_py():
                    return pa.RecordBatch.from_pylist([], schema=self.schema)
            else:
                batch = batch.filter(mask)  # NULL drops the row, as in WHERE
        if not self.columns:  # SELECT count(*) ... reads no column: only the rows count
            return batch.select([])
        n = batch.num_rows
        arrays = [as_array(evaluate(c, batch), n) for c in self.columns]
        return pa.RecordBatch.from_arrays(arrays, schema=self.schema)

    def __str__(self) -> str:
        cols = ", ".join(f"{c} AS {f.name}" for c, f in zip(self.columns, self.schema, strict=True))
        return f"[{cols}" + (f" WHERE {self.where}]" if self.where is not None else "]")


def _columns(e: Expr) -> list[Column]:
    if isinstance(e, Column):
        return [e]
    if isinstance(e, Call):
        return [c for a in e.args for c in _columns(a)]
    return []
