"""``q.explain_progress()``: why is nothing coming out (yet)?

The answer is assembled from what the running query already reports, per operator and per
source:

* windowed aggregates: how many windows are open, when the oldest one ends, the watermark
  it waits for and how far the watermark still has to go (``describe()`` of the operator);
* joins: rows held on each side and each side's watermark, so the side that holds results
  back is named; lookup joins: whether the table is loaded yet;
* sources: the watermark and where it comes from — no event time (windows close only at
  the end of the input), an event time without a watermark policy, no rows yet, a split
  (Kafka partition) that is idle or lagging behind the others, or simply the newest event
  time minus the declared delay;
* late rows so far per source, and where they went (a late output, or only counted).

The report is text (``str(report)``) and HTML (``_repr_html_``); its parts are also data:
``report.headline``, ``report.reasons``, ``report.sources``, ``report.operators``.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from datum_sql.notebook.display import CSS, esc, plural
from datum_sql.types import START_OF_TIME, format_micros

__all__ = ["OperatorReport", "ProgressReport", "SourceReport", "explain_progress"]

#: A split without rows for this long (and no idle_timeout set) is called idle.
IDLE_AFTER_S = 5.0
WINDOW_KINDS = ("window_aggregate", "session_aggregate")
INTERVAL_JOINS = ("interval_join", "sparse_interval_join")


@dataclass
class SourceReport:
    table: str
    node_id: str
    rows: int
    late_rows: int
    watermark: str
    finished: bool
    event_time: str | None
    delay: str | None
    late_output: str | None
    notes: list[str] = field(default_factory=list)
    #: per split (Kafka partition): {"split", "watermark", "idle_s", "lag"}
    splits: list[dict[str, Any]] = field(default_factory=list)
    holds_back: bool = False


@dataclass
class OperatorReport:
    node_id: str
    kind: str
    watermark: str
    lines: list[str] = field(default_factory=list)
    waiting: bool = False
    detail: dict[str, Any] = field(default_factory=dict)


@dataclass
class ProgressReport:
    name: str
    state: str
    rows_in: int
    rows_out: int
    late_rows: int
    headline: str
    reasons: list[str]
    sources: list[SourceReport]
    operators: list[OperatorReport]

    # -- text -----------------------------------------------------------------------------
    def __str__(self) -> str:
        out = [f"{self.name} ({self.state}): {self.headline}"]
        out += [f"  - {r}" for r in self.reasons]
        out.append("sources:")
        for s in self.sources:
            mark = "  <- holds the watermark back" if s.holds_back else ""
            out.append(
                f"  {s.table}: {s.rows:,} rows, {s.late_rows:,} late, watermark "
                f"{_wm(s.watermark)}{mark}"
            )
            out += [f"    {n}" for n in s.notes]
            for sp in s.splits:
                out.append(
                    f"    split {sp['split']}: watermark {_wm(sp['watermark'])}" + _split_extra(sp)
                )
        out.append("operators:")
        for o in self.operators:
            out.append(f"  {o.node_id} ({o.kind}), watermark {_wm(o.watermark)}")
            out += [f"    {line}" for line in o.lines]
        return "\n".join(out)

    __repr__ = __str__

    # -- HTML -----------------------------------------------------------------------------
    def _repr_html_(self) -> str:
        out = [f'<div class="datum datum-progress">{CSS}']
        out.append(
            f'<div class="datum-head"><b>{esc(self.name)}</b> '
            f'<span class="datum-state datum-state-{esc(self.state)}">{esc(self.state)}</span> '
            f"{esc(self.headline)}</div>"
        )
        if self.reasons:
            out.append(
                '<ul class="datum-reasons">'
                + "".join(f"<li>{esc(r)}</li>" for r in self.reasons)
                + "</ul>"
            )
        out.append(
            '<div class="datum-section">sources</div><table class="datum-t datum-sources"><thead><tr>'
        )
        out += [
            f"<th>{h}</th>" for h in ("table", "rows", "late", "watermark", "event time", "notes")
        ]
        out.append("</tr></thead><tbody>")
        for s in self.sources:
            notes = list(s.notes)
            if s.holds_back:
                notes.insert(0, "holds the watermark back")
            for sp in s.splits:
                notes.append(
                    f"split {sp['split']}: watermark {_wm(sp['watermark'])}{_split_extra(sp)}"
                )
            cls = ' class="datum-warn"' if s.holds_back else ""
            et = s.event_time or "none"
            if s.event_time and s.delay:
                et += f" - {s.delay}"
            out.append(
                f'<tr{cls}><td>{esc(s.table)}</td><td class="num">{s.rows:,}</td>'
                f'<td class="num">{s.late_rows:,}</td><td>{esc(_wm(s.watermark))}</td>'
                f'<td>{esc(et)}</td><td class="wrap">{"<br>".join(esc(n) for n in notes)}</td></tr>'
            )
        out.append("</tbody></table>")
        out.append(
            '<div class="datum-section">operators</div><table class="datum-t datum-operators"><thead><tr>'
        )
        out += [f"<th>{h}</th>" for h in ("operator", "kind", "watermark", "progress")]
        out.append("</tr></thead><tbody>")
        for o in self.operators:
            cls = ' class="datum-warn"' if o.waiting else ""
            out.append(
                f"<tr{cls}><td>{esc(o.node_id)}</td><td>{esc(o.kind)}</td>"
                f'<td>{esc(_wm(o.watermark))}</td><td class="wrap">{"<br>".join(esc(x) for x in o.lines)}</td></tr>'
            )
        out.append("</tbody></table></div>")
        return "".join(out)


def _wm(text: Any) -> str:
    if text in (None, "-inf", "None"):
        return "-inf (none yet)"
    if text == "+inf":
        return "+inf (input ended)"
    return str(text).replace("T", " ")


def _split_extra(sp: Mapping[str, Any]) -> str:
    extra = []
    if sp.get("idle_s") is not None:
        extra.append(f"last row {sp['idle_s']:.0f}s ago")
    if sp.get("lag") is not None:
        extra.append(f"{sp['lag']:,} records behind")
    if sp.get("note"):
        extra.append(str(sp["note"]))
    return f" ({', '.join(extra)})" if extra else ""


def _parse_time(text: Any) -> datetime | None:
    if not isinstance(text, str) or text in ("-inf", "+inf"):
        return None
    try:
        return datetime.fromisoformat(text)
    except ValueError:
        return None


def _span(delta: timedelta) -> str:
    seconds = delta.total_seconds()
    if seconds < 120:
        return f"{seconds:.3g}s"
    if seconds < 7200:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"


def _duration_us(us: int | None) -> str | None:
    if us is None:
        return None
    return _span(timedelta(microseconds=int(us)))


def _snapshot_clocks(executor: Any) -> dict[str, dict[str, Any]]:
    """Per source node: the event-time clock's splits (newest event time, last row seen),
    copied from the runtime thread's objects (plain reads; retried if they change under us)."""
    clocks = getattr(executor, "clocks", None) or {}
    now = time.monotonic()
    out: dict[str, dict[str, Any]] = {}
    for sid, clock in list(clocks.items()):
        for _ in range(3):
            try:
                splits = {
                    str(k): (int(s.max_time), now - float(s.last_seen))
                    for k, s in list(clock.splits.items())
                }
                break
            except RuntimeError:  # dict changed size during iteration
                continue
        else:
            splits = {}
        out[sid] = {
            "splits": splits,
            "derived": bool(getattr(clock, "derived", True)),
            "delay_us": int(getattr(clock, "delay_us", 0) or 0),
            "idle_timeout_s": getattr(clock, "idle_timeout_s", None),
        }
    return out


