"""Text files (CSV, JSON lines) read in chunks cut at record boundaries.

The fast path reads ``CHUNK_BYTES`` at a time, cuts the chunk after its last complete
record (the format's :meth:`TextFileSource.cut`) and parses the chunk in one pyarrow call. Only a chunk that fails to parse, or that holds rows the shared checks reject,
takes the slow path: it is split into records (:meth:`TextFileSource.records`), parsed in
halves (halves that parse are kept whole, so a chunk with a few bad records costs
O(bad * log n) parser calls) and each bad record is named by its line.

Positions are byte offsets: a block's ``at`` is ``{"offset", "line", "crc"}`` (where the
chunk starts, the line number there, the CRC-32 of the bytes before it), so a resume seeks
instead of parsing again what was read. Compressed files (``.gz``, ...) are decompressed;
their offsets and checksums count decompressed bytes. The fingerprint of what was read is
its size, modification time, length and CRC-32: a file whose size or time differ is read
again up to that length to tell a harmless touch from rows appended or a rewrite.
"""

from __future__ import annotations

import os
import re
import zlib
from abc import abstractmethod
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from datum_sql.connectors.files.source import Block, Changed, FileReader, FileSource, Origin

#: bytes read at a time; a chunk is parsed as one pyarrow block (measured: splitting it
#: into smaller blocks for pyarrow's threads costs more CPU than it saves on two cores)
CHUNK_BYTES = 8 << 20

_IN_ROW = re.compile(r"\s+in row \d+$")
_NEWLINE = ord("\n")


@dataclass
class TextBlock(Block):
    """A block with the bytes it was parsed from and, on the slow path, where each of its
    input records starts and ends in them."""

    data: bytes = b""
    starts: np.ndarray | None = None
    ends: np.ndarray | None = None


class TextFileSource(FileSource):
    """A :class:`FileSource` whose files are text records; a format supplies the hooks."""

    #: what one record is, for messages ("CSV row", "JSON object")
    UNIT = "record"

    # -- format hooks -------------------------------------------------------------------

    @property
    @abstractmethod
    def read_schema(self) -> pa.Schema:
        """The columns :meth:`parse` gives (the schema's names, in the types it reads)."""

    def prelude(self, reader: TextReader) -> Any:
        """Consume what comes before the first record (a CSV header) with
        :meth:`TextReader.take`; returns what :meth:`parse` needs to know of the file."""
        return None

    @abstractmethod
    def parse(self, data: bytes, context: Any) -> pa.Table:
        """The rows of ``data`` (whole records), with :attr:`read_schema`."""

    @abstractmethod
    def cut(self, data: bytes) -> int:
        """The end of the last complete record in ``data`` (more may follow); 0: none."""

    @abstractmethod
    def records(self, data: bytes) -> tuple[np.ndarray, np.ndarray]:
        """Where each record of ``data`` (whole records) starts and ends, blank ones left
        out (int64 arrays, ends exclusive, line ends included)."""

    def agrees(self, data: bytes, rows: int) -> bool:
        """Whether ``rows``, what the parser made of ``data``, is one row per record (False
        sends the chunk down the slow path, which names the record that is not one row)."""
        return True

    def reason(self, exc: Exception, context: Any) -> str:
        """Why one record did not parse, without pyarrow's row counting."""
        text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        return _IN_ROW.sub("", text)

    # -- FileSource ---------------------------------------------------------------------

    def open_reader(self, path: str, at: dict[str, Any] | None) -> TextReader:
        return TextReader(self, path, at)

    def changes(self, path: str, read: dict[str, Any]) -> Changed | None:
        st = os.stat(path)
        if st.st_size == read["size"] and st.st_mtime_ns == read["mtime_ns"]:
            return None
        length = read["bytes"]
        crc, got, more = crc_prefix(path, length)
        if got < length:
            return Changed(
                f"it was truncated or rewritten: it has fewer than the {length} bytes read"
            )
        if crc != read["crc"]:
            return Changed(
                f"it was rewritten: its first {length} bytes are not those that were read"
            )
        if not more:
            return None
        if not read["line_end"]:
            return Changed("its last line, read before it had a line end, was extended")
        return Changed(f"it grew from {read['size']} to {st.st_size} bytes", appended=True)

    def tail(self, read: dict[str, Any]) -> dict[str, Any]:
        return {"offset": read["bytes"], "line": read["line"], "crc": read["crc"]}


