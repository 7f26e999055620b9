"""The operator contract.

An operator sees Arrow record batches, watermarks (int64 microseconds) and bytes, nothing
else. One method is required, :meth:`Operator.on_batch`; the lifecycle hooks default to
no-ops so a stateless operator is a few lines. Every hook returns the batches it emits.

Ports: a multi-input operator (a join) receives ``port`` = the index of the input the
batch or watermark came from. The runtime forwards min(input watermarks) downstream
after :meth:`on_watermark` returns, through :meth:`output_watermark` (which an operator
that delays the watermark overrides).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import Any, ClassVar, TypeVar

import pyarrow as pa

from datum_sql.errors import PlanError


class Operator(ABC):
    """One step of the data path: batches in, batches out."""

    #: Bumped when the snapshot encoding changes; restore refuses what it cannot read.
    STATE_VERSION: ClassVar[int] = 1
    #: Input ports read again from their start each time the query (re)starts (a lookup
    #: table): the snapshot leaves their rows out, and the runtime restores no position,
    #: clock or watermark upstream of them.
    REREAD_PORTS: ClassVar[tuple[int, ...]] = ()
    #: True when a watermark makes this operator's results final (a window closes, a join
    #: forgets rows): a row behind the watermark could only be wrong here. The runtime asks
    #: :attr:`closes_on_watermark` (one operator kind may do both).
    CLOSES_ON_WATERMARK: ClassVar[bool] = False

    def __init__(self, name: str, config: dict[str, Any], inputs: list[pa.Schema]) -> None:
        self.name = name
        self.config = config
        self.inputs = inputs

    @property
    def closes_on_watermark(self) -> bool:
        return self.CLOSES_ON_WATERMARK

    @property
    @abstractmethod
    def output_schema(self) -> pa.Schema:
        """The schema of every batch this operator emits."""

    @abstractmethod
    def on_batch(self, batch: pa.RecordBatch, port: int = 0) -> list[pa.RecordBatch]:
        """Process one input batch; return what to emit now."""

    def on_watermark(self, watermark: int, port: int = 0) -> list[pa.RecordBatch]:
        """Input ``port``'s watermark advanced to ``watermark``; return what is now final."""
        return []

    def output_watermark(self, watermark: int) -> int:
        """The watermark forwarded downstream when the inputs' minimum is ``watermark``."""
        return watermark

    def on_close(self) -> list[pa.RecordBatch]:
        """Every input ended (after their final +inf watermark); flush what is left."""
        return []

    def snapshot(self) -> bytes | None:
        """The operator's state (Arrow IPC), or None when it has none."""
        return None

    def restore(self, data: bytes) -> None:
        """Load state written by :meth:`snapshot`."""

    def state_size(self) -> tuple[int, int]:
        """(rows, bytes) of state held, for status and limits."""
        return (0, 0)

    def describe(self) -> dict[str, Any]:
        """Operator-specific progress (open windows, rows waiting), JSON-able."""
        return {}


OpT = TypeVar("OpT", bound=type[Operator])
_REGISTRY: dict[str, type[Operator]] = {}


def register(kind: str) -> Callable[[OpT], OpT]:
    """Class decorator: make ``cls`` the implementation of job-graph operator ``kind``."""

    def deco(cls: OpT) -> OpT:
        _REGISTRY[kind] = cls
        return cls

    return deco


def operator_class(kind: str) -> type[Operator]:
    from datum_sql.engine import operators  # noqa: F401  (registers the built-ins)

    try:
        return _REGISTRY[kind]
    except KeyError:
        raise PlanError(
            f"no operator registered for {kind!r}; known: {', '.join(sorted(_REGISTRY))}"
        ) from None
