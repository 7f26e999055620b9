"""Fuzz: thousands of mutated statements through every SQL entry point of a Context.

The statements are the SQL of the docs and the tests (fuzz_corpus.py), unchanged and with
one to three token mutations each (fuzz_mutate.py), seeded: the same statements every run.
Every few statements get a fresh Context holding a few small bounded sources and sinks
(state_dir in a temporary directory, which is also the working directory); each statement
goes through ``ctx.explain``, ``ctx.sql``, ``ctx.execute_streaming`` and ``ctx.execute``.

Every call must either succeed or raise a *clean* error, which means precisely:

- the exception is an instance of a proper subclass of :class:`datum_sql.DatumError`
  (``SqlError``, ``PlanError``, ...), never the bare base class and never a raw exception
  of Python, pyarrow, DataFusion, DuckDB or sqlglot;
- its message is not empty and is not just the text of an internal exception: when the
  error chains a cause (``raise ... from exc``) that is not itself a DatumError, the
  message must say more than the cause's own text (where it happened, what to change);
  the internal exception may stay in the chain as ``__cause__``, for debugging.

And nothing may hang: each call has a deadline; a streaming query that is still running
after a short budget is cancelled, and the cancellation must end it promptly. A streaming
query that ends raises its failure (if any) from ``wait()``, under the same rule.

The test runs every statement, then fails with one line per distinct failure class
(kind, exception type, the datum_sql frame it escaped from) and an example statement.
"""

from __future__ import annotations

import os
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from fuzz_corpus import normalize, seeds
from fuzz_mutate import statements

import datum_sql as ds
from datum_sql.errors import DatumError

STATEMENTS = 2000  # mutated ones; the seeds themselves run too
MIN_RAN = 300  # statements that must run somewhere (see the test)
GROUP = 4  # statements per Context (a fresh one costs a dozen catalog writes)
SEED = 20240501
CALL_DEADLINE = 15.0  # s: a call on these tiny tables still running then is a hang
RUN_BUDGET = 0.3  # s a streaming query may run before it is cancelled
CANCEL_DEADLINE = 15.0  # s: cancel() must end a query within this

BASE = datetime(2024, 5, 1, 12, 0, 0)
TS = pa.timestamp("us")


def _times(n: int, step_ms: int) -> pa.Array:
    return pa.array([BASE + timedelta(milliseconds=i * step_ms) for i in range(n)], TS)


def _tables() -> dict[str, tuple[pa.Table, str | None]]:
    """name -> (rows, event-time column): the tables the docs and golden queries use."""
    n = 24
    ids = list(range(n))
    syms = pa.array([["a", "b", "c", None][i % 4] for i in ids], pa.string())
    t = pa.table(
        {
            "a": pa.array([i - 5 if i % 7 else None for i in ids], pa.int64()),
            "b": pa.array([i % 5 for i in ids], pa.int64()),
            "c": pa.array([i / 3 for i in ids], pa.float64()),
            "d": pa.array([i * 1.5 for i in ids], pa.float64()),
            "f": pa.array([None if i % 6 == 0 else i / 4 for i in ids], pa.float64()),
            "s": pa.array([["abc", "X", "", None, "a b"][i % 5] for i in ids], pa.string()),
            "k": syms,
            "v": pa.array([i % 9 - 4 for i in ids], pa.int64()),
            "x": pa.array([i / 4 for i in ids], pa.float64()),
            "id": pa.array(ids, pa.int64()),
            "p": pa.array([i * 0.25 for i in ids], pa.float64()),
            "ts": _times(n, 500),
        }
    )
    return {
        "t": (t, "ts"),
        "u": (pa.table({"id": ids, "a": ids, "b": [str(i) for i in ids]}), None),
        "v": (pa.table({"id": ids, "c": [float(i) for i in ids]}), None),
        "trades": (
            pa.table(
                {
                    "sym": syms,
                    "ts": _times(n, 700),
                    "px": [float(i) for i in ids],
                    "id": ids,
                    "qty": [i * 10 for i in ids],
                }
            ),
            "ts",
        ),
        "quotes": (
            pa.table({"sym": syms, "ts": _times(n, 900), "bid": [i + 0.5 for i in ids]}),
            "ts",
        ),
        "venues": (pa.table({"sym": ["a", "b", None], "venue": ["x", "y", "z"]}), None),
        "orders": (
            pa.table(
                {
                    "id": ids,
                    "customer": [["ann", "bob", "cy"][i % 3] for i in ids],
                    "amount": [i * 2.5 for i in ids],
                    "ts": _times(n, 1000),
                }
            ),
            None,
        ),
        "events": (pa.table({"id": ids, "amount": [i / 7 for i in ids], "label": ["e"] * n}), None),
    }


