"""Pictures: the metrics of a query over time (matplotlib), and the job graph as SVG.

``metrics_plot(query)`` (``q.plot()``) draws three panels from the query's metrics history
(one sample about every 0.2 s, the last hour kept): throughput in and out (rows/s),
watermark lag (seconds between the newest event time seen and the watermark) and state
size (rows held by operators). matplotlib is optional (``datum-sql[plot]``); figures are
made without pyplot, so nothing depends on, or changes, the session's backend.

``graph_svg(graph, counts)`` draws sources → operators → sinks top to bottom with a small
layered layout written here (no graphviz): each node's layer is its longest path from a
source, nodes in a layer are ordered by the mean position of their inputs. Side outputs
(late rows, dead letters) are dashed. With ``counts`` each box shows its row counts.
"""

from __future__ import annotations

import io
import itertools
import math
from collections.abc import Mapping, Sequence
from typing import Any

from datum_sql.engine.jobgraph import JobGraph, Node
from datum_sql.notebook.display import esc
from datum_sql.optional import require

__all__ = ["MetricsPlot", "graph_counts", "graph_svg", "metrics_plot"]

# -- job graph -----------------------------------------------------------------------------
BOX_W = 250
BOX_H = 58
GAP_X = 28
GAP_Y = 34
PAD = 12
_COLORS = {
    "source": ("#e8f5e9", "#2e7d32"),
    "operator": ("#e3f2fd", "#1565c0"),
    "sink": ("#fff3e0", "#e65100"),
}
_ids = itertools.count(1)


def graph_counts(metrics: Any) -> dict[str, dict[str, int]]:
    """Row counts per job-graph node from a running query's ``executor.metrics``."""
    counts: dict[str, dict[str, int]] = {}
    for nid, s in list(metrics.sources.items()):
        counts[nid] = {"rows_out": int(s.rows), "late_rows": int(s.late_rows)}
    for nid, o in list(metrics.operators.items()):
        counts[nid] = {
            "rows_in": int(o.rows_in),
            "rows_out": int(o.rows_out),
            "state_rows": int(o.state_rows),
        }
    for nid, k in list(metrics.sinks.items()):
        counts[nid] = {"rows_in": int(k.rows)}
    return counts


def _layers(graph: JobGraph) -> dict[str, int]:
    ids = {n.id for n in graph.nodes}
    layer: dict[str, int] = {}

    def depth(node: Node, seen: frozenset[str] = frozenset()) -> int:
        if node.id in layer:
            return layer[node.id]
        ups = [graph.node(i) for i in node.inputs if i in ids and i not in seen]
        d = 0 if not ups else 1 + max(depth(u, seen | {node.id}) for u in ups)
        layer[node.id] = d
        return d

    for n in graph.nodes:
        depth(n)
    return layer


def _title(node: Node) -> str:
    if node.role == "sink" and node.kind == "collect":
        return "(results)"
    return node.kind


def _subtitle(node: Node) -> str:
    side = node.config.get("side")
    if side:
        return f"{'late rows' if side == 'late' else 'dead letters'} · {node.id}"
    if node.role == "operator":
        extra = node.config.get("emit")
        window = node.config.get("window")
        if isinstance(window, Mapping) and window.get("kind"):
            return f"{window['kind']} window · {'on close' if extra == 'window_close' else 'updates'} · {node.id}"
        return node.id
    return f"{node.role} · {node.id}"


def count_text(node: Node, c: Mapping[str, int] | None) -> str:
    if not c:
        return ""
    if node.role == "source":
        late = c.get("late_rows") or 0
        return f"{c.get('rows_out', 0):,} rows read" + (f", {late:,} late" if late else "")
    if node.role == "sink":
        return f"{c.get('rows_in', 0):,} rows written"
    text = f"{c.get('rows_in', 0):,} in → {c.get('rows_out', 0):,} out"
    if c.get("state_rows"):
        text += f" · state {c['state_rows']:,}"
    return text