class TextReader(FileReader):
    """One text file, block by block (see the module docstring)."""

    def __init__(self, source: TextFileSource, path: str, at: dict[str, Any] | None) -> None:
        self.source = source
        self.path = path
        st = os.stat(path)
        self._stat = {"size": st.st_size, "mtime_ns": st.st_mtime_ns}
        self._stream = pa.input_stream(path)  # decompresses by extension
        self._buf = b""
        self._eof = False
        self.offset = 0
        self.line = 1
        self.crc = 0
        self._ended_line = True  # what was consumed ends with a line end (or is nothing)
        try:
            self.context = source.prelude(self)
            if at is not None:
                self._seek(at)
        except BaseException:
            self._stream.close()
            raise

    # -- for the format hooks --------------------------------------------------------------

    def peek(self, n: int) -> bytes:
        """At least ``n`` unconsumed bytes (fewer at the end of the file)."""
        while len(self._buf) < n and not self._eof:
            self._fill()
        return self._buf

    def take(self, n: int) -> bytes:
        """Consume the next ``n`` bytes (already peeked)."""
        if n == len(self._buf):
            data, self._buf = self._buf, b""
        else:
            data, self._buf = self._buf[:n], self._buf[n:]
        self.crc = zlib.crc32(data, self.crc)
        self.offset += len(data)
        if data:
            self._ended_line = ends_line(data)
        self.line += int(np.count_nonzero(np.frombuffer(data, dtype=np.uint8) == _NEWLINE))
        return data

    # -- FileReader -----------------------------------------------------------------------

    def __next__(self) -> TextBlock:
        while True:
            if self._eof:
                # A continuous source leaves a last line without a line end for a later
                # read: its writer may not have finished it.
                cut = self._last_line_end() if self.source.continuous else len(self._buf)
                if not cut:
                    raise StopIteration
                break
            if len(self._buf) >= CHUNK_BYTES:
                cut = self.source.cut(self._buf)
                if cut:
                    break
            self._fill()
        at = {"offset": self.offset, "line": self.line, "crc": self.crc}
        data = self.take(cut)
        read = {**self._stat, "bytes": self.offset, "crc": self.crc, "line_end": ends_line(data)}
        try:
            table = self.source.parse(data, self.context)
        except (pa.ArrowInvalid, pa.ArrowTypeError):
            return self._careful(at, read, data)
        if not self.source.agrees(data, table.num_rows):
            return self._careful(at, read, data)
        return TextBlock(at, read, table.num_rows, table, exact=False, data=data)

    def exact(self, block: Block) -> Block:
        assert isinstance(block, TextBlock)
        return block if block.exact else self._careful(block.at, block.read, block.data)

    def origins(self, block: Block, rows: list[int]) -> list[Origin]:
        assert isinstance(block, TextBlock) and block.starts is not None
        assert block.ends is not None
        data = block.data
        starts, ends = block.starts[rows].tolist(), block.ends[rows].tolist()
        newlines = np.flatnonzero(np.frombuffer(data, dtype=np.uint8) == _NEWLINE)
        lines = (block.at["line"] + np.searchsorted(newlines, starts)).tolist()
        out = []
        for start, end, line in zip(starts, ends, lines):
            raw = data[start:end].rstrip(b"\r\n")
            out.append(Origin(raw, f"{self.path}, line {line}", f"{self.path}:{line}"))
        return out

    @property
    def ended(self) -> bool:
        return self._eof and not self._buf

    def fingerprint(self) -> dict[str, Any]:
        return {
            **self._stat,
            "bytes": self.offset,
            "crc": self.crc,
            "line": self.line,
            "line_end": self.offset == 0 or self._ended_line,
        }

    def close(self) -> None:
        self._stream.close()

    # -- internals ------------------------------------------------------------------------

    def _last_line_end(self) -> int:
        """Where the last line end of the unconsumed bytes is (after it; 0: none)."""
        return max(self._buf.rfind(b"\n"), self._buf.rfind(b"\r")) + 1

    def _fill(self) -> None:
        data = self._stream.read(CHUNK_BYTES)
        if not data:
            self._eof = True
        else:
            self._buf = self._buf + data if self._buf else data

    def _seek(self, at: dict[str, Any]) -> None:
        """Skip to the block that started at ``at`` (the prelude was consumed)."""
        offset = int(at["offset"])
        if self._stream.seekable() and offset >= self.offset + len(self._buf):
            self._stream.seek(offset)
            self._buf = b""
        else:
            while self.offset + len(self._buf) < offset and not self._eof:
                self._fill()
            self._buf = self._buf[offset - self.offset :]
        self.offset, self.line, self.crc = offset, int(at["line"]), int(at["crc"])

    def _careful(self, at: dict[str, Any], read: dict[str, Any], data: bytes) -> TextBlock:
        """The slow path: parse the records of ``data`` in halves, naming the bad ones."""
        starts, ends = self.source.records(data)
        pieces: list[tuple[int, pa.Table]] = []
        bad: list[tuple[int, str]] = []
        self._halve(data, starts, ends, 0, len(starts), pieces, bad)
        if pieces:
            table = pa.concat_tables([t for _, t in pieces])
            rows = np.concatenate([np.arange(s, s + t.num_rows, dtype=np.int64) for s, t in pieces])
        else:
            table = self.source.read_schema.empty_table()
            rows = np.empty(0, dtype=np.int64)
        n = len(starts)
        return TextBlock(at, read, n, table, rows, bad, True, data=data, starts=starts, ends=ends)

    def _halve(
        self,
        data: bytes,
        starts: np.ndarray,
        ends: np.ndarray,
        lo: int,
        hi: int,
        pieces: list[tuple[int, pa.Table]],
        bad: list[tuple[int, str]],
    ) -> None:
        """Parse records [lo, hi); a range that fails is halved, down to single records."""
        if hi <= lo:
            return
        try:
            text = data[int(starts[lo]) : int(ends[hi - 1])]
            pieces.append((lo, self._parse_exact(text, hi - lo)))
            return
        except (pa.ArrowInvalid, pa.ArrowTypeError, _CountMismatch) as exc:
            if hi - lo == 1:
                bad.append((lo, self._why(exc)))
                return
        mid = (lo + hi) // 2
        self._halve(data, starts, ends, lo, mid, pieces, bad)
        self._halve(data, starts, ends, mid, hi, pieces, bad)

    def _parse_exact(self, text: bytes, n: int) -> pa.Table:
        """The ``n`` records of ``text`` (blank lines between them are no records), one row
        each (else :class:`_CountMismatch`)."""
        if not ends_line(text):
            text += b"\n"  # the last record of a file may lack its line end
        table = self.source.parse(text, self.context)
        if table.num_rows != n:
            raise _CountMismatch(table.num_rows)
        return table

    def _why(self, exc: Exception) -> str:
        if isinstance(exc, _CountMismatch):
            return f"expected one {self.source.UNIT}, found {exc.got} rows in it"
        return self.source.reason(exc, self.context)


