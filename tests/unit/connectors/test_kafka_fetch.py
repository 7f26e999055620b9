"""The Kafka source's hook into aiokafka's fetcher (plain record tuples) is optional: where
aiokafka's private fetcher names are not there, the hook reports False and changes
nothing, and the source converts ConsumerRecords instead (the e2e tests read both ways)."""

from __future__ import annotations

import sys
from collections import OrderedDict
from types import SimpleNamespace

import pytest

from datum_sql.connectors.kafka.fetch import _PlainResults, plain_records


def _consumer() -> SimpleNamespace:
    return SimpleNamespace(_fetcher=SimpleNamespace(_records=OrderedDict()))


def test_the_hook_replaces_the_fetchers_buffer() -> None:
    consumer = _consumer()
    assert plain_records(consumer) is True
    assert isinstance(consumer._fetcher._records, _PlainResults)


def test_without_aiokafkas_fetcher_module_the_hook_declines(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "aiokafka.consumer.fetcher", None)  # import fails
    consumer = _consumer()
    buffered = consumer._fetcher._records
    assert plain_records(consumer) is False
    assert consumer._fetcher._records is buffered


def test_an_unexpected_buffer_is_left_alone() -> None:
    consumer = SimpleNamespace(_fetcher=SimpleNamespace(_records={}))
    assert plain_records(consumer) is False
    assert type(consumer._fetcher._records) is dict
