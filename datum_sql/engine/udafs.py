"""Aggregate Python functions callable from SQL, registered in every DataFusion session.

A function is an object with ``accumulate(state, *args)``, ``merge(state, other)`` and
``finish(state)`` (and ``retract(state, *args)`` when it can take rows back out). Its
state is declared up front as named Arrow fields and owned by the engine: the streaming
operators keep it in Arrow columns (one row per group, snapshotted with every checkpoint),
and hand the function one group's state as a ``dict`` of Python values together with that
group's new rows as ``pyarrow.Array`` s, one per argument. Whatever the function returns
is checked against the declared state and return types before the engine keeps it.

:class:`AggregateUdf` calls the function over many groups at once: one call per group,
never per row, or one call for all of them when the function has the batched form of a
method (``accumulate_groups(state, groups, *args)``, ``merge_groups``, ``finish_groups``,
``retract_groups``: the state as a dict of arrays, one row per group; ``groups`` the
group of each argument row). :meth:`AggregateUdf.to_datafusion` wraps it as a DataFusion
accumulator, so ``ctx.sql`` evaluates the same code. Failures are
:class:`~datum_sql.engine.udfs.UdfFailure` s naming the function and the method.
"""

from __future__ import annotations

import threading
import traceback
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import datafusion
import numpy as np
import pyarrow as pa

from datum_sql.engine.udfs import UdfFailure

#: The methods every aggregate function has; ``retract`` is optional.
METHODS = ("accumulate", "merge", "finish")

State = dict[str, Any]


