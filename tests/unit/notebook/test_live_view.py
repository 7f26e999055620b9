"""q.show() in a (real) IPython shell: the view updates in place from a background thread,
and that thread ends when the query is cancelled or finishes by itself — never leaks."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from IPython.core.displaypub import CapturingDisplayPublisher
from nbtest_support import Gate, events, live_threads, shell, wait_until

import datum_sql as ds
from datum_sql.notebook import live

DEADLINE_S = 5.0


@pytest.fixture
def ip() -> Any:
    ip = shell()
    saved = ip.display_pub
    ip.display_pub = CapturingDisplayPublisher()
    yield ip
    ip.display_pub = saved


@pytest.fixture
def ctx() -> Any:
    with ds.Context(state_dir=None, checkpoint_interval=None) as c:
        yield c


def _ended_within(thread: threading.Thread, deadline: float = DEADLINE_S) -> bool:
    thread.join(deadline)
    return not thread.is_alive() and thread not in threading.enumerate()


def test_live_view_stops_when_the_query_is_cancelled(ip: Any, ctx: Any) -> None:
    ctx.execute(
        "CREATE SOURCE bids WITH (connector = 'nexmark', stream = 'bid', events_per_second = '2000')"
    )
    q = ctx.execute_streaming("SELECT auction, count(*) AS bids FROM bids GROUP BY auction")
    view = q.show(5, interval=0.05)
    assert isinstance(view, live.LiveView) and view.running
    assert view.thread is not None and view.thread in live_threads()
    wait_until(lambda: view.updates >= 2)  # it really updates in place
    first = ip.display_pub.outputs[0]
    assert first["transient"]["display_id"]
    updates = [o for o in ip.display_pub.outputs if o.get("update")]
    assert updates and all(o["transient"] == first["transient"] for o in updates)
    assert "current result (materialized state)" in updates[-1]["data"]["text/html"]
    q.cancel()
    assert _ended_within(view.thread), "the live view thread outlived the cancelled query"
    assert not live_threads()
    # its last update shows the final state
    assert "cancelled" in ip.display_pub.outputs[-1]["data"]["text/html"]


def test_live_view_stops_when_the_query_finishes_by_itself(ip: Any, ctx: Any) -> None:
    gate = Gate(events([0, 1]).to_batches(), events([2, 3]).to_batches())
    ctx.register_arrow("ev", gate, schema=events([0]).schema, event_time="ts",
                       watermark=ds.BoundedOutOfOrderness(seconds=1))  # fmt: skip
    q = ctx.execute_streaming("SELECT k, v FROM ev")
    try:
        view = q.show(interval=0.05)
        assert view.running
        time.sleep(0.2)
        assert view.running  # the query waits at the gate: the view stays live
    finally:
        gate.open()
    assert q.wait(30)
    assert _ended_within(view.thread)
    assert not live_threads()
    assert q.state == "finished"
    assert "finished" in ip.display_pub.outputs[-1]["data"]["text/html"]


def test_displaying_the_handle_is_live_while_running_and_static_after(ip: Any, ctx: Any) -> None:
    ctx.execute(
        "CREATE SOURCE bids WITH (connector = 'nexmark', stream = 'bid', events_per_second = '1000')"
    )
    q = ctx.execute_streaming("SELECT auction FROM bids")
    before = set(live_threads())
    from IPython.display import display

    display(q)
    started = [t for t in live_threads() if t not in before]
    assert len(started) == 1
    q.cancel()
    assert _ended_within(started[0])
    display(q)  # ended: a static view, no thread
    assert not live_threads()
    assert "datum-status" in ip.display_pub.outputs[-1]["data"]["text/html"]


def test_stop_ends_the_thread_while_the_query_runs_on(ip: Any, ctx: Any) -> None:
    ctx.execute(
        "CREATE SOURCE bids WITH (connector = 'nexmark', stream = 'bid', events_per_second = '1000')"
    )
    q = ctx.execute_streaming("SELECT auction FROM bids")
    view = q.show(interval=0.05)
    view.stop()
    assert view.thread is not None and _ended_within(view.thread)
    assert not q.done
    q.cancel()


def test_outside_ipython_show_prints_a_snapshot_and_starts_no_thread(
    ctx: Any, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(live, "in_ipython", lambda: False)
    ctx.register_arrow("ev", events([0, 1, 2]))
    q = ctx.execute_streaming("SELECT k, v FROM ev")
    q.wait(30)
    view = q.show()
    assert view.thread is None and not live_threads()
    out = capsys.readouterr().out
    assert "finished" in out and "ev" in out and "newest rows" in out
