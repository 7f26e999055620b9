"""Progress of running streaming queries, for the CLI.

On a terminal: a live table (rich) refreshed about four times a second, one row per source
and per sink of each query — state, rows, rows/s, watermark, late rows, lag, last checkpoint.
Anywhere else (a pipe, a log file, CI): a plain line per query every couple of seconds and a
summary line when it ends; never an escape code.

Everything shown comes from ``StreamingQuery.status()``; rates are computed here from the
deltas between polls. Any object with ``status()`` and ``done`` works, which keeps this
testable without a running engine.
"""

from __future__ import annotations

import sys
import time
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TextIO

from rich import box
from rich.console import Console, Group
from rich.live import Live
from rich.table import Table
from rich.text import Text

__all__ = ["Progress", "QueryLike"]

#: Seconds of history a rate is computed over (smooths the 4/s refresh).
RATE_WINDOW_S = 2.0

_STATE_STYLE = {
    "starting": "cyan",
    "running": "green",
    "finished": "bold green",
    "cancelled": "yellow",
    "failed": "bold red",
}


class QueryLike(Protocol):
    """What the display needs of a query (``StreamingQuery`` has it)."""

    @property
    def done(self) -> bool: ...

    def status(self) -> dict[str, Any]: ...


@dataclass
class _Row:
    """One source or sink of one query, as displayed."""

    role: str  # "source" | "sink"
    table: str
    rows: int
    rate: float | None
    watermark: str
    late: int | None
    lag: str


