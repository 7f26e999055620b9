"""The SQL dialect the planner writes for DataFusion, which evaluates every query.

sqlglot has no DataFusion dialect; PostgreSQL's generator is the closest, and this one
corrects what DataFusion spells or means differently, so a function works as documented
or is refused at planning (never a silently different answer):

- ``to_char(ts, 'YYYY-MM-DD')``, ``to_timestamp(s, fmt)``, ``to_date(s, fmt)``: PostgreSQL
  template patterns are translated to DataFusion's (chrono) format; a pattern chrono cannot
  reproduce exactly is refused, naming it.
- ``TRY_CAST``, ``uuid()``, ``sign()``, ``to_hex()``, ``isnan()`` keep their meaning.
- ``approx_percentile(col, q)`` / ``percentile_cont`` / ``median`` are DataFusion's
  ``percentile_cont`` here, which types them; ``ctx.sql`` computes them as the streaming
  aggregate does (plan/gathered.py replaces them in its SQL).

Time formats reach the planner as PostgreSQL templates (the ``Datum`` dialect keeps them
as written); the generator translates them with :func:`chrono_format`.
"""

from __future__ import annotations

import typing as t

from sqlglot import exp
from sqlglot.dialects.postgres import Postgres
from sqlglot.generators.postgres import PostgresGenerator

from datum_sql.errors import PlanError

#: PostgreSQL template pattern → chrono format, for output (to_char). Numeric patterns are
#: matched in upper or lower case; the case of a name pattern is the case of its output.
_NUMERIC = {
    "HH24": "%H", "HH12": "%I", "HH": "%I", "MI": "%M", "SS": "%S", "MS": "%3f", "US": "%6f",
    "IYYY": "%G", "YYYY": "%Y", "YY": "%y", "MM": "%m", "DDD": "%j", "DD": "%d", "IW": "%V",
    "ID": "%u",
}  # fmt: skip
#: With the FM (fill mode) prefix: no zero padding.
_FILL = {
    "HH24": "%-H", "HH12": "%-I", "HH": "%-I", "MI": "%-M", "SS": "%-S", "MM": "%-m",
    "DDD": "%-j", "DD": "%-d", "IW": "%-V", "ID": "%u", "Month": "%B", "Day": "%A",
    "Mon": "%b", "Dy": "%a",
}  # fmt: skip
_NAMES = {"Mon": "%b", "Dy": "%a", "AM": "%p", "PM": "%p", "am": "%P", "pm": "%P"}
#: Every PostgreSQL pattern, in upper case (matched in any case): those not above, or not
#: in that case, are refused rather than printed as text.
_UNSUPPORTED = [
    "Y,YYY", "SSSSS", "SSSS", "FF1", "FF2", "FF3", "FF4", "FF5", "FF6", "A.M.", "P.M.",
    "B.C.", "A.D.", "MONTH", "MON", "DAY", "DY", "IDDD", "IYY", "IY", "YYY", "TZH", "TZM",
    "TZ", "OF", "BC", "AD", "CC", "RM", "WW", "TH", "SP", "TM", "FX", "AM", "PM", "D", "W",
    "J", "Q", "Y", "I",
]  # fmt: skip
#: The patterns that work, for error messages.
SUPPORTED_PATTERNS = (
    "YYYY, YY, IYYY, MM, DD, DDD, IW, ID, HH24, HH12 (HH), MI, SS, MS, US, AM/PM (am/pm), "
    'Mon, Dy, FMMonth, FMDay, an FM prefix on numbers (no zero padding), and "quoted text"'
)


