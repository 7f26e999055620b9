"""A subquery of WHERE against a bounded table (kind ``subquery_join``): semi-, anti- and
scalar joins, as one column added to each stream row.

Port 0 is the stream, port 1 the subquery's result over bounded tables, read whole
first: until it has ended, stream batches are buffered (against ``state_limit_rows``), as
in the lookup join; its rows are read afresh on every (re)start (``REREAD_PORTS``). When
the subquery aggregates, port 1 is a changelog (``table_changelog``), applied at its end.

Each stream row comes out exactly once, with ``column`` set by ``mode``:

- ``exists``: TRUE when a table row has the row's keys (``left_keys`` = ``right_keys``;
  NULL keys match nothing) and passes the ``residual`` filter on the pair, if any (the
  correlated conditions other than equalities; the pairs of a batch are filtered at
  once), else FALSE. ``EXISTS`` keeps the TRUE rows, ``NOT EXISTS``
  the FALSE ones, so a subquery's duplicates never duplicate a row.
- ``in``: ``x IN (SELECT v ...)`` with SQL's three values, ``x`` and ``v`` being the
  last key pair and the other pairs the correlation: TRUE on a match; else NULL when the
  table rows of the row's correlation keys are not none and ``x`` or one of their ``v``
  is NULL (so ``NOT IN`` keeps nothing there); else FALSE.
- ``scalar``: the table's one value (NULL when it has no row; more rows fail the query).

Membership is vectorized: the table's keys are indexed once (the lookup join's
:class:`~datum_sql.engine.operators.joins.lookup._TableIndex`, built on
``pyarrow.compute.index_in``) and each stream batch is probed in one pass.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa

from datum_sql.engine.changelog import OP_COLUMN, apply_changelog
from datum_sql.engine.operators.base import Operator, register
from datum_sql.engine.operators.joins.common import (
    Side,
    TableFirst,
    check_limit,
    common_key_types,
    residual_pairs,
)
from datum_sql.engine.operators.joins.lookup import _TableIndex
from datum_sql.engine.state.codec import decode_state, encode_state
from datum_sql.errors import PlanError, QueryFailed
from datum_sql.types import END_OF_TIME

_MODES = ("exists", "in", "scalar")


class _KeySet(_TableIndex):
    """The table's key tuples, asked only whether a tuple is among them."""

    def contains(self, cols: list[pa.Array]) -> np.ndarray:
        ids, known = self._ids(cols, add=False)
        if len(self.offsets) <= 1:
            return np.zeros(len(known), np.bool_)
        ids = np.where(known, ids, 0)
        return known & (
            self.offsets[np.minimum(ids + 1, len(self.offsets) - 1)] > self.offsets[ids]
        )


