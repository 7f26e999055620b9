"""The tour notebook as a user sees it: executed, exported to HTML (nbconvert), opened in
headless Chromium. The DOM Chromium built must hold the rendered status table (class
``datum-status``) naming the live source, and its screenshot must be a real, non-blank PNG.

Chromium comes from the machine's set-up (Debian package ``chromium``); when it is missing
the test fails and says how to install it — it never skips.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import struct
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[3]
TOUR = ROOT / "notebooks" / "00_tour.ipynb"
WIDTH, HEIGHT = 1280, 4000
#: nbconvert's lab template loads require.js and MathJax from a CDN; the tour needs neither
#: and the test must not depend on the network.
EXTERNAL_SCRIPT = re.compile(r"<script[^>]*\ssrc=\"https?://[^\"]*\"[^>]*>\s*</script>")


def _chromium() -> str:
    for name in ("chromium", "chromium-browser"):
        path = shutil.which(name)
        if path:
            return path
    pytest.fail(
        "headless Chromium is not installed: the browser test needs the Debian package "
        "'chromium': install it with  apt-get install -y chromium",
        pytrace=False,
    )


def _execute(nb: Any, tmp: Path) -> None:
    from jupyter_client.kernelspec import KernelSpecManager
    from jupyter_client.manager import AsyncKernelManager
    from nbclient import NotebookClient

    spec_dir = tmp / "kernels" / "python3"
    spec_dir.mkdir(parents=True)
    spec = {
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "Python 3",
        "language": "python",
    }
    (spec_dir / "kernel.json").write_text(json.dumps(spec))
    km = AsyncKernelManager(
        kernel_name="python3",
        kernel_spec_manager=KernelSpecManager(
            kernel_dirs=[str(spec_dir.parent)], ensure_native_kernel=False
        ),
        connection_file=str(tmp / "connection.json"),
    )
    work = tmp / "work"
    work.mkdir()
    env = {**os.environ, "IPYTHONDIR": str(tmp / "ipython"), "PYDEVD_DISABLE_FILE_VALIDATION": "1"}
    client = NotebookClient(
        nb, km=km, kernel_name="python3", timeout=300, startup_timeout=120,
        resources={"metadata": {"path": str(work)}},
    )  # fmt: skip
    client.execute(env=env)


def _chromium_args(chromium: str, profile: Path) -> list[str]:
    return [
        chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
        "--no-first-run", "--disable-background-networking", "--disable-component-update",
        "--disable-sync", f"--user-data-dir={profile}", "--hide-scrollbars",
    ]  # fmt: skip


class _StatusTables(HTMLParser):
    """Collects the text of every <table> whose class list has ``datum-status``."""

    def __init__(self) -> None:
        super().__init__()
        self.tables: list[str] = []
        self.graphs = 0
        self._depth = 0
        self._buf: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        cls = (dict(attrs).get("class") or "").split()
        if tag == "svg" and "datum-graph" in cls:
            self.graphs += 1
        if tag == "table" and (self._depth or "datum-status" in cls):
            self._depth += 1

    def handle_endtag(self, tag: str) -> None:
        if tag == "table" and self._depth:
            self._depth -= 1
            if not self._depth:
                self.tables.append(" ".join("".join(self._buf).split()))
                self._buf = []

    def handle_data(self, data: str) -> None:
        if self._depth:
            self._buf.append(data)


def _png_size(data: bytes) -> tuple[int, int]:
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    assert data[12:16] == b"IHDR"
    width, height = struct.unpack(">II", data[16:24])
    return int(width), int(height)


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_exported_tour_renders_the_status_table_in_chromium(tmp_path: Path) -> None:
    chromium = _chromium()
    from nbconvert import HTMLExporter

    nb = nbformat.read(TOUR, as_version=4)
    _execute(nb, tmp_path)
    body, _ = HTMLExporter(template_name="lab").from_notebook_node(nb)
    body = EXTERNAL_SCRIPT.sub("", body)
    page = tmp_path / "tour.html"
    page.write_text(body, encoding="utf-8")

    dom = subprocess.run(
        [*_chromium_args(chromium, tmp_path / "profile-dom"), "--dump-dom", page.as_uri()],
        capture_output=True, text=True, timeout=180,
    )  # fmt: skip
    assert dom.returncode == 0, dom.stderr[-2000:]
    parser = _StatusTables()
    parser.feed(dom.stdout)
    assert parser.tables, "no rendered status table (table.datum-status) in Chromium's DOM"
    assert any("live_bids" in t for t in parser.tables), parser.tables
    assert parser.graphs >= 1, "no job graph picture (svg.datum-graph) in the DOM"

    shot = tmp_path / "tour.png"
    run = subprocess.run(
        [*_chromium_args(chromium, tmp_path / "profile-shot"), f"--screenshot={shot}",
         f"--window-size={WIDTH},{HEIGHT}", page.as_uri()],
        capture_output=True, text=True, timeout=180,
    )  # fmt: skip
    assert run.returncode == 0 and shot.exists(), run.stderr[-2000:]
    data = shot.read_bytes()
    assert _png_size(data) == (WIDTH, HEIGHT)
    import matplotlib.image as mpimg

    pixels = mpimg.imread(str(shot))[..., :3]
    non_white = float((pixels.min(axis=-1) < 0.9).mean())
    assert pixels.std() > 0.02 and non_white > 0.02, (pixels.std(), non_white)
