"""Every benchmark of the in-memory harness, by name, and the groups that measure other things."""

from __future__ import annotations

from benchmarks import (
    batch_scan,
    file_ingest,
    joins,
    kafka,
    nexmark,
    nexmark_suite,
    process,
    udafs,
    udfs,
)
from benchmarks.spec import Benchmark

BENCHMARKS: dict[str, Benchmark] = {
    b.name: b
    for b in (
        *nexmark.BENCHMARKS,
        *nexmark_suite.BENCHMARKS,
        *udafs.BENCHMARKS,
        *joins.BENCHMARKS,
        *kafka.BENCHMARKS,
        *process.BENCHMARKS,
        *udfs.BENCHMARKS,
        *batch_scan.BENCHMARKS,
        *file_ingest.BENCHMARKS,
    )
}
#: groups run by their own module (they measure memory over time, checkpoints, a rerun);
#: ``files`` runs ``file_rerun`` too
OTHER_GROUPS = ("state", "checkpoints", "file_rerun")
GROUPS = ("nexmark", "joins", "process", "udf", "batch", "files", "kafka", *OTHER_GROUPS)


def get(name: str) -> Benchmark:
    try:
        return BENCHMARKS[name]
    except KeyError:
        raise KeyError(f"unknown benchmark {name!r}; known: {', '.join(BENCHMARKS)}") from None


def in_group(group: str) -> list[Benchmark]:
    return [b for b in BENCHMARKS.values() if b.group == group]


__all__ = ["BENCHMARKS", "GROUPS", "OTHER_GROUPS", "get", "in_group"]
