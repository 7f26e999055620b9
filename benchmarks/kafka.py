"""Kafka: N JSON bids consumed from the real test broker, datum-sql beside raw aiokafka.

This process starts the Tansu broker (the one the tests use, ``tests/kafka_broker.py``); a
child process creates a topic of ``PARTITIONS`` partitions and produces the cached Nexmark
bids as JSON (encoded by DuckDB ``to_json``; bid ``i`` goes to partition ``i % PARTITIONS``,
so every partition is in event-time order). Then, each run in a fresh process of its own:

* ``aiokafka``: the practical limit — one ``AIOKafkaConsumer`` with the settings the kafka
  source uses, fetching the whole topic with ``getmany``, no decoding (nothing to compare);
* ``datum-sql``: ``CREATE SOURCE ... FORMAT PLAIN ENCODE JSON`` bounded at the end offsets
  (``scan.bounded.mode = 'latest'``), the ``tumble_count_sum_max`` SELECT, ``to_arrow()``;
* ``duckdb``: the same windows over the bids in memory: the reference datum-sql's whole
  result must equal (its events/s is in-memory batch work, not Kafka).

Both Kafka clocks include connecting to the broker; the ratio is datum-sql over aiokafka.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from benchmarks.child import call
from benchmarks.harness import Session, run_benchmark
from benchmarks.nexmark import TUMBLE_COUNT_SUM_MAX, TUMBLE_COUNT_SUM_MAX_DUCKDB
from benchmarks.spec import Benchmark, bids

PARTITIONS = 4
TOPIC = "bids"

BENCHMARKS = [
    Benchmark(
        "kafka_json_tumble", "kafka",
        f"JSON bids from a {PARTITIONS}-partition topic, tumble_count_sum_max, against raw aiokafka",
        bids, TUMBLE_COUNT_SUM_MAX, TUMBLE_COUNT_SUM_MAX_DUCKDB,
        engines=("datum-sql", "aiokafka", "duckdb"), baseline="aiokafka",
        runners={"datum-sql": "benchmarks.kafka_clients:prepare_datum",
                 "aiokafka": "benchmarks.kafka_clients:prepare_raw"},
    )
]  # fmt: skip


def _broker_class() -> Any:
    """The test suite's broker helper (tests/ is not a package: put it on the path)."""
    tests = str(Path(__file__).resolve().parents[1] / "tests")
    if tests not in sys.path:
        sys.path.insert(0, tests)
    from kafka_broker import KafkaBroker

    return KafkaBroker


def run_group(events: int, session: Session) -> list[dict[str, Any]]:
    """Start the broker, produce ``events`` bids from a child, run the benchmark."""
    (bench,) = BENCHMARKS
    spec = bench.inputs(events)["bids"]
    call("benchmarks.inputs:ensure", {"dataset": spec.dataset, "rows": spec.rows,
                                      "seed": spec.seed})  # fmt: skip
    broker = _broker_class().start()
    try:
        params = {"bootstrap": broker.bootstrap, "topic": TOPIC, "partitions": PARTITIONS}
        produced = call("benchmarks.kafka_clients:produce", {**params, "events": events})
        print(
            f"\nkafka: produced {produced['records']:,} JSON bids to {PARTITIONS} partitions "
            f"in {produced['seconds']:.1f} s"
        )
        return run_benchmark(bench, events, session, params=params)
    finally:
        broker.stop()


__all__ = ["BENCHMARKS", "PARTITIONS", "run_group"]
