"""A catalog file that cannot be read, or a state directory that cannot hold one, raises
CatalogError naming the path: not a PlanError, since no SQL is at fault."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import datum_sql as ds
from datum_sql.catalog.store import CATALOG_FILE, Catalog


def _refused(state: Path) -> ds.CatalogError:
    with pytest.raises(ds.CatalogError) as refused:
        ds.Context(state_dir=state)
    assert isinstance(refused.value, ds.DatumError)
    assert not isinstance(refused.value, ds.PlanError)
    return refused.value


def test_a_catalog_file_that_is_not_json(tmp_path: Path) -> None:
    (tmp_path / CATALOG_FILE).write_text('{"version": 1, "sources": [')
    error = _refused(tmp_path)
    assert f"catalog file {tmp_path / CATALOG_FILE} is not valid JSON" in str(error)


def test_a_catalog_file_of_another_version(tmp_path: Path) -> None:
    (tmp_path / CATALOG_FILE).write_text(json.dumps({"version": 99}))
    error = _refused(tmp_path)
    assert f"catalog file {tmp_path / CATALOG_FILE} has version 99" in str(error)


def test_a_catalog_file_that_cannot_be_read(tmp_path: Path) -> None:
    (tmp_path / CATALOG_FILE).mkdir()
    error = _refused(tmp_path)
    assert f"catalog file {tmp_path / CATALOG_FILE} cannot be read" in str(error)


def test_a_state_directory_that_cannot_be_used(tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.write_text("a file, not a directory")
    with pytest.raises(ds.CatalogError, match=f"cannot use state directory {state}"):
        Catalog(state)


def test_an_unknown_name_is_still_a_plan_error(tmp_path: Path) -> None:
    with pytest.raises(ds.PlanError, match="unknown source 'nope'"):
        Catalog(tmp_path).require("nope", kinds=("source",))


@pytest.mark.parametrize(
    ("content", "says"),
    [
        ("[]", "has version None"),
        ('{"version": 1, "sources": 7}', "'sources' is not a list"),
        ('{"version": 1, "sinks": [{"name": "s"}]}', "entry 0 of 'sinks' is malformed"),
        ('{"version": 1, "sources": ["bids"]}', "entry 0 of 'sources' is malformed"),
    ],
)
def test_a_catalog_file_of_another_shape(tmp_path: Path, content: str, says: str) -> None:
    (tmp_path / CATALOG_FILE).write_text(content)
    error = _refused(tmp_path)
    assert f"catalog file {tmp_path / CATALOG_FILE}" in str(error) and says in str(error)
