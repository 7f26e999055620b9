"""Decode a fetch's worth of Kafka message values into one Arrow record batch.

The hot path is vectorized: the payloads of a fetch are joined with newlines and parsed
by one ``pyarrow.json.read_json`` (ENCODE JSON) or ``pyarrow.csv.read_csv`` (ENCODE CSV)
call against the declared schema. Only when that call fails (or yields a different number
of rows than messages) does the slow path start: JSON records are grouped by how they
write their TIMESTAMP columns (text or epoch millis, which one parser call cannot mix) and
each group is parsed in one call; a group that still fails is bisected to locate its bad
records: halves that parse are kept as they are, so a batch with a few bad records costs
O(bad * log n) parser calls, good records still decode, and each bad one gets its own
reason. Rows always come out in message order.

What each encoding accepts
--------------------------
JSON
    One JSON object per message. Fields not in the schema are ignored; missing fields are
    NULL (a missing or NULL value in a ``NOT NULL`` column rejects the record). Newlines
    inside a message (pretty-printed JSON) are fine. A TIMESTAMP column accepts ISO-8601
    text (``2024-05-01T12:00:00``, a space instead of ``T``, optional fraction, optional
    ``Z`` or ``+hh:mm`` offset, converted to UTC) **or** integer epoch milliseconds
    (``1714564800000``); both forms may appear in one topic, even in one fetch. Anything
    else for a timestamp (epoch seconds as a float, ...) rejects the record.
CSV
    One CSV line per message, no header, fields in schema order; TIMESTAMP as ISO-8601
    text or integer epoch milliseconds.
BYTES
    The raw value as the only column (``binary``; a ``string`` column must hold UTF-8).

Text is UTF-8
    Every string value (a VARCHAR column, also inside arrays and structs) must be valid
    UTF-8 (strictly: no overlong forms or encoded surrogates); a record holding other bytes
    is a bad record (:mod:`~datum_sql.connectors.text` locates it without a row loop).

A message with no value (NULL or empty: a tombstone) is a bad record for JSON and CSV (the
``bad_records`` policy decides; nothing is dropped silently); for BYTES it is a NULL.
"""

from __future__ import annotations

import io
import itertools
import re
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from datum_sql.connectors.text import has_text, invalid_utf8
from datum_sql.errors import SchemaError


@dataclass
class Decoded:
    """The outcome of decoding ``n`` messages.

    ``batch`` holds the good records in input order; ``good`` their input indices (``None``
    when every record decoded); ``bad`` the (index, reason) of each rejected record, sorted.
    """

    batch: pa.RecordBatch
    good: list[int] | None = None
    bad: list[tuple[int, str]] = field(default_factory=list)

    def without(self, rows: dict[int, str]) -> Decoded:
        """This outcome with the batch rows ``rows`` (row -> reason) rejected as well;
        ``bad`` comes out sorted."""
        bad = sorted(self.bad)
        if not rows:
            return Decoded(self.batch, good=self.good, bad=bad)
        index = np.asarray(
            self.good if self.good is not None else range(self.batch.num_rows), np.int64
        )
        ok = np.ones(self.batch.num_rows, dtype=bool)
        ok[list(rows)] = False
        bad = sorted([*bad, *((int(index[j]), reason) for j, reason in rows.items())])
        return Decoded(self.batch.filter(pa.array(ok)), good=index[ok].tolist(), bad=bad)


class Decoder(ABC):
    """Turns a list of message values into :class:`Decoded`."""

    def __init__(self, schema: pa.Schema) -> None:
        self.schema = schema

    @abstractmethod
    def decode(self, values: list[bytes | None]) -> Decoded: ...


def make_decoder(encode: str | None, schema: pa.Schema | None) -> Decoder:
    """The decoder for ``ENCODE JSON|CSV|BYTES`` (default JSON) of a value schema."""
    kind = (encode or "JSON").upper()
    if kind == "BYTES":
        return BytesDecoder(schema)
    if schema is None or len(schema) == 0:
        raise SchemaError(f"ENCODE {kind} needs a declared schema (the columns of the value)")
    if kind == "JSON":
        return JsonDecoder(schema)
    if kind == "CSV":
        return CsvDecoder(schema)
    raise SchemaError(f"unsupported ENCODE {encode!r} for Kafka: use JSON, CSV or BYTES")


_ROW_SUFFIX = re.compile(r"\s+in row \d+$")


