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
    Products that overflow wrap, and the remainder is exact modulo 2**64 all the same.
    Without a negative dividend (ids, counts) the division is unsigned, which numpy does
    about twice as fast; the products and differences are computed in place."""
    valid = None if a.null_count == 0 else np.asarray(a.is_valid())
    x = a.to_numpy(zero_copy_only=False) if valid is None else a.fill_null(0).to_numpy()
    if not len(x) or x.min() >= 0:
        u = x.view(np.uint64)
        q = u // np.uint64(d)
        q *= np.uint64(d)
        r = np.subtract(u, q, out=q).view(np.int64)
    else:
        r = x // d
        r *= d
        np.subtract(x, r, out=r)
        np.subtract(r, d, out=r, where=(r != 0) & (x < 0))
    return pa.array(r, pa.int64(), mask=None if valid is None else ~valid)


#: Up to this many values, an integer ``x IN (...)`` compares with each (numpy, about
#: twice as fast as Arrow's comparisons OR-ed, and than its hash lookup).
FEW_VALUES = 16


def _in(values: tuple[Any, ...], x: Value) -> Value:
    # SQL: NULL IN (...) is NULL (is_in alone says false).
    if isinstance(x, pa.Array) and pa.types.is_integer(x.type) and len(values) <= FEW_VALUES:
        return _in_few(pa.array(values).cast(x.type).to_numpy(), x)
    found = pc.is_in(x, value_set=pa.array(values).cast(x.type))
    if isinstance(x, pa.Scalar) or x.null_count == 0:
        return found
    return pc.if_else(pc.is_valid(x), found, pa.scalar(None, pa.bool_()))


def _in_few(values: np.ndarray, x: pa.Array) -> pa.Array:
    """``x IN (values)`` for an integer ``x`` and a few values of its type: one comparison
    per value, OR-ed in place; NULL where ``x`` is NULL."""
    valid = None if x.null_count == 0 else np.asarray(x.is_valid())
    v = x.to_numpy(zero_copy_only=False) if valid is None else x.fill_null(0).to_numpy()
    found = np.zeros(len(v), np.bool_)
    hit = np.empty(len(v), np.bool_)
    for value in values:
        found |= np.equal(v, value, out=hit)
    return pa.array(found, pa.bool_(), mask=None if valid is None else ~valid)


@dataclass(frozen=True)
class TimeField:
    """One field of a ``to_char`` format: a key of :data:`TIME_FIELDS` (chrono's spelling)."""

    field: str

    def __repr__(self) -> str:
        return f"%{self.field}"


#: The fixed-width chrono fields ``to_char`` computes from date parts, and their widths:
#: year (``Y``, years 0-9999 only), year of century, month, day, day of year, hour (24, 12),
#: minute, second, milli- and microseconds, AM/PM, am/pm, month and weekday abbreviations.
TIME_FIELDS = {
    "Y": 4, "y": 2, "m": 2, "d": 2, "j": 3, "H": 2, "I": 2, "M": 2, "S": 2, "3f": 3, "6f": 6,
    "p": 2, "P": 2, "b": 3, "a": 3,
}  # fmt: skip
_NAMES = {
    "p": ["AM", "PM"],
    "P": ["am", "pm"],
    "b": ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"],
    "a": ["Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"],
}
_NAME_BYTES = {k: np.frombuffer("".join(v).encode(), np.uint8).reshape(len(v), -1)
               for k, v in _NAMES.items()}  # fmt: skip
_DAY_FIELDS = frozenset("Yymdjba")
_TICKS = {"s": 1, "ms": 1_000, "us": 1_000_000, "ns": 1_000_000_000}
#: Days from 1970-01-01 to 0000-01-01 and to 9999-12-31: chrono writes other years with a
#: sign or a fifth digit, which DataFusion evaluates.
_FIRST_DAY, _LAST_DAY = -719_528, 2_932_896


def _civil(days: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(year, month, day, day of year) of days since 1970-01-01, proleptic Gregorian
    (H. Hinnant's ``civil_from_days``: eras of 400 years counted from March 1st)."""
    z = days + 719_468
    era = z // 146_097
    doe = z - era * 146_097
    yoe = (doe - doe // 1460 + doe // 36_524 - doe // 146_096) // 365
    doy_march = doe - (365 * yoe + yoe // 4 - yoe // 100)
    mp = (5 * doy_march + 2) // 153
    day = doy_march - (153 * mp + 2) // 5 + 1
    month = np.where(mp < 10, mp + 3, mp - 9)
    year = yoe + era * 400 + (month <= 2)
    # day of year: March-based day, shifted to start on January 1st
    leap = (year % 4 == 0) & ((year % 100 != 0) | (year % 400 == 0))
    doy = np.where(month <= 2, doy_march - 305, doy_march + 60 + leap)
    return year, month, day, doy


def _to_char(parts: tuple[str | TimeField, ...], x: Value) -> Value:
    """``to_char`` with a format of fixed-width fields: every row's text has the same
    length, so the UTF-8 bytes fill one (rows, width) buffer, run by run (see
    :func:`_run_text`). A batch with a year outside 0-9999, or a zoned instant outside
    nanoseconds, raises ArrowInvalid: DataFusion then evaluates it, in its own way."""
    if isinstance(x, pa.Scalar):
        return _to_char(parts, pa.array([x], x.type))[0]
    n = len(x)
    date = pa.types.is_date32(x.type)
    v = x.cast(pa.int32() if date else pa.int64())
    v = (v.fill_null(0) if x.null_count else v).to_numpy().astype(np.int64, copy=False)
    tps = 1 if date else _TICKS[x.type.unit]
    days = v if date else v // (86_400 * tps)
    if n and (days.min() < _FIRST_DAY or days.max() > _LAST_DAY):
        raise pa.ArrowInvalid("to_char: a year outside 0-9999")
    if not date and x.type.tz is not None and tps < 1_000_000_000:
        # DataFusion formats a zoned timestamp through nanoseconds, and fails outside them
        limit = (2**63 - 1) // (1_000_000_000 // tps)
        if n and (v.min() < -limit or v.max() > limit):
            raise pa.ArrowInvalid("to_char: a zoned timestamp outside the nanosecond range")
    tod = np.zeros(n, np.int64) if date else v - days * (86_400 * tps)
    blocks = [
        _run_text(run, days if on_days else tod, tps, on_days) for on_days, run in _runs(parts)
    ]
    data = blocks[0] if len(blocks) == 1 else np.concatenate(blocks, axis=1)
    width = data.shape[1]
    if n * width >= 2**31:
        raise pa.ArrowInvalid("to_char: the batch's text exceeds 2 GiB")
    offsets = np.arange(n + 1, dtype=np.int32) * np.int32(width)
    validity = x.is_valid().buffers()[1] if x.null_count else None
    buffers = [validity, pa.py_buffer(offsets), pa.py_buffer(np.ascontiguousarray(data))]
    return pa.Array.from_buffers(pa.string(), n, buffers, null_count=x.null_count)


def _runs(parts: tuple[str | TimeField, ...]) -> list[tuple[bool, list[str | TimeField]]]:
    """``parts`` cut into runs of date fields or of time-of-day fields (True: a date run),
    literal text joining the run it follows (or the first run)."""
    runs: list[tuple[bool, list[str | TimeField]]] = []
    text: list[str | TimeField] = []
    for p in parts:
        if isinstance(p, str):
            (runs[-1][1] if runs else text).append(p)
            continue
        on_days = p.field in _DAY_FIELDS
        if not runs or runs[-1][0] != on_days:
            runs.append((on_days, text))
            text = []
        runs[-1][1].append(p)
    return runs or [(True, text)]


def _resolution(run: list[str | TimeField], tps: int) -> int:
    """Ticks per unit of the finest time-of-day field of ``run``."""
    units = {"6f": max(tps // 1_000_000, 1), "3f": max(tps // 1000, 1), "S": tps, "M": 60 * tps}
    return min(units.get(p.field, 3600 * tps) for p in run if isinstance(p, TimeField))


def _run_text(run: list[str | TimeField], src: np.ndarray, tps: int, on_days: bool) -> np.ndarray:
    """The (rows, width) UTF-8 text of one run over ``src`` (days, or ticks of the day).
    When a batch spans fewer units (days, or the run's finest time unit) than half its
    rows, the text of each unit is rendered once and gathered."""
    n = len(src)
    res = 1 if on_days else _resolution(run, tps)
    key = src // res if res > 1 else src
    if n:
        lo, hi = int(key.min()), int(key.max())
        if hi - lo < n // 2:
            units = np.arange(lo, hi + 1, dtype=np.int64) * res
            return _render(run, units, tps, on_days)[key - lo]
    return _render(run, src, tps, on_days)


def _render(run: list[str | TimeField], src: np.ndarray, tps: int, on_days: bool) -> np.ndarray:
    """The (rows, width) UTF-8 text of ``run`` for each value of ``src``, field by field."""
    fields = {p.field for p in run if isinstance(p, TimeField)}
    values: dict[str, np.ndarray] = {}
    if on_days:
        year, month, day, doy = _civil(src)
        values.update(Y=year, y=year % 100, m=month, d=day, j=doy, b=month - 1)
        values["a"] = (src + 4) % 7  # 1970-01-01 was a Thursday
    elif fields:
        secs = src // tps
        frac = src - secs * tps
        hour = secs // 3600
        values.update(H=hour, I=(hour + 11) % 12 + 1, M=secs // 60 % 60, S=secs % 60)
        values.update(p=hour // 12, P=hour // 12)
        values["3f"] = frac * 1000 // tps
        values["6f"] = frac * 1_000_000 // tps
    encoded = [p.encode() if isinstance(p, str) else p for p in run]
    width = sum(len(p) if isinstance(p, bytes) else TIME_FIELDS[p.field] for p in encoded)
    buf = np.empty((len(src), width), np.uint8)
    at = 0
    for p in encoded:
        if isinstance(p, bytes):
            buf[:, at : at + len(p)] = np.frombuffer(p, np.uint8)
            at += len(p)
            continue
        w = TIME_FIELDS[p.field]
        if p.field in _NAME_BYTES:
            buf[:, at : at + w] = _NAME_BYTES[p.field][values[p.field]]
        else:
            rest = values[p.field]
            for k in range(w - 1, -1, -1):
                rest, digit = np.divmod(rest, 10)
                buf[:, at + k] = digit + 48
        at += w
    return buf


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
    "to_char": _to_char,
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
