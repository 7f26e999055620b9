"""Running one benchmark honestly: each engine in fresh processes, full results compared.

For each of ``runs`` rounds, every engine runs once in a child process of its own (the
order rotates between rounds, so load changes hit every engine alike); each writes its
whole result. A separate child compares every result with the reference engine's first
run (:mod:`benchmarks.compare`). An engine's record then holds the median, min and max of
its runs, its own peak RSS and the verdict; a ratio is given only for equal results.

This module stays light: it runs in the orchestrating process, whose RSS a child inherits.
"""

from __future__ import annotations

import os
import statistics
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks import results
from benchmarks.child import ChildFailed, call
from benchmarks.environment import load_average
from benchmarks.spec import REFERENCE, Benchmark

RUNS = 3
SCRATCH = Path(__file__).resolve().parent / ".cache"


@dataclass
class Session:
    """One invocation: where records go and what they share."""

    machine: dict[str, Any]
    #: how the invocation was asked for, e.g. "python -m benchmarks --quick"
    command: str = "python -m benchmarks"
    quick: bool = False
    runs: int = RUNS
    results_path: Path = results.PATH
    run_id: str = field(default_factory=results.new_run_id)
    #: benchmarks whose results differed or whose engines failed
    failures: list[str] = field(default_factory=list)

    def record(self, **fields: Any) -> dict[str, Any]:
        """A record with the invocation's shared fields."""
        return {
            "run_id": self.run_id,
            "timestamp": results.now(),
            "quick": self.quick,
            "command": self.command,
            **self.machine,
            **fields,
        }


def engine_env(engine: str) -> dict[str, str]:
    """The child's environment: polars, like DuckDB, on one thread."""
    env = dict(os.environ)
    if engine == "polars":
        env["POLARS_MAX_THREADS"] = "1"
    return env


def run_benchmark(
    bench: Benchmark,
    events: int,
    session: Session,
    *,
    params: dict[str, Any] | None = None,
    echo: bool = True,
) -> list[dict[str, Any]]:
    """Run, compare, print and record ``bench``; its records, one per engine."""
    engines = list(bench.engines)
    if REFERENCE not in engines:
        raise ValueError(f"benchmark {bench.name} must run the reference engine {REFERENCE}")
    load_before = load_average()
    for spec in bench.inputs(events).values():
        call("benchmarks.inputs:ensure", {"dataset": spec.dataset, "rows": spec.rows,
                                          "seed": spec.seed})  # fmt: skip
    runs: dict[str, list[dict[str, Any]]] = {e: [] for e in engines}
    errors: dict[str, str] = {}
    SCRATCH.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="results-", dir=SCRATCH) as tmp:
        for i in range(session.runs):
            for engine in engines[i % len(engines) :] + engines[: i % len(engines)]:
                if engine in errors:
                    continue
                out = str(Path(tmp) / f"{engine}-{i}.arrow")
                args = {"bench": bench.name, "engine": engine, "events": events, "out": out,
                        "params": params or {}}  # fmt: skip
                try:
                    r = call("benchmarks.engines:run", args, env=engine_env(engine))
                except ChildFailed as exc:
                    errors[engine] = str(exc)
                    continue
                r["out"] = out
                runs[engine].append(r)
        verdicts = _compare(runs, errors)
    load_after = load_average()
    records = [
        _record(bench, events, engine, runs[engine], verdicts.get(engine), errors.get(engine),
                session, load_before, load_after)
        for engine in engines
    ]  # fmt: skip
    _ratios(records, bench.baseline)
    if any(r["equal"] is False or r["error"] for r in records):
        session.failures.append(bench.name)
    results.append(records, session.results_path)
    if echo:
        print_records(bench, records)
    return records