def explain_progress(query: Any) -> ProgressReport:
    """The progress report of a running (or ended) query; see the module docstring."""
    status = query.status()
    graph = query.executor.graph
    return build_report(status, graph, _snapshot_clocks(query.executor))


def build_report(
    status: Mapping[str, Any], graph: Any, clocks: Mapping[str, Mapping[str, Any]] | None = None
) -> ProgressReport:
    """The report from a status dict, the job graph and per-source clock snapshots."""
    clocks = clocks or {}
    state = str(status.get("state", "?"))
    late_targets = {
        n.config.get("of"): n.kind
        for n in graph.nodes
        if n.role == "sink" and n.config.get("side") == "late"
    }
    sources = [
        _source_report(
            n,
            (status.get("sources") or {}).get(n.kind, {}),
            clocks.get(n.id),
            late_targets.get(n.id),
        )
        for n in graph.sources
    ]
    has_windows = any(n.kind in WINDOW_KINDS for n in graph.operators)
    has_time_ops = has_windows or any(
        n.kind in ("asof_join", *INTERVAL_JOINS) for n in graph.operators
    )
    # Which inputs hold the query's watermark back: the lowest among those not ended.
    live = [s for s in sources if not s.finished]
    if live and has_time_ops:
        lowest = min(_order(s.watermark) for s in live)
        for s in live:
            s.holds_back = _order(s.watermark) == lowest
    operators = [
        _operator_report(n, (status.get("operators") or {}).get(n.id, {}), graph)
        for n in graph.operators
    ]
    rows_out = sum(
        int(info.get("rows") or 0)
        for n in graph.sinks
        if not n.config.get("side")
        for info in [(status.get("sinks") or {}).get(n.kind, {})]
    )
    reasons: list[str] = []
    if state in ("finished", "cancelled", "failed"):
        headline = f"the query {state}; {rows_out:,} result rows came out"
        if status.get("error"):
            reasons.append(f"error: {' '.join(str(status['error']).split())}")
    elif rows_out == 0:
        headline = "nothing has come out yet"
    else:
        headline = f"{rows_out:,} result rows so far"
    if state in ("starting", "running"):
        for o in operators:
            if o.waiting:
                reasons.append(f"{o.node_id}: {o.lines[0]}")
        for s in sources:
            if s.rows == 0 and not s.finished:
                reasons.append(f"source {s.table}: no rows read yet")
            if s.holds_back:
                why = next((n for n in s.notes if "watermark" in n), None)
                reasons.append(
                    f"source {s.table} holds the watermark back at {_wm(s.watermark)}"
                    + (f": {why}" if why else "")
                )
        if not reasons and rows_out == 0 and not has_time_ops:
            reasons.append("no operator waits for time: results come out as soon as rows match")
    for s in sources:
        if s.late_rows:
            where = (
                f"written to {s.late_output}"
                if s.late_output
                else "dropped and counted (name a late_output to keep them)"
            )
            reasons.append(f"{plural(s.late_rows, 'late row')} from {s.table} so far: {where}")
    return ProgressReport(
        name=str(status.get("name", "query")),
        state=state,
        rows_in=int(status.get("rows_in") or 0),
        rows_out=rows_out,
        late_rows=int(status.get("late_rows") or 0),
        headline=headline,
        reasons=reasons,
        sources=sources,
        operators=operators,
    )


