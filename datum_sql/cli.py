"""The ``datum-sql`` command: a thin layer over :class:`datum_sql.Context`.

::

    datum-sql run script.sql [--state-dir DIR] [--checkpoint-interval 10s]
    datum-sql replay script.sql --from X --to Y [--chunk 1h | --chunk-rows N] [--dry-run]
        [--save-positions]
    datum-sql sql "SELECT ..." [--state-dir DIR] [--format table|csv|json|jsonl]
    datum-sql explain "INSERT INTO ... SELECT ..." [--state-dir DIR]
    datum-sql demo [--rows N] [--out DIR]
    datum-sql status [--state-dir DIR] [--json]
    datum-sql reset QUERY --to start|checkpoint:N [--state-dir DIR] [--yes]
    datum-sql serve [--state-dir DIR] --listen HOST:PORT --token-file FILE
        [--tls-cert PEM --tls-key PEM] [--insecure-no-auth] [--checkpoint-interval 10s]

Exit codes: 0 success; 1 a query failed while running (or an internal error), ``status``
found a damaged checkpoint, ``reset`` without ``--yes`` (nothing changed); 2 bad usage,
SQL or plan (nothing ran), a file that cannot be read, or a reset refused; 130 stopped by
Ctrl-C (SIGINT) — every running query was cancelled and committed what it had processed.
``serve`` stopped by SIGTERM exits with 0 (its jobs were checkpointed and stopped).
``--debug`` adds tracebacks to error messages.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import re
import signal
import sys
import threading
import time
import traceback
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, TextIO

import pyarrow as pa

from datum_sql import __version__
from datum_sql.context import DEFAULT_STATE_DIR, Context
from datum_sql.engine.runtime.query import StreamingQuery
from datum_sql.errors import AlreadyExists, DatumError, PlanError, QueryFailed, SqlError
from datum_sql.progress import Progress
from datum_sql.replay import ReplayRange, replay
from datum_sql.replay.ranges import KINDS
from datum_sql.sql.parse import parse, statement_texts
from datum_sql.table_text import footer, rich_table
from datum_sql.types import parse_duration

__all__ = ["main"]

#: Rows a ``table`` rendering shows before "… N more rows".
MAX_TABLE_ROWS = 50

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130

DEMO_ROWS = 1_000_000


class _Interrupted(Exception):
    """SIGTERM, turned into the same clean stop as Ctrl-C."""


# -- entry point ------------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help, or a usage error argparse already printed
        return exc.code if isinstance(exc.code, int) else EXIT_USAGE
    if args.command is None:
        parser.print_help(sys.stderr)
        return EXIT_USAGE
    debug = bool(getattr(args, "debug", False))
    try:
        with _signals():
            return int(args.func(args))
    except (KeyboardInterrupt, _Interrupted):
        _err("interrupted")
        return EXIT_INTERRUPTED
    except DatumError as exc:
        _report(exc, debug=debug)
        return EXIT_USAGE
    except Exception as exc:
        _err(f"internal error: {type(exc).__name__}: {exc}")
        if debug:
            traceback.print_exc()
        else:
            _err("(run again with --debug for the traceback)")
        return EXIT_FAILED


def _parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--debug", action="store_true", help="show tracebacks with errors")
    state = argparse.ArgumentParser(add_help=False)
    state.add_argument(
        "--state-dir",
        default=DEFAULT_STATE_DIR,
        metavar="DIR",
        help=f"catalog and checkpoints (default: {DEFAULT_STATE_DIR})",
    )

    parser = argparse.ArgumentParser(
        prog="datum-sql",
        description="datum-sql: streaming SQL over Kafka, files and Arrow, in one Python package.",
        parents=[common],
    )
    parser.add_argument("--version", action="version", version=f"datum-sql {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    run = sub.add_parser(
        "run",
        parents=[common, state],
        help="run the statements of a SQL file (DDL, then streaming INSERTs)",
        description="Run a SQL script statement by statement; streaming INSERTs run until "
        "their sources end or Ctrl-C (which cancels them cleanly, committing what they "
        "processed). Run again with the same --state-dir to continue.",
    )
    run.add_argument("script", help="the .sql file")
    run.add_argument(
        "--checkpoint-interval",
        type=_duration,
        default=None,
        metavar="DURATION",
        help="how often running queries commit, e.g. 10s, '1 minute' (default: 10s)",
    )
    run.add_argument(
        "--fresh",
        action="store_true",
        help="discard the queries' checkpoints and start over (after a change to the SQL)",
    )
    run.set_defaults(func=_cmd_run)

    rerun = sub.add_parser(
        "replay",
        parents=[common, state],
        help="run a script's INSERTs again over a range of their input only",
        description="Run the INSERT INTO queries of a SQL script again over the half-open "
        "range [--from, --to) of their input: event time (timestamps), Kafka offsets "
        "('partition:0,offset:100;partition:1,offset:80') or file names (told from the "
        "values, or named by --by). The script's DDL runs as for 'run'. A replay does not "
        "move the queries' saved positions (the next 'run' goes on from where the last one "
        "stopped) unless --save-positions. Each chunk commits when it ends; into an append sink a repeated replay "
        "writes its rows again, an upsert sink (DuckDB with primary_key) takes them as the "
        "same rows.",
    )
    rerun.add_argument("script", help="the .sql file")
    rerun.add_argument(
        "--from", dest="start", required=True, metavar="X", help="where the range starts"
    )
    rerun.add_argument(
        "--to", dest="end", required=True, metavar="Y", help="where it ends (not included)"
    )
    rerun.add_argument(
        "--by", choices=KINDS, help="what the range measures (default: told from the values)"
    )
    rerun.add_argument(
        "--chunk", metavar="DURATION", help="replay event time in chunks of this length, e.g. 1h"
    )
    rerun.add_argument(
        "--chunk-rows",
        type=_positive_int,
        metavar="N",
        help="replay Kafka offsets N per partition at a time",
    )
    rerun.add_argument(
        "--dry-run", action="store_true", help="read and count what would be read; write nothing"
    )
    rerun.add_argument(
        "--save-positions",
        action="store_true",
        help="after every chunk committed, move the queries' saved positions to the end of "
        "the range (offset and file ranges)",
    )
    rerun.set_defaults(func=_cmd_replay)

    sql = sub.add_parser(
        "sql",
        parents=[common, state],
        help="run a batch query and print the result",
        description="Run a batch query over what the tables hold now. DDL statements "
        "before the query (separated by ';') run first.",
    )
    sql.add_argument("query", help='e.g. "SELECT * FROM orders LIMIT 10"')
    sql.add_argument(
        "--format", choices=("table", "csv", "json", "jsonl"), default="table", help="output format"
    )
    sql.set_defaults(func=_cmd_sql)

    explain = sub.add_parser(
        "explain",
        parents=[common, state],
        help="print the streaming plan of a query",
    )
    explain.add_argument("query", help='e.g. "INSERT INTO sink SELECT ... FROM source"')
    explain.set_defaults(func=_cmd_explain)

    demo = sub.add_parser(
        "demo",
        parents=[common],
        help="run the embedded demo (Nexmark bids -> filter -> Parquet), no services needed",
    )
    demo.add_argument(
        "--rows", type=_positive_int, default=DEMO_ROWS, help=f"bids to generate ({DEMO_ROWS:,})"
    )
    demo.add_argument(
        "--out", default="out/demo", metavar="DIR", help="output directory (default: out/demo)"
    )
    demo.set_defaults(func=_cmd_demo)

    status = sub.add_parser(
        "status",
        parents=[common, state],
        help="list each query's saved positions, without running anything",
        description="For each query of the state directory: its SQL (secrets masked), "
        "whether it is running, its kept checkpoints and, per source, the position the "
        "newest intact one saved (Kafka: the next offset per partition; files: the files "
        "done and the one being read). Safe beside a running query. Every checkpoint is "
        "checked as recovery checks it: a damaged one is reported, naming the file, and "
        "the exit code is then 1.",
    )
    status.add_argument("--json", action="store_true", help="print one JSON document instead")
    status.set_defaults(func=_cmd_status)

    reset = sub.add_parser(
        "reset",
        parents=[common, state],
        help="move a query's saved position: back to its start or to a kept checkpoint",
        description="--to start deletes the query's checkpoints: its next run reads its "
        "sources from the start with no state, while its sinks keep what they hold (the "
        "rows come again). --to checkpoint:N deletes the checkpoints after N: the next run "
        "resumes from N; refused when the rows after N already reached a sink that appends "
        "(they would be written twice). Without --yes it only prints what it would do and "
        "exits with 1. Refused while the query runs.",
    )
    reset.add_argument("query", help="the query's name, as `datum-sql status` shows it")
    reset.add_argument(
        "--to",
        required=True,
        type=_reset_target,
        metavar="start|checkpoint:N",
        help="where the next run begins",
    )
    reset.add_argument("--yes", action="store_true", help="do it (without: print the plan only)")
    reset.set_defaults(func=_cmd_reset)

    server = sub.add_parser(
        "serve",
        parents=[common, state],
        help="serve the state directory over Arrow Flight SQL (ADBC, pyarrow.flight clients)",
        description="Serve the catalog of the state directory over Arrow Flight SQL: "
        "queries, DDL, INSERT jobs (which keep running after their client leaves, and are "
        "resumed from their checkpoints at the next start), SHOW QUERIES, CANCEL QUERY. "
        "Clients send 'authorization: Bearer TOKEN' with a token of --token-file (one "
        "'TOKEN ROLE' per line, roles read and admin). SIGTERM or Ctrl-C checkpoints and "
        "stops the jobs, then the server. See docs/server.md.",
    )
    server.add_argument(
        "--listen",
        default="127.0.0.1:50051",
        metavar="HOST:PORT",
        help="address to listen on (default: 127.0.0.1:50051; port 0 picks a free one)",
    )
    server.add_argument("--token-file", metavar="FILE", help="one 'TOKEN ROLE' per line")
    server.add_argument("--tls-cert", metavar="PEM", help="TLS certificate chain (PEM)")
    server.add_argument("--tls-key", metavar="PEM", help="the TLS certificate's private key")
    server.add_argument(
        "--insecure-no-auth",
        action="store_true",
        help="serve without tokens (refused unless --listen is a loopback address)",
    )
    server.add_argument(
        "--checkpoint-interval",
        type=_duration,
        default=None,
        metavar="DURATION",
        help="how often running queries commit (default: 10s)",
    )
    server.add_argument(
        "--subscription-stall-limit",
        type=_duration,
        default=None,
        metavar="DURATION",
        help="disconnect a SUBSCRIBE client whose buffer stayed full this long (default: 30s)",
    )
    server.add_argument(
        "--subscription-buffer-rows",
        type=int,
        default=None,
        metavar="N",
        help="unread rows a SUBSCRIBE client may hold (default: 100000)",
    )
    server.set_defaults(func=_cmd_serve)
    return parser


def _duration(text: str) -> str:
    try:
        parse_duration(text, what="duration")
    except (ValueError, DatumError) as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text


def _reset_target(text: str) -> int | None:
    from datum_sql.ops.reset import parse_target

    try:
        return parse_target(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _positive_int(text: str) -> int:
    try:
        value = int(text.replace("_", ""))
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be positive: {text!r}")
    return value


# -- run --------------------------------------------------------------------------------------


def _cmd_run(args: argparse.Namespace) -> int:
    path = Path(args.script)
    try:
        script = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        _err(f"no such file: {path}")
        return EXIT_USAGE
    except (OSError, UnicodeDecodeError) as exc:
        _err(f"cannot read {path}: {exc}")
        return EXIT_USAGE

    kwargs: dict[str, Any] = {}
    if args.checkpoint_interval is not None:
        kwargs["checkpoint_interval"] = args.checkpoint_interval
    ctx = Context(args.state_dir, **kwargs)
    queries: list[StreamingQuery] = []
    progress = Progress(queries, out=sys.stdout)
    try:
        try:
            parse(script)  # every syntax error of the file before anything runs
            for text in _statements(script):
                result = _execute_in_script(ctx, text, fresh=args.fresh)
                if isinstance(result, StreamingQuery):
                    queries.append(result)
                    _info(f"started {result.name}: {_one_line(text, 100)}")
                else:
                    _print_result(result)
        except DatumError as exc:
            _stop(queries)
            _report(exc, debug=args.debug, where=str(path))
            return EXIT_USAGE
        if not queries:
            return EXIT_OK
        progress.queries = list(queries)
        progress.run_until_done()
    except (KeyboardInterrupt, _Interrupted):
        progress.queries = list(queries)
        _stop_interrupted(progress)
        return EXIT_INTERRUPTED
    failed = [q for q in queries if q.state == "failed"]
    if failed:
        _stop(queries)
        progress.final()
        for q in failed:
            _report_failure(q, debug=args.debug)
        return EXIT_FAILED
    return EXIT_OK


_INSERT = re.compile(r"^\s*INSERT\s+INTO\b", re.I)
_SINK_AS = re.compile(r"^\s*CREATE\s+SINK\b.*\bAS\s*\(?\s*SELECT\b", re.I | re.S)


def _cmd_replay(args: argparse.Namespace) -> int:
    path = Path(args.script)
    try:
        script = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        _err(f"cannot read {path}: {exc}")
        return EXIT_USAGE
    ctx = Context(args.state_dir)
    inserts: list[str] = []
    try:
        parse(script)
        for text in _statements(script):
            if _INSERT.match(text):
                inserts.append(text)
            elif _SINK_AS.match(text):
                raise PlanError(
                    "replay: CREATE SINK ... AS SELECT starts its query as it is declared; "
                    "declare the sink, then INSERT INTO it, to replay that query"
                )
            else:
                _print_result(_execute_in_script(ctx, text))
        rng = ReplayRange.of(args.start, args.end, args.by)
        report = replay(
            ctx, inserts, rng, chunk=args.chunk, chunk_rows=args.chunk_rows,
            dry_run=args.dry_run, save_positions=args.save_positions,
        )  # fmt: skip
    except (KeyboardInterrupt, _Interrupted):
        ctx.close()
        return EXIT_INTERRUPTED
    except QueryFailed as exc:
        _report(exc, debug=args.debug, where=str(path))
        return EXIT_FAILED
    except DatumError as exc:
        _report(exc, debug=args.debug, where=str(path))
        return EXIT_USAGE
    for line in report.lines():
        print(line)
    return EXIT_OK


def _statements(script: str) -> Iterator[str]:
    """Each statement of ``script``, preceded by blanks standing in for the text before it:
    line and column numbers in errors then point into the file."""
    pos = 0
    for text in statement_texts(script):
        start = script.find(text, pos)
        if start < 0:  # pragma: no cover - statement_texts returns slices of the script
            yield text
            continue
        pos = start + len(text)
        yield re.sub(r"[^\n]", " ", script[:start]) + text


_CREATE = re.compile(
    r"^(\s*CREATE\s+(?:SOURCE|SINK|TABLE|(?:MATERIALIZED\s+)?VIEW)\s+)(?!IF\s+NOT\s+EXISTS\b)",
    re.I,
)
_CREATE_VIEW = re.compile(r"^\s*CREATE\s+MATERIALIZED\s+VIEW\s+", re.I)


def _execute_in_script(ctx: Context, text: str, *, fresh: bool = False) -> Any:
    """``ctx.execute(text)``; a CREATE SOURCE/SINK/MATERIALIZED VIEW the state directory
    already holds with the same definition (the script run again) keeps the existing table
    (a view: its query, restarted from its checkpoint), and a ``CREATE SINK ... AS SELECT``
    then starts its query again."""
    try:
        return ctx.execute(text, fresh=fresh)
    except AlreadyExists as exc:
        if _CREATE_VIEW.match(text) and exc.kind == "materialized view" and _is_stale(ctx, exc):
            # The view could not restart from its checkpoint: build it again from its sources.
            ctx.execute(f'DROP MATERIALIZED VIEW "{exc.name}"')
            return ctx.execute(text, fresh=fresh)
        if not _same_definition(ctx, text, exc):
            raise
    return ctx.execute(_CREATE.sub(r"\1IF NOT EXISTS ", text, count=1), fresh=fresh)


def _is_stale(ctx: Context, exc: AlreadyExists) -> bool:
    """The catalog holds the view ``exc`` names from an earlier run, but it could not be
    restarted."""
    try:
        ctx.view(exc.name)
    except DatumError:
        return True
    return False


#: Catalog entry fields the Context derives when it creates a table.
_DERIVED = ("bounded", "reads", "state_limit_rows")


def _same_definition(ctx: Context, text: str, exc: AlreadyExists) -> bool:
    """Whether ``text`` creates the very entry ``exc`` says the catalog holds (the script
    run again); a PlanError when it creates another definition under that kind and name."""
    from sqlglot import exp

    from datum_sql.sql.analyze import Binder

    nodes = parse(text)
    if len(nodes) != 1 or not isinstance(nodes[0], exp.Create) or not _CREATE.match(text):
        return False
    new = getattr(Binder(ctx.catalog).bind(nodes[0], text), "entry", None)
    if new is None or new.kind != exc.kind:
        return False
    a, b = ctx.catalog.require(exc.name, kinds=(exc.kind,)).to_json(), new.to_json()
    derived = set(_DERIVED)  # filled in by the Context at CREATE time, not written by the user
    if b.get("schema") is None:  # inferred from the data
        derived.add("schema")
    if {k: v for k, v in a.items() if k not in derived} == {
        k: v for k, v in b.items() if k not in derived
    }:
        return True
    raise PlanError(
        f"{exc.kind} {exc.name!r} already exists in state directory {ctx.state_dir} with a "
        f"different definition; DROP {exc.kind.upper()} {exc.name} first, or use another "
        "--state-dir"
    )


def _stop(queries: Sequence[Any]) -> None:
    for q in queries:
        if not q.done:
            q.cancel()


def _stop_interrupted(progress: Progress) -> None:
    queries = progress.queries
    running = [q for q in queries if not q.done]
    if running:
        _err(f"stopping {len(running)} running quer{'y' if len(running) == 1 else 'ies'}…")
    try:
        _stop(queries)
    except (KeyboardInterrupt, _Interrupted):
        _err("forced stop: output not yet committed is discarded")
        return
    progress.final()
    if running:
        _err("stopped; processed rows were committed")


def _report_failure(q: StreamingQuery, *, debug: bool) -> None:
    error = q.error
    _err(f"query {q.name} failed: {_strip_prefix(str(error))}")
    if debug and error is not None:
        traceback.print_exception(error, file=sys.stderr)


def _strip_prefix(message: str) -> str:
    return message.removeprefix("query failed: ")


# -- sql / explain ----------------------------------------------------------------------------


def _cmd_sql(args: argparse.Namespace) -> int:
    ctx = Context(args.state_dir)
    *setup, last = _split_or_fail(args.query)
    for text in setup:
        _refuse_streaming(text)
        _print_result(ctx.execute(text))
    _refuse_streaming(last)
    from sqlglot import exp

    node = parse(last)[0]
    result = ctx.sql(last) if isinstance(node, exp.Query) else ctx.execute(last)
    _print_result(result, fmt=args.format)
    return EXIT_OK


def _cmd_explain(args: argparse.Namespace) -> int:
    ctx = Context(args.state_dir)
    *setup, last = _split_or_fail(args.query)
    for text in setup:
        _refuse_streaming(text)
        _print_result(ctx.execute(text))
    print(ctx.explain(last))
    return EXIT_OK


def _split_or_fail(sql: str) -> list[str]:
    parse(sql)  # syntax errors with positions in the whole text
    texts = list(_statements(sql))
    if not texts:
        raise SqlError("Empty SQL: expected a statement", sql=sql)
    return texts


def _refuse_streaming(text: str) -> None:
    from sqlglot import exp

    node = parse(text)[0]
    if isinstance(node, exp.Insert) or (
        isinstance(node, exp.Create) and isinstance(node.expression, exp.Query)
    ):
        raise PlanError(
            "this starts a streaming query; put it in a script and use `datum-sql run script.sql`"
        )


# -- demo -------------------------------------------------------------------------------------


def _cmd_demo(args: argparse.Namespace) -> int:
    out_dir = Path(args.out)
    sink_dir = out_dir / "big_bids"
    _clear_demo_output(sink_dir)
    path = sink_dir.as_posix().replace("'", "''")
    statements = [
        "CREATE SOURCE bids\n"
        f"    WITH (connector = 'nexmark', stream = 'bid', rows = '{args.rows}')",
        "CREATE SINK big_bids\n"
        "    (auction BIGINT, bidder BIGINT, price_eur DOUBLE, date_time TIMESTAMP)\n"
        f"    WITH (connector = 'parquet', path = '{path}')",
        "INSERT INTO big_bids\n    SELECT auction, bidder, price * 0.908 AS price_eur, date_time\n"
        "    FROM bids WHERE price > 1000000",
    ]
    console = _console()
    console.print(
        f"[bold]datum-sql demo[/bold]: {args.rows:,} Nexmark bids → filter + currency "
        "conversion → Parquet\n"
    )
    for text in statements:
        console.print(f"  {text};", highlight=False, markup=False)
    console.print()

    ctx = Context(state_dir=None)
    ctx.execute(statements[0])
    ctx.execute(statements[1])
    started = time.monotonic()
    query = ctx.execute(statements[2])
    progress = Progress([query], out=sys.stdout)
    try:
        progress.run_until_done()
    except (KeyboardInterrupt, _Interrupted):
        _stop_interrupted(progress)
        return EXIT_INTERRUPTED
    if query.state == "failed":
        _report_failure(query, debug=args.debug)
        return EXIT_FAILED
    seconds = time.monotonic() - started

    sample_sql = (
        "SELECT auction, bidder, price_eur, date_time FROM big_bids\n"
        "    ORDER BY price_eur DESC LIMIT 10"
    )
    console.print(
        f"\nThe ten biggest bids, read back with ctx.sql():\n  {sample_sql}", markup=False
    )
    _print_result(ctx.sql(sample_sql))
    count = ctx.sql("SELECT count(*) AS n FROM big_bids").column(0)[0].as_py()
    parts = len(list(sink_dir.glob("*.parquet")))
    rate = args.rows / seconds if seconds > 0 else 0.0
    console.print(
        f"\n{count:,} of {args.rows:,} bids matched, written to {sink_dir}/ "
        f"({parts} Parquet part file{'s' if parts != 1 else ''})\n"
        f"in {seconds:.2f}s ({rate:,.0f} bids/s)",
        highlight=False,
        markup=False,
    )
    return EXIT_OK


def _clear_demo_output(sink_dir: Path) -> None:
    """Remove what an earlier demo wrote there (only part files and the staging dir)."""
    if not sink_dir.is_dir():
        return
    for part in sink_dir.glob("part-*.parquet"):
        part.unlink()
    staging = sink_dir / "_staging"
    if staging.is_dir():
        for leftover in staging.iterdir():
            if leftover.is_file():
                leftover.unlink()


# -- status / reset ---------------------------------------------------------------------------


def _cmd_status(args: argparse.Namespace) -> int:
    from datum_sql.ops.render import print_status
    from datum_sql.ops.status import state_status

    doc = state_status(Path(args.state_dir))
    if args.json:
        print(json.dumps(doc, indent=1, default=str), flush=True)
    else:
        print_status(_console(), doc)
    for problem in doc["problems"]:
        _err(problem)
    return EXIT_FAILED if doc["problems"] else EXIT_OK


def _cmd_reset(args: argparse.Namespace) -> int:
    from datum_sql.ops.render import print_plan
    from datum_sql.ops.reset import reset

    plan = reset(Path(args.state_dir), args.query, args.to, apply=args.yes)
    print_plan(_console(), plan)
    if plan.delete and not plan.applied:
        _err("nothing changed; run again with --yes to do it")
        return EXIT_FAILED
    return EXIT_OK


# -- serve ------------------------------------------------------------------------------------


def _cmd_serve(args: argparse.Namespace) -> int:
    import logging

    from datum_sql.server import serve
    from datum_sql.server.jobs import Jobs

    server_log = logging.getLogger("datum_sql.server")
    if not server_log.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("datum-sql serve: %(levelname)s %(message)s"))
        server_log.addHandler(handler)
        server_log.setLevel(logging.INFO)
    kwargs: dict[str, Any] = {}
    if args.checkpoint_interval is not None:
        kwargs["checkpoint_interval"] = args.checkpoint_interval
    ctx = Context(args.state_dir, **kwargs)
    jobs = Jobs(Path(args.state_dir))
    handle = serve(
        ctx, args.listen, token_file=args.token_file, tls_cert=args.tls_cert,
        tls_key=args.tls_key, insecure_no_auth=args.insecure_no_auth, jobs=jobs,
        subscription_stall_limit=args.subscription_stall_limit,
        subscription_buffer_rows=args.subscription_buffer_rows,
    )  # fmt: skip
    try:
        resumed = jobs.resume(ctx)
        _info(f"serving Flight SQL on {handle.location}" + (
            f" (resumed {len(resumed)} job{'s' if len(resumed) != 1 else ''}: "
            f"{', '.join(resumed)})" if resumed else ""
        ))  # fmt: skip
        while True:
            time.sleep(0.5)
            jobs.prune()
    except (KeyboardInterrupt, _Interrupted) as exc:
        running = len(ctx.queries)
        _err(f"stopping: {running} running quer{'y' if running == 1 else 'ies'} to checkpoint")
        stopped = handle.stop()
        ctx.close()
        code = EXIT_OK if isinstance(exc, _Interrupted) else EXIT_INTERRUPTED
        if not stopped:
            # a call that never ends (a subscriber reading nothing) would hold the exit
            # too; the jobs are checkpointed and stopped: leave without waiting for it
            _err("stopped (a client call was still open)")
            sys.stdout.flush()
            os._exit(code)
        _err("stopped")
        return code


# -- output -----------------------------------------------------------------------------------


def _console(file: TextIO | None = None) -> Any:
    from rich.console import Console

    out = file if file is not None else sys.stdout
    tty = _isatty(out)
    # Never escape codes when not a terminal (even with FORCE_COLOR); no wrapping in a pipe.
    return Console(file=out, force_terminal=tty, width=None if tty else 1000, soft_wrap=not tty)


def _print_result(result: Any, fmt: str = "table") -> None:
    if result is None:
        return
    if isinstance(result, pa.Table):
        _print_table(result, fmt)
    elif isinstance(result, str):
        print(result)
    else:
        print(repr(result))


def _print_table(table: pa.Table, fmt: str = "table") -> None:
    out = sys.stdout
    if fmt == "csv":
        import pyarrow.csv as pacsv

        buf = io.BytesIO()
        pacsv.write_csv(table, buf)
        out.write(buf.getvalue().decode("utf-8"))
    elif fmt in ("json", "jsonl"):
        rows = table.to_pylist()
        if fmt == "json":
            out.write(json.dumps(rows, default=str, indent=1) + "\n")
        else:
            for row in rows:
                out.write(json.dumps(row, default=str) + "\n")
    else:
        console = _console(out)
        console.print(rich_table(table, MAX_TABLE_ROWS))
        console.print(footer(table.num_rows, MAX_TABLE_ROWS), highlight=False, markup=False)
    out.flush()


def _report(exc: BaseException, *, debug: bool, where: str | None = None) -> None:
    message = str(exc)
    if isinstance(exc, SqlError) and where and exc.line is not None:
        message = f"{where}:{exc.line}:{exc.column}: {message}"
    elif where:
        message = f"{where}: {message}"
    _err(message)
    if debug:
        traceback.print_exception(exc, file=sys.stderr)


def _info(message: str) -> None:
    print(message, flush=True)


def _err(message: str) -> None:
    print(f"datum-sql: {message}", file=sys.stderr, flush=True)


def _one_line(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _isatty(out: TextIO) -> bool:
    try:
        return bool(out.isatty())
    except (AttributeError, ValueError):
        return False


# -- signals ----------------------------------------------------------------------------------


@contextlib.contextmanager
def _signals() -> Iterator[None]:
    """Ctrl-C raises KeyboardInterrupt even when the parent ignored SIGINT (a background job);
    SIGTERM stops the same clean way."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def on_term(signum: int, frame: Any) -> None:
        raise _Interrupted()

    previous = {
        signal.SIGINT: signal.signal(signal.SIGINT, signal.default_int_handler),
        signal.SIGTERM: signal.signal(signal.SIGTERM, on_term),
    }
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


if __name__ == "__main__":
    raise SystemExit(main())
