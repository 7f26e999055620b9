"""The interval join's held rows cost linear work as they grow and shrink: an insert
appends the new rows without copying those already held, a purge marks rows gone without
copying the others, and results stay those of a plain sorted state (the property test
against DuckDB in ``test_interval_join.py`` covers every path; here the sizes are large
enough for the purged rows to be dropped and for many batches to be held)."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
from joins_harness import BASE_US, SEC, make, rows

from datum_sql.types import END_OF_TIME

TS = pa.timestamp("us")
L_SCHEMA = pa.schema([("lid", pa.int64()), ("k", pa.int64()), ("ts", TS)])
R_SCHEMA = pa.schema([("rid", pa.int64()), ("k", pa.int64()), ("ts", TS)])


def config(kind: str) -> dict[str, Any]:
    schema = pa.schema(
        [("lid", pa.int64()), ("k", pa.int64()), ("ts", TS), ("rid", pa.int64()), ("r_ts", TS)]
    )
    return {
        "left_keys": ["k"], "right_keys": ["k"],
        "left_columns": [["lid", "lid"], ["k", "k"], ["ts", "ts"]],
        "right_columns": [["rid", "rid"], ["ts", "r_ts"]],
        "kind": kind, "left_time": "ts", "right_time": "ts",
        "lower_us": -2 * SEC, "upper_us": 2 * SEC, "schema": schema,
    }  # fmt: skip


def batch(schema: pa.Schema, start: int, n: int) -> pa.RecordBatch:
    ids = list(range(start, start + n))
    return pa.RecordBatch.from_arrays(
        [
            pa.array(ids, pa.int64()),
            pa.array([i % 97 for i in ids], pa.int64()),
            pa.array([BASE_US + i * SEC // 100 for i in ids], TS),
        ],
        schema=schema,
    )


def first_buffer(op: Any) -> int:
    return op._lrows.table.column("lid").chunk(0).buffers()[1].address


def test_inserting_and_purging_never_copies_the_rows_already_held() -> None:
    op = make("interval_join", config("left"), L_SCHEMA, R_SCHEMA)
    op.on_batch(batch(L_SCHEMA, 0, 1000), 0)
    address = first_buffer(op)
    for i in range(1, 30):
        op.on_batch(batch(L_SCHEMA, i * 1000, 1000), 0)
    # the first batch's rows were not copied by the 29 inserts after it
    assert first_buffer(op) == address
    assert op.describe()["left_rows_held"] == 30_000
    # rows at 0..4.99 s are final once the right watermark passes ts + 2 s (reading them
    # joins the table's chunks into one, once); later purges only mark rows gone
    out = op.on_watermark(BASE_US + 7 * SEC, 1)
    assert sum(b.num_rows for b in out) == 500
    address = first_buffer(op)
    for second in range(8, 20):
        out = op.on_watermark(BASE_US + second * SEC, 1)
        assert sum(b.num_rows for b in out) == 100
        assert first_buffer(op) == address
    assert op.describe()["left_rows_held"] == 28_300 and op.state_size()[0] == 28_300


def test_results_equal_a_reference_across_many_inserts_purges_and_a_restore() -> None:
    def drive(restore_at: int | None) -> pa.Table:
        op = make("interval_join", config("left"), L_SCHEMA, R_SCHEMA)
        out: list[pa.RecordBatch] = []
        for step in range(60):
            if step == restore_at:
                data = op.snapshot()
                op = make("interval_join", config("left"), L_SCHEMA, R_SCHEMA)
                op.restore(data)
            out += op.on_batch(batch(L_SCHEMA, step * 500, 500), 0)
            out += op.on_batch(batch(R_SCHEMA, step * 500 + 250, 500), 1)
            mark = BASE_US + (step * 500) * SEC // 100
            out += op.on_watermark(mark, 0)
            out += op.on_watermark(mark, 1)
        for port in (0, 1):
            out += op.on_watermark(END_OF_TIME, port)
        out += op.on_close()
        return pa.Table.from_batches(out)

    got = drive(None)
    # ids are times (1/100 s apart) and keys are id % 97: a left row's partners are the
    # right ids (250 .. 30249) of its key within 2 s, i.e. 200 ids either way
    expected = []
    for left in range(30_000):
        partners = [left + 97 * j for j in range(-2, 3) if 250 <= left + 97 * j < 30_250]
        expected += [(left, r) for r in partners] or [(left, None)]
    assert rows(got, "lid", "rid") == sorted(expected, key=lambda p: (p[0], p[1] is None, p[1]))
    again = drive(31)
    assert rows(again, "lid", "rid") == rows(got, "lid", "rid")
