"""``python -m benchmarks report``: the tables of ``benchmarks/README.md``, from the results file.

The newest record of each (benchmark, engine, events) is kept; the kept records are shown
grouped by the invocation that made them, newest first, each under the machine, versions,
commit and load average it ran under. Everything between the two markers in the README is
replaced; the rest of the README is left as it is.
"""

from __future__ import annotations

import argparse
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from benchmarks import results
from benchmarks.environment import describe

README = Path(__file__).resolve().parent / "README.md"
BEGIN = "<!-- results:begin -->"
END = "<!-- results:end -->"
#: the groups whose engines' results are compared: one row per benchmark, ratios beside
COMPARED = ("nexmark", "joins", "process", "udf", "files", "kafka")
#: the share of DuckDB's events/s every query should reach; the tables name those below it
TARGET = 0.25


def latest(records: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """The newest record of each (benchmark, engine, events), in file order."""
    kept: dict[tuple[str, str, int], dict[str, Any]] = {}
    for r in records:
        key = (r["benchmark"], r["engine"], r["events"])
        if key not in kept or r["timestamp"] >= kept[key]["timestamp"]:
            kept[key] = r
    return list(kept.values())


def _rate(r: dict[str, Any]) -> str:
    if r.get("error") or not r.get("median_s") or not r.get("events_per_s"):
        return "FAILED" if r.get("error") else "-"
    fastest, slowest = r["events"] / r["min_s"], r["events"] / r["max_s"]
    return f"{r['events_per_s'] / 1e6:.2f}M ({slowest / 1e6:.2f}-{fastest / 1e6:.2f})"


def _mb(x: float | None) -> str:
    return "-" if x is None else f"{x:.0f}"


def _result(rows: list[dict[str, Any]]) -> str:
    parts = []
    for r in rows:
        if r.get("error"):
            parts.append(f"**FAILED** ({r['engine']})")
        elif r["equal"] is False:
            reason = (r.get("difference") or {}).get("reason") or "results differ"
            parts.append(f"**DIFFERENT** ({r['engine']}: {reason})")
    if not parts:
        reference = next((r for r in rows if r["engine"] == r["reference"]), rows[0])
        rows_out = reference.get("rows_out")
        compared = [r["engine"] for r in rows if r["equal"] is True and r is not reference]
        parts.append(f"equal, {rows_out:,} rows ({', '.join(compared)} = {reference['engine']})")
    for r in rows:
        parts += [f"{r['engine']}: {note}" for note in r.get("notes") or []]
    return "; ".join(parts)


def _engines(records: list[dict[str, Any]]) -> list[str]:
    out: list[str] = []
    for r in records:
        if r["engine"] not in out:
            out.append(r["engine"])
    return out


def _compared_table(records: list[dict[str, Any]]) -> list[str]:
    """One row per benchmark: events/s of each engine (median, slowest-fastest run), the
    ratios to the baseline (only for equal results), peak RSS, the verdict."""
    engines = _engines(records)
    baseline, reference = records[0]["baseline"], records[0]["reference"]
    # where the baseline is not the reference, the reference only checks results
    others = [e for e in engines if e not in (baseline, reference)]
    head = (
        ["benchmark", "events", "input MB"]
        + [f"{e} ev/s" for e in engines]
        + [f"{e} ÷ {baseline}" for e in others]
        + [f"peak RSS MB {' / '.join(engines)} (after input)", "result"]
    )
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    by_bench: dict[str, list[dict[str, Any]]] = {}
    for r in records:
        by_bench.setdefault(r["benchmark"], []).append(r)
    for name, rows in by_bench.items():
        of = {r["engine"]: r for r in rows}
        first = rows[0]
        input_mb = next((r["input_mb"] for r in rows if r.get("input_mb") is not None), None)

        def ratio(e: str, of: dict[str, dict[str, Any]] = of) -> str:
            r = of.get(e)
            return "n/a" if r is None or r.get("ratio") is None else f"{r['ratio']:.2f}x"

        rss = " / ".join(_mb(of[e]["peak_rss_mb"]) if e in of else "-" for e in engines)
        at_input = " / ".join(_mb(of[e].get("rss_input_mb")) if e in of else "-" for e in engines)
        cells = (
            [f"`{name}`", f"{first['events']:,}", "-" if input_mb is None else f"{input_mb:.1f}"]
            + [_rate(of[e]) if e in of else "-" for e in engines]
            + [ratio(e) for e in others]
            + [f"{rss} ({at_input})", _result(rows)]
        )
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def _below_target(records: list[dict[str, Any]]) -> list[str]:
    """A line naming the benchmarks where datum-sql runs below ``TARGET`` of DuckDB."""
    slow = [
        f"`{r['benchmark']}` ({r['ratio']:.2f}x)"
        for r in records
        if r["engine"] == "datum-sql" and r["baseline"] == "duckdb"
        and r.get("ratio") is not None and r["ratio"] < TARGET
    ]  # fmt: skip
    return [f"Below {TARGET:g} of DuckDB's events/s: {', '.join(slow)}.", ""] if slow else []


def _seconds(r: dict[str, Any]) -> str:
    if r.get("error") or not r.get("median_s"):
        return "-"
    return f"{r['median_s']:.3f} ({r['min_s']:.3f}-{r['max_s']:.3f})"


def _alone_table(records: list[dict[str, Any]]) -> list[str]:
    """Groups measuring one engine alone: events/s (none where the runs read none of the
    events, e.g. a rerun with nothing new), seconds, peak RSS and their own metrics."""
    lines = [
        "| benchmark | engine | events | ev/s | seconds | peak RSS MB | measured |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in records:
        metrics = ", ".join(f"{k} = {v}" for k, v in (r.get("metrics") or {}).items())
        lines.append(
            f"| `{r['benchmark']}` | {r['engine']} | {r['events']:,} | {_rate(r)} | "
            f"{_seconds(r)} | {_mb(r['peak_rss_mb'])} | {metrics} |"
        )
    return lines


def render(records: list[dict[str, Any]]) -> str:
    """The generated part of the README."""
    kept = latest(records)
    out = [
        "_Generated by `python -m benchmarks report` from `benchmarks/results.jsonl`; "
        "do not edit by hand._",
        "",
    ]
    if not kept:
        return "\n".join([*out, "No results yet: run `./dev bench --quick`."])
    runs: dict[str, list[dict[str, Any]]] = {}
    for r in sorted(kept, key=lambda r: r["timestamp"]):
        runs.setdefault(r["run_id"], []).append(r)
    for run_id, rows in sorted(runs.items(), key=lambda kv: kv[1][0]["timestamp"], reverse=True):
        first = rows[0]
        loads = [x for r in rows for x in (r["load_before"][0], r["load_after"][0])]
        when = first["timestamp"].replace("T", " ").removesuffix("+00:00")
        kind = "quick pass" if first["quick"] else "run"
        out += [
            f"### {kind} of {when} UTC: `{first.get('command', 'python -m benchmarks')}`",
            "",
            f"Run `{run_id}`: {describe(first)}.",
            f"Load average (1 min) while it ran: {min(loads):.2f} to {max(loads):.2f} "
            f"on {first['cpu_count']} CPUs.",
            "",
        ]
        for group in dict.fromkeys(r["group"] for r in rows):
            members = [r for r in rows if r["group"] == group]
            out += [f"**{group}**", ""]
            if group in COMPARED:
                out += [*_compared_table(members), "", *_below_target(members)]
            else:
                out += [*_alone_table(members), ""]
    return "\n".join(out).rstrip()


def rewrite(readme: Path, generated: str) -> None:
    text = readme.read_text()
    if BEGIN not in text or END not in text:
        raise ValueError(f"{readme} has no {BEGIN} ... {END} section to rewrite")
    head, rest = text.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    readme.write_text(f"{head}{BEGIN}\n{generated}\n{END}{tail}")


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks report")
    parser.add_argument("--results", type=Path, default=results.PATH)
    parser.add_argument("--readme", type=Path, default=README)
    args = parser.parse_args(argv)
    rewrite(args.readme, render(results.read(args.results)))
    print(f"rewrote the results section of {args.readme} from {args.results}")
    return 0


__all__ = ["BEGIN", "END", "latest", "main", "render", "rewrite"]
