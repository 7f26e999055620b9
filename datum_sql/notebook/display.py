"""HTML and text renderings of what datum-sql hands back, and the IPython formatters.

* Result tables (``ctx.sql``, ``SHOW ...``, ``ctx.sample``): a ``pyarrow.Table`` stays a
  ``pyarrow.Table``; under IPython an HTML formatter registered for ``pa.Table`` /
  ``pa.RecordBatch`` renders it (head of the rows, column types, the row count).
* A query handle: state, per source rows / watermark / late rows / lag, per sink rows,
  operators with their state, last checkpoint, and the newest result rows
  (:func:`query_html`, :func:`query_text`).
* ``q.status()`` stays a plain ``dict``: under IPython a formatter recognises its shape
  (the keys ``StreamingQuery.status()`` returns) and renders it as the status table; any
  other dict is left alone.
* ``ctx.explain(sql)`` stays text: under IPython a formatter recognises EXPLAIN output and
  shows it as preformatted text plus the job graph drawn as SVG. :class:`ExplainView` is
  the same as an object (``%%sql EXPLAIN ...``, ``q.explain()``), with row counts once the
  query runs.

Every user-supplied string (values, names, SQL, errors) is HTML-escaped.
"""

from __future__ import annotations

import html
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from datum_sql.engine.jobgraph import JobGraph, Node
from datum_sql.progress import _checkpoint, _lag, _one_line, _rate, _seconds, _sink_label
from datum_sql.table_text import cell, grid_text, is_numeric, table_text

__all__ = [
    "ExplainView",
    "is_status",
    "query_html",
    "query_text",
    "register_formatters",
    "register_if_ipython",
    "status_html",
    "status_text",
    "table_html",
    "table_text",
]

#: Longest cell text shown before it is cut (the whole value stays in the cell's title).
MAX_CELL_CHARS = 120

CSS = """<style>
div.datum {font-family: var(--jp-ui-font-family, -apple-system, 'Segoe UI', sans-serif);
  font-size: 13px; line-height: 1.4; margin: 2px 0; text-align: left;}
div.datum table.datum-t {border-collapse: collapse; margin: 4px 0; table-layout: auto;
  font-size: 12px;}
div.datum table.datum-t th, div.datum table.datum-t td {padding: 2px 10px;
  border-bottom: 1px solid #e3e3e3; text-align: left; vertical-align: top;
  white-space: nowrap; line-height: 1.4;}
div.datum table.datum-t th {font-weight: 600; background: #f5f6f8;}
div.datum table.datum-t td.num, div.datum table.datum-t th.num {text-align: right;
  font-variant-numeric: tabular-nums;}
div.datum table.datum-t td.wrap {white-space: normal; min-width: 280px; max-width: 760px;}
div.datum table.datum-t tr.datum-warn td {background: #fff8e1;}
div.datum .datum-type {display: block; font-weight: 400; color: #888; font-size: 11px;}
div.datum .datum-null {color: #aaa; font-style: italic;}
div.datum .datum-foot, div.datum .datum-dim {color: #777; font-size: 12px;}
div.datum .datum-state {padding: 0 6px; border-radius: 8px; color: #fff; font-size: 12px;}
div.datum .datum-state-starting {background: #3a87ad;}
div.datum .datum-state-running {background: #2e9c4a;}
div.datum .datum-state-finished {background: #246b36;}
div.datum .datum-state-cancelled {background: #b88a00;}
div.datum .datum-state-failed {background: #c0392b;}
div.datum .datum-error {color: #c0392b; white-space: pre-wrap;}
div.datum .datum-section {margin-top: 6px; font-weight: 600;}
div.datum ul {margin: 4px 0; padding-left: 20px;}
div.datum pre {margin: 4px 0; font-size: 12px; white-space: pre-wrap;}
</style>"""


# -- values --------------------------------------------------------------------------------
def esc(value: Any) -> str:
    """HTML-escaped text of ``value`` (quotes included)."""
    return html.escape(str(value), quote=True)


def _cell_html(value: Any) -> str:
    if value is None:
        return '<span class="datum-null">NULL</span>'
    text = cell(value)
    if len(text) > MAX_CELL_CHARS:
        return f'<span title="{esc(text)}">{esc(text[:MAX_CELL_CHARS])}…</span>'
    return esc(text)


