"""Scalar Python functions callable from SQL, registered in every DataFusion session.

A function is vectorized: it receives one ``pyarrow.Array`` per argument and returns an
array of the declared type and of the arguments' length; both are checked on every call.
The functions live in one process-wide registry (``register``), so that every session the
planner and the Calc operator create (:func:`session`) knows them, and a plan's types are
the ones its operators compute. A failure inside the function is kept (:func:`take_failure`)
in the failure list of the session that ran it (DataFusion calls it on its own threads), so
the operator can fail the query naming the function, with its traceback.
"""

from __future__ import annotations

import functools
import threading
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import datafusion
import pyarrow as pa
import pyarrow.compute as pc

VOLATILITIES = ("immutable", "stable", "volatile")


class UdfFailure(Exception):
    """A call of function ``name`` failed: ``reason`` says how (types and lengths, or the
    Python exception with its traceback), never the values it was given."""

    def __init__(self, name: str, reason: str) -> None:
        self.name = name
        self.reason = reason
        super().__init__(f"function {name}() {reason}")


@dataclass(frozen=True)
class ScalarUdf:
    """``fn`` called as ``name(args)`` in SQL, taking ``input_types``, returning ``return_type``."""

    name: str
    fn: Callable[..., Any]
    input_types: tuple[pa.DataType, ...]
    return_type: pa.DataType
    volatility: str = "immutable"

    def call(self, failures: list[UdfFailure], *args: pa.Array) -> pa.Array:
        """``fn`` over ``args``, its result checked against the declared type and length; a
        failure is appended to ``failures`` and raised."""
        n = len(args[0]) if args else 1
        try:
            out = self.fn(*args)
        except Exception as exc:
            text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
            failures.append(UdfFailure(self.name, f"raised {type(exc).__name__}:\n{text}"))
            raise failures[-1] from exc
        try:
            return self._checked(out, n)
        except UdfFailure as failure:
            failures.append(failure)
            raise

    def _checked(self, out: Any, n: int) -> pa.Array:
        if isinstance(out, pa.ChunkedArray):
            out = out.combine_chunks()
        if not isinstance(out, pa.Array):
            got = type(out).__name__
            raise UdfFailure(
                self.name, f"must return a pyarrow.Array of {self.return_type}, got {got}"
            )
        if out.type != self.return_type:
            raise UdfFailure(self.name, f"returned {out.type}, expected {self.return_type}")
        if len(out) != n:
            raise UdfFailure(
                self.name, f"returned {len(out)} rows, expected {n} (one per input row)"
            )
        return out

    def to_datafusion(self, failures: list[UdfFailure]) -> datafusion.ScalarUDF:
        def call(*args: pa.Array) -> pa.Array:
            return self.call(failures, *args)

        return datafusion.udf(
            call, list(self.input_types), self.return_type, self.volatility, self.name
        )


_registry: dict[str, ScalarUdf] = {}
_lock = threading.Lock()


def register(udf: ScalarUdf) -> None:
    """Make ``udf`` callable in every session created from now on (replacing one of its name)."""
    with _lock:
        _registry[udf.name] = udf


def registered() -> dict[str, ScalarUdf]:
    """The registered functions, by name."""
    with _lock:
        return dict(_registry)


def session(
    config: datafusion.SessionConfig | None = None, failures: list[UdfFailure] | None = None
) -> datafusion.SessionContext:
    """A DataFusion session that knows every registered function (scalar and aggregate);
    their failures are appended to ``failures``."""
    ctx = datafusion.SessionContext(config) if config is not None else datafusion.SessionContext()
    failures = [] if failures is None else failures
    for udf in registered().values():
        ctx.register_udf(udf.to_datafusion(failures))
    from datum_sql.engine import percentile, udafs, xor_distinct  # udafs imports UdfFailure

    udafs.add_to(ctx, failures)
    for internal in [percentile.datafusion_udf(), *xor_distinct.datafusion_udfs()]:
        ctx.register_udf(internal)
    return ctx


BUILTIN_TYPES = ("SCALAR", "AGGREGATE", "WINDOW", "TABLE")


@functools.cache
def builtin_names(*function_types: str) -> frozenset[str]:
    """The names of DataFusion's own functions, which a registered one may not shadow: of
    the given :data:`BUILTIN_TYPES`, or of every type when none is given."""
    unknown = set(function_types) - set(BUILTIN_TYPES)
    if unknown:
        raise ValueError(f"unknown function types {sorted(unknown)}; known: {BUILTIN_TYPES}")
    routines = _routines()
    if function_types:
        routines = routines.filter(pc.is_in(routines["function_type"], pa.array(function_types)))
    return frozenset(pc.utf8_lower(routines["routine_name"]).to_pylist())


@functools.cache
def _routines() -> pa.Table:
    """(routine_name, function_type) of DataFusion's functions: one query, however many
    selections of them are asked for."""
    config = datafusion.SessionConfig().with_information_schema(True)
    return (
        datafusion.SessionContext(config)
        .sql("SELECT DISTINCT routine_name, function_type FROM information_schema.routines")
        .to_arrow_table()
    )
