"""Token-level mutations of SQL statements, seeded and reproducible.

A statement is cut into tokens (each keeps the whitespace before it); a mutation deletes,
duplicates, swaps, inserts or replaces tokens, or truncates the statement. Replacements
come from pools of the same kind (identifiers, literals, types, keywords, operators), built
from the seeds themselves plus edge values (empty strings, huge and negative numbers, NULL);
an identifier is replaced by a name that exists (a table or column of the fuzzed Context)
more often than not, so that the mutated statement gets past the binder.
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

TOKEN = re.compile(
    r"""(\s*)(
      '(?:[^']|'')*'?                      # a string literal (maybe unterminated)
    | "(?:[^"]|"")*"?                      # a quoted identifier
    | --[^\n]*                             # a comment
    | \d+(?:\.\d+)?(?:[eE][-+]?\d+)?       # a number
    | [A-Za-z_][A-Za-z_0-9]*               # a word
    | <=|>=|<>|!=|\|\||::|=>               # two-character operators
    | \S                                   # anything else, one character
    )""",
    re.X,
)

KEYWORDS = frozenset(
    " ".join(
        [
            "SELECT FROM WHERE GROUP BY HAVING ORDER LIMIT OFFSET AS AND OR NOT IN IS NULL LIKE",
            "BETWEEN CASE WHEN THEN ELSE END JOIN LEFT RIGHT FULL INNER OUTER CROSS ON USING",
            "ASOF UNION ALL DISTINCT WITH INSERT INTO CREATE SOURCE SINK MATERIALIZED VIEW DROP",
            "IF EXISTS SHOW SOURCES SINKS VIEWS SET EXPLAIN WATERMARK FOR EMIT WINDOW CLOSE",
            "ALLOWED LATENESS LATE ROWS TO INTERVAL CAST TRUE FALSE DESC ASC FORMAT ENCODE",
            "PLAIN JSON INCLUDE KEY PRIMARY OVER PARTITION VALUES TABLE FILTER",
        ]
    ).split()
)
TYPES = (
    "INT", "INTEGER", "BIGINT", "SMALLINT", "TINYINT", "DOUBLE", "FLOAT", "REAL", "VARCHAR",
    "TEXT", "STRING", "BOOLEAN", "DATE", "TIME", "TIMESTAMP", "TIMESTAMPTZ", "DECIMAL(10, 2)",
    "DECIMAL(38, 0)", "BYTEA", "BLOB", "INTERVAL", "JSON", "UUID", "INT[]", "STRUCT<a INT>",
)  # fmt: skip
EDGE_LITERALS = (
    "''", "'x'", "'%'", "'NaN'", "'inf'", "'-1'", "'0'", "'1 second'", "'-5 seconds'",
    "'2024-13-45 99:99:99'", "'0 seconds'", "'1000000 days'", "'\\'", "'é'", "0", "1", "-1",
    "1e308", "-1e308", "9223372036854775807", "9223372036854775808", "0.5", "NULL",
)  # fmt: skip
#: binary operators: one replaced by another keeps the statement parseable
OPERATORS = ("+", "-", "*", "/", "%", "=", "<", ">", "<=", ">=", "<>", "!=", "||")
#: what _insert may also add: punctuation, which usually breaks the syntax
PUNCTUATION = ("(", ")", ",", ";", ".", "::")


TYPE_WORDS = frozenset(t.split("(")[0].split("[")[0].split("<")[0] for t in TYPES)


def tokens(sql: str) -> list[tuple[str, str]]:
    """(leading whitespace, token text) pairs; joined back they give ``sql`` (less a
    trailing blank)."""
    return [(m.group(1), m.group(2)) for m in TOKEN.finditer(sql)]


def kind(text: str) -> str:
    if text[0] in "'" or text[0].isdigit():
        return "literal"
    if text[0] == '"':
        return "identifier"
    if text[0].isalpha() or text[0] == "_":
        up = text.upper()
        if up in KEYWORDS:
            return "keyword"
        if up in TYPE_WORDS:
            return "type"
        return "identifier"
    return "operator" if text in OPERATORS else "punctuation"


@dataclass
class Pools:
    identifiers: list[str] = field(default_factory=list)
    #: names that exist where the statements run: tables, columns
    known: list[str] = field(default_factory=list)
    tables: list[str] = field(default_factory=list)
    literals: list[str] = field(default_factory=lambda: list(EDGE_LITERALS))
    keywords: list[str] = field(default_factory=lambda: sorted(KEYWORDS))
    types: list[str] = field(default_factory=lambda: list(TYPES))
    operators: list[str] = field(default_factory=lambda: list(OPERATORS))

    @classmethod
    def from_seeds(
        cls, seeds: Sequence[str], tables: Sequence[str] = (), columns: Sequence[str] = ()
    ) -> Pools:
        pools = cls(known=[*tables, *columns], tables=list(tables))
        idents: dict[str, None] = {}
        lits: dict[str, None] = dict.fromkeys(pools.literals)
        for sql in seeds:
            for _, text in tokens(sql):
                k = kind(text)
                if k == "identifier":
                    idents[text] = None
                elif k == "literal" and len(text) < 60:
                    lits[text] = None
        pools.identifiers = list(idents)
        pools.literals = list(lits)
        return pools

    def of(self, k: str) -> list[str]:
        return {
            "identifier": self.identifiers,
            "literal": self.literals,
            "keyword": self.keywords,
            "type": self.types,
            "operator": self.operators,
            "punctuation": list(PUNCTUATION),
        }[k]


Tokens = list[tuple[str, str]]


def _delete(t: Tokens, rnd: random.Random, _: Pools) -> Tokens:
    i = rnd.randrange(len(t))
    return t[:i] + t[i + 1 :]


def _spaced(t: Tokens, i: int) -> Tokens:
    """``t`` with a blank before token ``i``, so that an inserted token stays separate."""
    if i < len(t) and not t[i][0]:
        t = [*t[:i], (" ", t[i][1]), *t[i + 1 :]]
    return t


def _duplicate(t: Tokens, rnd: random.Random, _: Pools) -> Tokens:
    i = rnd.randrange(len(t))
    return _spaced([*t[: i + 1], (" ", t[i][1]), *t[i + 1 :]], i + 2)


def _swap(t: Tokens, rnd: random.Random, _: Pools) -> Tokens:
    i = rnd.randrange(len(t))
    j = min(i + 1, len(t) - 1) if rnd.random() < 0.6 else rnd.randrange(len(t))
    t = list(t)
    (wi, ti), (wj, tj) = t[i], t[j]
    t[i], t[j] = (wi, tj), (wj, ti)
    return t


def _truncate(t: Tokens, rnd: random.Random, _: Pools) -> Tokens:
    return t[: rnd.randrange(len(t))]


def _insert(t: Tokens, rnd: random.Random, pools: Pools) -> Tokens:
    i = rnd.randrange(len(t) + 1)
    k = rnd.choice(["identifier", "literal", "keyword", "type", "operator", "punctuation"])
    return _spaced([*t[:i], (" ", rnd.choice(pools.of(k))), *t[i:]], i + 1)


def _replacer(k: str) -> Callable[[Tokens, random.Random, Pools], Tokens]:
    def replace(t: Tokens, rnd: random.Random, pools: Pools) -> Tokens:
        spots = [i for i, (_, text) in enumerate(t) if kind(text) == k]
        if not spots:  # nothing of that kind: change a name instead (or add a token)
            return (
                _insert(t, rnd, pools)
                if k == "identifier"
                else _replacer("identifier")(t, rnd, pools)
            )
        i = rnd.choice(spots)
        t = list(t)
        pool = (
            pools.known if k == "identifier" and pools.known and rnd.random() < 0.6 else pools.of(k)
        )
        t[i] = (t[i][0], rnd.choice(pool))
        return t

    replace.__name__ = f"replace_{k}"
    return replace


FUNCTIONS = (
    "upper", "lower", "abs", "round", "coalesce", "length", "concat", "substr", "substring",
    "date_trunc", "extract", "sum", "count", "avg", "min", "max", "first_value", "last_value",
    "greatest", "least", "nullif", "floor", "ceil", "sqrt", "ln", "power", "to_timestamp",
    "now", "trim", "replace", "regexp_match", "tumble", "hop", "session", "make_timestamp",
    "epoch_us", "array_agg", "string_agg", "row_number", "lag", "nofunc",
)  # fmt: skip


def _replace_function(t: Tokens, rnd: random.Random, pools: Pools) -> Tokens:
    """A function name (a word before "(") replaced by another one."""
    spots = [
        i
        for i in range(len(t) - 1)
        if t[i + 1][1] == "(" and kind(t[i][1]) in ("identifier", "keyword", "type")
    ]
    if not spots:
        return _replacer("identifier")(t, rnd, pools)
    i = rnd.choice(spots)
    return [*t[:i], (t[i][0], rnd.choice(FUNCTIONS)), *t[i + 1 :]]


READS = {"FROM", "JOIN", "TUMBLE", "HOP", "SESSION"}


def retarget(t: Tokens, rnd: random.Random, pools: Pools) -> Tokens:
    """Every table a statement reads (the name after FROM / JOIN / ``tumble(``) replaced by
    one that exists, so the rest of the statement meets the binder and the planner."""
    out = list(t)
    for i in range(1, len(out)):
        before = [text.upper() for _, text in out[max(0, i - 2) : i]]
        reads = before[-1] in READS or (
            len(before) == 2 and before == [before[0], "("] and before[0] in READS
        )
        if reads and kind(out[i][1]) == "identifier" and pools.tables:
            out[i] = (out[i][0], rnd.choice(pools.tables))
    return out


#: Replacing a token keeps the statement parseable more often than moving tokens around,
#: and gets further (binder, planner, runtime): it is drawn more often.
STRUCTURAL = (_delete, _duplicate, _swap, _truncate, _insert, _replacer("keyword"))
SEMANTIC = (
    _replacer("identifier"), _replacer("literal"), _replacer("type"), _replacer("operator"),
    _replace_function,
)  # fmt: skip


def mutate(sql: str, rnd: random.Random, pools: Pools) -> tuple[str, list[str]]:
    """``sql`` with one to three random mutations (half the time after :func:`retarget`);
    and their names."""
    t = tokens(sql)
    names = []
    if rnd.random() < 0.5:
        t = retarget(t, rnd, pools)
        names.append("retarget")
    for _ in range(rnd.choice((1, 1, 2, 3))):
        if not t:
            break
        op = rnd.choice(SEMANTIC if rnd.random() < 0.65 else STRUCTURAL)
        names.append(op.__name__.lstrip("_"))
        t = op(t, rnd, pools)
    return "".join(w + text for w, text in t).strip(), names


def statements(
    seeds: Sequence[str], n: int, seed: int, tables: Sequence[str] = (), columns: Sequence[str] = ()
) -> list[tuple[str, str, list[str]]]:
    """``n`` distinct mutated statements: (statement, its seed, the mutations applied).
    ``tables`` and ``columns`` are the names that exist where the statements will run."""
    rnd = random.Random(seed)
    pools = Pools.from_seeds(seeds, tables, columns)
    # seeds naming a table that exists get further than the binder: pick them more often
    existing = {t.lower() for t in tables}
    runnable = [s for s in seeds if any(t.lower() in existing for _, t in tokens(s))] or seeds
    out: dict[str, tuple[str, str, list[str]]] = {}
    attempts = 0
    while len(out) < n and attempts < n * 20:
        attempts += 1
        origin = rnd.choice(runnable if rnd.random() < 0.7 else seeds)
        sql, names = mutate(origin, rnd, pools)
        if sql and sql not in out and sql not in seeds:
            out[sql] = (sql, origin, names)
    return list(out.values())