def plural(n: int, word: str) -> str:
    """``"1 row"``, ``"2 rows"`` (thousands separated)."""
    return f"{n:,} {word}{'' if n == 1 else 's'}"


def _num(value: Any) -> str:
    return f"{value:,}" if isinstance(value, int) and not isinstance(value, bool) else ""


# -- tables --------------------------------------------------------------------------------
def table_html(
    table: pa.Table | pa.RecordBatch, max_rows: int = 20, *, title: str | None = None
) -> str:
    """A table's first ``max_rows`` rows as an HTML table, with column types and row count."""
    fragment = _table_fragment(table, max_rows, title=title)
    return f'<div class="datum datum-result">{CSS}{fragment}</div>'


def _table_fragment(
    table: pa.Table | pa.RecordBatch, max_rows: int, *, title: str | None = None
) -> str:
    n = table.num_rows
    head = table.slice(0, max_rows)
    rows = head.to_pylist()
    numeric = [is_numeric(f.type) for f in table.schema]
    out = []
    if title:
        out.append(f'<div class="datum-section">{esc(title)}</div>')
    out.append('<table class="datum-t datum-table"><thead><tr>')
    for f, is_num in zip(table.schema, numeric, strict=True):
        cls = ' class="num"' if is_num else ""
        out.append(f'<th{cls}>{esc(f.name)}<span class="datum-type">{esc(f.type)}</span></th>')
    out.append("</tr></thead><tbody>")
    names = table.schema.names
    for row in rows:
        out.append("<tr>")
        for name, is_num in zip(names, numeric, strict=True):
            cls = ' class="num"' if is_num else ""
            out.append(f"<td{cls}>{_cell_html(row.get(name))}</td>")
        out.append("</tr>")
    out.append("</tbody></table>")
    more = f" (first {len(rows):,} shown)" if n > len(rows) else ""
    out.append(
        f'<div class="datum-foot">{n:,} row{"s" if n != 1 else ""}, '
        f"{table.num_columns} column{'s' if table.num_columns != 1 else ''}{more}</div>"
    )
    return "".join(out)


def _clip(text: str, limit: int = 40) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


# -- status --------------------------------------------------------------------------------
_STATUS_KEYS = frozenset({"name", "state", "rows_in", "rows_out", "sources", "operators", "sinks"})


def is_status(obj: Any) -> bool:
    """True for a dict shaped like ``StreamingQuery.status()``."""
    return (
        isinstance(obj, Mapping)
        and set(obj) >= _STATUS_KEYS
        and isinstance(obj.get("sources"), Mapping)
        and isinstance(obj.get("sinks"), Mapping)
    )


def _watermark_text(value: Any) -> str:
    if value is None or value == "-inf":
        return "—"
    if value == "+inf":
        return "end of input"
    return str(value)


def _state_rows(status: Mapping[str, Any]) -> tuple[int, int]:
    ops = (status.get("operators") or {}).values()
    return (
        sum(int(o.get("state_rows") or 0) for o in ops),
        sum(int(o.get("state_bytes") or 0) for o in ops),
    )


def _bytes(n: int) -> str:
    size = float(n)
    for unit in ("B", "KB", "MB", "GB"):
        if size < 1024 or unit == "GB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{n} B"  # pragma: no cover


def _summary(status: Mapping[str, Any], rates: Mapping[str, float | None] | None) -> list[str]:
    """The headline facts as short texts (unescaped)."""
    parts = [_seconds(status.get("elapsed_s")) or ""]
    rate_in = _rate((rates or {}).get("in"))
    rate_out = _rate((rates or {}).get("out"))
    parts.append(
        f"{int(status.get('rows_in') or 0):,} rows in" + (f" ({rate_in}/s)" if rate_in else "")
    )
    parts.append(
        f"{int(status.get('rows_out') or 0):,} out" + (f" ({rate_out}/s)" if rate_out else "")
    )
    late = int(status.get("late_rows") or 0)
    parts.append(f"{late:,} late")
    rows, size = _state_rows(status)
    parts.append(f"state {rows:,} rows ({_bytes(size)})")
    wm = status.get("watermark")
    if wm not in (None, "-inf"):
        parts.append(f"watermark {_watermark_text(wm)}")
    checkpoint = _checkpoint(dict(status))
    parts.append(f"last checkpoint {checkpoint}" if checkpoint else "no checkpoint yet")
    if status.get("recovered_from"):
        rec = status["recovered_from"]
        parts.append(f"resumed from checkpoint {rec.get('checkpoint', rec)}")
    return [p for p in parts if p]


