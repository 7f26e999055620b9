"""Planning as data: tests/fixtures/plan/errors.sql (refused at planning, the same message for
ctx.sql and a streaming query) and functions.sql (the rows both return)."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import datum_sql as ds

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "plan"
#: In time order: no row is late.
TIMES = [
    dt.datetime(1999, 12, 31, 23, 59, 59),
    dt.datetime(2024, 1, 7),
    dt.datetime(2024, 3, 2, 15, 4, 5, 123456),
]
TABLE = pa.table(
    {
        "id": pa.array([255, 4096, 10], pa.int64()),
        "region": pa.array(["x", None, "7"], pa.string()),
        "amount": pa.array([0.0, 4.0, -2.5], pa.float64()),
        "ts": pa.array(TIMES, pa.timestamp("us")),
        "created": pa.array(TIMES, pa.timestamp("us")),
    }
)


@pytest.fixture(scope="module")
def ctx() -> Any:
    c = ds.Context(state_dir=None)
    c.register_arrow("t", TABLE, event_time="ts", watermark=ds.BoundedOutOfOrderness(seconds=1))
    c.register_arrow("plain", TABLE)
    c.execute("CREATE SOURCE bids WITH (connector = 'nexmark', stream = 'bid')")
    c.register_kafka_topic(
        "k", topic="k", bootstrap_servers="127.0.0.1:1", schema=TABLE.schema, event_time="ts"
    )
    yield c
    c.close()


@dataclass
class Block:
    head: str
    meta: dict[str, str]
    sql: str


def _blocks(name: str, head: str, minimum: int) -> list:
    out = []
    line_number = 1
    for block in (FIXTURES / name).read_text().split("\n\n"):
        start = line_number
        line_number += block.count("\n") + 2
        lines = block.strip("\n").splitlines()
        if not lines or not lines[0].startswith(f"-- {head}:"):
            continue  # the header comment
        meta = {}
        body = lines[1:]
        while body and body[0].startswith("-- "):
            key, _, value = body.pop(0)[3:].partition(":")
            meta[key] = value.strip()
        first = lines[0].removeprefix(f"-- {head}:").strip()
        out.append(pytest.param(Block(first, meta, "\n".join(body)), id=f"line{start}"))
    assert len(out) >= minimum, f"{name} lost its cases"
    return out


def _refusal(run: Any) -> ds.DatumError:
    with pytest.raises(ds.DatumError) as info:
        run()
    assert "DataFusion error" not in str(info.value)
    assert "likely caused by a bug" not in str(info.value)
    return info.value


@pytest.mark.parametrize("case", _blocks("errors.sql", "fail", 25))
def test_refused_at_planning(ctx: Any, case: Block) -> None:
    assert set(case.meta) <= {"only", "batch"}, case.meta
    streaming = _refusal(lambda: ctx.prepare(case.sql))
    assert case.head in str(streaming)
    if case.meta.get("only") == "streaming":
        if case.meta.get("batch") == "runs":
            ctx.sql(case.sql)  # a batch query has all its input: no watermark needed
        return
    batch = _refusal(lambda: ctx.sql(case.sql))
    assert str(batch) == str(streaming)
    assert type(batch) is type(streaming)


@pytest.mark.parametrize("case", _blocks("functions.sql", "expect", 15))
def test_functions_work_as_documented(ctx: Any, case: Block) -> None:
    want = sorted(eval(case.head, {"datetime": dt}), key=repr)
    batch = ctx.sql(case.sql)
    streamed = ctx.execute_streaming(case.sql).to_arrow(timeout=60)
    for result in (batch, streamed):
        rows = [tuple(r.values()) for r in result.to_pylist()]
        assert sorted(rows, key=repr) == want
    assert [(f.name, f.type) for f in streamed.schema] == [(f.name, f.type) for f in batch.schema]
