"""Tables as text, drawn by rich: ``datum-sql sql`` output and the notebook's text views.

One set of cell rules for every text rendering: NULL for a missing value, floats to 15
significant digits (no ``0.1 + 0.2`` noise), bytes as ``\\x..`` hex, long cells cut with an
ellipsis. Every cell and header is drawn as the characters it holds: never read as rich
markup (``[red]x[/red]`` shows as typed) and always on one line — a newline, carriage return
or tab in a value is shown as the two characters ``\\n``, ``\\r``, ``\\t``. Imports only
pyarrow and rich.
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import pyarrow as pa

if TYPE_CHECKING:
    from rich.text import Text

__all__ = ["cell", "footer", "grid_text", "is_numeric", "rich_table", "table_text"]

#: Widest a cell is drawn before it is cut with "…".
MAX_CELL_WIDTH = 40

#: Characters that would break a row, folded into visible escapes.
_ONE_LINE = str.maketrans({"\n": "\\n", "\r": "\\r", "\t": "\\t"})


def cell(value: Any) -> str:
    """A value as the text of one cell."""
    if value is None:
        return "NULL"
    if isinstance(value, float):
        return format(value, ".15g")
    if isinstance(value, bytes):
        return "\\x" + value.hex()
    return str(value)


def _shown(text: str) -> Text:
    """``text`` as one line of rich Text, never read as markup."""
    from rich.text import Text

    return Text(text.translate(_ONE_LINE))


def is_numeric(t: pa.DataType) -> bool:
    """Whether a column of type ``t`` holds numbers (drawn right-aligned)."""
    return pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_decimal(t)


def rich_table(table: pa.Table | pa.RecordBatch, max_rows: int) -> Any:
    """A rich Table of the first ``max_rows`` rows of ``table`` (numbers right-aligned)."""
    from rich import box
    from rich.table import Table

    view = Table(box=box.SIMPLE_HEAD, pad_edge=False, show_edge=False)
    for field in table.schema:
        view.add_column(
            _shown(field.name),
            justify="right" if is_numeric(field.type) else "left",
            max_width=MAX_CELL_WIDTH, no_wrap=True, overflow="ellipsis",
        )  # fmt: skip
    head = table.slice(0, max_rows)
    for row in zip(*(col.to_pylist() for col in head.columns)):
        view.add_row(*(_shown(cell(v)) for v in row))
    return view


def grid_text(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """Rows of already-formatted cells under ``header``, as plain text."""
    from rich import box
    from rich.table import Table

    view = Table(box=box.SIMPLE_HEAD, pad_edge=False, show_edge=False)
    for name in header:
        view.add_column(_shown(name), no_wrap=True)
    for row in rows:
        view.add_row(*(_shown(c) for c in row))
    return render(view)


def render(renderable: Any) -> str:
    """Plain text of a rich renderable: no colours, no wrapping, no trailing blanks."""
    from rich.console import Console

    buf = io.StringIO()
    Console(file=buf, width=10_000, color_system=None, soft_wrap=True).print(renderable)
    return "\n".join(line.rstrip() for line in buf.getvalue().splitlines()).strip("\n")


def footer(rows: int, max_rows: int) -> str:
    """What follows the first ``max_rows`` of ``rows`` rows: the row count, or how many
    more rows there are."""
    if rows > max_rows:
        return f"… {rows - max_rows:,} more rows ({rows:,} in all)"
    return f"({rows:,} row{'' if rows == 1 else 's'})"


def table_text(table: pa.Table | pa.RecordBatch, max_rows: int = 20) -> str:
    """The first ``max_rows`` rows of ``table`` as text, then the row count."""
    return render(rich_table(table, max_rows)) + "\n" + footer(table.num_rows, max_rows)