def _io_rows(status: Mapping[str, Any]) -> list[dict[str, str]]:
    rows = []
    for table, info in (status.get("sources") or {}).items():
        idle = info.get("idle_splits") or []
        notes = []
        if info.get("finished"):
            notes.append("ended")
        if idle:
            notes.append(f"idle: {', '.join(map(str, idle))}")
        if info.get("rejected_rows"):
            notes.append(f"{int(info['rejected_rows']):,} rejected")
        if info.get("state") and info.get("state") not in ("running", "closed"):
            notes.append(str(info["state"]))
        rows.append(
            {
                "role": "in",
                "table": str(table),
                "rows": _num(int(info.get("rows") or 0)),
                "watermark": _watermark_text(info.get("watermark")),
                "late": _num(int(info.get("late_rows") or 0)),
                "lag": _lag(dict(info)),
                "notes": "; ".join(notes),
            }
        )
    for table, info in (status.get("sinks") or {}).items():
        commits = info.get("commits")
        rows.append(
            {
                "role": "out",
                "table": _sink_label(str(table)),
                "rows": _num(int(info.get("rows") or 0)),
                "watermark": "",
                "late": "",
                "lag": "",
                "notes": plural(int(commits), "commit") if commits else "",
            }
        )
    return rows


_DETAIL_SKIP = {"kind", "rows_in", "rows_out", "watermark", "state_rows", "state_bytes"}


def _detail(info: Mapping[str, Any]) -> str:
    return ", ".join(
        f"{k}={v}" for k, v in info.items() if k not in _DETAIL_SKIP and v not in (None, "", [])
    )


def status_html(
    status: Mapping[str, Any],
    *,
    rates: Mapping[str, float | None] | None = None,
    newest: pa.Table | None = None,
    newest_title: str = "newest rows",
    operators: bool = True,
) -> str:
    """The status of a query as HTML: a headline, the in/out table (class ``datum-status``),
    the operators, the error if any, and optionally the newest result rows."""
    return f'<div class="datum datum-query">{CSS}{_status_fragment(status, rates=rates, newest=newest, newest_title=newest_title, operators=operators)}</div>'


def _status_fragment(
    status: Mapping[str, Any],
    *,
    rates: Mapping[str, float | None] | None = None,
    newest: pa.Table | None = None,
    newest_title: str = "newest rows",
    operators: bool = True,
) -> str:
    state = str(status.get("state", "?"))
    out = [
        f'<div class="datum-head"><b>{esc(status.get("name", "query"))}</b> '
        f'<span class="datum-state datum-state-{esc(state)}">{esc(state)}</span> '
        f'<span class="datum-dim">{" · ".join(esc(p) for p in _summary(status, rates))}</span></div>'
    ]
    io = _io_rows(status)
    with_lag = any(r["lag"] for r in io)
    with_notes = any(r["notes"] for r in io)
    head = ["", "table", "rows", "watermark", "late"]
    head += ["lag"] if with_lag else []
    head += ["notes"] if with_notes else []
    out.append('<table class="datum-t datum-status"><thead><tr>')
    out += [f"<th{_numcls(h)}>{esc(h)}</th>" for h in head]
    out.append("</tr></thead><tbody>")
    for r in io:
        cells = [r["role"], r["table"], r["rows"], r["watermark"], r["late"]]
        cells += [r["lag"]] if with_lag else []
        cells += [r["notes"]] if with_notes else []
        out.append(
            f'<tr class="datum-{r["role"]}">'
            + "".join(f"<td{_numcls(h)}>{esc(c)}</td>" for h, c in zip(head, cells, strict=True))
            + "</tr>"
        )
    out.append("</tbody></table>")
    ops = status.get("operators") or {}
    if operators and ops:
        out.append('<table class="datum-t datum-operators"><thead><tr>')
        oh = ["operator", "kind", "rows in", "rows out", "watermark", "state rows", "detail"]
        out += [f"<th{_numcls(h)}>{esc(h)}</th>" for h in oh]
        out.append("</tr></thead><tbody>")
        for oid, info in ops.items():
            cells = [
                str(oid),
                str(info.get("kind", "")),
                _num(int(info.get("rows_in") or 0)),
                _num(int(info.get("rows_out") or 0)),
                _watermark_text(info.get("watermark")),
                _num(int(info.get("state_rows") or 0)),
                _detail(info),
            ]
            out.append(
                "<tr>"
                + "".join(f"<td{_numcls(h)}>{esc(c)}</td>" for h, c in zip(oh, cells, strict=True))
                + "</tr>"
            )
        out.append("</tbody></table>")
    if status.get("error"):
        out.append(f'<div class="datum-error">{esc(status["error"])}</div>')
    if newest is not None:
        out.append(_table_fragment(newest, newest.num_rows, title=newest_title))
    return "".join(out)


