"""DataFusion's error text as one short line, for the planner and the Calc operator alike.

DataFusion raises plain exceptions whose text wraps the cause in layers ("DataFusion
error: ... Error during planning: ..."), asks for a bug report, and lists every signature
it tried. Users see the cause, in SQL's type names.
"""

from __future__ import annotations

import re

#: DataFusion's wrapping around the message that matters.
_WRAPPING = re.compile(
    r"DataFusion error: |Error during planning: |Internal error: |Schema error: |Arrow error: "
    r"|Execution error: |Optimizer rule '[^']*' failed caused by |type_coercion caused by "
    r"|Invalid argument error: |External error: "
)
_BUG_NOTE = re.compile(
    r"\.?\s*This (issue|error) was likely caused by a bug in DataFusion's code\..*?issues\.?"
)
#: DataFusion's guess at a misspelt function: it picks among equally close names at random.
_GUESS = re.compile(r"\.? ?Did you mean '[^']*'\?")
_NO_MATCH = re.compile(r"No function matches the given name and argument types '([^']*)'")
_CANDIDATES = re.compile(r"Candidate functions:(.*)$", re.S)
#: DataFusion (Arrow) type names → SQL type names, for messages.
_TYPE_NAMES = [
    (re.compile(r'Timestamp\([^)]*"[^)]*\)'), "TIMESTAMPTZ"),
    (re.compile(r"Timestamp\([^)]*\)"), "TIMESTAMP"),
    (re.compile(r"\b(Utf8View|LargeUtf8|Utf8)\b"), "VARCHAR"),
    (re.compile(r"\bInt8\b"), "TINYINT"),
    (re.compile(r"\bInt16\b"), "SMALLINT"),
    (re.compile(r"\bInt32\b"), "INTEGER"),
    (re.compile(r"\bInt64\b"), "BIGINT"),
    (re.compile(r"\bUInt8\b"), "UTINYINT"),
    (re.compile(r"\bUInt16\b"), "USMALLINT"),
    (re.compile(r"\bUInt32\b"), "UINTEGER"),
    (re.compile(r"\bUInt64\b"), "UBIGINT"),
    (re.compile(r"\b(Duration|Interval)(\([^)]*\))?"), "INTERVAL"),
    (re.compile(r"\bFloat32\b"), "REAL"),
    (re.compile(r"\bFloat64\b"), "DOUBLE"),
    (re.compile(r"\bBoolean\b"), "BOOLEAN"),
    (re.compile(r"\bDate32\b"), "DATE"),
    (re.compile(r"\bDecimal(128|256)?\b(\(\d+, ?\d+\))?"), "DECIMAL"),
]
_MAX_MESSAGE = 300


def sql_type_names(text: str) -> str:
    """``text`` with DataFusion's type names written as SQL's (Utf8 → VARCHAR, ...)."""
    for pattern, name in _TYPE_NAMES:
        text = pattern.sub(name, text)
    return text


def datafusion_message(exc: BaseException) -> str:
    """A DataFusion error as one short line: the cause, in SQL's type names, without the
    wrapping, the bug-report note and the list of every signature tried."""
    raw = str(exc)
    no_match = _NO_MATCH.search(raw)
    if no_match:
        candidates = _CANDIDATES.search(raw)
        lines = candidates.group(1).split("\n") if candidates else []
        options = list(dict.fromkeys(sql_type_names(c.strip()) for c in lines if c.strip()))
        shown = ", ".join(options[:6]) + (", ..." if len(options) > 6 else "")
        text = f"no function {no_match.group(1)}" + (f"; it takes {shown}" if shown else "")
        return sql_type_names(text) + "; add a CAST"
    text = " ".join(raw.split())
    text = _GUESS.sub("", _BUG_NOTE.sub("", text))
    text = _WRAPPING.sub("", text).strip()
    text = sql_type_names(text)
    return text if len(text) <= _MAX_MESSAGE else text[: _MAX_MESSAGE - 3] + "..."
