"""Two spellings, one statement: tests/fixtures/parse/spellings.sql (Flink's window TVFs)."""

from __future__ import annotations

from pathlib import Path

import pytest

from datum_sql.sql.dialect import Datum
from datum_sql.sql.parse import parse_one

FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "parse" / "spellings.sql"


def _cases() -> list:
    cases = []
    for block in FIXTURE.read_text().split("\n\n"):
        lines = block.strip("\n").splitlines()
        if not lines or not lines[0].startswith("-- spelling:"):
            continue
        what = lines[0].removeprefix("-- spelling:").strip()
        other, canonical = lines[1:]
        cases.append(pytest.param(other, canonical, id=what))
    assert len(cases) >= 6, "spellings.sql lost its cases"
    return cases


@pytest.mark.parametrize(("other", "canonical"), _cases())
def test_both_spellings_parse_to_one_tree(other: str, canonical: str) -> None:
    tree = parse_one(other)
    assert tree == parse_one(canonical)
    generated = tree.sql(dialect=Datum)
    assert generated == parse_one(canonical).sql(dialect=Datum)
    assert "DESCRIPTOR" not in generated and parse_one(generated) == tree