@register("subquery_join")
class SubqueryJoin(TableFirst, Operator):
    """``WHERE [NOT] EXISTS (...)``, ``x [NOT] IN (SELECT ...)``, ``x > (SELECT agg ...)``."""

    KIND = "subquery_join"
    STATE_VERSION = 1
    REREAD_PORTS = (1,)

    def __init__(self, name: str, config: dict[str, Any], inputs: list[pa.Schema]) -> None:
        super().__init__(name, config, inputs)
        if len(inputs) != 2:
            raise PlanError(f"{name}: a subquery join has two inputs, got {len(inputs)}")
        self._mode = str(config.get("mode"))
        if self._mode not in _MODES:
            raise PlanError(f"{name}: mode must be one of {_MODES}, got {self._mode!r}")
        self._schema: pa.Schema = config["schema"]
        self._column = str(config["column"])
        if list(self._schema.names) != [*inputs[0].names, self._column]:
            raise PlanError(
                f"{name}: output schema {self._schema.names} must be the stream's columns "
                f"then {self._column!r}"
            )
        keys = (list(config.get("left_keys") or []), list(config.get("right_keys") or []))
        if len(keys[0]) != len(keys[1]) or (self._mode == "in" and not keys[0]):
            raise PlanError(f"{name}: left_keys and right_keys must pair up (IN: at least one)")
        self._left = Side(name, "left", inputs[0], keys[0], None, [])
        table_schema = inputs[1]
        if config.get("table_changelog"):
            table_schema = table_schema.remove(table_schema.get_field_index(OP_COLUMN))
        self._changelog = bool(config.get("table_changelog"))
        self._right = Side(name, "right", table_schema, keys[1], None, [])
        #: EXISTS: the correlated conditions beside the keys, over (stream, table) pairs.
        self._residual: tuple[Any, list[str], list[str]] | None = None
        if config.get("residual") is not None:
            left, right = list(config["residual_left"]), list(config["residual_right"])
            missing = [c for c in left if c not in inputs[0].names]
            missing += [c for c in right if c not in table_schema.names]
            if missing or self._mode != "exists" or not keys[0]:
                raise PlanError(f"{name}: a residual needs EXISTS, keys and its columns {missing}")
            self._residual = (config["residual"], left, right)
        self._types = common_key_types(self._left.key_types, self._right.key_types)
        limit = config.get("state_limit_rows")
        self._limit: int | None = None if limit is None else int(limit)
        self._loaded = False
        self._buffer: list[pa.RecordBatch] = []  # stream batches waiting for the table
        self._buffered = 0
        self._parts: list[pa.Table] = []  # the table, as read
        self._probe: Any = None

    @property
    def output_schema(self) -> pa.Schema:
        return self._schema

    # -- the table ------------------------------------------------------------------------
    def _table(self) -> pa.Table:
        schema = self.inputs[1]
        table = pa.concat_tables(self._parts) if self._parts else schema.empty_table()
        if self._changelog:
            table = apply_changelog(None, table)
        return table

    def _build(self) -> None:
        self._loaded = True
        table = self._table()
        if self._mode == "scalar":
            self._probe = self._scalar(table)
        elif self._mode == "exists":
            self._probe = self._exists(table)
        else:
            self._probe = self._in(table)

    def _keyset(self, table: pa.Table, n_keys: int) -> _KeySet:
        side = Side(self.name, "right", table.schema, self._right.keys[:n_keys], None, [])
        return _KeySet(side, self._types[:n_keys], table)

    def _exists(self, table: pa.Table) -> Any:
        if not self._right.keys:
            found = table.num_rows > 0
            return lambda cols, batch: np.full(batch.num_rows, found)
        keys = self._keyset(table, len(self._right.keys))
        if self._residual is None:
            return lambda cols, batch: pa.array(keys.contains(cols))
        expr, left, right = self._residual

        def probe(cols: list[pa.Array], batch: pa.RecordBatch) -> pa.Array:
            found = np.zeros(batch.num_rows, np.bool_)
            qi, rows, _ = keys.probe(cols)
            if len(qi):
                q, r = pa.array(qi, pa.int64()), pa.array(rows, pa.int64())
                arrays = [batch.column(c).take(q) for c in left]
                arrays += [table.column(c).take(r).combine_chunks() for c in right]
                names = [f"l.{c}" for c in left] + [f"r.{c}" for c in right]
                kept = residual_pairs(pa.RecordBatch.from_arrays(arrays, names=names), expr)
                found[qi if kept is None else qi[kept]] = True
            return pa.array(found)

        return probe

    def _in(self, table: pa.Table) -> Any:
        n_corr = len(self._right.keys) - 1
        match = self._keyset(table, n_corr + 1)
        value = table.column(self._right.keys[-1])
        if n_corr:
            selected = self._keyset(table, n_corr)
            nulls = self._keyset(table.filter(value.is_null()), n_corr)
        has_rows, has_null = table.num_rows > 0, value.null_count > 0

        def probe(cols: list[pa.Array], batch: pa.RecordBatch) -> pa.Array:
            n = batch.num_rows
            found = match.contains(cols)
            corr = cols[:-1]
            some = selected.contains(corr) if n_corr else np.full(n, has_rows)
            null_v = nulls.contains(corr) if n_corr else np.full(n, has_null)
            null_x = np.asarray(cols[-1].is_null())
            unknown = ~found & some & (null_x | null_v)
            return pa.array(found, pa.bool_(), mask=unknown)

        return probe

    def _scalar(self, table: pa.Table) -> Any:
        if table.num_rows > 1:
            raise QueryFailed(
                f"a scalar subquery returned {table.num_rows} rows; it must return at most "
                "one (aggregate it, or use IN / EXISTS)",
                operator=self.name,
            )
        field = self._schema.field(self._column)
        one = table.column(0)[0] if table.num_rows else pa.scalar(None, field.type)
        return lambda cols, batch: pa.repeat(one.cast(field.type), batch.num_rows)

    # -- the stream -----------------------------------------------------------------------
    def _marked(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        cols = self._left.key_columns(pa.Table.from_batches([batch]), self._types)
        mark = self._probe(cols, batch)
        arrays = [*batch.columns, pa.array(mark) if isinstance(mark, np.ndarray) else mark]
        return pa.RecordBatch.from_arrays(arrays, schema=self._schema)

    def _flush(self) -> list[pa.RecordBatch]:
        out = [self._marked(b) for b in self._buffer]
        self._buffer = []
        self._buffered = 0
        return out

    def on_batch(self, batch: pa.RecordBatch, port: int = 0) -> list[pa.RecordBatch]:
        if batch.num_rows == 0:
            return []
        if port == 1:
            self._parts.append(pa.Table.from_batches([batch]))
            if self._loaded:  # the table grew after its end: rebuild for the next batch
                self._build()
            return []
        if not self._loaded:
            self._buffer.append(batch)
            self._buffered += batch.num_rows
            check_limit(
                self.name,
                "left",
                self._buffered,
                self._limit,
                "stream rows are buffered until the subquery's table has been read to its "
                "end; raise the limit or make the table smaller",
            )
            return []
        return [self._marked(batch)]

    def on_watermark(self, watermark: int, port: int = 0) -> list[pa.RecordBatch]:
        if port == 1 and watermark >= END_OF_TIME and not self._loaded:
            self._build()
            return self._flush()
        return []

    def on_close(self) -> list[pa.RecordBatch]:
        if not self._loaded:
            self._build()
        return self._flush()

    # -- checkpoints and status -----------------------------------------------------------
    def snapshot(self) -> bytes | None:
        schema = self.inputs[0]
        buffered = pa.Table.from_batches(self._buffer, schema=schema)
        return encode_state(self.KIND, self.STATE_VERSION, {}, {"buffer": buffered})

    def restore(self, data: bytes) -> None:
        _, tables = decode_state(data, self.KIND, self.STATE_VERSION)
        buffered = tables["buffer"].cast(self.inputs[0])
        self._buffer = buffered.to_batches() if buffered.num_rows else []
        self._buffered = buffered.num_rows
        # The table is read again from its start: every stream row waits for its end.
        self._parts = []
        self._loaded = False
        self._probe = None
