"""``python -m benchmarks [names...] [--quick] [--events N] [--runs N]``: run benchmarks.

Names are benchmarks or groups (``nexmark``, ``joins``, ``process``, ``udf``, ``batch``,
``files``, ``kafka``, ``state``, ``checkpoints``, ``file_rerun``; ``files`` includes
``file_rerun``); none runs them all. ``--quick`` is a pass of about 1M events per benchmark.
``python -m benchmarks report`` rewrites the tables of ``benchmarks/README.md`` from
``benchmarks/results.jsonl``; ``python -m benchmarks list`` names every benchmark.

This process only orchestrates: every measured run is a child process (see ``child.py``).
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path

from benchmarks import batch_scan, results
from benchmarks.environment import describe, load_average, machine
from benchmarks.harness import RUNS, Session, run_benchmark
from benchmarks.registry import BENCHMARKS, GROUPS, in_group


@dataclass(frozen=True)
class Sizes:
    """How much each group runs over."""

    nexmark: int  # bids
    joins: int  # rows of both inputs
    kafka: int  # bids through the broker
    state: int  # N of the N-vs-10N window state run
    checkpoint_events: int  # bids replayed per pass of the overhead run
    checkpoint_passes: int
    checkpoint_repeat: int
    checkpoint_keys: int  # groups of the checkpoint-size run


#: the process-function benchmark: 1M events of 10k keys unless --events says otherwise
PROCESS_EVENTS = 1_000_000
FULL = Sizes(5_000_000, 2_000_000, 1_000_000, 1_000_000, 5_000_000, 20, 5, 1_000_000)
#: the checkpoint overhead replays 1M bids 60 times: a few seconds, several 1 s checkpoints
QUICK = Sizes(1_000_000, 1_000_000, 1_000_000, 100_000, 1_000_000, 60, 3, 200_000)


def _names(parser: argparse.ArgumentParser, wanted: list[str]) -> list[str]:
    """The benchmarks and groups asked for, in registry order; unknown names fail."""
    unknown = [n for n in wanted if n not in BENCHMARKS and n not in GROUPS]
    if unknown:
        parser.error(
            f"unknown benchmark(s) {', '.join(unknown)}; groups: {', '.join(GROUPS)}; "
            f"benchmarks: {', '.join(BENCHMARKS)}"
        )
    return wanted or list(GROUPS)


def run(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks",
        epilog="also: 'python -m benchmarks report' rewrites the tables of benchmarks/README.md "
        "from the results file; 'python -m benchmarks list' names every benchmark",
    )
    parser.add_argument("names", nargs="*", help="benchmarks or groups (default: all)")
    parser.add_argument("--quick", action="store_true", help="a pass of about 1M events each")
    parser.add_argument(
        "--events", type=int, help="events of the nexmark, joins, udf, batch and files benchmarks"
    )
    parser.add_argument("--kafka-events", type=int, help="bids produced for the kafka group")
    parser.add_argument("--runs", type=int, default=RUNS, help=f"runs per engine (default {RUNS})")
    parser.add_argument("--results", type=Path, default=results.PATH, help="the JSONL file")
    args = parser.parse_args(argv)
    if args.runs < 1:
        parser.error("--runs must be at least 1")
    names = _names(parser, args.names)
    sizes = QUICK if args.quick else FULL
    events = {
        "nexmark": args.events or sizes.nexmark,
        "joins": args.events or sizes.joins,
        "process": args.events or PROCESS_EVENTS,
        "udf": args.events or sizes.nexmark,
        "batch": args.events or batch_scan.DEFAULT_ROWS,
        "files": args.events or sizes.nexmark,
    }
    session = Session(
        machine(), command=" ".join(["python -m benchmarks", *argv]), quick=args.quick,
        runs=args.runs, results_path=args.results,
    )  # fmt: skip
    print(f"machine: {describe(session.machine)}")
    print(f"load average now: {' '.join(map(str, load_average()))}; run id {session.run_id}")

    chosen = [b for b in BENCHMARKS.values() if b.name in names or b.group in names]
    for bench in chosen:
        if bench.group in events:
            run_benchmark(bench, events[bench.group], session)
    if any(b.group == "kafka" for b in chosen):
        from benchmarks import kafka

        kafka.run_group(args.kafka_events or sizes.kafka, session)
    if "files" in names or "file_rerun" in names:
        from benchmarks import file_ingest

        file_ingest.run_rerun(events["files"], session)
    if "state" in names:
        from benchmarks import window_state

        window_state.run_group(sizes.state, session)
    if "checkpoints" in names:
        from benchmarks import checkpoints

        checkpoints.run_group(sizes, session)

    print(f"\nresults appended to {session.results_path}; load average now "
          f"{' '.join(map(str, load_average()))}")  # fmt: skip
    if session.failures:
        print(f"\nDIFFERENT or FAILED: {', '.join(session.failures)}", file=sys.stderr)
        return 1
    return 0


def main(argv: list[str]) -> int:
    if argv[:1] == ["report"]:
        from benchmarks import report

        return report.main(argv[1:])
    if argv[:1] == ["list"]:
        for group in GROUPS:
            members = [b.name for b in in_group(group)] or ["(a group of its own)"]
            print(f"{group}: {', '.join(members)}")
        return 0
    return run(argv)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