@dataclass(frozen=True)
class AggregateUdf:
    """``impl`` called as ``name(args)`` in SQL over groups of rows of ``input_types``,
    keeping ``state`` (named fields, starting at ``initial``), returning ``return_type``."""

    name: str
    impl: Any
    input_types: tuple[pa.DataType, ...]
    return_type: pa.DataType
    state: tuple[pa.Field, ...]
    initial: tuple[Any, ...]

    @property
    def retracts(self) -> bool:
        return callable(getattr(self.impl, "retract", None))

    @property
    def state_names(self) -> list[str]:
        return [f.name for f in self.state]

    # -- calls over many groups ---------------------------------------------------------
    def states(self, columns: list[pa.Array]) -> list[State]:
        """The Python state of each row of the state ``columns``."""
        names = self.state_names
        values = [c.to_pylist() for c in columns]
        return [dict(zip(names, row, strict=True)) for row in zip(*values, strict=True)]

    def accumulate(
        self, columns: list[pa.Array], args: list[pa.Array], offsets: np.ndarray, how: str
    ) -> list[pa.Array]:
        """Each group's state (a row of ``columns``) after ``how`` (accumulate or retract)
        of its rows: ``args`` sorted by group, group ``i`` at ``offsets[i]:offsets[i+1]``.
        A group without rows keeps its state: the function never sees an empty array.
        ``{how}_groups``, when the function has it, takes every group in one call."""
        sizes = np.diff(offsets)
        busy = np.flatnonzero(sizes > 0)
        batched = getattr(self.impl, f"{how}_groups", None)
        if batched is not None and len(busy):
            pick = pa.array(busy, pa.int64())
            state = {f.name: c.take(pick) for f, c in zip(self.state, columns)}
            groups = pa.array(np.repeat(np.arange(len(busy)), sizes[busy]), pa.int64())
            got = self.call(f"{how}_groups", batched, state, groups, *args)
            new = self.group_columns(got, len(busy), f"{how}_groups")
            return [scatter(c, busy, a) for c, a in zip(columns, new)]
        if batched is not None:
            return columns
        fn = getattr(self.impl, how)
        out = self.states(columns)
        for i in busy.tolist():
            lo, n = int(offsets[i]), int(sizes[i])
            out[i] = self.call(how, fn, out[i], *(a.slice(lo, n) for a in args))
        return self.to_columns(out, how)

    def merge(self, left: list[pa.Array], right: list[pa.Array]) -> list[pa.Array]:
        """Row by row, the merge of the states ``left`` and ``right`` (equal lengths);
        ``merge_groups``, when the function has it, merges them all in one call."""
        batched = getattr(self.impl, "merge_groups", None)
        if batched is not None:
            names = self.state_names
            got = self.call(
                "merge_groups", batched, dict(zip(names, left)), dict(zip(names, right))
            )
            return self.group_columns(got, len(left[0]), "merge_groups")
        fn = self.impl.merge
        pairs = zip(self.states(left), self.states(right), strict=True)
        return self.to_columns([self.call("merge", fn, a, b) for a, b in pairs], "merge")

    def finish(self, columns: list[pa.Array]) -> pa.Array:
        """The SQL value of each state row (``finish_groups``: all in one call)."""
        batched = getattr(self.impl, "finish_groups", None)
        if batched is not None:
            got = self.call("finish_groups", batched, dict(zip(self.state_names, columns)))
            return self._array(got, self.return_type, len(columns[0]), "finish_groups returned")
        fn = self.impl.finish
        values = [self.call("finish", fn, s) for s in self.states(columns)]
        return checked(values, self.return_type, self.name, "finish returned")

    def group_columns(self, got: Any, n: int, how: str) -> list[pa.Array]:
        """The state columns a ``*_groups`` method returned (a dict of ``n``-row arrays)."""
        names = self.state_names
        if not isinstance(got, Mapping) or set(got) != set(names):
            what = sorted(got) if isinstance(got, Mapping) else type(got).__name__
            raise UdfFailure(
                self.name, f"{how} must return the state as a dict of arrays with keys {names}, "
                f"got {what}"
            )  # fmt: skip
        return [
            self._array(got[f.name], f.type, n, f"{how} returned {f.name!r} as") for f in self.state
        ]

    def _array(self, got: Any, want: pa.DataType, n: int, what: str) -> pa.Array:
        if isinstance(got, pa.ChunkedArray):
            got = got.combine_chunks()
        if not isinstance(got, pa.Array):
            raise UdfFailure(
                self.name, f"{what} {type(got).__name__}, expected a pyarrow.Array of {want}"
            )
        if len(got) != n:
            raise UdfFailure(self.name, f"{what} {len(got)} rows, expected {n} (one per group)")
        if got.type == want:
            return got
        if _fits(got.type, want):
            try:
                return got.cast(want)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
                pass
        raise UdfFailure(self.name, f"{what} {got.type}, expected {want}")

    def to_columns(self, states: list[Any], how: str) -> list[pa.Array]:
        """State columns of the dicts ``states`` returned by method ``how``, checked."""
        names = self.state_names
        for s in states:
            if not isinstance(s, Mapping) or set(s) != set(names):
                got = sorted(s) if isinstance(s, Mapping) else type(s).__name__
                raise UdfFailure(
                    self.name, f"{how} must return the state as a dict with keys {names}, got {got}"
                )
        return [
            checked([s[f.name] for s in states], f.type, self.name, f"{how} returned {f.name!r} as")
            for f in self.state
        ]

    def call(self, how: str, fn: Any, *args: Any) -> Any:
        """``fn(*args)``; an exception becomes a UdfFailure carrying its traceback."""
        try:
            return fn(*args)
        except Exception as exc:
            text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
            raise UdfFailure(self.name, f"{how} raised {type(exc).__name__}:\n{text}") from exc

    # -- batch SQL ------------------------------------------------------------------------
    def to_datafusion(self, failures: list[UdfFailure]) -> datafusion.AggregateUDF:
        """The function as a DataFusion aggregate; its failures are appended to ``failures``."""
        udaf = self

        class Adapter(datafusion.Accumulator):  # type: ignore[misc]
            def __init__(self) -> None:
                self.columns = [pa.array([v], f.type) for v, f in zip(udaf.initial, udaf.state)]

            def _guard(self, step: Any) -> Any:
                try:
                    return step()
                except UdfFailure as failure:
                    failures.append(failure)
                    raise

            def update(self, *values: pa.Array) -> None:
                if len(values[0]):
                    args = [_plain(v) for v in values]
                    self.columns = self._guard(
                        lambda: udaf.accumulate(
                            self.columns, args, np.array([0, len(args[0])]), "accumulate"
                        )
                    )

            def merge(self, states: list[pa.Array]) -> None:
                for i in range(len(states[0])):
                    other = [_plain(s).slice(i, 1) for s in states]
                    self.columns = self._guard(lambda o=other: udaf.merge(self.columns, o))

            def state(self) -> list[pa.Scalar]:
                return [c[0] for c in self.columns]

            def evaluate(self) -> pa.Scalar:
                return self._guard(lambda: udaf.finish(self.columns))[0]

        return datafusion.udaf(
            Adapter,
            list(self.input_types),
            self.return_type,
            [f.type for f in self.state],
            "immutable",
            self.name,
        )


