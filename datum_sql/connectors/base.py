"""The contract between the runtime and the outside world.

A :class:`Source` is opened at a position (``None`` = its configured start), yields Arrow
record batches (and, optionally, :class:`~datum_sql.types.Watermark` markers), and reports
the position *after* the last item it yielded, so a checkpoint can resume exactly there.

A :class:`Sink` receives batches and takes part in a two-phase commit: ``pre_commit``
makes everything written so far durable but invisible and returns a small JSON-able
record of it; ``commit`` publishes it; ``abort`` throws away what was not committed.
Sinks that cannot stage (callbacks, Kafka) publish on ``write`` and are at-least-once.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar, TypeAlias

import pyarrow as pa

from datum_sql.redaction import redact
from datum_sql.types import Watermark


@dataclass(frozen=True)
class SplitBatch:
    """A batch from one split of a source (a Kafka partition, a file).

    The runtime tracks event time and watermarks per split; a plain ``pa.RecordBatch``
    from :meth:`Source.read` belongs to the split ``""``.
    """

    split: str
    batch: pa.RecordBatch


@dataclass(frozen=True)
class RejectedRecords:
    """Records a source could not decode, under a ``bad_records`` policy of ``skip`` or
    ``dead_letter``: the runtime counts them and routes them to the dead-letter sink.

    ``batch`` has at least the columns ``raw`` (binary), ``reason`` (string) and
    ``position`` (string: where the record was, e.g. ``topic/partition/offset``).
    """

    batch: pa.RecordBatch


@dataclass(frozen=True)
class SplitEnded:
    """A split will yield no more rows here (a Kafka partition revoked by a rebalance, or
    read to its end in bounded mode): it stops holding back the source's watermark."""

    split: str


SourceItem: TypeAlias = pa.RecordBatch | SplitBatch | Watermark | RejectedRecords | SplitEnded


@dataclass(frozen=True)
class StagedCheck:
    """What a sink finds, before recovery commits anything, about the output a checkpoint
    staged: which staged files are damaged or gone (one message each, naming the file), and
    whether any of that output is already published (a commit of it ran, maybe in part)."""

    damaged: tuple[str, ...] = ()
    published: bool = False


@dataclass
class ConnectorSpec:
    """What a connector factory receives: the table's name, schema and options."""

    name: str
    options: dict[str, Any]
    schema: pa.Schema | None = None
    format: str | None = None
    encode: str | None = None
    event_time: str | None = None
    #: Python objects that cannot live in options (an Arrow table, a callback).
    obj: Any = None
    extra: dict[str, Any] = field(default_factory=dict)
    #: The name of the streaming query the connector serves (None outside one: batch
    #: reads, samples). A Kafka source derives its default consumer group id from it.
    query: str | None = None
    #: The columns the query reads (in the schema's order), None: all. A source may
    #: produce only these; the runtime selects them from batches that carry more.
    columns: tuple[str, ...] | None = None

    def __repr__(self) -> str:
        return f"ConnectorSpec(name={self.name!r}, options={redact(self.options)!r})"


class Source(ABC):
    """A table's rows as a stream of Arrow record batches."""

    #: Options this connector understands (name -> one-line description). A name ending
    #: in ``.*`` admits every option with that prefix.
    OPTIONS: ClassVar[dict[str, str]] = {}
    REQUIRED: ClassVar[tuple[str, ...]] = ()

    def __init__(self, spec: ConnectorSpec) -> None:
        self.spec = spec
        self.name = spec.name

    @property
    @abstractmethod
    def schema(self) -> pa.Schema:
        """The schema of every batch :meth:`read` yields."""

    @property
    def bounded(self) -> bool:
        """True when :meth:`read` ends by itself."""
        return True

    async def open(self, position: dict[str, Any] | None) -> None:
        """Prepare to read from ``position`` (as returned by :meth:`position`), or the start."""

    @abstractmethod
    def read(self) -> AsyncIterator[SourceItem]:
        """Yield batches (and optional watermark markers) until the source ends."""

    def position(self) -> dict[str, Any]:
        """JSON-able position just after the last item yielded."""
        return {}

    async def commit(self, position: dict[str, Any]) -> None:
        """A checkpoint covering ``position`` was published (Kafka commits offsets here)."""

    async def close(self) -> None:
        """Release connections and files."""

    def metrics(self) -> dict[str, Any]:
        """Connector-specific status (lag, files read, ...), JSON-able."""
        return {}


