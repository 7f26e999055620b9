"""Catalog metadata in the shapes Flight SQL's metadata calls return.

There is one catalog (:data:`CATALOG`) holding one schema (:data:`SCHEMA`); tables are named
without qualification in SQL. Table types are the kinds of the catalog: ``SOURCE``,
``SINK``, ``MATERIALIZED VIEW`` and ``VIEW``. Nothing here shows a table's options (where
connector secrets live): only names, kinds and column types.
"""

from __future__ import annotations

import re
from typing import Any

import pyarrow as pa

from datum_sql import __version__

__all__ = [
    "CATALOG",
    "SCHEMA",
    "TABLE_TYPES",
    "catalogs",
    "db_schemas",
    "sql_info",
    "table_types",
    "tables",
]

CATALOG = "datum"
SCHEMA = "main"
TABLE_TYPES = ("MATERIALIZED VIEW", "SINK", "SOURCE", "VIEW")

CATALOGS_SCHEMA = pa.schema([pa.field("catalog_name", pa.string(), nullable=False)])
DB_SCHEMAS_SCHEMA = pa.schema(
    [pa.field("catalog_name", pa.string()), pa.field("db_schema_name", pa.string(), False)]
)
TABLE_TYPES_SCHEMA = pa.schema([pa.field("table_type", pa.string(), nullable=False)])
_TABLES_FIELDS = [
    pa.field("catalog_name", pa.string()),
    pa.field("db_schema_name", pa.string()),
    pa.field("table_name", pa.string(), nullable=False),
    pa.field("table_type", pa.string(), nullable=False),
]
TABLE_SCHEMA_FIELD = pa.field("table_schema", pa.binary(), nullable=False)


def tables_schema(include_schema: bool) -> pa.Schema:
    return pa.schema(_TABLES_FIELDS + ([TABLE_SCHEMA_FIELD] if include_schema else []))


# GetSqlInfo: info_name uint32 not null, value dense_union<...> with these type codes.
_VALUE_TYPE = pa.dense_union(
    [
        pa.field("string_value", pa.string()),
        pa.field("bool_value", pa.bool_()),
        pa.field("bigint_value", pa.int64()),
        pa.field("int32_bitmask", pa.int32()),
        pa.field("string_list", pa.list_(pa.field("item", pa.string()))),
        pa.field(
            "int32_to_int32_list_map",
            pa.map_(pa.int32(), pa.list_(pa.field("item", pa.int32()))),
        ),
    ],
    type_codes=[0, 1, 2, 3, 4, 5],
)
SQL_INFO_SCHEMA = pa.schema(
    [pa.field("info_name", pa.uint32(), nullable=False), pa.field("value", _VALUE_TYPE, False)]
)

# SqlInfo ids (Flight SQL's SqlInfo enum) -> (union type code, value)
_SQL_INFO: dict[int, tuple[int, Any]] = {
    0: (0, "datum-sql"),  # FLIGHT_SQL_SERVER_NAME
    1: (0, __version__),  # FLIGHT_SQL_SERVER_VERSION
    2: (0, pa.__version__),  # FLIGHT_SQL_SERVER_ARROW_VERSION
    3: (1, False),  # FLIGHT_SQL_SERVER_READ_ONLY
    4: (1, True),  # FLIGHT_SQL_SERVER_SQL
    5: (1, False),  # FLIGHT_SQL_SERVER_SUBSTRAIT
    8: (3, 0),  # FLIGHT_SQL_SERVER_TRANSACTION: none
    9: (1, False),  # FLIGHT_SQL_SERVER_CANCEL (the CancelQuery action; use CANCEL QUERY)
    10: (1, False),  # FLIGHT_SQL_SERVER_BULK_INGESTION
    500: (1, False),  # SQL_DDL_CATALOG
    501: (1, False),  # SQL_DDL_SCHEMA
    502: (1, True),  # SQL_DDL_TABLE (CREATE/DROP SOURCE, SINK, MATERIALIZED VIEW)
    504: (0, '"'),  # SQL_IDENTIFIER_QUOTE_CHAR
    529: (0, "schema"),  # SQL_SCHEMA_TERM
    531: (0, "catalog"),  # SQL_CATALOG_TERM
}


def sql_info(ids: list[int]) -> pa.Table:
    """The rows of GetSqlInfo for ``ids`` (all known ones when empty); ids the server has no
    value for are left out, as the protocol allows."""
    wanted = sorted(_SQL_INFO) if not ids else [i for i in ids if i in _SQL_INFO]
    children: list[list[Any]] = [[] for _ in range(6)]
    codes, offsets = [], []
    for info in wanted:
        code, value = _SQL_INFO[info]
        codes.append(code)
        offsets.append(len(children[code]))
        children[code].append(value)
    arrays = [pa.array(values, type=_VALUE_TYPE.field(i).type) for i, values in enumerate(children)]
    value = pa.UnionArray.from_dense(
        pa.array(codes, pa.int8()),
        pa.array(offsets, pa.int32()),
        arrays,
        [_VALUE_TYPE.field(i).name for i in range(6)],
        list(range(6)),
    )
    return pa.Table.from_arrays([pa.array(wanted, pa.uint32()), value], schema=SQL_INFO_SCHEMA)


def catalogs() -> pa.Table:
    return pa.Table.from_pylist([{"catalog_name": CATALOG}], schema=CATALOGS_SCHEMA)


def db_schemas(catalog: str | None, pattern: str | None) -> pa.Table:
    rows = []
    if _catalog_matches(catalog) and _like(pattern, SCHEMA):
        rows.append({"catalog_name": CATALOG, "db_schema_name": SCHEMA})
    return pa.Table.from_pylist(rows, schema=DB_SCHEMAS_SCHEMA)


def table_types() -> pa.Table:
    return pa.Table.from_pylist([{"table_type": t} for t in TABLE_TYPES], schema=TABLE_TYPES_SCHEMA)


def tables(
    entries: list[tuple[str, str, pa.Schema | None]],
    *,
    catalog: str | None,
    schema_pattern: str | None,
    name_pattern: str | None,
    types: list[str],
    include_schema: bool,
) -> pa.Table:
    """GetTables over ``entries`` (name, table type, column schema if known), filtered as
    the request asks, ordered by name and type."""
    rows = []
    wanted = {t.upper() for t in types}
    if _catalog_matches(catalog) and _like(schema_pattern, SCHEMA):
        for name, kind, columns in sorted(entries, key=lambda e: (e[0], e[1])):
            if wanted and kind not in wanted:
                continue
            if not _like(name_pattern, name):
                continue
            row: dict[str, Any] = {
                "catalog_name": CATALOG, "db_schema_name": SCHEMA,
                "table_name": name, "table_type": kind,
            }  # fmt: skip
            if include_schema:
                row["table_schema"] = (columns or pa.schema([])).serialize().to_pybytes()
            rows.append(row)
    return pa.Table.from_pylist(rows, schema=tables_schema(include_schema))


def _catalog_matches(catalog: str | None) -> bool:
    return catalog is None or catalog == CATALOG


def _like(pattern: str | None, value: str) -> bool:
    """SQL LIKE as the metadata calls use it: ``%`` any run, ``_`` one character, ``\\``
    escapes either; case-sensitive."""
    if pattern is None:
        return True
    out, escaped = [], False
    for ch in pattern:
        if escaped:
            out.append(re.escape(ch))
            escaped = False
        elif ch == "\\":
            escaped = True
        elif ch == "%":
            out.append(".*")
        elif ch == "_":
            out.append(".")
        else:
            out.append(re.escape(ch))
    return re.fullmatch("".join(out), value, re.S) is not None
