"""A Python aggregate function in a tumbling window, beside the built-in it reimplements.

``tumble_sum_udaf`` sums each auction's bid prices per 10 s window with ``py_sum``, an
aggregate Python function (accumulate / merge / finish, called once per group and batch;
registered in the child process that runs it); ``tumble_sum_udaf_batched`` with
``py_sum_groups``, the same function in the batched form (``accumulate_groups`` and
friends: one call per batch for all its groups); ``tumble_sum_builtin`` with the built-in
``sum``. Their events/s side by side are the cost of calling Python.
"""

from __future__ import annotations

from typing import Any

from benchmarks.spec import Benchmark, bids

_QUERY = (
    "SELECT auction, window_start, window_end, {agg}(price) AS total "
    "FROM tumble(bids, date_time, INTERVAL '10 seconds') "
    "GROUP BY window_start, window_end, auction EMIT ON WINDOW CLOSE"
)
_DUCKDB = (
    "SELECT auction, time_bucket(INTERVAL 10 SECOND, date_time) AS window_start, "
    "time_bucket(INTERVAL 10 SECOND, date_time) + INTERVAL 10 SECOND AS window_end, "
    "sum(price) AS total FROM bids GROUP BY 1, 2, 3"
)


class PySum:
    """sum(price): the state is the running total and the count of non-NULL prices."""

    state = {"total": "BIGINT", "n": "BIGINT"}
    initial = {"total": 0, "n": 0}

    def accumulate(self, state: dict[str, Any], price: Any) -> dict[str, Any]:
        import pyarrow.compute as pc

        total = pc.sum(price).as_py() or 0
        return {"total": state["total"] + total, "n": state["n"] + pc.count(price).as_py()}

    def merge(self, state: dict[str, Any], other: dict[str, Any]) -> dict[str, Any]:
        return {"total": state["total"] + other["total"], "n": state["n"] + other["n"]}

    def finish(self, state: dict[str, Any]) -> int | None:
        return state["total"] if state["n"] else None


class PySumGroups(PySum):
    """py_sum in the batched form: numpy over every group of a batch at once."""

    def accumulate_groups(self, state: dict[str, Any], groups: Any, price: Any) -> dict[str, Any]:
        import numpy as np
        import pyarrow as pa

        n = len(state["total"])
        g = np.asarray(groups)
        total = np.zeros(n, np.int64)
        np.add.at(total, g, np.asarray(price.fill_null(0)))
        count = np.bincount(g[np.asarray(price.is_valid())], minlength=n)
        return self.merge_groups(state, {"total": pa.array(total), "n": pa.array(count)})

    def merge_groups(self, state: dict[str, Any], other: dict[str, Any]) -> dict[str, Any]:
        import pyarrow.compute as pc

        return {k: pc.add(state[k], other[k]) for k in ("total", "n")}

    def finish_groups(self, state: dict[str, Any]) -> Any:
        import pyarrow as pa
        import pyarrow.compute as pc

        return pc.if_else(pc.greater(state["n"], 0), state["total"], pa.scalar(None, pa.int64()))


def prepare_with_py_sum(bench: Benchmark, events: int, params: dict[str, Any]) -> Any:
    """datum-sql's run, with ``py_sum`` and ``py_sum_groups`` registered first (in the
    child process that runs it: the harness's own process never loads datum-sql)."""
    import datum_sql as ds
    from benchmarks.engines import prepare_datum

    ds.udaf(input_types=["BIGINT"], return_type="BIGINT", name="py_sum")(PySum)
    ds.udaf(input_types=["BIGINT"], return_type="BIGINT", name="py_sum_groups")(PySumGroups)
    return prepare_datum(bench, events, params)


BENCHMARKS = [
    Benchmark(
        "tumble_sum_udaf", "nexmark",
        "sum per auction in 10 s tumbling windows, by a Python aggregate function",
        bids, _QUERY.format(agg="py_sum"), _DUCKDB, engines=("datum-sql", "duckdb"),
        runners={"datum-sql": "benchmarks.udafs:prepare_with_py_sum"},
    ),
    Benchmark(
        "tumble_sum_udaf_batched", "nexmark",
        "the same windows summed by the function's batched form (all groups of a batch per call)",
        bids, _QUERY.format(agg="py_sum_groups"), _DUCKDB, engines=("datum-sql", "duckdb"),
        runners={"datum-sql": "benchmarks.udafs:prepare_with_py_sum"},
    ),
    Benchmark(
        "tumble_sum_builtin", "nexmark",
        "the same windows summed by the built-in sum (the UDAF's baseline)",
        bids, _QUERY.format(agg="sum"), _DUCKDB, engines=("datum-sql", "duckdb"),
    ),
]  # fmt: skip

__all__ = ["BENCHMARKS"]
