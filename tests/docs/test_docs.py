"""Every ```python block of README.md and docs/*.md runs, in order, one namespace per page.

A page is a script: later blocks see names from earlier ones. Blocks run in a fresh
temporary directory so relative paths (``out/...``, ``.datum``) stay out of the repo.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
BLOCK = re.compile(r"^```python\n(.*?)^```", re.M | re.S)


def blocks(page: Path) -> list[str]:
    return BLOCK.findall(page.read_text())


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_page_snippets_run(page: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    code = blocks(page)
    if page.name != "README.md":
        assert code, f"{page.name} has no python snippet to run"
    monkeypatch.chdir(tmp_path)
    namespace: dict[str, object] = {"__name__": f"docs_{page.stem}"}
    for i, block in enumerate(code):
        try:
            exec(compile(block, f"{page.name}[block {i + 1}]", "exec"), namespace)
        except Exception as exc:
            raise AssertionError(
                f"{page.name} block {i + 1} failed: {exc!r}\n---\n{block}"
            ) from exc
    ctx = namespace.get("ctx")
    if ctx is not None and hasattr(ctx, "close"):
        ctx.close()  # type: ignore[attr-defined]


LINK = re.compile(r"\]\(([^)#]+)\)")


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_page_links_resolve(page: Path) -> None:
    for target in LINK.findall(page.read_text()):
        if "://" in target:
            continue
        assert (page.parent / target).exists(), f"{page.name} links to missing {target}"