def _order(wm: str) -> float:
    if wm in ("-inf", "", None):
        return float("-inf")
    if wm == "+inf":
        return float("inf")
    t = _parse_time(wm)
    return t.timestamp() if t else float("-inf")


def _source_report(
    node: Any, info: Mapping[str, Any], clock: Mapping[str, Any] | None, late_output: str | None
) -> SourceReport:
    cfg = node.config
    event_time = cfg.get("event_time")
    delay_us = cfg.get("watermark_delay_us")
    report = SourceReport(
        table=node.kind,
        node_id=node.id,
        rows=int(info.get("rows") or 0),
        late_rows=int(info.get("late_rows") or 0),
        watermark=str(info.get("watermark", "-inf")),
        finished=bool(info.get("finished")),
        event_time=event_time,
        delay=_duration_us(delay_us) if event_time and delay_us is not None else None,
        late_output=late_output,
    )
    notes = report.notes
    if report.finished:
        notes.append("input ended: its watermark is +inf, every window may close")
    elif event_time is None:
        notes.append(
            "no event time: its watermark never advances, so windows and time-bounded joins "
            "over it close only when the input ends (declare WATERMARK FOR <column> AS <column> "
            "- INTERVAL '...', or register it with event_time= and watermark=)"
        )
    elif delay_us is None:
        notes.append(
            f"event time {event_time} without a watermark policy: the watermark moves only on "
            "watermark markers from the source or at the end of input"
        )
    if not report.finished and event_time is not None and clock:
        _split_notes(report, info, clock, delay_us)
    if info.get("idle_splits"):
        notes.append(
            f"idle splits (not holding the watermark back): {', '.join(map(str, info['idle_splits']))}"
        )
    return report


