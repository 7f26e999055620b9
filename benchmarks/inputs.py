"""Benchmark inputs, generated once per (dataset, rows, seed) into Parquet under ``.cache/``.

Every engine of a benchmark reads the same file into memory (``pyarrow.parquet.read_table``)
before its clock starts, so all of them time the same in-memory work on the same rows. A
file's name carries a fingerprint of the code that generates it: change a generator and
the cache misses instead of serving stale rows.

A file set (:data:`FILE_SETS`) is a directory instead: a cached dataset's rows cut into a
number of CSV or Parquet files, in order, for the benchmarks that time reading files.
"""

from __future__ import annotations

import hashlib
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from importlib import util
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

CACHE = Path(__file__).resolve().parent / ".cache"
BID_COLUMNS = ["auction", "bidder", "price", "channel", "date_time"]
TS = pa.timestamp("us")
#: 2026-01-01 00:00:00 UTC in microseconds, where the market ticks start
MARKET_START_US = 1_767_225_600_000_000
SYMBOLS = 50


def market(rows: int, seed: int, value: str) -> pa.Table:
    """``rows`` ticks over ``SYMBOLS`` symbols, one per millisecond with jitter, sorted by time.

    Timestamps are strictly increasing (the i-th tick falls in millisecond i), so no symbol
    has two ticks at one instant: an ASOF match is never a tie the engines may break apart.
    """
    rng = np.random.default_rng(seed)
    names = pa.array([f"SYM{i:03d}" for i in range(SYMBOLS)], pa.string())
    ts = MARKET_START_US + np.arange(rows, dtype=np.int64) * 1000 + rng.integers(0, 1000, rows)
    return pa.table(
        {
            "sym": names.take(pa.array(rng.integers(0, SYMBOLS, rows))),
            "ts": pa.array(ts, pa.int64()).cast(TS),
            value: pa.array(rng.uniform(10, 1000, rows).round(2), pa.float64()),
        }
    )


def keyed_events(rows: int, seed: int, keys: int = 10_000) -> pa.Table:
    """``rows`` events of ``keys`` random keys, one per millisecond (no ties), in time order."""
    rng = np.random.default_rng(seed)
    ts = MARKET_START_US + np.arange(rows, dtype=np.int64) * 1000
    return pa.table(
        {
            "k": pa.array(rng.integers(0, keys, rows), pa.int64()),
            "ts": pa.array(ts, pa.int64()).cast(TS),
        }
    )


def big_parquet(rows: int, seed: int) -> pa.Table:
    """``rows`` rows for a file scan: ``id`` in order, ``x`` random in [0, 2^40), ``y`` uniform
    in [0, 1), and a text ``tag`` of 1000 values the scan's query does not read."""
    rng = np.random.default_rng(seed)
    tags = pa.array([f"tag-{i:04d}" for i in range(1000)], pa.string())
    return pa.table(
        {
            "id": pa.array(np.arange(rows, dtype=np.int64)),
            "x": pa.array(rng.integers(0, 1 << 40, rows, dtype=np.int64)),
            "y": pa.array(rng.random(rows)),
            "tag": tags.take(pa.array(rng.integers(0, 1000, rows))),
        }
    )


def nexmark(stream: str, columns: list[str] | None) -> Callable[[int, int], pa.Table]:
    def build(rows: int, seed: int) -> pa.Table:
        # imported here: an engine's child reading the cache must not carry datum-sql's memory
        from datum_sql.connectors.generators import nexmark_table

        return nexmark_table(stream, rows, seed, columns=columns)

    return build


DATASETS: dict[str, Callable[[int, int], pa.Table]] = {
    "bid": nexmark("bid", BID_COLUMNS),
    "person": nexmark("person", ["id", "name", "date_time"]),
    "auction": nexmark("auction", ["id", "seller", "reserve", "date_time"]),
    # every column of each stream, for the Nexmark queries that read urls, extras, ...
    "bid_full": nexmark("bid", None),
    "person_full": nexmark("person", None),
    "auction_full": nexmark("auction", None),
    "trades": lambda rows, seed: market(rows, seed + 1, "px"),
    "quotes": lambda rows, seed: market(rows, seed + 2, "bid"),
    "keyed_events": keyed_events,
    "big_parquet": big_parquet,
}


