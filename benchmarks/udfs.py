"""Scalar Python UDFs against the same expression built in, both in datum-sql.

Each benchmark runs three engines over the same bids: ``datum-sql`` calling the UDF,
``datum-sql-builtin`` running the query with the UDF written as its built-in equivalent,
and DuckDB running that built-in query (the reference every result must equal, and the
baseline of both ratios). The UDF's overhead is the quotient of the two datum-sql figures
(built-in events/s over UDF events/s), measured in the same interleaved runs.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from benchmarks.nexmark_suite import full_bids
from benchmarks.spec import Benchmark

BUILTIN = "datum-sql-builtin"
ENGINES = ("datum-sql", BUILTIN, "duckdb")
RUNNERS = {
    "datum-sql": "benchmarks.udfs:prepare_with_udfs",
    BUILTIN: "benchmarks.udfs:prepare_builtin",
}

EUR = "SELECT auction, bidder, {eur} AS eur FROM bid WHERE {eur} > 1000000 AND {eur} < 50000000"
CHANNEL = "SELECT auction, bidder, {upper} AS channel FROM bid"

#: benchmark -> the datum-sql query with each UDF written as its built-in equivalent
BUILTIN_SQL = {
    "udf_usd_to_eur": EUR.format(eur="0.908 * price"),
    "udf_upper_channel": CHANNEL.format(upper="upper(channel)"),
}

BENCHMARKS = [
    Benchmark(
        "udf_usd_to_eur", "udf",
        "bids in a euro price band, euros by a Python UDF (usd_to_eur(price), pc.multiply) "
        "in the filter and the projection, against 0.908 * price",
        full_bids,
        EUR.format(eur="usd_to_eur(price)"),
        EUR.format(eur="0.908::DOUBLE * price"),
        engines=ENGINES, runners=RUNNERS,
    ),
    Benchmark(
        "udf_upper_channel", "udf",
        "every bid with its channel upper-cased by a Python UDF (shout(channel), "
        "pc.utf8_upper), against upper(channel)",
        full_bids,
        CHANNEL.format(upper="shout(channel)"),
        BUILTIN_SQL["udf_upper_channel"],
        engines=ENGINES, runners=RUNNERS,
    ),
]  # fmt: skip


def usd_to_eur(price: Any) -> Any:
    import pyarrow as pa
    import pyarrow.compute as pc

    return pc.multiply(price.cast(pa.float64()), 0.908)


def shout(s: Any) -> Any:
    import pyarrow.compute as pc

    return pc.utf8_upper(s)


def prepare_with_udfs(bench: Benchmark, events: int, params: dict[str, Any]) -> Any:
    """datum-sql's run calling the UDFs, registered first (in the child that runs it)."""
    import datum_sql as ds
    from benchmarks.engines import prepare_datum

    ds.udf(input_types=["BIGINT"], return_type="DOUBLE")(usd_to_eur)
    ds.udf(input_types=["VARCHAR"], return_type="VARCHAR")(shout)
    return prepare_datum(bench, events, params)


def prepare_builtin(bench: Benchmark, events: int, params: dict[str, Any]) -> Any:
    """datum-sql's run of the same query with the built-in expression."""
    from benchmarks.engines import prepare_datum

    builtin = dataclasses.replace(bench, datum_sql=BUILTIN_SQL[bench.name])
    return prepare_datum(builtin, events, params)


__all__ = ["BENCHMARKS", "BUILTIN_SQL"]