def _reason(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return _ROW_SUFFIX.sub("", text)


class _ParsingDecoder(Decoder):
    """Shared machinery of the text formats: one parser call, bisection on failure,
    TIMESTAMP columns that accept epoch milliseconds, NOT NULL checks."""

    #: what one message must be, for the reason of a row-count mismatch
    UNIT = "record"

    def __init__(self, schema: pa.Schema) -> None:
        super().__init__(schema)
        self._ts_cols = [f.name for f in schema if pa.types.is_timestamp(f.type)]
        self._required = [f.name for f in schema if not f.nullable]
        self._text_cols = [f.name for f in schema if has_text(f.type)]
        #: timestamp columns currently read as integer epoch millis (learned from the data)
        self._millis: frozenset[str] = frozenset()

    # subclasses: parse ``data`` (lines) with ``read_schema``
    @abstractmethod
    def _parse(self, data: bytes, read_schema: pa.Schema) -> pa.Table: ...

    @abstractmethod
    def _failed_column(self, exc: Exception) -> str | None:
        """The column a parse error is about, when the parser says."""

    @abstractmethod
    def _prepare(self, values: list[bytes]) -> list[bytes]:
        """``values`` made one line each (called only when some message holds a newline)."""

    def _join(self, values: list[bytes]) -> tuple[list[bytes], bytes]:
        """(values, their newline-joined text), one line per message: the text is built
        once and handed to the parser as it is (copied again only when a message holds a
        line break of its own)."""
        data = b"\n".join(values)
        if data.count(b"\n") != len(values) - 1:
            values = self._prepare(values)
            data = b"\n".join(values)
        return values, data

    def _read_schema(self, millis: frozenset[str]) -> pa.Schema:
        fields = []
        for f in self.schema:
            typ = pa.int64() if f.name in millis else f.type
            fields.append(pa.field(f.name, typ, nullable=True))
        return pa.schema(fields)

    def _parse_flex(self, data: bytes) -> pa.Table:
        """Parse, switching a TIMESTAMP column between ISO text and epoch millis as the
        parser's errors say; the switch sticks for later batches."""
        millis = self._millis
        tried: set[frozenset[str]] = set()
        while True:
            tried.add(millis)
            try:
                table = self._parse(data, self._read_schema(millis))
            except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
                col = self._failed_column(exc)
                if col is None or col not in self._ts_cols:
                    raise
                nxt = millis ^ {col}
                if nxt in tried:
                    raise
                millis = nxt
                continue
            self._millis = millis
            return self._convert_millis(table, millis)

    def _convert_millis(self, table: pa.Table, millis: frozenset[str]) -> pa.Table:
        for name in millis:
            i = table.schema.get_field_index(name)
            target = self.schema.field(name).type
            ms = table.column(i).cast(pa.timestamp("ms", tz=target.tz))
            table = table.set_column(i, pa.field(name, target), ms.cast(target))
        return table

    def _parse_exact(self, values: list[bytes], data: bytes | None = None) -> pa.Table:
        """Parse ``values`` (``data``: their joined text, when already built); raise unless
        it gives exactly one row per message."""
        table = self._parse_flex(b"\n".join(values) if data is None else data)
        if table.num_rows != len(values):
            raise _CountMismatch(table.num_rows, len(values))
        return table

    def decode(self, values: list[bytes | None]) -> Decoded:
        n = len(values)
        if n == 0:
            return Decoded(_empty(self))
        bad: list[tuple[int, str]] = []
        if all(values):  # one pass: no NULL and no empty value
            keep = None
            vals: list[bytes] = values  # type: ignore[assignment]
        else:
            idx = [i for i, v in enumerate(values) if not v]
            bad = [(i, "message value is empty (NULL or tombstone)") for i in idx]
            keep = [i for i, v in enumerate(values) if v]
            vals = [values[i] for i in keep]  # type: ignore[misc]
        vals, data = self._join(vals)
        good_local: list[int] | None = None  # indices (into ``vals``) of the decoded rows
        try:
            table = self._parse_exact(vals, data) if vals else None
        except (pa.ArrowInvalid, pa.ArrowTypeError, _CountMismatch):
            table, good_local, local_bad = self._decode_hard(vals)
            bad.extend((i if keep is None else keep[i], r) for i, r in local_bad)
        if keep is not None and good_local is None and table is not None:
            good_local = list(range(table.num_rows))
        return self._finish(n, table, good_local, keep, bad)

    def _decode_hard(
        self, vals: list[bytes]
    ) -> tuple[pa.Table | None, list[int], list[tuple[int, str]]]:
        """``vals`` do not parse in one call: (table, the input index of each of its rows
        in order, bad records). Records are first grouped by how their TIMESTAMP columns
        are written (text or epoch millis; :meth:`_forms`), each group parsed in one call;
        a group that still fails is bisected to find its bad records."""
        groups: dict[Any, list[int]] = {}
        for i, v in enumerate(vals):
            groups.setdefault(self._forms(v), []).append(i)
        parts: list[tuple[list[int], pa.Table]] = []
        bad: list[tuple[int, str]] = []
        for idx in groups.values() if len(groups) > 1 else [list(range(len(vals)))]:
            sub = [vals[i] for i in idx]
            pieces: list[tuple[int, pa.Table]] = []
            if len(groups) > 1:
                try:
                    pieces = [(0, self._parse_exact(sub))]
                except (pa.ArrowInvalid, pa.ArrowTypeError, _CountMismatch):
                    pieces = []
            if not pieces:
                sub_bad: list[tuple[int, str]] = []
                self._bisect(sub, 0, len(sub), pieces, sub_bad)
                bad.extend((idx[i], r) for i, r in sub_bad)
            parts.extend(([idx[s + j] for j in range(t.num_rows)], t) for s, t in pieces)
        if not parts:
            return None, [], bad
        rows = [r for ix, _ in parts for r in ix]
        table = pa.concat_tables([t for _, t in parts])
        if any(a > b for a, b in itertools.pairwise(rows)):  # groups interleave: input order
            order = sorted(range(len(rows)), key=rows.__getitem__)
            table = table.take(pa.array(order, pa.int64()))
            rows = [rows[i] for i in order]
        return table, rows, bad

    def _forms(self, value: bytes) -> Any:
        """How ``value`` writes its TIMESTAMP columns, as a hashable key (records with the
        same key parse together); a heuristic only — the parser still checks everything."""
        return None

    def _finish(
        self,
        n: int,
        table: pa.Table | None,
        good_local: list[int] | None,
        keep: list[int] | None,
        bad: list[tuple[int, str]],
    ) -> Decoded:
        if table is None or table.num_rows == 0:
            bad.sort()
            return Decoded(_empty(self), good=[], bad=bad)
        good = good_local
        if keep is not None:
            good = [keep[i] for i in (good_local or range(table.num_rows))]
        batch = table.combine_chunks().to_batches()
        rb = batch[0] if batch else _empty(self)
        if rb.schema != self.schema:
            rb = pa.RecordBatch.from_arrays(rb.columns, schema=self.schema)
        out = Decoded(rb, good=None if good is not None and len(good) == n else good, bad=bad)
        return out.without(self._problems(table))

    def _problems(self, table: pa.Table) -> dict[int, str]:
        """Rows (of ``table``) that parsed but cannot be kept -> why: text that is not
        UTF-8, a NULL in a ``NOT NULL`` column. Vectorized; only bad rows are visited."""
        found: dict[int, str] = {}
        for name in self._text_cols:
            for j in invalid_utf8(table.column(name)).tolist():
                found.setdefault(j, f"value of column {name!r} is not valid UTF-8")
        for name in self._required:
            nulls = table.column(name).is_null()
            if pc.any(nulls).as_py():
                for j in np.flatnonzero(nulls.to_numpy()).tolist():
                    found.setdefault(j, f"missing value for NOT NULL column {name!r}")
        return dict(sorted(found.items()))

    def _bisect(
        self,
        vals: list[bytes],
        lo: int,
        hi: int,
        pieces: list[tuple[int, pa.Table]],
        bad: list[tuple[int, str]],
    ) -> None:
        if hi - lo <= 8:  # small segments: one record at a time
            for i in range(lo, hi):
                try:
                    pieces.append((i, self._parse_exact(vals[i : i + 1])))
                except _CountMismatch as exc:
                    bad.append((i, f"expected one {self.UNIT} per message, found {exc.got}"))
                except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
                    bad.append((i, _reason(exc)))
            return
        mid = (lo + hi) // 2
        for a, b in ((lo, mid), (mid, hi)):
            try:
                pieces.append((a, self._parse_exact(vals[a:b])))
            except (pa.ArrowInvalid, pa.ArrowTypeError, _CountMismatch):
                self._bisect(vals, a, b, pieces, bad)


class _CountMismatch(Exception):
    def __init__(self, got: int, expected: int) -> None:
        super().__init__(f"{got} rows for {expected} messages")
        self.got = got


def _empty(dec: Decoder) -> pa.RecordBatch:
    return pa.RecordBatch.from_arrays(
        [pa.array([], type=f.type) for f in dec.schema], schema=dec.schema
    )


class JsonDecoder(_ParsingDecoder):
    UNIT = "JSON object"
    _COLUMN = re.compile(r"Column\(/([^)/]*)\)")

    def __init__(self, schema: pa.Schema) -> None:
        super().__init__(schema)
        import pyarrow.json as pj

        self._pj = pj
        self._read_options = pj.ReadOptions(use_threads=True, block_size=1 << 20)
        #: small inputs (bisection): a thread pool costs more than it saves
        self._small_options = pj.ReadOptions(use_threads=False, block_size=1 << 20)
        self._form_patterns = [
            re.compile(rb'"' + re.escape(name.encode()) + rb'"\s*:\s*(.)') for name in self._ts_cols
        ]

    def _forms(self, value: bytes) -> Any:
        out = []
        for pattern in self._form_patterns:
            m = pattern.search(value)
            first = m.group(1) if m else b""
            if first == b'"':
                out.append("text")
            elif first and first in b"-0123456789":
                out.append("number")
            else:
                out.append("")  # missing, null, or not a timestamp at all: the parser decides
        return tuple(out)

    def _prepare(self, values: list[bytes]) -> list[bytes]:
        # A newline inside a JSON text can only be whitespace between tokens (strings must
        # escape it), so it may become a space: one message stays one line.
        return [v.replace(b"\r\n", b" ").replace(b"\n", b" ") for v in values]

    def _parse(self, data: bytes, read_schema: pa.Schema) -> pa.Table:
        pj = self._pj
        opts = pj.ParseOptions(explicit_schema=read_schema, unexpected_field_behavior="ignore")
        try:
            read = self._read_options if len(data) > 1 << 16 else self._small_options
            return pj.read_json(io.BytesIO(data), read_options=read, parse_options=opts)
        except pa.ArrowInvalid as exc:
            if "straddl" not in str(exc):
                raise
        # one record is larger than a parser block: parse the whole text as one block
        whole = pj.ReadOptions(use_threads=False, block_size=len(data) + 1)
        return pj.read_json(io.BytesIO(data), read_options=whole, parse_options=opts)

    def _failed_column(self, exc: Exception) -> str | None:
        m = self._COLUMN.search(str(exc))
        return m.group(1) if m else None


class CsvDecoder(_ParsingDecoder):
    UNIT = "CSV line"
    _COLUMN = re.compile(r"CSV column #(\d+)")

    def __init__(self, schema: pa.Schema) -> None:
        super().__init__(schema)
        import pyarrow.csv as pcsv

        self._pcsv = pcsv
        self._read_options = pcsv.ReadOptions(column_names=schema.names, use_threads=True)
        self._parse_options = pcsv.ParseOptions(newlines_in_values=False)

    def _prepare(self, values: list[bytes]) -> list[bytes]:
        # a trailing line break per message is common ("a,b\n"): drop it
        return [v.rstrip(b"\r\n") for v in values]

    def _parse(self, data: bytes, read_schema: pa.Schema) -> pa.Table:
        pcsv = self._pcsv
        convert = pcsv.ConvertOptions(
            column_types={f.name: f.type for f in read_schema},
            check_utf8=False,  # checked after parsing, like every text format (stricter)
            strings_can_be_null=False,
            quoted_strings_can_be_null=False,
        )
        return pcsv.read_csv(
            io.BytesIO(data),
            read_options=self._read_options,
            parse_options=self._parse_options,
            convert_options=convert,
        )

    def _failed_column(self, exc: Exception) -> str | None:
        m = self._COLUMN.search(str(exc))
        if not m:
            return None
        i = int(m.group(1))
        return self.schema.names[i] if 0 <= i < len(self.schema) else None


class BytesDecoder(Decoder):
    """ENCODE BYTES: the message value as the one column (default name ``value``)."""

    def __init__(self, schema: pa.Schema | None) -> None:
        if schema is None or len(schema) == 0:
            schema = pa.schema([pa.field("value", pa.binary())])
        if len(schema) != 1:
            raise SchemaError(
                f"ENCODE BYTES gives one column (the message value); the schema has "
                f"{len(schema)}: {', '.join(schema.names)}"
            )
        typ = schema.field(0).type
        if not (
            pa.types.is_binary(typ)
            or pa.types.is_large_binary(typ)
            or pa.types.is_string(typ)
            or pa.types.is_large_string(typ)
        ):
            raise SchemaError(
                f"ENCODE BYTES: column {schema.names[0]!r} must be BYTEA/binary or VARCHAR, "
                f"not {typ}"
            )
        super().__init__(schema)

    def decode(self, values: list[bytes | None]) -> Decoded:
        f = self.schema.field(0)
        raw = pa.array(values, type=pa.binary())
        problems: dict[int, str] = {}
        if not f.nullable and raw.null_count:
            for j in np.flatnonzero(raw.is_null().to_numpy(zero_copy_only=False)).tolist():
                problems[j] = f"message value is empty (NULL) for NOT NULL column {f.name!r}"
        col: pa.Array = raw
        if has_text(f.type):
            col = raw.view(pa.string())
            for j in invalid_utf8(col).tolist():
                problems[j] = f"value of column {f.name!r} is not valid UTF-8"
        if problems:
            ok = np.ones(len(values), dtype=bool)
            ok[list(problems)] = False
            col = col.filter(pa.array(ok))
            good, bad = np.flatnonzero(ok).tolist(), sorted(problems.items())
        else:
            good, bad = None, []
        if col.type != f.type:
            col = col.cast(f.type)  # valid UTF-8 by now: string -> large_string, ...
        return Decoded(pa.RecordBatch.from_arrays([col], schema=self.schema), good=good, bad=bad)