class Progress:
    """Show the progress of ``queries`` until they end.

    ``out`` is where to write (default ``sys.stdout``); ``is_terminal`` picks the live table
    (True) or plain lines (False) and defaults to ``out.isatty()``. ``log_interval`` is the
    seconds between plain lines; ``refresh_per_second`` the live table's refresh rate.
    """

    def __init__(
        self,
        queries: Iterable[QueryLike],
        *,
        out: TextIO | None = None,
        is_terminal: bool | None = None,
        refresh_per_second: float = 4.0,
        log_interval: float = 2.0,
        fail_fast: bool = True,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.queries: list[QueryLike] = list(queries)
        self.out: TextIO = out if out is not None else sys.stdout
        self.is_terminal = _isatty(self.out) if is_terminal is None else bool(is_terminal)
        self.refresh_s = 1.0 / max(refresh_per_second, 0.1)
        self.log_interval = log_interval
        self.fail_fast = fail_fast
        self._clock = clock
        self._history: dict[tuple[int, str, str], deque[tuple[float, int]]] = {}
        self._reported: set[int] = set()
        self._shown_states: list[str] = []

    # -- driving --------------------------------------------------------------------------
    def run_until_done(self, timeout: float | None = None) -> bool:
        """Poll and display until every query has ended — or, with ``fail_fast``, until one
        failed. Returns True when that happened, False when ``timeout`` passed first.

        Ctrl-C (KeyboardInterrupt) propagates to the caller, which decides what to cancel.
        """
        deadline = None if timeout is None else self._clock() + timeout
        if self.is_terminal:
            return self._run_live(deadline)
        return self._run_plain(deadline)

    def finished(self) -> bool:
        """True when every query ended, or (``fail_fast``) one of them failed."""
        if all(q.done for q in self.queries):
            return True
        return self.fail_fast and any(_state(q) == "failed" for q in self.queries)

    def _run_live(self, deadline: float | None) -> bool:
        with Live(
            self.renderable(),
            console=self._console(),
            auto_refresh=False,
            transient=False,
            redirect_stdout=False,
            redirect_stderr=False,
        ) as live:
            while True:
                ended = self.finished()
                live.update(self.renderable(), refresh=True)
                if ended:
                    return True
                if deadline is not None and self._clock() >= deadline:
                    return False
                time.sleep(self.refresh_s)

    def _run_plain(self, deadline: float | None) -> bool:
        next_log = self._clock() + self.log_interval
        while True:
            self._report_ended()
            if self.finished():
                return True
            now = self._clock()
            if deadline is not None and now >= deadline:
                return False
            if now >= next_log:
                self._write(self.lines())
                next_log = now + self.log_interval
            else:
                self._observe_all()
            time.sleep(min(0.1, self.log_interval))

    def final(self) -> None:
        """Show how every query ended, after the caller stopped them (Ctrl-C, a failure):
        summary lines for those not reported yet, or the final table on a terminal."""
        if self.is_terminal:
            states = [_state(q) for q in self.queries]
            if states != self._shown_states:
                self._console().print(self.renderable())
        else:
            self._report_ended(everything=True)

    def _report_ended(self, everything: bool = False) -> None:
        ended = [
            q for q in self.queries
            if (everything or q.done) and id(q) not in self._reported
        ]  # fmt: skip
        if ended:
            self._reported.update(id(q) for q in ended)
            self._write(self.summary_lines(ended))

    def _console(self) -> Console:
        return Console(file=self.out, force_terminal=True)

    def _write(self, lines: Sequence[str]) -> None:
        for line in lines:
            self.out.write(line + "\n")
        self.out.flush()

    # -- what is shown --------------------------------------------------------------------
    def renderable(self) -> Group:
        """The live display: per query a header line (state, elapsed, last checkpoint) and a
        small table with a row per source (in) and sink (out)."""
        parts: list[Any] = []
        self._shown_states = [_state(q) for q in self.queries]
        for q in self.queries:
            status = q.status()
            state = str(status.get("state", "?"))
            header = Text.assemble(
                (str(status.get("name", "query")), "bold"),
                " ",
                (state, _STATE_STYLE.get(state, "")),
                f" {_seconds(status.get('elapsed_s'))}",
            )
            checkpoint = _checkpoint(status)
            if checkpoint:
                header.append(f"  last checkpoint {checkpoint}", style="dim")
            parts.append(header)
            rows = self._rows(q, status)
            with_lag = any(r.lag for r in rows)
            table = Table(box=box.SIMPLE_HEAD, pad_edge=False, show_edge=False, padding=(0, 1))
            table.add_column("", no_wrap=True, min_width=3)
            table.add_column("table", no_wrap=True, overflow="fold")
            table.add_column("rows", justify="right", no_wrap=True, min_width=11)
            table.add_column("rows/s", justify="right", no_wrap=True, min_width=9)
            table.add_column("watermark", no_wrap=True, min_width=19)
            table.add_column("late", justify="right", no_wrap=True, min_width=4)
            if with_lag:
                table.add_column("lag", justify="right", no_wrap=True, min_width=10)
            for r in rows:
                cells = [
                    "in" if r.role == "source" else "out",
                    r.table,
                    f"{r.rows:,}",
                    _rate(r.rate),
                    r.watermark,
                    "" if r.late is None else f"{r.late:,}",
                ]
                table.add_row(*cells, *([r.lag] if with_lag else []))
            parts.append(table)
            if status.get("error"):
                parts.append(Text(_one_line(str(status["error"])), style="red"))
        return Group(*parts)

    def lines(self) -> list[str]:
        """One plain progress line per running query."""
        stamp = time.strftime("%H:%M:%S")
        out = []
        for q in self.queries:
            if q.done:  # reported by its summary line
                continue
            status = q.status()
            parts = [
                f"{stamp} {status.get('name', 'query')} {status.get('state', '?')} "
                f"{_seconds(status.get('elapsed_s'))}"
            ]
            for r in self._rows(q, status):
                if r.role == "source":
                    text = f"in {r.table}: {r.rows:,} rows, {_rate(r.rate) or '0'} rows/s"
                    if r.watermark:
                        text += f", watermark {r.watermark}"
                    if r.late:
                        text += f", {r.late:,} late"
                    if r.lag:
                        text += f", lag {r.lag}"
                else:
                    text = f"out {r.table}: {r.rows:,} rows, {_rate(r.rate) or '0'} rows/s"
                parts.append(text)
            checkpoint = _checkpoint(status)
            if checkpoint:
                parts.append(f"last checkpoint {checkpoint}")
            out.append(" | ".join(parts))
        return out

    def summary_lines(self, queries: Sequence[QueryLike] | None = None) -> list[str]:
        """One line per query saying how it ended and how many rows went in and out."""
        out = []
        for q in self.queries if queries is None else queries:
            status = q.status()
            elapsed = status.get("elapsed_s") or 0.0
            name, state = status.get("name", "query"), status.get("state", "?")
            parts = [f"{name} {state} after {_seconds(elapsed)}"]
            for role, key in (("in", "sources"), ("out", "sinks")):
                for table, info in (status.get(key) or {}).items():
                    rows = int(info.get("rows") or 0)
                    avg = f" ({_rate(rows / elapsed)} rows/s)" if elapsed and rows else ""
                    label = table if role == "in" else _sink_label(str(table))
                    parts.append(f"{role} {label}: {rows:,} rows{avg}")
            if status.get("late_rows"):
                parts.append(f"{status['late_rows']:,} late rows")
            unchanged = _no_change(status)
            if unchanged:
                parts.append(unchanged)
            checkpoint = _checkpoint(status)
            if checkpoint:
                parts.append(f"last checkpoint {checkpoint}")
            if status.get("error"):
                parts.append(f"error: {_one_line(str(status['error']))}")
            out.append(" | ".join(parts))
        return out

    # -- internals --------------------------------------------------------------------------
    def _observe_all(self) -> None:
        for q in self.queries:
            self._rows(q, q.status())

    def _rows(self, q: QueryLike, status: dict[str, Any]) -> list[_Row]:
        now = self._clock()
        rows = []
        for table, info in (status.get("sources") or {}).items():
            n = int(info.get("rows") or 0)
            rows.append(
                _Row(
                    role="source",
                    table=str(table),
                    rows=n,
                    rate=self._rate(q, "source", str(table), now, n),
                    watermark=_watermark(info.get("watermark")),
                    late=int(info.get("late_rows") or 0),
                    lag=_lag(info),
                )
            )
        for table, info in (status.get("sinks") or {}).items():
            n = int(info.get("rows") or 0)
            rows.append(
                _Row(
                    role="sink",
                    table=_sink_label(str(table)),
                    rows=n,
                    rate=self._rate(q, "sink", str(table), now, n),
                    watermark="",
                    late=None,
                    lag="",
                )
            )
        return rows

    def _rate(self, q: QueryLike, role: str, table: str, now: float, rows: int) -> float | None:
        """Rows per second over the last ``RATE_WINDOW_S`` seconds of polls."""
        samples = self._history.setdefault((id(q), role, table), deque())
        samples.append((now, rows))
        while len(samples) > 2 and now - samples[1][0] >= RATE_WINDOW_S:
            samples.popleft()
        if q.done:
            return None
        first_t, first_rows = samples[0]
        if now - first_t <= 0:
            return None
        return max(rows - first_rows, 0) / (now - first_t)


def _isatty(out: TextIO) -> bool:
    try:
        return bool(out.isatty())
    except (AttributeError, ValueError):
        return False


def _state(q: QueryLike) -> str:
    state = getattr(q, "state", None)
    if isinstance(state, str):
        return state
    return str(q.status().get("state", ""))


def _seconds(value: Any) -> str:
    if not isinstance(value, int | float):
        return ""
    if value < 60:
        return f"{value:.1f}s"
    minutes, seconds = divmod(int(value), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m{seconds:02d}s" if hours else f"{minutes}m{seconds:02d}s"


def _rate(rate: float | None) -> str:
    if rate is None:
        return ""
    return f"{rate:,.0f}"


def _watermark(value: Any) -> str:
    if value is None or value == "-inf":
        return ""
    text = str(value)
    if text == "+inf":
        return "end of input"
    return text.partition(".")[0]  # to the second


def _lag(info: dict[str, Any]) -> str:
    """Records behind the end of the input, summed over partitions (Kafka)."""
    parts = info.get("partitions")
    if not isinstance(parts, dict) or not parts:
        lag = info.get("lag")
        return f"{lag:,}" if isinstance(lag, int) else ""
    lags = [p.get("lag") for p in parts.values() if isinstance(p, dict)]
    known = [x for x in lags if isinstance(x, int)]
    total = f"{sum(known):,}" if known else "?"
    return f"{total} ({len(parts)} part.)"


def _no_change(status: dict[str, Any]) -> str:
    """For a resumed run that finished without reading a row: that it had nothing to do."""
    recovered = status.get("recovered_from")
    if status.get("state") != "finished" or not isinstance(recovered, dict):
        return ""
    sources = (status.get("sources") or {}).values()
    if status.get("rows_in") or any(info.get("rejected_rows") for info in sources):
        return ""
    return f"no new input since checkpoint #{recovered.get('checkpoint')}: nothing written"


def _checkpoint(status: dict[str, Any]) -> str:
    """``status()["last_checkpoint"]`` as a short text: its id and how long ago."""
    last = status.get("last_checkpoint")
    if last is None:
        return ""
    if not isinstance(last, dict):
        return str(last)
    ident = next(
        (last[k] for k in ("id", "checkpoint_id", "epoch") if last.get(k) is not None), None
    )
    at = next((last[k] for k in ("at", "time", "completed_at", "timestamp") if last.get(k)), None)
    text = f"#{ident}" if ident is not None else "done"
    if isinstance(at, int | float):
        text += f" {_seconds(max(time.time() - at, 0.0))} ago"
    elif at:
        at = str(at)
        today = time.strftime("%Y-%m-%d ")
        text += f" at {at.removeprefix(today)}"
    return text


def _sink_label(table: str) -> str:
    """Rows returned to the caller (a SELECT, a materialized view) go to the internal
    ``collect`` sink."""
    return "(results)" if table == "collect" else table


def _one_line(text: str) -> str:
    return " ".join(text.split())