def _tooltip(node: Node) -> str:
    parts = [f"{node.id} [{node.role}] {node.kind}"]
    for k, v in node.config.items():
        if v not in (None, "", [], {}):
            parts.append(f"{k} = {v}")
    return "\n".join(parts)


def _clip(text: str, limit: int = 30) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def graph_svg(graph: JobGraph, counts: Mapping[str, Mapping[str, int]] | None = None) -> str:
    """The job graph as a standalone SVG document fragment (``<svg ...>...</svg>``)."""
    layer = _layers(graph)
    depth = max(layer.values(), default=0) + 1
    rows: list[list[Node]] = [[] for _ in range(depth)]
    for n in graph.nodes:
        rows[layer[n.id]].append(n)
    # order each layer by the mean position of its inputs (one top-down pass)
    pos: dict[str, float] = {}
    for r, nodes in enumerate(rows):
        if r > 0:
            order = {n.id: i for i, n in enumerate(nodes)}

            def key(n: Node, order: dict[str, int] = order) -> tuple[float, int]:
                ups = [pos[i] for i in n.inputs if i in pos]
                return (sum(ups) / len(ups) if ups else math.inf, order[n.id])

            nodes.sort(key=key)
        for i, n in enumerate(nodes):
            pos[n.id] = i - (len(nodes) - 1) / 2
    widest = max((len(r) for r in rows), default=1)
    width = widest * BOX_W + (widest - 1) * GAP_X + 2 * PAD
    height = depth * BOX_H + (depth - 1) * GAP_Y + 2 * PAD
    center = width / 2
    xy: dict[str, tuple[float, float]] = {}
    for r, nodes in enumerate(rows):
        for n in nodes:
            x = center + pos[n.id] * (BOX_W + GAP_X) - BOX_W / 2
            y = float(PAD + r * (BOX_H + GAP_Y))
            xy[n.id] = (x, y)
    uid = next(_ids)
    arrow = f"datum-arrow-{uid}"
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="datum-graph" width="{width:.0f}" '
        f'height="{height:.0f}" viewBox="0 0 {width:.0f} {height:.0f}" role="img" '
        f'aria-label="job graph" font-family="sans-serif" font-size="12">',
        f'<defs><marker id="{arrow}" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" '
        f'markerHeight="7" orient="auto-start-reverse"><path d="M 0 0 L 10 5 L 0 10 z" '
        f'fill="#666"/></marker></defs>',
    ]
    for n in graph.nodes:
        for up in n.inputs:
            if up not in xy:
                continue
            x1, y1 = xy[up][0] + BOX_W / 2, xy[up][1] + BOX_H
            x2, y2 = xy[n.id][0] + BOX_W / 2, xy[n.id][1]
            mid = (y1 + y2) / 2
            dash = ' stroke-dasharray="5 4"' if n.config.get("side") else ""
            out.append(
                f'<path class="datum-edge" d="M {x1:.1f} {y1:.1f} C {x1:.1f} {mid:.1f} '
                f'{x2:.1f} {mid:.1f} {x2:.1f} {y2 - 1:.1f}" fill="none" stroke="#888" '
                f'stroke-width="1.4"{dash} marker-end="url(#{arrow})"/>'
            )
    for n in graph.nodes:
        x, y = xy[n.id]
        fill, stroke = _COLORS.get(n.role, ("#f5f5f5", "#555"))
        dash = ' stroke-dasharray="5 4"' if n.config.get("side") else ""
        count = count_text(n, (counts or {}).get(n.id))
        out.append(
            f'<g class="datum-node datum-{n.role}" data-id="{esc(n.id)}">'
            f"<title>{esc(_tooltip(n))}</title>"
            f'<rect x="{x:.1f}" y="{y:.1f}" width="{BOX_W}" height="{BOX_H}" rx="7" '
            f'fill="{fill}" stroke="{stroke}" stroke-width="1.5"{dash}/>'
            f'<text x="{x + 10:.1f}" y="{y + 18:.1f}" font-weight="bold" fill="#222">'
            f"{esc(_clip(_title(n), 34))}</text>"
            f'<text x="{x + 10:.1f}" y="{y + 34:.1f}" fill="#666" font-size="11">'
            f"{esc(_clip(_subtitle(n), 42))}</text>"
        )
        if count:
            out.append(
                f'<text class="datum-count" x="{x + 10:.1f}" y="{y + 50:.1f}" fill="{stroke}" '
                f'font-size="11">{esc(_clip(count, 42))}</text>'
            )
        out.append("</g>")
    out.append("</svg>")
    return "".join(out)