def _numcls(header: str) -> str:
    if header in ("rows", "late", "lag", "rows in", "rows out", "state rows"):
        return ' class="num"'
    return ' class="wrap"' if header in ("notes", "detail") else ""


def status_text(
    status: Mapping[str, Any],
    *,
    rates: Mapping[str, float | None] | None = None,
    newest: pa.Table | None = None,
) -> str:
    """The status of a query as plain text (same content as :func:`status_html`)."""
    head = f"{status.get('name', 'query')} {status.get('state', '?')}: " + " · ".join(
        _summary(status, rates)
    )
    io = _io_rows(status)
    grid = grid_text(
        ["", "table", "rows", "watermark", "late", "lag", "notes"],
        [
            [r["role"], r["table"], r["rows"], r["watermark"], r["late"], r["lag"], r["notes"]]
            for r in io
        ],
    )
    out = [head, grid]
    ops = status.get("operators") or {}
    if ops:
        out.append(
            grid_text(
                ["operator", "kind", "rows in", "rows out", "watermark", "state rows", "detail"],
                [
                    [
                        str(oid),
                        str(info.get("kind", "")),
                        _num(int(info.get("rows_in") or 0)),
                        _num(int(info.get("rows_out") or 0)),
                        _watermark_text(info.get("watermark")),
                        _num(int(info.get("state_rows") or 0)),
                        _clip(_detail(info), 60),
                    ]
                    for oid, info in ops.items()
                ],
            )
        )
    if status.get("error"):
        out.append("error: " + _one_line(str(status["error"])))
    if newest is not None:
        out.append("newest rows:\n" + table_text(newest, newest.num_rows))
    return "\n".join(out)


# -- query handles -------------------------------------------------------------------------
def query_rates(query: Any, window_s: float = 2.0) -> dict[str, float | None]:
    """Rows per second in and out over the last ``window_s`` seconds of the query's metrics
    history (None when the query ended or there is not enough history)."""
    history = list(getattr(query.executor.metrics, "history", ()))
    if query.done or len(history) < 2:
        return {"in": None, "out": None}
    last = history[-1]
    first = next((s for s in history if last.at - s.at <= window_s), history[-2])
    if first is last:
        first = history[-2]
    dt = last.at - first.at
    if dt <= 0:
        return {"in": None, "out": None}
    return {"in": (last.rows_in - first.rows_in) / dt, "out": (last.rows_out - first.rows_out) / dt}


def newest_rows(query: Any, n: int) -> tuple[pa.Table | None, str]:
    """The query's newest ``n`` result rows (its current state for an updating query),
    and a title for them; (None, "") for a query writing into a sink."""
    buffer = getattr(query, "_buffer", None)
    if buffer is None or n <= 0:
        return None, ""
    try:
        table = query.latest(n)
    except Exception:  # a failed query: the status says why
        return None, ""
    title = "current result (materialized state)" if buffer.updating else "newest rows"
    if buffer.updating and table.num_rows >= n:
        title += f", last {n} rows"
    return table, title


def query_html(query: Any, n: int = 10) -> str:
    """A query handle as HTML: its status and its newest result rows."""
    newest, title = newest_rows(query, n)
    return status_html(query.status(), rates=query_rates(query), newest=newest, newest_title=title)


def query_text(query: Any, n: int = 10) -> str:
    newest, _ = newest_rows(query, n)
    return status_text(query.status(), rates=query_rates(query), newest=newest)


