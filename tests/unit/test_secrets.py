"""Secret option values never appear in echoed SQL, errors, tracebacks, reprs or the CLI."""

from __future__ import annotations

import subprocess
import sys
import traceback
from pathlib import Path

import pytest

import datum_sql as ds
from datum_sql.redaction import REDACTED, Secret, redact_sql

SECRET = "hunter2"

KAFKA = (
    "CREATE SOURCE k (a INT) WITH (connector = 'kafka', topic = 't', "
    "properties.bootstrap.server = '127.0.0.1:1', properties.security.protocol = 'SASL_PLAINTEXT', "
    "properties.sasl.mechanism = 'PLAIN', properties.sasl.username = 'u', "
    "properties.sasl.password = 'hunter2') FORMAT PLAIN ENCODE JSON"
)

#: (SQL text, the same text with its secrets masked)
MASKED = [
    ("properties.sasl.password = 'hunter2'", "properties.sasl.password = '******'"),
    ("properties.sasl.password='it''s2'", "properties.sasl.password='******'"),
    ("\"properties.sasl.password\" = 'hunter2'", "\"properties.sasl.password\" = '******'"),
    ("properties.sasl.password = hunter2 oops", "properties.sasl.password = ****** oops"),
    ("properties.sasl.password = 'hunter2", "properties.sasl.password = '******'"),
    ("properties.ssl.key.password = E'hunter2'", "properties.ssl.key.password = '******'"),
    (
        'properties.sasl.jaas.config = \'x required username="u" password="hunter2";\'',
        "properties.sasl.jaas.config = '******'",
    ),
    ("topic = 'password', a = 'b'", "topic = 'password', a = 'b'"),
    ("WHERE price = 5", "WHERE price = 5"),
]


@pytest.mark.parametrize(("sql", "masked"), MASKED)
def test_redact_sql(sql: str, masked: str) -> None:
    assert redact_sql(sql) == masked


def test_a_syntax_error_masks_the_statement_and_keeps_the_caret_on_the_token() -> None:
    ctx = ds.Context(state_dir=None)
    bad = KAFKA.replace("'hunter2')", "'hunter2' oops)")
    with pytest.raises(ds.SqlError) as info:
        ctx.execute(bad)
    err = info.value
    shown = "".join(traceback.format_exception(err))
    assert SECRET not in shown and SECRET not in (err.sql or "")
    assert REDACTED in str(err)
    excerpt, caret = str(err).splitlines()[-2:]
    assert excerpt[caret.index("^") :].startswith("oops")
    assert err.text == "oops"


def test_a_token_inside_a_secret_is_masked_too() -> None:
    ctx = ds.Context(state_dir=None)
    with pytest.raises(ds.SqlError) as info:
        ctx.execute(KAFKA.replace("'hunter2')", "'hunter2"))
    assert SECRET not in str(info.value) and SECRET not in repr(info.value.text)


def test_catalog_entries_hold_secrets_wrapped(tmp_path: Path) -> None:
    ctx = ds.Context(state_dir=tmp_path)
    ctx.execute(KAFKA)
    entry = ctx.catalog.get("k")
    assert SECRET not in str(vars(entry)) and SECRET not in repr(entry)
    assert isinstance(entry.options["properties.sasl.password"], Secret)
    # The connector still gets the value, and so does the owner-only catalog file.
    assert ctx._spec(entry).options["properties.sasl.password"] == SECRET
    assert SECRET in (tmp_path / "catalog.json").read_text()
    again = ds.Context(state_dir=tmp_path).catalog.get("k")
    assert SECRET not in str(vars(again))
    assert again.options["properties.sasl.password"].reveal() == SECRET


def test_show_and_explain_mask_secrets() -> None:
    ctx = ds.Context(state_dir=None)
    ctx.execute(KAFKA)
    assert SECRET not in str(ctx.execute("SHOW SOURCES").to_pylist())
    assert SECRET not in ctx.explain("SELECT a FROM k WHERE a > 1")


def test_cli_run_with_a_syntax_error_prints_no_secret(tmp_path: Path) -> None:
    script = tmp_path / "bad.sql"
    script.write_text(KAFKA.replace("'hunter2')", "'hunter2' oops)") + ";\n")
    for extra in ([], ["--debug"]):
        out = subprocess.run(
            [sys.executable, "-m", "datum_sql.cli", "run", str(script), "--state-dir",
             str(tmp_path / "state"), *extra],
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert out.returncode != 0
        assert "Syntax error" in out.stderr
        assert SECRET not in out.stdout + out.stderr
