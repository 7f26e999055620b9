"""Helpers the Kafka end-to-end tests share: topic names, waiting, a collecting sink."""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

import pyarrow as pa


def unique(prefix: str = "t") -> str:
    """A topic (or group) name no other test uses."""
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def wait_for(what: str, check: Callable[[], bool], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.02)


class Collector:
    """A callback sink that keeps every row (thread-safe: the query runs on its own thread)."""

    def __init__(self) -> None:
        self.rows: list[dict[str, Any]] = []
        self._lock = threading.Lock()

    def __call__(self, batch: pa.RecordBatch) -> None:
        with self._lock:
            self.rows.extend(batch.to_pylist())

    def ids(self) -> list[int]:
        with self._lock:
            return [r["id"] for r in self.rows]

    def count(self) -> int:
        with self._lock:
            return len(self.rows)


def committed(broker: Any, topic: str, group: str, partitions: int) -> dict[int, int | None]:
    """The group's committed offsets, asked of the broker without joining the group."""
    from aiokafka import AIOKafkaConsumer, TopicPartition

    async def ask() -> dict[int, int | None]:
        consumer = AIOKafkaConsumer(
            bootstrap_servers=broker.bootstrap, group_id=group, enable_auto_commit=False
        )
        await consumer.start()
        try:
            return {
                p: await consumer.committed(TopicPartition(topic, p)) for p in range(partitions)
            }
        finally:
            await consumer.stop()

    return dict(asyncio.run(ask()))