def line_spans(data: bytes) -> tuple[np.ndarray, np.ndarray]:
    """Where each line of ``data`` starts and ends (after its ``\\n``; the last line may
    lack one)."""
    if not data:
        return np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int64)
    ends = np.flatnonzero(np.frombuffer(data, dtype=np.uint8) == _NEWLINE) + 1
    if not len(ends) or ends[-1] < len(data):
        ends = np.append(ends, len(data))
    starts = np.concatenate([[0], ends[:-1]]).astype(np.int64)
    return starts, ends.astype(np.int64)


def ends_line(data: bytes) -> bool:
    """Whether ``data`` ends with a line end (empty data does not)."""
    return data[-1:] in (b"\n", b"\r")


class _CountMismatch(Exception):
    def __init__(self, got: int) -> None:
        super().__init__(f"{got} rows")
        self.got = got


def crc_prefix(path: str, length: int) -> tuple[int, int, bool]:
    """CRC-32 of the first ``length`` bytes of ``path`` (decompressed), how many there were,
    and whether more follow."""
    crc, got = 0, 0
    with pa.input_stream(path) as stream:
        while got < length:
            data = stream.read(min(CHUNK_BYTES, length - got))
            if not data:
                return crc, got, False
            crc = zlib.crc32(data, crc)
            got += len(data)
        return crc, got, bool(stream.read(1))
