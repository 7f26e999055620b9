"""Two keyed process functions the tests (and the crash child) run, with references that
compute their expected output by hand, one event at a time.

``idle_alert``: an alert when a key stays quiet for ``IDLE`` of event time after a row
(at that row's time + IDLE); at the end of input every key's last quiet spell counts.
``order_lifecycle``: a state machine over order events, with a shipment deadline timer.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

import pyarrow as pa

import datum_sql as ds

IDLE = timedelta(seconds=30)
DEADLINE = timedelta(seconds=60)


def idle_alert_over(column: str) -> Callable[[ds.Activation], ds.ProcessResponse]:
    """The idle alert over rows whose event time is ``column``."""

    def idle_alert(act: ds.Activation) -> ds.ProcessResponse:
        return _idle(act, act.rows.column(column).to_pylist())

    return idle_alert


IDLE_DECLARATION: dict[str, Any] = {
    "state": {"last_seen": "TIMESTAMP"},
    "output": {"idle_since": "TIMESTAMP", "alert_at": "TIMESTAMP"},
    "time": "alert_at",
}
idle_alert = ds.process_function(**IDLE_DECLARATION, name="idle_alert")(idle_alert_over("ts"))


def _idle(act: ds.Activation, times: list[datetime]) -> ds.ProcessResponse:
    # absent last_seen: no row yet, or its quiet spell was already reported
    last = act.state.get("last_seen")
    alerts = []
    if act.timer is not None:
        alerts.append({"idle_since": act.timer - IDLE, "alert_at": act.timer})
        last = None
    for t in times:  # gaps inside this call's rows
        if last is not None and t - last >= IDLE:
            alerts.append({"idle_since": last, "alert_at": last + IDLE})
        last = t
    if act.rows.num_rows == 0:
        return ds.ProcessResponse(rows=alerts, clear=["last_seen"])
    old = act.state.get("last_seen")
    return ds.ProcessResponse(
        rows=alerts,
        set={"last_seen": last},
        timers=[last + IDLE],
        delete_timers=[old + IDLE] if old is not None else [],
    )


def idle_reference(rows: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    """(k, idle_since, alert_at) of every quiet spell of ``rows`` (k, ts), by hand."""
    by_key: dict[Any, list[datetime]] = {}
    for r in rows:
        by_key.setdefault(r["k"], []).append(r["ts"])
    out = []
    for k, times in by_key.items():
        times.sort()
        for a, b in zip(times, [*times[1:], None], strict=True):
            if b is None or b - a >= IDLE:
                out.append((k, a, a + IDLE))
    return out


TRANSITIONS: dict[str | None, set[str]] = {
    None: {"created"},
    "created": {"paid", "cancelled"},
    "paid": {"shipped", "cancelled"},
    "shipped": set(),
    "cancelled": set(),
}


@ds.process_function(
    state={"status": "VARCHAR", "paid_at": "TIMESTAMP"},
    output={"at": "TIMESTAMP", "event": "VARCHAR", "status": "VARCHAR", "kind": "VARCHAR"},
    time="at",
)
def order_lifecycle(act: ds.Activation) -> ds.ProcessResponse:
    """created -> paid -> shipped, or cancelled before shipping; a shipment is due
    DEADLINE after payment (a "late" row when it is not, once)."""
    status = act.state.get("status")
    paid_at = act.state.get("paid_at")
    old_deadline = paid_at + DEADLINE if paid_at is not None else None
    out = []
    if act.timer is not None:
        out.append({"at": act.timer, "event": "deadline", "status": status, "kind": "late"})
        paid_at = None
    events = act.rows.column("event").to_pylist()
    for event, t in zip(events, act.rows.column("ts").to_pylist(), strict=True):
        if paid_at is not None and t >= paid_at + DEADLINE:
            out.append(
                {"at": paid_at + DEADLINE, "event": "deadline", "status": status, "kind": "late"}
            )
            paid_at = None
        if event in TRANSITIONS[status]:
            status = event
            paid_at = t if event == "paid" else None
            out.append({"at": t, "event": event, "status": status, "kind": "ok"})
        else:
            out.append({"at": t, "event": event, "status": status, "kind": "invalid"})
    changes = {"status": status, "paid_at": paid_at} if status is not None else {}
    new_deadline = paid_at + DEADLINE if paid_at is not None else None
    return ds.ProcessResponse(
        rows=pa.Table.from_pylist(out, schema=LIFECYCLE_OUTPUT) if out else None,
        set=changes,
        timers=[new_deadline] if new_deadline is not None and new_deadline != old_deadline else [],
        delete_timers=[old_deadline]
        if old_deadline is not None and new_deadline != old_deadline
        else [],
    )


LIFECYCLE_OUTPUT = pa.schema(
    [
        ("at", pa.timestamp("us")),
        ("event", pa.string()),
        ("status", pa.string()),
        ("kind", pa.string()),
    ]
)


def lifecycle_reference(rows: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    """(order_id, at, event, status, kind) by hand: each order's events in time order
    (ties in arrival order, the order of ``rows``)."""
    by_key: dict[Any, list[tuple[datetime, int, str]]] = {}
    for i, r in enumerate(rows):
        by_key.setdefault(r["order_id"], []).append((r["ts"], i, r["event"]))
    out = []
    for k, events in by_key.items():
        status: str | None = None
        paid_at = None
        for t, _, event in sorted(events):
            if paid_at is not None and t >= paid_at + DEADLINE:
                out.append((k, paid_at + DEADLINE, "deadline", status, "late"))
                paid_at = None
            if event in TRANSITIONS[status]:
                status = event
                paid_at = t if event == "paid" else None
                out.append((k, t, event, status, "ok"))
            else:
                out.append((k, t, event, status, "invalid"))
        if paid_at is not None:
            out.append((k, paid_at + DEADLINE, "deadline", status, "late"))
    return out


def orders_table(seed: int, n: int = 500, disorder: timedelta = timedelta(seconds=4)) -> pa.Table:
    """``n`` order events of 12 orders, with gaps around DEADLINE and bounded disorder
    (less than ``disorder``) in arrival order."""
    rng = random.Random(seed)
    t, rows = datetime(2024, 5, 1, 12), []
    for _ in range(n):
        t += timedelta(milliseconds=rng.choice([0, 500, 4000, 20000, 45000]))
        event = rng.choice(["created", "paid", "shipped", "cancelled", "paid", "shipped"])
        rows.append({"order_id": f"o{rng.randint(1, 12)}", "ts": t, "event": event})
    span = disorder.total_seconds() * 0.9
    return pa.Table.from_pylist(
        sorted(rows, key=lambda r: r["ts"] + timedelta(seconds=rng.uniform(0, span)))
    )