def _write_files(root: Path) -> None:
    """The files the docs' CREATE SOURCE statements name (relative paths)."""
    data = root / "data"
    (data / "sensors").mkdir(parents=True)
    (data / "payments.csv").write_text(
        "id,order_id,method,paid\n" + "".join(f"{i},{i % 5},card,{i * 3.5}\n" for i in range(20))
    )
    (data / "clicks.jsonl").write_text(
        "".join(f'{{"user": {i % 4}, "page": "p{i}"}}\n' for i in range(20))
    )
    pq.write_table(pa.table({"sym": ["a", "b"], "name": ["A", "B"]}), data / "catalog.parquet")
    (data / "sensors" / "s1.csv").write_text("sensor,value\n1,2.5\n2,3.5\n")


def _context(root: Path, i: int) -> ds.Context:
    ctx = ds.Context(state_dir=root / "state" / str(i), checkpoint_interval=0.2)
    for name, (table, event_time) in _tables().items():
        ctx.register_arrow(
            name, table, event_time=event_time, batch_size=5,
            watermark=ds.BoundedOutOfOrderness(seconds=1) if event_time else None,
        )  # fmt: skip
    out = root / "out" / str(i)
    ctx.register_append_sink("collected", lambda batch: None)
    ctx.register_append_sink("out", ds.ParquetSink(out / "parquet"))
    ctx.register_append_sink("db", ds.DuckDBSink(out / "db.duckdb", "rows"))
    ctx.register_append_sink("upsert", ds.DuckDBSink(out / "up.duckdb", "rows", primary_key="k"))
    return ctx


# -- judging outcomes ------------------------------------------------------------------------


@dataclass
class Failure:
    kind: str  # raw | bare | hang | stuck
    exc_type: str
    where: str
    message: str


def _where(exc: BaseException) -> str:
    """The innermost datum_sql frame the exception passed through (else the innermost)."""
    frames = traceback.extract_tb(exc.__traceback__)
    ours = [f for f in frames if f"{os.sep}datum_sql{os.sep}" in f.filename]
    frame = (ours or frames or [None])[-1]
    if frame is None:
        return "?"
    path = frame.filename.split(f"{os.sep}datum_sql{os.sep}")[-1]
    return f"{path}:{frame.lineno} ({frame.name})"


def judge(exc: BaseException) -> Failure | None:
    """None for a clean error (module docstring), else what is wrong with it."""
    text = str(exc)
    if not isinstance(exc, DatumError):
        return Failure("raw", type(exc).__name__, _where(exc), text[:200])
    if type(exc) is DatumError:
        return Failure("bare", "DatumError (base class)", _where(exc), text[:200])
    if not text.strip():
        return Failure("bare", f"{type(exc).__name__} with no message", _where(exc), "")
    cause = exc.__cause__
    if (
        cause is not None
        and not isinstance(cause, DatumError)
        and text.strip() == str(cause).strip()
    ):
        return Failure(
            "bare",
            f"{type(exc).__name__} repeating its {type(cause).__name__}",
            _where(exc),
            text[:200],
        )
    return None


# -- running with deadlines ------------------------------------------------------------------


class Hang(Exception):
    pass


def call(fn: Callable[[], Any], deadline: float = CALL_DEADLINE) -> Any:
    """``fn()`` on a daemon thread; its result, its exception re-raised, or :class:`Hang`."""
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["result"] = fn()
        except BaseException as exc:
            box["error"] = exc

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(deadline)
    if worker.is_alive():
        raise Hang(f"still running after {deadline} s")
    if "error" in box:
        raise box["error"]
    return box.get("result")