async def data_batches(source: Source) -> AsyncGenerator[pa.RecordBatch, None]:
    """The rows ``source`` reads from its start, batch by batch: its markers (watermarks,
    rejected records, split ends) and empty batches left out. The source is opened first
    and closed when the iteration ends or is closed early (``contextlib.aclosing``)."""
    await source.open(None)
    reader = source.read()
    try:
        async for item in reader:
            batch = item.batch if isinstance(item, SplitBatch) else item
            if isinstance(batch, pa.RecordBatch) and batch.num_rows:
                yield batch
    finally:
        aclose = getattr(reader, "aclose", None)
        if aclose is not None:
            await aclose()
        await source.close()


class Sink(ABC):
    """Where the rows of a query go."""

    OPTIONS: ClassVar[dict[str, str]] = {}
    REQUIRED: ClassVar[tuple[str, ...]] = ()
    #: True when the sink can apply a changelog (``_op`` column with -U/+U/-D rows).
    ACCEPTS_CHANGELOG: ClassVar[bool] = False
    #: True when pre_commit/commit make the output exactly-once.
    EXACTLY_ONCE: ClassVar[bool] = False

    def __init__(self, spec: ConnectorSpec) -> None:
        self.spec = spec
        self.name = spec.name

    @property
    def accepts_changelog(self) -> bool:
        return self.ACCEPTS_CHANGELOG

    @property
    def declared_schema(self) -> pa.Schema | None:
        """The schema the sink insists on, if it has one (a declared column list, a table)."""
        return self.spec.schema

    async def open(self, schema: pa.Schema) -> None:
        """Prepare to receive batches of ``schema``."""

    @abstractmethod
    async def write(self, batch: pa.RecordBatch) -> None:
        """Accept one batch (staged until commit for exactly-once sinks)."""

    async def pre_commit(self, checkpoint_id: int) -> dict[str, Any]:
        """Make everything written so far durable but unpublished; describe it (JSON-able).

        The record covers every pre-committed output not yet committed (an earlier
        checkpoint whose commit never ran is carried by the next one).
        """
        return {}

    async def commit(self, checkpoint_id: int, staged: dict[str, Any] | None = None) -> None:
        """Publish what :meth:`pre_commit` staged. Idempotent: recovery may repeat it."""

    async def verify_staged(self, checkpoint_id: int, staged: dict[str, Any]) -> StagedCheck:
        """Recovery, before any sink commits: check the output ``staged`` by checkpoint
        ``checkpoint_id`` against the checksums its record carries."""
        return StagedCheck()

    def snapshot(self) -> bytes | None:
        """State kept in the checkpoint itself, or None: a sink that holds its output in
        memory (a materialized view's result) has its output restored from it."""
        return None

    def restore(self, data: bytes) -> None:
        """Load what :meth:`snapshot` wrote, before the query reads on."""
        raise NotImplementedError(f"sink {self.name!r} keeps no state in checkpoints")

    async def abort(self) -> None:
        """Throw away what was written since the last :meth:`pre_commit`."""

    async def discard_uncommitted(self, keep: set[str]) -> None:
        """Recovery: delete staged output that no published checkpoint refers to."""

    async def close(self) -> None:
        """Release files and connections; called after the last commit."""

    def metrics(self) -> dict[str, Any]:
        return {}


SourceFactory = Callable[[ConnectorSpec], Source]
SinkFactory = Callable[[ConnectorSpec], Sink]