def _split_notes(
    report: SourceReport, info: Mapping[str, Any], clock: Mapping[str, Any], delay_us: int | None
) -> None:
    splits: dict[str, tuple[int, float]] = dict(clock.get("splits") or {})
    derived = clock.get("derived", True) and delay_us is not None
    delay = int(delay_us or 0)
    timeout = clock.get("idle_timeout_s")
    raw = info.get("partitions")
    partitions: Mapping[Any, Any] = raw if isinstance(raw, Mapping) else {}
    rows: list[dict[str, Any]] = []
    for split, (max_time, idle_s) in sorted(splits.items()):
        wm = max_time - delay if derived and max_time != START_OF_TIME else START_OF_TIME
        part = partitions.get(split)
        if part is None and split.isdigit():
            part = partitions.get(int(split))
        lag = part.get("lag") if isinstance(part, Mapping) else None
        rows.append({"split": split or "(single)", "wm": wm, "watermark": format_micros(wm),
                     "idle_s": idle_s, "lag": lag if isinstance(lag, int) else None,
                     "no_rows": max_time == START_OF_TIME})  # fmt: skip
    if not rows:
        report.notes.append("no rows read yet: the watermark starts with the first row")
        return
    if len(rows) == 1:
        r = rows[0]
        if r["no_rows"]:
            report.notes.append("no rows read yet: the watermark starts with the first row")
        elif derived:
            newest = format_micros(r["wm"] + delay)
            report.notes.append(
                f"watermark = newest event time {newest} - {_duration_us(delay) or '0s'}: "
                "it advances as newer rows arrive"
            )
        if r["idle_s"] is not None and r["idle_s"] >= IDLE_AFTER_S and not r["no_rows"]:
            report.notes.append(f"no rows for {r['idle_s']:.0f}s: the watermark waits for new rows")
        return
    active = [r for r in rows if timeout is None or r["idle_s"] < timeout]
    if not active:
        return
    low = min(active, key=lambda r: r["wm"])
    high = max(active, key=lambda r: r["wm"])
    for r in rows:
        note = None
        if timeout is not None and r["idle_s"] >= timeout:
            note = "idle, skipped"
        elif r is low and (low["wm"] < high["wm"] or r["no_rows"]):
            if r["no_rows"]:
                note = "no rows yet: holds the watermark at -inf"
            elif r["idle_s"] >= IDLE_AFTER_S:
                note = "idle: holds the watermark back"
            else:
                note = "lagging: holds the watermark back"
        report.splits.append(
            {"split": r["split"], "watermark": r["watermark"], "idle_s": r["idle_s"],
             "lag": r["lag"], "note": note}
        )  # fmt: skip
    if low["wm"] < high["wm"] or low["no_rows"]:
        if low["no_rows"]:
            why = "has no rows yet"
        elif low["idle_s"] >= IDLE_AFTER_S:
            why = f"is idle (no rows for {low['idle_s']:.0f}s)"
        else:
            behind = timedelta(microseconds=high["wm"] - low["wm"])
            why = f"lags {_span(behind)} of event time behind split {high['split']}"
        hint = (
            " — set idle_timeout so a quiet split stops holding it back"
            if timeout is None and (low["no_rows"] or low["idle_s"] >= IDLE_AFTER_S)
            else ""
        )
        report.notes.append(
            f"split {low['split']} {why}: the source watermark is the minimum over splits{hint}"
        )


