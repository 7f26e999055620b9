"""Tables as text (datum_sql/table_text.py): values are drawn as typed, one line per row."""

from __future__ import annotations

import pyarrow as pa

from datum_sql.table_text import footer, grid_text, table_text

#: Values rich would read as markup, or that would break a row onto several lines.
AWKWARD = ["[red]x[/red]", "[bold]", "two\nlines", "tab\there", "cr\rhere"]
SHOWN = ["[red]x[/red]", "[bold]", "two\\nlines", "tab\\there", "cr\\rhere"]


def _body(text: str) -> list[str]:
    """The row lines of a rendering: after the header rule, before the footer."""
    lines = text.splitlines()
    rule = next(i for i, line in enumerate(lines) if set(line.strip()) <= {"─", " "})
    return [line.strip() for line in lines[rule + 1 : -1]]


def test_cells_are_never_markup_and_stay_on_one_line() -> None:
    table = pa.table({"v": AWKWARD})
    text = table_text(table)
    assert _body(text) == SHOWN
    assert text.splitlines()[-1] == "(5 rows)"


def test_column_names_are_drawn_as_typed() -> None:
    text = table_text(pa.table({"[b]name[/b]": [1], "a\nb": [2]}))
    header = text.splitlines()[0]
    assert "[b]name[/b]" in header and "a\\nb" in header


def test_grid_cells_are_never_markup_and_stay_on_one_line() -> None:
    text = grid_text(["[i]h[/i]"], [[v] for v in AWKWARD])
    lines = text.splitlines()
    assert lines[0].strip() == "[i]h[/i]"
    assert [line.strip() for line in lines[2:]] == SHOWN


def test_the_footer_counts_the_rows_or_the_rows_left_out() -> None:
    assert [footer(n, 50) for n in (0, 1, 2, 50)] == [
        "(0 rows)",
        "(1 row)",
        "(2 rows)",
        "(50 rows)",
    ]
    assert footer(1234, 50) == "… 1,184 more rows (1,234 in all)"
    assert table_text(pa.table({"n": range(3)}), max_rows=2).splitlines()[-1] == footer(3, 2)
