"""Kafka: N JSON bids consumed from the real test broker, datum-sql beside raw aiokafka.

This process starts the Tansu broker (the one the tests use, ``tests/kafka_broker.py``); a
child process creates a topic of ``PARTITIONS`` partitions and produces the cached Nexmark
bids as JSON (encoded by DuckDB ``to_json``; bid ``i`` goes to partition ``i % PARTITIONS``,
so every partition is in event-time order). Then, each run in a fresh process of its own:

* ``aiokafka``: the raw client, the baseline — one ``AIOKafkaConsumer`` with the settings
  the kafka source uses, fetching the whole topic with ``getmany``, no decoding (nothing to
  compare);
* ``aiokafka-tuples``: the same, with the consumer handing out ``(offset, timestamp, key,
  value)`` tuples instead of ``ConsumerRecord`` objects, as it does inside the source: the
  floor of the client as datum-sql drives it;
* ``confluent-kafka`` (when installed): librdkafka's ``Consumer.consume(num_messages=...)``
  over the same topic, each message's error checked, no decoding;
* ``datum-sql``: ``CREATE SOURCE ... FORMAT PLAIN ENCODE JSON`` bounded at the end offsets
  (``scan.bounded.mode = 'latest'``), the ``tumble_count_sum_max`` SELECT, ``to_arrow()``;
* ``duckdb``: the same windows over the bids in memory: the reference datum-sql's whole
  result must equal (its events/s is in-memory batch work, not Kafka).

Every Kafka clock includes connecting to the broker; the ratio is over aiokafka's.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any

from benchmarks.child import call
from benchmarks.harness import Session, run_benchmark
from benchmarks.nexmark import TUMBLE_COUNT_SUM_MAX, TUMBLE_COUNT_SUM_MAX_DUCKDB
from benchmarks.spec import Benchmark, bids

PARTITIONS = 4
TOPIC = "bids"

#: the raw clients beside datum-sql (confluent-kafka where it is installed: the dev extra)
RAW_CLIENTS = {
    "aiokafka": "benchmarks.kafka_clients:prepare_raw",
    "aiokafka-tuples": "benchmarks.kafka_clients:prepare_raw_tuples",
    **(
        {"confluent-kafka": "benchmarks.kafka_clients:prepare_confluent"}
        if importlib.util.find_spec("confluent_kafka")
        else {}
    ),
}

BENCHMARKS = [
    Benchmark(
        "kafka_json_tumble", "kafka",
        f"JSON bids from a {PARTITIONS}-partition topic, tumble_count_sum_max, against raw aiokafka",
        bids, TUMBLE_COUNT_SUM_MAX, TUMBLE_COUNT_SUM_MAX_DUCKDB,
        engines=("datum-sql", *RAW_CLIENTS, "duckdb"), baseline="aiokafka",
        runners={"datum-sql": "benchmarks.kafka_clients:prepare_datum", **RAW_CLIENTS},
    )
]  # fmt: skip


def _broker_class() -> Any:
    """The test suite's broker helper (tests/ is not a package: put it on the path)."""
    tests = str(Path(__file__).resolve().parents[1] / "tests")
    if tests not in sys.path:
        sys.path.insert(0, tests)
    from kafka_broker import KafkaBroker

    return KafkaBroker


def print_reader_ratios(records: list[dict[str, Any]]) -> None:
    """datum-sql's events/s over each raw client's (the table gives only aiokafka's: the
    raw clients' results are counts, not compared with DuckDB's)."""
    rate = {r["engine"]: r["events_per_s"] for r in records if not r["error"]}
    ours = rate.get("datum-sql")
    if not ours:
        return
    shown = [f"{ours / rate[e]:.2f}x {e}" for e in RAW_CLIENTS if rate.get(e)]
    print("   datum-sql over each raw client: " + ", ".join(shown))


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
        records = run_benchmark(bench, events, session, params=params)
        print_reader_ratios(records)
        return records
    finally:
        broker.stop()


__all__ = ["BENCHMARKS", "PARTITIONS", "RAW_CLIENTS", "print_reader_ratios", "run_group"]
