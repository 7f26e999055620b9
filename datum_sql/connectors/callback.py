"""A Python callable as a sink (``connector = 'callback'``, registered from Python).

At-least-once: the callback sees each batch as it is written, before any checkpoint
covers it, so after a crash and recovery it may see rows again (the ones produced since
the last checkpoint). Make it idempotent, or use an exactly-once sink (files, DuckDB).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any, ClassVar

import pyarrow as pa

from datum_sql.connectors.base import ConnectorSpec, Sink
from datum_sql.connectors.registry import sink
from datum_sql.errors import PlanError, SinkError


def _target(obj: Any) -> Callable[[pa.RecordBatch], Any] | None:
    """``obj.write`` for an object with a write method, else ``obj`` when callable."""
    write = getattr(obj, "write", None)
    if callable(write):
        return write  # type: ignore[no-any-return]
    return obj if callable(obj) else None


@sink("callback")
class CallbackSink(Sink):
    """Calls ``spec.obj`` with every ``pyarrow.RecordBatch``: a function (sync or async),
    or an object with a ``write(batch)`` method. Append-only (``register_append_sink``):
    a changelog query is refused at planning; iterate a streaming SELECT to see one."""

    OPTIONS: ClassVar[dict[str, str]] = {}
    ACCEPTS_CHANGELOG: ClassVar[bool] = False
    EXACTLY_ONCE: ClassVar[bool] = False

    def __init__(self, spec: ConnectorSpec) -> None:
        super().__init__(spec)
        fn = _target(spec.obj)
        if fn is None:
            raise PlanError(
                f"{spec.name}: a callback sink needs a function taking a pyarrow.RecordBatch "
                f"or an object with a write(batch) method, got {type(spec.obj).__name__}"
            )
        self._fn = fn
        self._batches = 0
        self._rows = 0

    async def write(self, batch: pa.RecordBatch) -> None:
        try:
            result = self._fn(batch)
            if inspect.isawaitable(result):
                await result
        except Exception as exc:
            what = getattr(self._fn, "__qualname__", type(self._fn).__name__)
            raise SinkError(
                f"sink {self.name!r}: callback {what} raised {type(exc).__name__}: {exc}"
            ) from exc
        self._batches += 1
        self._rows += batch.num_rows

    def metrics(self) -> dict[str, Any]:
        return {"batches": self._batches, "rows_written": self._rows}