def scatter(column: pa.Array, rows: np.ndarray, values: pa.Array) -> pa.Array:
    """``column`` with its ``rows`` replaced by ``values``."""
    index = np.arange(len(column), dtype=np.int64)
    index[rows] = len(column) + np.arange(len(rows), dtype=np.int64)
    return pa.concat_arrays([column, values.cast(column.type)]).take(pa.array(index))


def _plain(arr: pa.Array | pa.ChunkedArray) -> pa.Array:
    """DataFusion hands strings as views: the classic layout the function was declared with."""
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    if arr.type == pa.string_view():
        return arr.cast(pa.string())
    if arr.type == pa.binary_view():
        return arr.cast(pa.binary())
    return arr


def checked(values: list[Any], want: pa.DataType, name: str, what: str) -> pa.Array:
    """``values`` (Python values or pyarrow scalars) as an array of ``want``: a value of
    another kind (a str for a number, a float for an integer) fails naming both types."""
    try:
        arr = pa.array(values)
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError):
        arr = None
    if arr is not None and _fits(arr.type, want):
        try:
            return arr if arr.type == want else arr.cast(want)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            pass
    raise UdfFailure(name, f"{what} {_got(values, want)}, expected {want}")


def _fits(got: pa.DataType, want: pa.DataType) -> bool:
    """Whether values inferred as ``got`` are values of ``want`` (an integer is a number
    of any kind; NULLs fit everything)."""
    if got == want or pa.types.is_null(got):
        return True
    if pa.types.is_integer(got):
        return pa.types.is_integer(want) or pa.types.is_floating(want) or pa.types.is_decimal(want)
    for test in (pa.types.is_floating, pa.types.is_decimal, pa.types.is_boolean,
                 pa.types.is_timestamp, pa.types.is_date, pa.types.is_time,
                 pa.types.is_duration):  # fmt: skip
        if test(got):
            return test(want)
    if pa.types.is_string(got) or pa.types.is_large_string(got):
        return pa.types.is_string(want) or pa.types.is_large_string(want)
    if pa.types.is_binary(got) or pa.types.is_large_binary(got):
        return pa.types.is_binary(want) or pa.types.is_large_binary(want)
    if pa.types.is_list(got) or pa.types.is_large_list(got):
        lists = pa.types.is_list(want) or pa.types.is_large_list(want)
        return lists and _fits(got.value_type, want.value_type)
    if pa.types.is_struct(got) and pa.types.is_struct(want):
        names = {f.name: f.type for f in want}
        return all(f.name in names and _fits(f.type, names[f.name]) for f in got)
    return False


def _got(values: list[Any], want: pa.DataType) -> str:
    """The type of the first value that is not one of ``want``'s, as the message says it."""
    for v in values:
        try:
            t = pa.array([v]).type
        except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError):
            return type(v).__name__
        if not _fits(t, want):
            return str(t)
    return "values of mixed types"


_registry: dict[str, AggregateUdf] = {}
_lock = threading.Lock()


def register(udaf: AggregateUdf) -> None:
    """Make ``udaf`` callable in every session created from now on (replacing one of its name)."""
    with _lock:
        _registry[udaf.name] = udaf


def registered() -> dict[str, AggregateUdf]:
    """The registered aggregate functions, by name."""
    with _lock:
        return dict(_registry)


def add_to(ctx: datafusion.SessionContext, failures: list[UdfFailure]) -> None:
    """Register every aggregate function in ``ctx``; their failures go to ``failures``."""
    for udaf in registered().values():
        ctx.register_udaf(udaf.to_datafusion(failures))
