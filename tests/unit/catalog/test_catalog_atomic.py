"""Catalog changes are atomic: a write that fails (a full disk) changes nothing, in memory
or on disk, leaves no temporary file behind, and raises a CatalogError naming the file."""

from __future__ import annotations

import errno
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import datum_sql as ds
from datum_sql import durable
from datum_sql.catalog.entries import SourceEntry
from datum_sql.catalog.store import CATALOG_FILE, Catalog

NEXMARK = "WITH (connector = 'nexmark', stream = 'bid', rows = '10')"


def _full_disk(call: str) -> Callable[..., Any]:
    """A replacement for ``os.<call>`` that fails as on a full disk (a write first writes
    half of its bytes, as a real short write would)."""
    real = getattr(os, call)

    def fail(*args: Any) -> Any:
        if call == "write":
            fd, data = args
            real(fd, bytes(data)[: len(data) // 2])
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    return fail


def _on_disk(state: Path) -> tuple[bytes, list[str]]:
    return (state / CATALOG_FILE).read_bytes(), sorted(p.name for p in state.iterdir())


CHANGES = {
    "create": "CREATE SOURCE b " + NEXMARK,
    "drop": "DROP SOURCE a",
}


@pytest.mark.parametrize("call", ["write", "fsync", "replace"])
@pytest.mark.parametrize("change", sorted(CHANGES))
def test_a_failed_catalog_write_changes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, call: str, change: str
) -> None:
    state = tmp_path / "state"
    ctx = ds.Context(state_dir=state)
    ctx.execute("CREATE SOURCE a " + NEXMARK)
    before = _on_disk(state)
    names = ctx.catalog.names()

    with monkeypatch.context() as m:
        m.setattr(os, call, _full_disk(call))
        with pytest.raises(ds.CatalogError) as failed:
            ctx.execute(CHANGES[change])

    assert str(state / CATALOG_FILE) in str(failed.value)
    assert "No space left on device" in str(failed.value)
    assert ctx.catalog.names() == names
    assert _on_disk(state) == before  # the same file, and no catalog.json.tmp beside it
    assert ds.Context(state_dir=state).catalog.names() == names


@pytest.mark.parametrize("call", ["write", "fsync", "replace"])
def test_a_failed_replace_keeps_the_old_entry(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, call: str
) -> None:
    catalog = Catalog(tmp_path)
    old = SourceEntry("a", "nexmark", {"stream": "bid"})
    catalog.add(old)
    before = _on_disk(tmp_path)

    with monkeypatch.context() as m:
        m.setattr(os, call, _full_disk(call))
        with pytest.raises(ds.CatalogError, match=str(tmp_path / CATALOG_FILE)):
            catalog.add(SourceEntry("a", "nexmark", {"stream": "auction"}), replace=True)

    assert catalog.get("a") is old
    assert _on_disk(tmp_path) == before
    assert Catalog(tmp_path).get("a") == old


def test_a_rename_that_cannot_be_made_durable_is_undone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The one failure after the new file is in place: flushing the directory entry."""
    catalog = Catalog(tmp_path)
    catalog.add(SourceEntry("a", "nexmark", {"stream": "bid"}))
    before = _on_disk(tmp_path)

    with monkeypatch.context() as m:
        m.setattr(durable, "fsync_dir", _full_disk("fsync"))
        with pytest.raises(ds.CatalogError, match=str(tmp_path / CATALOG_FILE)):
            catalog.add(SourceEntry("b", "nexmark", {"stream": "bid"}))

    assert catalog.names() == ["a"]
    assert _on_disk(tmp_path) == before
    assert Catalog(tmp_path).names() == ["a"]