def _operator_report(node: Any, info: Mapping[str, Any], graph: Any) -> OperatorReport:
    kind = str(info.get("kind") or node.kind)
    wm = str(info.get("watermark", "-inf"))
    report = OperatorReport(node_id=node.id, kind=kind, watermark=wm)
    report.detail = {k: v for k, v in info.items() if k not in ("kind", "watermark")}
    lines = report.lines
    if kind in WINDOW_KINDS:
        emit = node.config.get("emit", "window_close")
        open_windows = int(info.get("open_windows") or 0)
        if open_windows:
            oldest = info.get("oldest_open_window_end")
            closes = info.get("closes_at_watermark") or oldest
            groups = info.get("groups")
            text = f"{open_windows:,} window{'s' if open_windows != 1 else ''} open"
            if groups and int(groups) != open_windows:
                text += f" ({int(groups):,} groups)"
            text += f"; the oldest ends {_wm(oldest)} and closes when the watermark reaches {_wm(closes)}"
            now, need = _parse_time(wm), _parse_time(closes)
            if need is not None:
                if now is None:
                    text += " (no watermark yet)"
                elif need > now:
                    text += f" (watermark now {_wm(wm)}, {_span(need - now)} of event time to go)"
            if emit == "window_close":
                text += "; EMIT ON WINDOW CLOSE: nothing is emitted for a window before it closes"
                report.waiting = True
            else:
                text += "; its current values are already emitted as updates"
            lines.append(text)
        else:
            lines.append("no open windows")
    elif kind in ("group_aggregate", "changelog_aggregate"):
        lines.append(
            f"{int(info.get('groups') or info.get('state_rows') or 0):,} groups; emits updates after each batch"
        )
    elif kind.endswith("_join"):
        _join_lines(report, info, kind)
    elif kind == "calc":
        lines.append("stateless")
    else:
        detail = {k: v for k, v in report.detail.items() if k not in ("rows_in", "rows_out")}
        lines.append(", ".join(f"{k}={v}" for k, v in detail.items()) or "—")
    lines.append(
        f"{int(info.get('rows_in') or 0):,} rows in, {int(info.get('rows_out') or 0):,} out"
    )
    return report


def _join_lines(report: OperatorReport, info: Mapping[str, Any], kind: str) -> None:
    lines = report.lines
    if kind == "lookup_join":
        if info.get("table_loaded") is False:
            lines.append(
                f"waiting for the lookup table to load; {int(info.get('stream_rows_buffered') or 0):,} stream rows buffered"
            )
            report.waiting = True
        else:
            lines.append(f"lookup table loaded ({int(info.get('table_rows') or 0):,} rows)")
        return
    left, right = int(info.get("left_rows_held") or 0), int(info.get("right_rows_held") or 0)
    lwm, rwm = info.get("left_watermark"), info.get("right_watermark")
    text = f"holds {left:,} left and {right:,} right rows in state; left watermark {_wm(lwm)}, right watermark {_wm(rwm)}"
    lo, ro = _order(str(lwm)), _order(str(rwm))
    if kind == "asof_join" and left:
        if ro < lo or ro == float("-inf"):
            text += "; left rows wait until the right watermark passes their time: the right input holds results back"
            report.waiting = True
    elif kind in INTERVAL_JOINS and lo != ro:
        side = "left" if lo < ro else "right"
        text += f"; state is purged as the {side} watermark (the lower one) advances"
    lines.append(text)
