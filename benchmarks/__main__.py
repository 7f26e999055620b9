"""``python -m benchmarks [names...] [--events N]``: run benchmarks, print a table."""

from __future__ import annotations

import argparse

from benchmarks.harness import HEADER, run_isolated
from benchmarks.nexmark import QUERIES


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks")
    parser.add_argument(
        "names", nargs="*", help=f"benchmarks to run (default: all): {', '.join(QUERIES)}"
    )
    parser.add_argument("--events", type=int, default=5_000_000)
    args = parser.parse_args()
    names = args.names or list(QUERIES)
    print(HEADER)
    for name in names:
        result = run_isolated("benchmarks.nexmark", "query", {"query": name, "events": args.events})
        print(result.line(), flush=True)


if __name__ == "__main__":
    main()