@dataclass
class Report:
    failures: dict[tuple[str, str, str], list[tuple[str, str, str]]] = field(default_factory=dict)
    calls: int = 0
    clean_errors: int = 0
    successes: int = 0

    def add(self, f: Failure, entry: str, sql: str) -> None:
        self.failures.setdefault((f.kind, f.exc_type, f.where), []).append((entry, sql, f.message))

    def lines(self) -> Iterator[str]:
        for (kind, exc_type, where), cases in sorted(
            self.failures.items(), key=lambda kv: -len(kv[1])
        ):
            entry, sql, message = cases[0]
            yield (
                f"[{kind}] {exc_type} at {where}: {len(cases)}x, e.g. {entry}({sql[:160]!r})"
                f" -> {message[:160]!r}"
            )


def _finish(q: ds.StreamingQuery, entry: str, sql: str, report: Report) -> None:
    """Let a started query run for RUN_BUDGET, then cancel it; judge how it ended."""
    try:
        ended = call(lambda: q.wait(RUN_BUDGET))
        if not ended:
            call(lambda: q.cancel(CANCEL_DEADLINE), CANCEL_DEADLINE + 5)
            if q.state not in ("cancelled", "finished", "failed"):
                report.add(
                    Failure("stuck", "cancel", q.state, "cancel() did not end it"), entry, sql
                )
                return
            if q.error is not None:
                raise q.error
    except Hang as exc:
        report.add(Failure("hang", "query", "wait/cancel", str(exc)), entry, sql)
        return
    except BaseException as exc:
        failure = judge(exc)
        if failure is not None:
            report.add(failure, f"{entry}->wait", sql)
        else:
            report.clean_errors += 1


def run_statement(ctx: ds.Context, sql: str, report: Report) -> bool:
    """Every entry point on ``sql``; True when one of them succeeded."""
    entries: list[tuple[str, Callable[[], Any]]] = [
        ("explain", lambda: ctx.explain(sql)),
        ("sql", lambda: ctx.sql(sql)),
        ("execute_streaming", lambda: ctx.execute_streaming(sql)),
        ("execute", lambda: ctx.execute(sql)),
    ]
    succeeded = False
    for entry, fn in entries:
        report.calls += 1
        try:
            result = call(fn)
        except Hang as exc:
            report.add(Failure("hang", entry, "call", str(exc)), entry, sql)
            continue
        except BaseException as exc:
            failure = judge(exc)
            if failure is not None:
                report.add(failure, entry, sql)
            else:
                report.clean_errors += 1
            continue
        report.successes += 1
        succeeded = True
        if isinstance(result, ds.StreamingQuery):
            _finish(result, entry, sql, report)
    try:  # nothing may keep running: views, queries started by execute()
        call(lambda: [q.cancel(CANCEL_DEADLINE) for q in ctx.queries], CANCEL_DEADLINE + 5)
    except Hang as exc:
        report.add(Failure("hang", "cancel", "StreamingQuery.cancel", str(exc)), "cancel", sql)
    except BaseException as exc:
        failure = judge(exc)
        if failure is not None:
            report.add(failure, "cancel", sql)
    return succeeded


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_mutated_statements_fail_cleanly_and_never_hang(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    _write_files(tmp_path)
    corpus = seeds()
    tables = [*_tables(), "collected", "out", "db", "upsert"]
    columns = sorted({c for t, _ in _tables().values() for c in t.column_names})
    mutated = [sql for sql, _, _ in statements(corpus, STATEMENTS, SEED, tables, columns)]
    assert len(corpus) >= 300 and len(mutated) == STATEMENTS, (len(corpus), len(mutated))
    report = Report()
    started = time.monotonic()
    ran = 0
    for i, sql in enumerate([*corpus, *mutated]):
        if i % GROUP == 0:
            ctx = _context(tmp_path, i)
        ran += run_statement(ctx, normalize(sql), report)
    elapsed = time.monotonic() - started
    summary = (
        f"{len(corpus)} seeds + {len(mutated)} mutated statements, {report.calls} calls in "
        f"{elapsed:.1f} s: {ran} statements ran somewhere, {report.successes} calls succeeded, "
        f"{report.clean_errors} clean errors, {sum(len(c) for c in report.failures.values())} "
        f"failures in {len(report.failures)} classes"
    )
    print(summary)
    # a run that never gets past the parser tests little: hundreds of statements must plan
    # and run. A fixed floor, not a share of the seeds: most new seeds name tables this
    # context lacks, so a share rises with every test file (370 ran on 2026-12-01)
    assert ran >= MIN_RAN, summary
    assert not report.failures, summary + "\n" + "\n".join(report.lines())