def _compare(
    runs: dict[str, list[dict[str, Any]]], errors: dict[str, str]
) -> dict[str, list[dict[str, Any]]]:
    """Each engine's verdicts: its runs against the reference's first (the reference's own
    later runs too: it must agree with itself)."""
    reference = runs[REFERENCE]
    if not reference:
        for engine in runs:
            errors.setdefault(engine, f"not compared: the reference engine {REFERENCE} failed")
        return {}
    targets = [(e, r["out"]) for e, rs in runs.items() for r in rs if r["compared"]]
    targets = [(e, out) for e, out in targets if out != reference[0]["out"]]
    if not targets:
        return {}
    try:
        found = call(
            "benchmarks.compare:compare_files",
            {"reference": reference[0]["out"], "results": [out for _, out in targets]},
        )
    except ChildFailed as exc:
        for engine in runs:
            errors.setdefault(engine, f"comparing results failed: {exc}")
        return {}
    out: dict[str, list[dict[str, Any]]] = {}
    for (engine, _), verdict in zip(targets, found["verdicts"], strict=True):
        out.setdefault(engine, []).append(verdict)
    return out


def _record(
    bench: Benchmark,
    events: int,
    engine: str,
    runs: list[dict[str, Any]],
    verdicts: list[dict[str, Any]] | None,
    error: str | None,
    session: Session,
    load_before: list[float],
    load_after: list[float],
) -> dict[str, Any]:
    seconds = [r["seconds"] for r in runs]
    compared = bool(runs) and all(r["compared"] for r in runs)
    if not compared:
        equal = None
    elif engine == REFERENCE:
        equal = all(v["equal"] for v in verdicts or [])
    else:
        equal = bool(verdicts) and all(v["equal"] for v in verdicts)
    difference = next((v for v in verdicts or [] if not v["equal"]), None)
    median = statistics.median(seconds) if seconds else None
    n_events = bench.events(events)
    return session.record(
        group=bench.group,
        benchmark=bench.name,
        about=bench.about,
        engine=engine,
        baseline=bench.baseline,
        reference=REFERENCE,
        events=n_events,
        input_rows=next((r["input_rows"] for r in runs if r["input_rows"] is not None), None),
        input_mb=next((r["input_bytes"] / 1e6 for r in runs if r["input_bytes"] is not None), None),
        runs=len(runs),
        seconds=seconds,
        cpu_s=[r["cpu_s"] for r in runs],
        median_s=median,
        min_s=min(seconds, default=None),
        max_s=max(seconds, default=None),
        events_per_s=n_events / median if median else None,
        rows_out=runs[0]["rows_out"] if runs else None,
        rss_input_mb=max((r["rss_input_mb"] for r in runs), default=None),
        peak_rss_mb=max((r["peak_rss_mb"] for r in runs), default=None),
        peak_rss_mb_runs=[r["peak_rss_mb"] for r in runs],
        equal=equal,
        difference=difference,
        notes=sorted({n for r in runs for n in r["notes"]}),
        error=error,
        ratio=None,
        load_before=load_before,
        load_after=load_after,
    )


def group_record(
    session: Session,
    *,
    group: str,
    benchmark: str,
    about: str,
    engine: str,
    events: int,
    runs: list[dict[str, Any]],
    metrics: dict[str, Any],
    load_before: list[float],
    load_after: list[float],
    per_event: bool = True,
) -> dict[str, Any]:
    """A record of a group that measures one engine alone (memory over time, checkpoints, a
    rerun): no comparison, its own ``metrics``; each of ``runs`` carries seconds and peak
    RSS. ``per_event=False``: the runs read none of the ``events`` (a rerun with nothing
    new), so there are no events/s, only seconds."""
    seconds = [r["seconds"] for r in runs]
    median = statistics.median(seconds)
    return session.record(
        group=group,
        benchmark=benchmark,
        about=about,
        engine=engine,
        events=events,
        runs=len(runs),
        seconds=seconds,
        median_s=median,
        min_s=min(seconds),
        max_s=max(seconds),
        events_per_s=events / median if median and per_event else None,
        peak_rss_mb=max(r["peak_rss_mb"] for r in runs),
        peak_rss_mb_runs=[r["peak_rss_mb"] for r in runs],
        metrics=metrics,
        equal=None,
        error=None,
        load_before=load_before,
        load_after=load_after,
    )


