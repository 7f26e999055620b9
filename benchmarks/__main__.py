"""``python -m benchmarks [names...] [--events N] [--kafka-events N]``: run benchmarks, print
a table. Names are Nexmark queries, or ``kafka`` (the Kafka group: starts the test broker)."""

from __future__ import annotations

import argparse

from benchmarks import kafka
from benchmarks.harness import HEADER, run_isolated
from benchmarks.nexmark import QUERIES

GROUPS = ("kafka", "joins", "state", "checkpoints")


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks")
    parser.add_argument(
        "names",
        nargs="*",
        help=f"benchmarks to run (default: all): {', '.join([*QUERIES, *GROUPS])}",
    )
    parser.add_argument("--events", type=int, default=5_000_000)
    parser.add_argument(
        "--kafka-events", type=int, default=1_000_000, help="bids produced for the kafka group"
    )
    args = parser.parse_args()
    names = args.names or [*QUERIES, *GROUPS]
    unknown = [n for n in names if n not in QUERIES and n not in GROUPS]
    if unknown:
        parser.error(f"unknown benchmark(s) {', '.join(unknown)}")
    queries = [n for n in names if n in QUERIES]
    if queries:
        print(HEADER)
    for name in queries:
        result = run_isolated("benchmarks.nexmark", "query", {"query": name, "events": args.events})
        print(result.line(), flush=True)
    if "kafka" in names:
        if queries:
            print()
        kafka.main(args.kafka_events)
    if "joins" in names:
        from benchmarks import joins

        if queries or "kafka" in names:
            print()
        joins.main()
    if "checkpoints" in names:
        from benchmarks import checkpoints

        if queries or "kafka" in names or "joins" in names:
            print()
        checkpoints.main()
    if "state" in names:  # window state purged by watermarks: RSS over N and 10x N events
        from benchmarks import window_state

        if queries or "kafka" in names or "joins" in names:
            print()
        window_state.main()


if __name__ == "__main__":
    main()
