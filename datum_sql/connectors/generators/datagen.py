"""``connector = 'datagen'``: random rows for the table's declared columns.

Per column type (options ``fields.<column>.<property>`` tune one column, RisingWave style):

* integers, floats, decimals: uniform in ``[min, max]`` (defaults 0 and 32767, clipped to the
  type); ``kind = 'sequence'`` counts ``min, min + 1, …`` and wraps after ``max``;
* strings: ``length`` (default 10) random lowercase letters; ``kind = 'sequence'`` gives the
  decimal text of the sequence above;
* booleans: random (``kind = 'sequence'`` alternates false, true);
* timestamps and dates: event time advancing monotonically, row ``r`` at
  ``2026-01-01 00:00:00 + r * inter_event_us``.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.types as pt

from datum_sql.connectors.base import ConnectorSpec
from datum_sql.connectors.generators._base import (
    BASE_TIME_US,
    CHUNK_ROWS,
    DEFAULT_INTER_EVENT_US,
    ChunkedGenerator,
    GeneratorSource,
    float_option,
    int_option,
    narrow,
    random_strings,
    rng_for,
)
from datum_sql.connectors.registry import source
from datum_sql.errors import PlanError

_DATAGEN_CODE = 9
DEFAULT_MIN = 0
DEFAULT_MAX = 32767
DEFAULT_LENGTH = 10
_FIELD_PROPS = ("kind", "min", "max", "length")
_KINDS = ("random", "sequence")
_INT64_MAX = 2**63 - 1

ColumnFn = Callable[[np.ndarray, np.random.Generator], pa.Array]


def _is_numeric(t: pa.DataType) -> bool:
    return pt.is_integer(t) or pt.is_floating(t) or pt.is_decimal(t)


def _int_bounds(t: pa.DataType) -> tuple[int, int]:
    info = np.iinfo(t.to_pandas_dtype())
    return int(info.min), min(int(info.max), _INT64_MAX)


class DatagenGenerator(ChunkedGenerator):
    """Random rows of ``schema``; ``fields`` holds per-column options (``{col: {prop: value}}``)."""

    def __init__(
        self,
        schema: pa.Schema,
        *,
        seed: int = 0,
        inter_event_us: int = DEFAULT_INTER_EVENT_US,
        fields: dict[str, dict[str, Any]] | None = None,
        table: str = "datagen",
        columns: Sequence[str] | None = None,
    ) -> None:
        """``columns``: the ones to generate (None: all); the options of every column of
        ``schema`` are checked all the same."""
        super().__init__(narrow(schema, columns))
        self.seed = seed
        self.inter_event_us = inter_event_us
        fields = fields or {}
        made = [
            (f.name, zlib.crc32(f.name.encode()), self._column_fn(table, f, fields.get(f.name, {})))
            for f in schema
        ]
        produced = set(self.schema.names)
        self._columns: list[tuple[int, ColumnFn]] = [
            (code, fn) for name, code, fn in made if name in produced
        ]

    def make_chunk(self, k: int) -> pa.RecordBatch:
        rows = np.arange(k * CHUNK_ROWS, (k + 1) * CHUNK_ROWS, dtype=np.int64)
        arrays = [
            fn(rows, rng_for(self.seed, _DATAGEN_CODE, code, k)) for code, fn in self._columns
        ]
        return pa.RecordBatch.from_arrays(arrays, schema=self.schema)

    # ------------------------------------------------------------------ per type

    def _column_fn(self, table: str, field: pa.Field, props: dict[str, Any]) -> ColumnFn:
        t, name = field.type, field.name
        where = f"{table}: column {name!r}"
        kind = str(props.get("kind", "random")).strip().lower()
        if kind not in _KINDS:
            raise PlanError(
                f"{where}: option 'fields.{name}.kind' must be 'random' or 'sequence', "
                f"got {props['kind']!r}"
            )
        opts = {f"fields.{name}.{p}": v for p, v in props.items()}

        if pt.is_timestamp(t) or pt.is_date(t):
            if "kind" in props or "min" in props or "max" in props or "length" in props:
                raise PlanError(
                    f"{where}: {t} columns advance with event time (option 'inter_event_us'); "
                    f"they take no fields.{name}.* options"
                )
            return self._time_fn(t)

        if "length" in props and not (pt.is_string(t) or pt.is_large_string(t)):
            raise PlanError(f"{where}: option 'fields.{name}.length' applies to strings only")
        if pt.is_boolean(t):
            if "min" in props or "max" in props:
                raise PlanError(f"{where}: boolean columns take no fields.{name}.min/max")
            if kind == "sequence":
                return lambda rows, rng: pa.array(rows % 2 == 1)
            return lambda rows, rng: pa.array(rng.random(len(rows)) < 0.5)

        if pt.is_string(t) or pt.is_large_string(t):
            if kind == "sequence":
                lo = int_option(table, opts, f"fields.{name}.min", DEFAULT_MIN, minimum=None)
                return lambda rows, rng: pa.array(rows + lo).cast(t)
            if "min" in props or "max" in props:
                raise PlanError(
                    f"{where}: fields.{name}.min/max apply to strings only with kind 'sequence'"
                )
            length = int_option(table, opts, f"fields.{name}.length", DEFAULT_LENGTH)
            return lambda rows, rng: random_strings(rng, len(rows), length, length).cast(t)

        if pt.is_integer(t):
            tmin, tmax = _int_bounds(t)
            lo = int_option(table, opts, f"fields.{name}.min", max(DEFAULT_MIN, tmin), minimum=None)
            hi = int_option(table, opts, f"fields.{name}.max", min(DEFAULT_MAX, tmax), minimum=None)
            for key, v in ((f"fields.{name}.min", lo), (f"fields.{name}.max", hi)):
                if not tmin <= v <= tmax:
                    raise PlanError(f"{where}: option {key!r} = {v} is outside the range of {t}")
            self._check_order(where, name, lo, hi)
            if kind == "sequence":
                span = hi - lo + 1
                return lambda rows, rng: pa.array(lo + rows % span).cast(t)
            return lambda rows, rng: pa.array(
                rng.integers(lo, hi, len(rows), dtype=np.int64, endpoint=True)
            ).cast(t)

        if pt.is_floating(t) or pt.is_decimal(t):
            lo_f = float_option(table, opts, f"fields.{name}.min", positive=False)
            hi_f = float_option(table, opts, f"fields.{name}.max", positive=False)
            lo_v = float(DEFAULT_MIN) if lo_f is None else lo_f
            hi_v = float(DEFAULT_MAX) if hi_f is None else hi_f
            self._check_order(where, name, lo_v, hi_v)
            scale = t.scale if pt.is_decimal(t) else None
            if scale is not None:
                try:
                    pa.array([lo_v, hi_v]).cast(t)
                except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
                    raise PlanError(
                        f"{where}: [{lo_v}, {hi_v}] does not fit {t}; "
                        f"set fields.{name}.min / fields.{name}.max"
                    ) from None

            def finish(values: np.ndarray) -> pa.Array:
                if scale is not None:
                    values = np.clip(np.round(values, scale), lo_v, hi_v)
                return pa.array(values).cast(t)

            if kind == "sequence":
                span_f = max(np.floor(hi_v - lo_v) + 1.0, 1.0)
                return lambda rows, rng: finish(lo_v + np.fmod(rows, span_f))
            return lambda rows, rng: finish(lo_v + rng.random(len(rows)) * (hi_v - lo_v))

        raise PlanError(
            f"{where}: datagen cannot generate type {t}; it generates integers, floats, "
            "decimals, booleans, strings, timestamps and dates"
        )

    @staticmethod
    def _check_order(where: str, name: str, lo: float, hi: float) -> None:
        if lo > hi:
            raise PlanError(
                f"{where}: option 'fields.{name}.min' ({lo}) is greater than "
                f"'fields.{name}.max' ({hi})"
            )

    def _time_fn(self, t: pa.DataType) -> ColumnFn:
        step = self.inter_event_us

        def fn(rows: np.ndarray, rng: np.random.Generator) -> pa.Array:
            micros = pa.array(BASE_TIME_US + rows * step, pa.timestamp("us"))
            if pt.is_timestamp(t):
                if t.unit == "us":
                    return micros.cast(t)
                return micros.cast(pa.timestamp(t.unit), safe=False).cast(t)
            return micros.cast(t)

        return fn


@source("datagen")
class DatagenSource(GeneratorSource):
    """Random rows for the declared columns: ``CREATE SOURCE t (...) WITH (connector = 'datagen')``.

    Every option of :class:`GeneratorSource`, plus ``fields.<column>.<property>``.
    """

    CONNECTOR = "datagen"
    OPTIONS = {
        **GeneratorSource.COMMON_OPTIONS,
        "fields.*": (
            "per-column settings fields.<column>.kind ('random' or 'sequence'), "
            f".min and .max (numbers; defaults {DEFAULT_MIN} and {DEFAULT_MAX}), "
            f".length (strings; default {DEFAULT_LENGTH})"
        ),
    }

    def make_generator(self) -> DatagenGenerator:
        schema = self.spec.schema
        if schema is None or len(schema) == 0:
            raise PlanError(
                f"{self.name}: the datagen connector needs declared columns, e.g. "
                f"CREATE SOURCE {self.name} (id BIGINT, ts TIMESTAMP) WITH (connector = 'datagen')"
            )
        return DatagenGenerator(
            schema,
            seed=self.seed,
            inter_event_us=self.inter_event_us,
            fields=_field_options(self.spec, schema),
            table=self.name,
            columns=self.spec.columns,
        )


def _field_options(spec: ConnectorSpec, schema: pa.Schema) -> dict[str, dict[str, Any]]:
    """``fields.<column>.<prop>`` options grouped by column; unknown columns or props refused."""
    out: dict[str, dict[str, Any]] = {}
    for key, value in spec.options.items():
        if not key.startswith("fields."):
            continue
        column, _, prop = key[len("fields.") :].rpartition(".")
        if not column or prop not in _FIELD_PROPS:
            raise PlanError(
                f"{spec.name}: option {key!r} is not understood; write fields.<column>.<prop> "
                f"with <prop> one of {', '.join(_FIELD_PROPS)}"
            )
        if column not in schema.names:
            raise PlanError(
                f"{spec.name}: option {key!r} names no column; "
                f"columns are: {', '.join(schema.names)}"
            )
        out.setdefault(column, {})[prop] = value
    return out