def _ratios(records: list[dict[str, Any]], baseline: str) -> None:
    """Each engine's events/s over the baseline's — only where both results are valid. Where
    the baseline is not the reference, the reference only checks results: it gets no ratio."""
    base = next((r for r in records if r["engine"] == baseline), None)
    if base is None or not _valid(base, allow_uncompared=True):
        return
    for r in records:
        if r is base or (baseline != REFERENCE and r["engine"] == REFERENCE):
            continue
        if _valid(r, allow_uncompared=False):
            r["ratio"] = base["median_s"] / r["median_s"]


def _valid(r: dict[str, Any], *, allow_uncompared: bool) -> bool:
    if r["error"] or not r["median_s"] or r["runs"] == 0:
        return False
    return r["equal"] is True or (allow_uncompared and r["equal"] is None)


# -- printing --------------------------------------------------------------------------------


def mega(x: float | None, digits: int = 2) -> str:
    return "-" if x is None else f"{x / 1e6:.{digits}f}M"


def verdict_text(r: dict[str, Any]) -> str:
    if r["error"]:
        return "FAILED"
    if r["equal"] is None:
        return "not compared"
    if not r["equal"]:
        return "DIFFERENT"
    return "equal (reference)" if r["engine"] == r["reference"] else "equal"


def ratio_text(r: dict[str, Any]) -> str:
    if r["engine"] == r["baseline"]:
        return "1 (base)"
    if r["ratio"] is None:
        return "n/a"
    return f"{r['ratio']:.2f}x"


def print_records(bench: Benchmark, records: list[dict[str, Any]]) -> None:
    first = records[0]
    inputs = next((r for r in records if r["input_mb"] is not None), first)
    size = f"{inputs['input_mb']:.1f} MB in memory" if inputs["input_mb"] is not None else "?"
    width = max(10, *(len(r["engine"]) for r in records))
    print(
        f"\n== {bench.name}: {bench.about}\n   {first['events']:,} events, input {size}; "
        f"load average {first['load_before'][0]:.2f} -> {first['load_after'][0]:.2f} "
        f"({first['cpu_count']} CPUs); {max(r['runs'] for r in records)} runs each"
    )
    print(
        f"   {'engine':<{width}} {'median ev/s':>11} {'min ev/s':>9} {'max ev/s':>9} "
        f"{'median s':>9} {'cpu/wall':>8} {'vs ' + bench.baseline:>10} {'RSS input':>9} "
        f"{'peak RSS':>9} {'rows out':>11}  result"
    )
    for r in records:
        cpu = (
            f"{statistics.median(r['cpu_s']) / r['median_s']:.2f}"
            if r["median_s"] and r["cpu_s"]
            else "-"
        )
        slowest = r["events"] / r["max_s"] if r["max_s"] else None
        fastest = r["events"] / r["min_s"] if r["min_s"] else None
        rss_in = "-" if r["rss_input_mb"] is None else f"{r['rss_input_mb']:.0f} MB"
        peak = "-" if r["peak_rss_mb"] is None else f"{r['peak_rss_mb']:.0f} MB"
        rows = "-" if r["rows_out"] is None else f"{r['rows_out']:,}"
        median_s = "-" if r["median_s"] is None else f"{r['median_s']:.3f}"
        notes = "; ".join(r["notes"])
        print(
            f"   {r['engine']:<{width}} {mega(r['events_per_s']):>11} {mega(slowest):>9} "
            f"{mega(fastest):>9} {median_s:>9} {cpu:>8} {ratio_text(r):>10} {rss_in:>9} "
            f"{peak:>9} {rows:>11}  {verdict_text(r)}" + (f"  [{notes}]" if notes else "")
        )
    for r in records:
        if r["error"]:
            last = " | ".join(r["error"].strip().splitlines()[-2:])
            print(f"   !! {r['engine']} FAILED (whole message in the results file): {last}")
        if r["equal"] is False:
            d = r["difference"] or {}
            print(f"   !! DIFFERENT: {r['engine']} vs {r['reference']}: {d.get('reason')}")
            for key in ("missing_examples", "extra_examples"):
                for example in d.get(key) or []:
                    print(f"      {key.split('_')[0]}: {example}")


__all__ = ["RUNS", "Session", "engine_env", "group_record", "print_records", "run_benchmark"]
