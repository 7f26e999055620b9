"""Over-window aggregates of a changelog (kind ``over_changelog``): ``agg(x) OVER
(PARTITION BY p ORDER BY o <frame>)`` over an updating input, such as an unbounded top-N,
or over an append-only input (every row an insert) when no watermark can make the output
final: an ORDER BY that is not event time, or a function that reads rows after the current
one or the partition's size (lead, rank, dense_rank, percent_rank, cume_dist, ntile,
nth_value).

Rows of a changelog come and go at any time, so no output is ever final: the operator
keeps, per partition, the input's current rows with the outputs it last emitted for them.
On a batch, the changes are applied as a multiset (an insert adds a copy of its row, a
retraction removes a copy of an equal row) to the partitions they touch; those partitions'
frames are evaluated again over their current rows (one sort, the vectorized frame
arithmetic of ``over``; rank and its kin count peers, rows with equal ``o``), and the
difference between the old and the new output rows is emitted: ``-D`` for an output row
that is gone (a retracted row, or a row whose frame changed), then ``+I`` for a new one. Rows whose frame did not change are not emitted again.
Rows with equal ``o`` are ordered by their other columns, so the answer does not depend on
arrival. Output: the input columns, the aggregates, ``_op`` (a changelog, identified by
the input's own key when it has one).

Config: as ``over_aggregate`` (``time_column`` is the ORDER BY column, any orderable type)
without ``allowed_lateness_us``. Snapshot: the current rows and their outputs, Arrow IPC.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from datum_sql.engine.changelog import OP_COLUMN, apply_changelog
from datum_sql.engine.eventtime import ordinals
from datum_sql.engine.operators.base import Operator, register
from datum_sql.engine.operators.over import FrameEvaluator, OverCall, Run, plain, plain_type
from datum_sql.engine.operators.over_frames import Partitions
from datum_sql.engine.state.codec import decode_state, encode_state
from datum_sql.engine.state.keys import KeyIndex
from datum_sql.errors import PlanError, QueryFailed

_SLOT = "__over_slot"
#: Where NULL ORDER BY values sort in a RANGE frame with an offset: above every value.
_NULL_ORDER = 1 << 62


@register("over_changelog")
class OverChangelog(Operator):
    """Keeps each partition's current rows; re-emits the outputs a change alters."""

    KIND = "over_changelog"
    STATE_VERSION = 1

    def __init__(self, name: str, config: dict[str, Any], inputs: list[pa.Schema]) -> None:
        super().__init__(name, config, inputs)
        self._input: pa.Schema = inputs[0]
        self._schema: pa.Schema = config["schema"]
        #: an append-only input (no ``_op``): every row an insert
        self._appends = OP_COLUMN not in self._input.names
        self._rows_schema = pa.schema([f for f in self._input if f.name != OP_COLUMN])
        self._partition: list[str] = list(config.get("partition") or [])
        self._order: str = config["time_column"]
        frame = config["frame"]
        self._calls = [OverCall(**c) for c in config["calls"]]
        self._frames = FrameEvaluator(
            name, frame["mode"], frame.get("preceding"), self._calls, self._rows_schema,
            self._schema, whole=True,
        )  # fmt: skip
        want = [*self._rows_schema.names, *(c.output for c in self._calls), OP_COLUMN]
        if self._schema.names != want:
            raise PlanError(f"{name}: output schema {self._schema.names} is not {want}")
        self._out_rows = pa.schema([f for f in self._schema if f.name != OP_COLUMN])
        limit = config.get("state_limit_rows")
        self._limit: int | None = None if limit is None else int(limit)
        types = [plain_type(self._input.field(c).type) for c in self._partition]
        self._index = KeyIndex(types or [pa.int8()])
        #: current rows with their last outputs, and each row's partition slot
        self._state = self._out_rows.empty_table()
        self._slot = np.empty(0, np.int64)

    @property
    def output_schema(self) -> pa.Schema:
        return self._schema

    def _keys(self, table: pa.Table) -> list[pa.Array]:
        if not self._partition:
            return [pa.array(np.zeros(table.num_rows, np.int8))]
        return [plain(table.column(c)) for c in self._partition]

    def on_batch(self, batch: pa.RecordBatch, port: int = 0) -> list[pa.RecordBatch]:
        if batch.num_rows == 0:
            return []
        changes = pa.Table.from_batches([batch])
        if self._appends:
            changes = _ops(changes, "+I")
        slots, _ = self._index.slots(self._keys(changes))
        touched = np.zeros(self._index.n_slots, bool)
        touched[slots] = True
        mine = touched[self._slot] if len(self._slot) else np.zeros(0, bool)
        old = self._state.filter(pa.array(mine))
        rest = self._state.filter(pa.array(~mine))
        rest_slot = self._slot[~mine]
        current = apply_changelog(old.select(self._rows_schema.names), changes)
        current = current.cast(self._rows_schema)
        new = self._evaluate(current)
        out = self._difference(old, new)
        new_slot = self._index.slots(self._keys(new))[0] if new.num_rows else rest_slot[:0]
        self._state = pa.concat_tables([rest, new]).combine_chunks()
        self._slot = np.concatenate([rest_slot, new_slot])
        self._check_limit()
        return out

    def _evaluate(self, rows: pa.Table) -> pa.Table:
        """``rows`` (whole partitions) with every call's output over its frame."""
        if rows.num_rows == 0:
            return self._out_rows.empty_table()
        slot = self._index.slots(self._keys(rows))[0]
        # by partition, ORDER BY value (NULLs last), then every other column: ties do not
        # depend on arrival
        sortable = [
            n for n in rows.column_names if not pa.types.is_nested(rows.schema.field(n).type)
        ]
        keys = pa.table({_SLOT: pa.array(slot), "__o": plain(rows.column(self._order)),
                         **{f"__c{i}": plain(rows.column(n)) for i, n in enumerate(sortable)}})  # fmt: skip
        by = [(c, "ascending") for c in keys.column_names]
        order = pa.array(np.asarray(pc.sort_indices(keys, sort_keys=by)))
        rows = rows.take(order).combine_chunks()
        slot = slot[np.asarray(order)]
        n = rows.num_rows
        parts = Partitions.of(slot)
        run = Run(rows, slot, self._positions(plain(rows.column(self._order))),
                  np.arange(n, dtype=np.int64), np.ones(n, bool), parts, parts.start)  # fmt: skip
        values = self._frames.values(run, np.arange(n, dtype=np.int64), None)
        arrays = [*(c.combine_chunks() for c in rows.columns), *values]
        out = [a if a.type == f.type else a.cast(f.type) for a, f in zip(arrays, self._out_rows)]
        return pa.Table.from_arrays(out, schema=self._out_rows)

    def _positions(self, order: pa.Array) -> np.ndarray:
        """The ORDER BY values as int64 that order and tie as they do: the ordinals (NULL
        above every value, beyond any RANGE offset) where a RANGE frame has an offset,
        else dense ranks (NULLs tied, last)."""
        if self._frames.mode == "range" and self._frames.preceding:
            values, valid = ordinals(order)
            values = values.astype(np.int64, copy=False)
            return values if valid is None else np.where(valid, values, _NULL_ORDER)
        return np.asarray(pc.rank(order, sort_keys="ascending", tiebreaker="dense")).astype(
            np.int64
        )

    def _difference(self, old: pa.Table, new: pa.Table) -> list[pa.RecordBatch]:
        """``-D`` for each output row of ``old`` not in ``new`` (as multisets), then ``+I``
        for each of ``new`` not in ``old``: one multiset sum each way."""
        parts = []
        for minus, plus, op in ((new, old, "-D"), (old, new, "+I")):
            rows = apply_changelog(None, pa.concat_tables([_ops(minus, "-D"), _ops(plus, "+I")]))
            if rows.num_rows:
                parts.append(_ops(rows, op).cast(self._schema))
        return pa.concat_tables(parts).combine_chunks().to_batches() if parts else []

    def _check_limit(self) -> None:
        if self._limit is not None and self._state.num_rows > self._limit:
            raise QueryFailed(
                f"operator {self.name!r} holds {self._state.num_rows} current rows of its "
                f"changelog input, over its state limit of {self._limit} (state_limit_rows); "
                "raise the limit or partition the input's rows more narrowly",
                operator=self.name,
            )

    def snapshot(self) -> bytes | None:
        return encode_state(self.KIND, self.STATE_VERSION, {}, {"rows": self._state})

    def restore(self, data: bytes) -> None:
        _, tables = decode_state(data, self.KIND, self.STATE_VERSION)
        self._state = tables["rows"].cast(self._out_rows).combine_chunks()
        self._index = KeyIndex(self._index.types)
        if self._state.num_rows:
            self._slot = self._index.slots(self._keys(self._state))[0]
        else:
            self._slot = np.empty(0, np.int64)

    def state_size(self) -> tuple[int, int]:
        return self._state.num_rows, int(self._state.nbytes)

    def describe(self) -> dict[str, Any]:
        return {"rows": self._state.num_rows, "partitions": self._index.n_slots}


def _ops(rows: pa.Table, op: str) -> pa.Table:
    return rows.append_column(OP_COLUMN, pa.array(np.full(rows.num_rows, op, object), pa.string()))