# -- EXPLAIN -------------------------------------------------------------------------------
@dataclass
class ExplainView:
    """EXPLAIN output: the plan text plus the job graph, drawn as SVG in a notebook.

    ``counts`` (node id -> ``{"rows_in": .., "rows_out": ..}``) adds row counts to the
    picture, for a running query (``q.explain()``).
    """

    text: str
    graph: JobGraph
    counts: dict[str, dict[str, int]] | None = field(default=None)

    def svg(self) -> str:
        from datum_sql.notebook.plots import graph_svg

        return graph_svg(self.graph, self.counts)

    def _repr_html_(self) -> str:
        return (
            f'<div class="datum datum-explain">{CSS}{self.svg()}'
            f"<details><summary>plan</summary><pre>{esc(self.text)}</pre></details></div>"
        )

    def __str__(self) -> str:
        return self.text

    def __repr__(self) -> str:
        return self.text


_GRAPH_LINE = re.compile(
    r"^(?P<id>\S+) \[(?P<role>source|operator|sink)\] (?P<kind>[^(\s]+)\((?P<cfg>.*)\)"
    r"(?: <- (?P<inputs>[\w.-]+(?:, [\w.-]+)*))?$"
)


def graph_from_explain(text: str) -> JobGraph | None:
    """The job graph of EXPLAIN text (``== job graph ==`` section), for drawing; None when
    ``text`` is not EXPLAIN output."""
    if "== job graph ==" not in text or "== logical plan ==" not in text:
        return None
    section = text.split("== job graph ==", 1)[1].strip().splitlines()
    nodes = []
    for line in section:
        m = _GRAPH_LINE.match(line.strip())
        if m is None:
            return None
        cfg = m.group("cfg")
        side = re.search(r"\bside=(late|dead_letter)\b", cfg)
        nodes.append(
            Node(
                id=m.group("id"),
                role=m.group("role"),  # type: ignore[arg-type]
                kind=m.group("kind"),
                config={"side": side.group(1)} if side else {},
                inputs=tuple(m.group("inputs").split(", ")) if m.group("inputs") else (),
            )
        )
    return JobGraph(tuple(nodes)) if nodes else None


def explain_html(text: str) -> str | None:
    """EXPLAIN text as HTML (graph picture + text); None when it is not EXPLAIN text."""
    if not isinstance(text, str):
        return None
    graph = graph_from_explain(text)
    if graph is None:
        return None
    return ExplainView(text, graph)._repr_html_()


# -- IPython -------------------------------------------------------------------------------
def _status_or_none(obj: Any) -> str | None:
    return status_html(obj) if is_status(obj) else None


def register_formatters(ip: Any) -> None:
    """Register the HTML renderings with IPython shell ``ip`` (idempotent)."""
    formatter = ip.display_formatter.formatters["text/html"]
    formatter.for_type(pa.Table, table_html)
    formatter.for_type(pa.RecordBatch, table_html)
    # Plain dicts and strings keep their types; only status dicts and EXPLAIN text render.
    formatter.for_type(dict, _status_or_none)
    formatter.for_type(str, explain_html)


def register_if_ipython() -> bool:
    """Register the formatters when running inside an IPython shell (never imports
    IPython otherwise). True when registered."""
    if "IPython" not in sys.modules:
        return False
    try:
        from IPython import get_ipython

        ip = get_ipython()
    except Exception:
        return False
    if ip is None or not hasattr(ip, "display_formatter"):
        return False
    register_formatters(ip)
    return True


def explain_query(query: Any) -> ExplainView:
    """``q.explain()``: the job graph of a running (or ended) query with row counts so far."""
    from datum_sql.notebook.plots import count_text, graph_counts

    graph = query.executor.graph
    counts = graph_counts(query.executor.metrics)
    full = str(graph).splitlines()
    if len(full) != len(graph.nodes):  # a config spanning lines: fall back to short lines
        full = [
            f"{n.id} [{n.role}] {n.kind}" + (f" <- {', '.join(n.inputs)}" if n.inputs else "")
            for n in graph.nodes
        ]
    lines = []
    for node, line in zip(graph.nodes, full, strict=True):
        text = count_text(node, counts.get(node.id))
        lines.append(f"{line}  -- {text}" if text else line)
    return ExplainView("\n".join(lines), graph, counts)
