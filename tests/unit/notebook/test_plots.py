"""q.plot() (matplotlib, headless) and the job graph as SVG (hand-written layout)."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from typing import Any

import matplotlib
import pytest
from nbtest_support import events, wait_until

import datum_sql as ds
from datum_sql.engine.jobgraph import JobGraph, Node
from datum_sql.notebook.plots import graph_svg

matplotlib.use("Agg")
SVG = "{http://www.w3.org/2000/svg}"
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


@pytest.fixture
def ctx() -> Any:
    with ds.Context(state_dir=None, checkpoint_interval=None) as c:
        yield c


def test_plot_draws_three_panels_from_the_metrics_history(ctx: Any, tmp_path: Any) -> None:
    ctx.execute("""
        CREATE SOURCE bids (WATERMARK FOR date_time AS date_time - INTERVAL '1 second')
        WITH (connector = 'nexmark', stream = 'bid', events_per_second = '4000')
    """)
    q = ctx.execute_streaming("SELECT auction, count(*) AS n FROM bids GROUP BY auction")
    wait_until(lambda: len(q.executor.metrics.history) >= 4)
    q.cancel()
    plot = q.plot()
    axes = plot.figure.get_axes()
    assert [a.get_title(loc="left") for a in axes] == [
        "throughput", "watermark lag (newest event time - watermark)", "state size",
    ]  # fmt: skip
    assert plot.samples >= 4
    rate_in = axes[0].get_lines()[0].get_ydata()
    assert max(v for v in rate_in if v == v) > 0  # some rows/s (NaN skipped)
    assert max(axes[2].get_lines()[0].get_ydata()) > 0  # state grew
    png = plot._repr_png_()
    assert png.startswith(PNG_SIGNATURE) and len(png) > 5000
    plot.savefig(tmp_path / "m.png")
    assert (tmp_path / "m.png").read_bytes().startswith(PNG_SIGNATURE)


def test_plot_of_a_query_without_samples_still_draws(ctx: Any) -> None:
    ctx.register_arrow("t", events([0]))
    q = ctx.execute_streaming("SELECT k FROM t")
    q.wait(30)
    q.executor.metrics.history.clear()
    assert q.plot()._repr_png_().startswith(PNG_SIGNATURE)


def test_graph_svg_layers_a_join_and_marks_side_outputs() -> None:
    graph = JobGraph((
        Node("source_0", "source", "left<&>"),
        Node("late_1", "sink", "late_rows", {"side": "late", "of": "source_0"}, ("source_0",)),
        Node("source_2", "source", "right"),
        Node("join_3", "operator", "asof_join", {}, ("source_0", "source_2")),
        Node("sink_4", "sink", "out", {}, ("join_3",)),
    ))  # fmt: skip
    svg = graph_svg(graph, {"join_3": {"rows_in": 7, "rows_out": 3, "state_rows": 2}})
    root = ET.fromstring(svg)  # well-formed XML
    boxes = {g.get("data-id"): g for g in root.iter(f"{SVG}g")}
    assert set(boxes) == {n.id for n in graph.nodes}

    def y(node_id: str) -> float:
        return float(boxes[node_id].find(f"{SVG}rect").get("y"))

    assert y("source_0") == y("source_2") < y("join_3") < y("sink_4")
    assert y("late_1") == y("join_3")
    texts = [t.text for t in root.iter(f"{SVG}text")]
    assert "left<&>" in texts  # escaped in the markup, intact once parsed
    assert "7 in → 3 out · state 2" in texts
    dashed = [p for p in root.iter(f"{SVG}path") if p.get("stroke-dasharray")]
    assert len(dashed) == 1  # the late-rows edge
    assert len(list(root.iter(f"{SVG}path"))) == 1 + 4  # arrow marker + 4 edges
