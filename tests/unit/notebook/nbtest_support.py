"""Helpers shared by the notebook tests (not a test module): a real IPython shell, an HTML
well-formedness checker, small data."""

from __future__ import annotations

import os
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta
from html.parser import HTMLParser
from typing import Any

import pyarrow as pa

VOID = {"br", "hr", "img", "input", "meta", "link", "col", "area", "base", "wbr", "source"}
#: SVG elements written self-closing (``<path .../>``) are fine: the parser reports them.
T0 = datetime(2026, 1, 1)


def shell() -> Any:
    """The process's IPython InteractiveShell (history off, IPYTHONDIR in a temp dir), with
    ``%load_ext datum_sql`` done."""
    from IPython.core.interactiveshell import InteractiveShell
    from traitlets.config import Config

    if not InteractiveShell.initialized():
        os.environ.setdefault("IPYTHONDIR", tempfile.mkdtemp(prefix="datum-ipython-"))
        config = Config()
        config.HistoryManager.enabled = False
        InteractiveShell.instance(config=config)
    ip = InteractiveShell.instance()
    ip.extension_manager.load_extension("datum_sql")
    return ip


class _Checker(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.stack: list[str] = []
        self.errors: list[str] = []
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.text: list[str] = []
        self._in_style = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))
        if tag == "style":
            self._in_style = True
        if tag not in VOID:
            self.stack.append(tag)

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))

    def handle_endtag(self, tag: str) -> None:
        if tag == "style":
            self._in_style = False
        if not self.stack or self.stack[-1] != tag:
            self.errors.append(f"</{tag}> closes {self.stack[-1:] or 'nothing'}")
            return
        self.stack.pop()

    def handle_data(self, data: str) -> None:
        if not self._in_style:
            self.text.append(data)


def parse_html(html: str) -> _Checker:
    """Parse ``html``; assert every element is closed in order. Returns the parser, with
    ``tags`` (name, attrs) and ``text`` (the visible text, entities decoded)."""
    checker = _Checker()
    checker.feed(html)
    checker.close()
    assert not checker.errors, checker.errors
    assert not checker.stack, f"unclosed: {checker.stack}"
    return checker


def classes(checker: _Checker) -> set[str]:
    out: set[str] = set()
    for _, attrs in checker.tags:
        out.update((attrs.get("class") or "").split())
    return out


def wait_until(condition: Callable[[], bool], timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.02)


def live_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("datum-live-")]


def events(seconds: list[float], keys: list[str] | None = None) -> pa.Table:
    """Rows with event times T0 + seconds (in that arrival order)."""
    keys = keys or ["a"] * len(seconds)
    return pa.table(
        {
            "k": keys,
            "v": list(range(1, len(seconds) + 1)),
            "ts": pa.array([T0 + timedelta(seconds=s) for s in seconds], pa.timestamp("us")),
        }
    )


class Gate:
    """An iterator of record batches that yields ``first`` and then blocks until
    :meth:`open` (then yields ``rest`` and ends): keeps a query running, mid-stream."""

    def __init__(self, first: list[pa.RecordBatch], rest: list[pa.RecordBatch]) -> None:
        self.first = first
        self.rest = rest
        self.event = threading.Event()

    def open(self) -> None:
        self.event.set()

    def __iter__(self) -> Iterator[pa.RecordBatch]:
        yield from self.first
        self.event.wait(60)
        yield from self.rest