def chrono_format(template: str, *, function: str, parse: bool = False) -> str:
    """The chrono format that prints (or, with ``parse``, reads) what PostgreSQL's
    ``template`` does; PlanError naming the first pattern that has no exact equivalent."""
    out: list[str] = []
    i = 0
    while i < len(template):
        rest = template[i:]
        if rest[0] == '"':
            end = rest.find('"', 1)
            if end < 0:
                raise PlanError(f'{function}(): unterminated "quoted text" in {template!r}')
            out.append(rest[1:end].replace("%", "%%"))
            i += end + 1
            continue
        if rest[0] == "\\" and len(rest) > 1:
            out.append(rest[1].replace("%", "%%"))
            i += 2
            continue
        fill = rest[:2].upper() == "FM"
        found = _pattern(rest[2:] if fill else rest, fill)
        if found is None and not fill:
            out.append("%%" if rest[0] == "%" else rest[0])
            i += 1
            continue
        pattern, chrono = found or ("", None)
        if chrono is None:
            what = rest[: len(pattern) + (2 if fill else 0)]
            raise PlanError(
                f"{function}(): the pattern {what!r} in {template!r} is not supported; "
                f'supported: {SUPPORTED_PATTERNS}. Quote literal text ("...")'
            )
        out.append(chrono.replace("%-", "%") if parse else chrono)
        i += len(pattern) + (2 if fill else 0)
    chrono = "".join(out)
    if parse:
        _check_parse(chrono, template, function)
    return chrono


def _check_parse(chrono: str, template: str, function: str) -> None:
    """Refuse formats DataFusion would read wrongly: it drops hours read without minutes."""
    fields = chrono.replace("%%", "")
    if ("%H" in fields or "%I" in fields) and "%M" not in fields:
        raise PlanError(f"{function}(): {template!r} reads hours without minutes; add MI")
    if "%I" in fields and "%p" not in fields and "%P" not in fields:
        raise PlanError(f"{function}(): {template!r} reads HH12 without AM/PM; add AM or use HH24")


def _pattern(text: str, fill: bool) -> tuple[str, str | None] | None:
    """The longest pattern ``text`` starts with, and its chrono format (None: unsupported)."""
    best: tuple[str, str | None] | None = None
    for pattern, chrono in (_FILL if fill else {**_NUMERIC, **_NAMES}).items():
        head = text[: len(pattern)]
        matches = head == pattern or (pattern in _NUMERIC and head == pattern.lower())
        if matches and (best is None or len(head) > len(best[0])):
            best = (head, chrono)
    for pattern in _UNSUPPORTED:
        head = text[: len(pattern)]
        if head.upper() == pattern and (best is None or len(head) > len(best[0])):
            best = (head, None)
    return best


def _template(e: exp.Expr, function: str, *, parse: bool) -> str:
    fmt = e.args.get("format")
    if not isinstance(fmt, exp.Literal) or not fmt.is_string:
        raise PlanError(f"{function}() needs its format as a string literal")
    return chrono_format(fmt.this, function=function, parse=parse)


def _formatted(function: str, *, parse: bool) -> t.Callable[[PostgresGenerator, exp.Expr], str]:
    def render(self: PostgresGenerator, e: exp.Expr) -> str:
        chrono = _template(e, function, parse=parse)
        return self.func(function, e.this, exp.Literal.string(chrono))

    return render


def _percentile(self: PostgresGenerator, e: exp.Expr) -> str:
    return self.func("percentile_cont", e.this, e.args.get("quantile"))


class DataFusionGenerator(PostgresGenerator):
    TRANSFORMS: t.ClassVar = {
        **PostgresGenerator.TRANSFORMS,
        exp.TimeToStr: _formatted("to_char", parse=False),
        exp.StrToTime: _formatted("to_timestamp", parse=True),
        exp.StrToDate: _formatted("to_date", parse=True),
        exp.TryCast: lambda self, e: self.cast_sql(e, safe_prefix="TRY_"),
        exp.Uuid: lambda *_: "uuid()",
        exp.Sign: lambda self, e: self.func("signum", e.this),
        exp.Hex: lambda self, e: self.func("to_hex", e.this),
        exp.ApproxQuantile: _percentile,
        exp.IsNan: lambda self, e: self.func("isnan", e.this),
    }

    def median_sql(self, expression: exp.Median) -> str:
        """``median(DISTINCT x)`` in the call form: WITHIN GROUP cannot hold a DISTINCT."""
        if isinstance(expression.this, exp.Distinct):
            return self.func("percentile_cont", expression.this, exp.Literal.number(0.5))
        return super().median_sql(expression)


class DataFusion(Postgres):
    """PostgreSQL as DataFusion reads it (``.sql(dialect=DataFusion)``)."""

    Generator = DataFusionGenerator
