"""``q.show()``: a view of a running query that updates in place in a notebook.

The view is one IPython display (a display id) refreshed by a background thread every
``interval`` seconds: the query's status (sources, watermarks, late rows, state, last
checkpoint) and its newest rows — for an updating query (a changelog) the current
materialized state, for an append-only query the latest rows. The kernel is never
blocked: other cells run meanwhile.

The thread (named ``datum-live-<query>``, a daemon) ends on its own when the query ends
(finished, cancelled or failed), after one last refresh showing the final state; or when
:meth:`LiveView.stop` is called. It holds no resources besides the display id.

Outside IPython (a plain script or terminal) there is nothing to update in place:
``show()`` prints one text snapshot and starts no thread.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from datum_sql.notebook.display import query_html, query_text

__all__ = ["LiveView", "display_query", "show"]


class LiveView:
    """A live display of ``query`` (see the module docstring)."""

    def __init__(self, query: Any, n: int = 20, *, interval: float = 0.5) -> None:
        if interval <= 0:
            raise ValueError("interval must be > 0 seconds")
        self.query = query
        self.n = n
        self.interval = interval
        self.updates = 0
        self._stop = threading.Event()
        self._handle: Any = None
        self._last: str | None = None
        self.thread: threading.Thread | None = None

    # -- rendering ------------------------------------------------------------------------
    def bundle(self) -> dict[str, str]:
        """The current view as a MIME bundle (HTML and plain text)."""
        return {
            "text/html": query_html(self.query, self.n),
            "text/plain": query_text(self.query, self.n),
        }

    def _repr_html_(self) -> str:
        return query_html(self.query, self.n)

    def __repr__(self) -> str:
        state = "live" if self.running else "stopped"
        return f"<LiveView of {getattr(self.query, 'name', 'query')} ({state}, {self.updates} updates)>"

    def _ipython_display_(self) -> None:
        # Returned by q.show() as the last expression of a cell: it is already on screen.
        if self._handle is None:
            from IPython.display import display

            display(self.bundle(), raw=True)

    # -- running --------------------------------------------------------------------------
    @property
    def running(self) -> bool:
        return self.thread is not None and self.thread.is_alive()

    def start(self) -> LiveView:
        """Display the view and keep it updated until the query ends (needs IPython)."""
        from IPython.display import display

        if self.thread is not None:
            return self
        bundle = self.bundle()
        self._last = bundle["text/html"]
        self._handle = display(bundle, raw=True, display_id=True)
        if self.query.done:
            return self  # nothing will change any more
        self.thread = threading.Thread(
            target=self._run, name=f"datum-live-{getattr(self.query, 'name', 'query')}", daemon=True
        )
        self.thread.start()
        return self

    def _run(self) -> None:
        try:
            while not self._stop.wait(self.interval):
                ended = self.query.done
                self._refresh()
                if ended:
                    return
        finally:
            self._stop.set()

    def _refresh(self) -> None:
        try:
            bundle = self.bundle()
        except Exception as exc:  # never kill the thread silently mid-render: show why
            bundle = {"text/plain": f"live view stopped: {exc}", "text/html": f"<pre>{exc}</pre>"}
            self._stop.set()
        if bundle["text/html"] == self._last:
            return
        self._last = bundle["text/html"]
        if self._handle is not None:
            self._handle.update(bundle, raw=True)
            self.updates += 1

    def stop(self, timeout: float | None = 5.0) -> None:
        """Stop updating (the display keeps its last content)."""
        self._stop.set()
        if self.thread is not None and self.thread is not threading.current_thread():
            self.thread.join(timeout)

    def wait(self, timeout: float | None = None) -> bool:
        """Block until the updater thread ended (True) or ``timeout`` passed (False)."""
        if self.thread is None:
            return True
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.thread.is_alive():
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                return False
            self.thread.join(0.05 if left is None else min(left, 0.05))
        return True


def in_ipython() -> bool:
    """True inside an IPython shell (a Jupyter kernel or the IPython terminal)."""
    import sys

    if "IPython" not in sys.modules:
        return False
    from IPython import get_ipython

    return get_ipython() is not None


def show(query: Any, n: int = 20, *, interval: float = 0.5) -> LiveView:
    """Show ``query`` live in a notebook (returns the running :class:`LiveView`); outside
    IPython print one text snapshot."""
    view = LiveView(query, n, interval=interval)
    if in_ipython():
        return view.start()
    print(query_text(query, n))
    return view


def display_query(query: Any, n: int = 20) -> None:
    """IPython's display of a query handle: a live view while it runs, its final status
    and rows once it ended."""
    view = LiveView(query, n)
    if query.done:
        from IPython.display import display

        display(view.bundle(), raw=True)
    else:
        view.start()