# -- metrics over time ---------------------------------------------------------------------
class MetricsPlot:
    """A matplotlib figure of a query's metrics; displays as PNG in a notebook.

    ``.figure`` is the :class:`matplotlib.figure.Figure`; ``.savefig(path)`` saves it.
    """

    def __init__(self, figure: Any, samples: int, name: str) -> None:
        self.figure = figure
        self.samples = samples
        self.name = name

    def savefig(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("bbox_inches", "tight")
        self.figure.savefig(*args, **kwargs)

    def _repr_png_(self) -> bytes:
        buf = io.BytesIO()
        self.savefig(buf, format="png", dpi=90)
        return buf.getvalue()

    def __repr__(self) -> str:
        return f"<MetricsPlot of {self.name}: {self.samples} samples>"


def _throughput(at: Sequence[float], rows: Sequence[int]) -> list[float]:
    out = [math.nan] if at else []
    for i in range(1, len(at)):
        dt = at[i] - at[i - 1]
        out.append((rows[i] - rows[i - 1]) / dt if dt > 0 else math.nan)
    return out


def metrics_plot(query: Any, *, figsize: tuple[float, float] = (8.0, 6.0)) -> MetricsPlot:
    """Throughput, watermark lag and state size of ``query`` over time."""
    require("matplotlib", "q.plot()")
    from matplotlib.figure import Figure

    history = list(query.executor.metrics.history)
    name = getattr(query, "name", "query")
    fig = Figure(figsize=figsize, layout="constrained")
    axes = fig.subplots(3, 1, sharex=True)
    fig.suptitle(f"{name} ({getattr(query, 'state', '')})")
    if not history:
        for ax in axes:
            ax.text(0.5, 0.5, "no samples yet", ha="center", va="center", transform=ax.transAxes)
    t0 = history[0].at if history else 0.0
    at = [s.at for s in history]
    xs = [a - t0 for a in at]
    ax_rate, ax_lag, ax_state = axes
    marker = "." if len(history) < 30 else None
    ax_rate.plot(
        xs,
        _throughput(at, [s.rows_in for s in history]),
        label="in",
        color="#2e7d32",
        marker=marker,
    )
    ax_rate.plot(
        xs,
        _throughput(at, [s.rows_out for s in history]),
        label="out",
        color="#e65100",
        marker=marker,
    )
    ax_rate.set_ylabel("rows/s")
    ax_rate.set_title("throughput", loc="left", fontsize=10)
    ax_rate.legend(loc="upper right", fontsize=8)
    lag = [math.nan if s.watermark_lag_s is None else s.watermark_lag_s for s in history]
    ax_lag.plot(xs, lag, color="#1565c0", marker=marker)
    ax_lag.set_ylabel("seconds")
    ax_lag.set_title("watermark lag (newest event time - watermark)", loc="left", fontsize=10)
    if history and all(math.isnan(v) for v in lag):
        ax_lag.text(
            0.5, 0.5, "no lag to show (no event time, or the input ended)", ha="center", va="center",
            transform=ax_lag.transAxes, color="#777",
        )  # fmt: skip
    ax_state.plot(xs, [s.state_rows for s in history], color="#6a1b9a", marker=marker)
    ax_state.set_ylabel("rows")
    ax_state.set_title("state size", loc="left", fontsize=10)
    ax_state.set_xlabel("seconds since start")
    for ax in axes:
        ax.grid(True, alpha=0.3)
    if history:
        ax_rate.set_ylim(bottom=0)
        ax_state.set_ylim(bottom=0)
    return MetricsPlot(fig, len(history), name)
