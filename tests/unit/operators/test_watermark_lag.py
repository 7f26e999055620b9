"""watermark_lag driven directly: batches pass unchanged, the watermark moves back by the
lag (the start and the end of time pass as they are), and a non-positive lag is refused."""

from __future__ import annotations

import pyarrow as pa
import pytest

from datum_sql.engine.operators import operator_class
from datum_sql.errors import PlanError
from datum_sql.types import END_OF_TIME, START_OF_TIME

SCHEMA = pa.schema([("ws", pa.timestamp("us")), ("n", pa.int64())])


def make(lag_us: int) -> object:
    return operator_class("watermark_lag")("lag", {"lag_us": lag_us, "schema": SCHEMA}, [SCHEMA])


def test_rows_pass_and_the_watermark_trails_by_the_lag() -> None:
    op = make(10)
    batch = pa.RecordBatch.from_pydict({"ws": pa.array([5, 1]).cast(SCHEMA.field("ws").type),
                                        "n": [1, 2]}, schema=SCHEMA)  # fmt: skip
    assert op.on_batch(batch) == [batch]
    assert op.on_batch(batch.slice(0, 0)) == []
    assert op.on_watermark(100) == []
    assert op.output_watermark(100) == 90
    assert op.output_watermark(END_OF_TIME) == END_OF_TIME  # the end of input still closes all
    assert op.output_watermark(START_OF_TIME) == START_OF_TIME
    assert op.output_watermark(START_OF_TIME + 3) == START_OF_TIME
    assert op.output_schema == SCHEMA and op.snapshot() is None


@pytest.mark.parametrize("lag", [0, -5])
def test_a_lag_must_be_positive(lag: int) -> None:
    with pytest.raises(PlanError, match="must be positive"):
        make(lag)
