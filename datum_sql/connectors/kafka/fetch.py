"""aiokafka fetches as plain ``(offset, timestamp, key, value)`` tuples.

``AIOKafkaConsumer.getmany()`` wraps every record of a fetch in a ``ConsumerRecord``
dataclass (eleven fields and a tuple of headers, built in Python), and those objects, kept
in the fetch's lists until it is decoded, are containers the cyclic garbage collector
follows: surviving its young generations, they trigger full collections, whose cost grows
with everything else the process holds (in a query: pyarrow, DataFusion, DuckDB). Measured
on the benchmark topic, the two together are most of the client's CPU per message.

:func:`plain_records` makes one consumer's ``getmany()`` return, per record, the tuple
``(offset, timestamp, key, value)`` read from the record batch's own record (the
C-extension ``DefaultRecord`` or a legacy record), which dies at once. A tuple of ints and
bytes is untracked by the collector at its first young collection, so nothing piles up
for the full ones. Everything else stays aiokafka's: CRC checks, control batches, aborted
transactions (``isolation.level``), positions, ``max_records``.

This reaches into two private names of aiokafka (``Fetcher._records``,
``PartitionRecords._consumer_record``). When they are not there (another aiokafka
version) :func:`plain_records` says so and :func:`as_plain` turns ``ConsumerRecord``
objects into the same tuples, so the source reads either way.
"""

from __future__ import annotations

from collections import OrderedDict
from operator import itemgetter
from typing import Any

#: a record: (offset, timestamp in epoch ms, key, value)
Record = tuple[int, int, bytes | None, bytes | None]

offset_of = itemgetter(0)
timestamp_of = itemgetter(1)
key_of = itemgetter(2)
value_of = itemgetter(3)


def _plain(tp: Any, record: Any) -> Record:
    """Stands in for ``PartitionRecords._consumer_record``."""
    return (record.offset, record.timestamp, record.key, record.value)


class _PlainResults(OrderedDict[Any, Any]):
    """The fetcher's buffer of fetch results; each one stored hands out plain records."""

    def __setitem__(self, tp: Any, result: Any) -> None:
        records = getattr(result, "_partition_records", None)
        if records is not None and hasattr(records, "_consumer_record"):
            records._consumer_record = _plain
        super().__setitem__(tp, result)


def plain_records(consumer: Any) -> bool:
    """After ``consumer.start()``: make its ``getmany()`` return :data:`Record` tuples.
    False when this aiokafka's fetcher does not look as expected (nothing changed)."""
    try:
        from aiokafka.consumer.fetcher import PartitionRecords
    except ImportError:  # another aiokafka layout: the source converts ConsumerRecords
        return False

    fetcher = getattr(consumer, "_fetcher", None)
    buffered = getattr(fetcher, "_records", None)
    if isinstance(buffered, _PlainResults):
        return True
    if type(buffered) is not OrderedDict or not hasattr(PartitionRecords, "_consumer_record"):
        return False
    plain = _PlainResults()
    for tp, result in buffered.items():
        plain[tp] = result
    fetcher._records = plain  # type: ignore[union-attr]
    return True


def as_plain(data: dict[Any, list[Any]]) -> dict[Any, list[Record]]:
    """``getmany()`` results holding ``ConsumerRecord`` objects, as :data:`Record` tuples."""
    return {
        tp: [(m.offset, m.timestamp, m.key, m.value) for m in msgs] for tp, msgs in data.items()
    }
