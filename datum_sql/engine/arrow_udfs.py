"""Registered scalar functions as ``pyarrow.compute`` functions, so that an expression the
planner compiles to ``pyarrow.compute`` (a join's residual ON filter) can call them.

Each :class:`~datum_sql.engine.udfs.ScalarUdf` gets its own name in pyarrow's process-wide
function registry (registered once, never replaced: a function registered again under the
same SQL name is a new object and gets a new kernel name). The kernel calls
:meth:`ScalarUdf.call`, so types and lengths are checked as in DataFusion, and a failure
propagates as the :class:`~datum_sql.engine.udfs.UdfFailure` it raised.
"""

from __future__ import annotations

import itertools
import threading
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from datum_sql.engine.udfs import ScalarUdf, UdfFailure

_kernels: dict[int, tuple[ScalarUdf, str]] = {}
_counter = itertools.count(1)
_lock = threading.Lock()


def call(udf: ScalarUdf, args: list[pc.Expression]) -> pc.Expression:
    """``udf(args)`` as a ``pyarrow.compute`` expression; each argument is cast (safely:
    a value that does not fit fails) to the declared input type."""
    cast = [
        pc.Expression._call("cast", [a], pc.CastOptions.safe(t))
        for a, t in zip(args, udf.input_types, strict=True)
    ]
    return pc.Expression._call(_kernel(udf), cast)


def _kernel(udf: ScalarUdf) -> str:
    with _lock:
        known = _kernels.get(id(udf))
        if known is not None and known[0] is udf:
            return known[1]
        name = f"{udf.name}.udf{next(_counter)}"
        pc.register_scalar_function(
            _vectorized(udf),
            name,
            {"summary": f"SQL function {udf.name}()", "description": "a registered Python UDF"},
            {f"arg{i}": t for i, t in enumerate(udf.input_types)},
            udf.return_type,
        )
        _kernels[id(udf)] = (udf, name)
        return name


def _vectorized(udf: ScalarUdf) -> Any:
    def kernel(ctx: Any, *args: pa.Array | pa.Scalar) -> pa.Array | pa.Scalar:
        n = ctx.batch_length
        scalar = all(isinstance(a, pa.Scalar) for a in args)
        arrays = [_broadcast(a, 1 if scalar else n) for a in args]
        failures: list[UdfFailure] = []
        out = udf.call(failures, *arrays)
        return out[0] if scalar else out

    return kernel


def _broadcast(value: pa.Array | pa.Scalar, n: int) -> pa.Array:
    if isinstance(value, pa.Scalar):  # a literal argument, repeated as DataFusion does
        return pa.repeat(value, n)
    return value