@dataclass(frozen=True)
class FileSet:
    """The rows of ``dataset`` cut into ``files`` files of ``format`` (``csv``: a header
    line, text quoted only where needed; ``parquet``: snappy, one row group per file)."""

    dataset: str
    format: str
    files: int


FILE_SETS: dict[str, FileSet] = {
    f"bid_{fmt}_{files}": FileSet("bid", fmt, files)
    for fmt in ("csv", "parquet")
    for files in (1000, 10)
}


def _fingerprint() -> str:
    """A hash of this module and of datum-sql's generators: the code that makes the rows."""
    spec = util.find_spec("datum_sql")
    assert spec is not None and spec.submodule_search_locations
    generators = Path(next(iter(spec.submodule_search_locations))) / "connectors" / "generators"
    digest = hashlib.sha256(Path(__file__).read_bytes())
    for path in sorted(generators.glob("*.py")):
        digest.update(path.read_bytes())
    return digest.hexdigest()[:10]


def path(dataset: str, rows: int, seed: int) -> Path:
    return CACHE / f"{dataset}-{rows}-s{seed}-{_fingerprint()}.parquet"


def directory(name: str, rows: int, seed: int) -> Path:
    """Where the file set ``name`` of ``rows`` rows is cached."""
    return CACHE / f"{name}-{rows}-s{seed}-{_fingerprint()}"


def _write_files(name: str, rows: int, seed: int) -> dict[str, Any]:
    """The file set ``name``: its dataset's rows cut in order into its files (each written
    in turn, so their modification times follow their names); written into a partial
    directory, then renamed."""
    spec = FILE_SETS[name]
    target = directory(name, rows, seed)
    if not target.exists():
        ensure(spec.dataset, rows, seed)
        table = load(spec.dataset, rows, seed)
        partial = target.with_name(f"{target.name}.{os.getpid()}.partial")
        shutil.rmtree(partial, ignore_errors=True)
        partial.mkdir(parents=True)
        bounds = np.linspace(0, rows, spec.files + 1).astype(np.int64)
        width = len(str(spec.files - 1))
        for i, (lo, hi) in enumerate(zip(bounds[:-1].tolist(), bounds[1:].tolist())):
            part = table.slice(lo, hi - lo)
            out = partial / f"part-{i:0{width}d}.{spec.format}"
            if spec.format == "csv":
                pacsv.write_csv(part, out, pacsv.WriteOptions(quoting_style="needed"))
            else:
                pq.write_table(part, out, row_group_size=max(hi - lo, 1))
        os.replace(partial, target)
    files = sorted(target.iterdir())
    return {"path": str(target), "files": len(files), "bytes": sum(f.stat().st_size for f in files)}


def ensure(dataset: str, rows: int, seed: int = 0) -> dict[str, Any]:
    """Generate the dataset into the cache unless it is there (written whole, then renamed)."""
    if dataset in FILE_SETS:
        return _write_files(dataset, rows, seed)
    if dataset not in DATASETS:
        known = ", ".join([*DATASETS, *FILE_SETS])
        raise KeyError(f"unknown benchmark dataset {dataset!r}; known: {known}")
    target = path(dataset, rows, seed)
    if not target.exists():
        CACHE.mkdir(parents=True, exist_ok=True)
        table = DATASETS[dataset](rows, seed)
        if table.num_rows != rows:
            raise RuntimeError(f"dataset {dataset}: generated {table.num_rows} rows, not {rows}")
        partial = target.with_suffix(f".{os.getpid()}.partial")
        pq.write_table(table, partial)
        os.replace(partial, target)
    return {"path": str(target), "bytes": target.stat().st_size}


def load(dataset: str, rows: int, seed: int = 0) -> pa.Table:
    """The cached dataset, read whole into memory (run :func:`ensure` first)."""
    target = path(dataset, rows, seed)
    if not target.exists():
        raise FileNotFoundError(f"benchmark input {target} is missing: run ensure() first")
    return pq.read_table(target)


__all__ = [
    "CACHE", "DATASETS", "FILE_SETS", "FileSet", "directory", "ensure", "keyed_events", "load",
    "market", "path",
]  # fmt: skip
