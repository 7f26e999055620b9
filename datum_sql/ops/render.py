"""``datum-sql status`` and ``reset`` for people: rich tables and plain lines (no colours
or wrapping outside a terminal, as the rest of the CLI prints)."""

from __future__ import annotations

from typing import Any

from datum_sql.ops.positions import describe
from datum_sql.ops.reset import ResetPlan


def print_status(console: Any, doc: dict[str, Any]) -> None:
    from rich.padding import Padding
    from rich.table import Table

    queries = doc["queries"]
    if not queries:
        console.print(f"no query has run with state directory {doc['state_dir']}", markup=False)
    for q in queries:
        state = "[green]running[/green]" if q["running"] else "not running"
        console.print(f"[bold]query {_escape(q['name'])}[/bold]: {state}")
        if q["sql"]:
            console.print(f"  {' '.join(q['sql'].split())}", markup=False, highlight=False)
        last = q["last_checkpoint"]
        if last is None:
            console.print("  no checkpoint yet: the next run starts from the beginning")
        else:
            kept = ", ".join(str(c["id"]) for c in q["checkpoints"])
            when = f" at {last['time']}" if last["time"] else ""
            console.print(
                f"  last checkpoint {last['id']}{when} (kept: {kept})",
                markup=False,
                highlight=False,
            )
        if q["sources"]:
            table = Table(title=None, show_edge=False, pad_edge=False)
            table.add_column("source")
            table.add_column("connector")
            table.add_column(f"position saved by checkpoint {q['positions_from']}")
            for s in q["sources"]:
                what = describe(s)
                if s["read_again_on_restart"]:
                    what += " (read again on every restart)"
                table.add_row(s["table"] or s["node"], s["connector"] or "", what)
            console.print(Padding(table, (0, 0, 0, 2), expand=False))
        for s in q["sinks"]:
            console.print(f"  sink {_sink(s)}", markup=False, highlight=False)
        for problem in q["problems"]:
            console.print(f"  [bold red]DAMAGED[/bold red] {_escape(problem)}")
        console.print()


def _sink(sink: dict[str, Any]) -> str:
    if not sink["table"]:
        return f"{sink['node']} (not recorded)"
    how = "upserts" if sink["upserts"] else "appends"
    return f"{sink['table']} ({sink['connector']}, {sink['delivery']}, {how})"


def print_plan(console: Any, plan: ResetPlan) -> None:
    target = "its start" if plan.to is None else f"checkpoint {plan.to}"
    if not plan.delete:
        head = f"query {plan.query}: nothing to change"
    else:
        ids = ", ".join(map(str, plan.delete))
        verb = "reset" if plan.applied else "would reset"
        done = "deleted" if plan.applied else "deleting"
        head = f"{verb} query {plan.query} to {target}, {done} checkpoint(s) {ids}:"
    console.print(head, markup=False, highlight=False)
    for effect in plan.effects:
        console.print(f"  - {effect}", markup=False, highlight=False)


def _escape(text: str) -> str:
    from rich.markup import escape

    return escape(text)
