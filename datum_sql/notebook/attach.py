"""The notebook layer attaches itself to the query handle and the Context.

Installs the implementations of the handle's ``show()``, ``plot()``, ``explain()``,
``explain_progress()`` and notebook rendering, and of ``ctx.verify()``, into
:mod:`datum_sql.extensions`. Each one imports its module on its first call, so attaching
(done by ``import datum_sql``) loads nothing heavy.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from datum_sql import extensions

__all__ = ["install"]


def _show(query: Any, n: int = 20, *, interval: float = 0.5) -> Any:
    from datum_sql.notebook.live import show

    return show(query, n, interval=interval)


def _plot(query: Any) -> Any:
    from datum_sql.notebook.plots import metrics_plot

    return metrics_plot(query)


def _explain(query: Any) -> Any:
    from datum_sql.notebook.display import explain_query

    return explain_query(query)


def _explain_progress(query: Any) -> Any:
    from datum_sql.notebook.progress_report import explain_progress

    return explain_progress(query)


def _html(query: Any) -> str:
    from datum_sql.notebook.display import query_html

    return query_html(query)


def _display(query: Any) -> None:
    from datum_sql.notebook.live import display_query

    display_query(query)


def _verify(ctx: Any, sql: str, **options: Any) -> Any:
    from datum_sql.notebook.verify import verify

    return verify(ctx, sql, **options)


IMPLEMENTATIONS: dict[str, Callable[..., Any]] = {
    "query.show": _show,
    "query.plot": _plot,
    "query.explain": _explain,
    "query.explain_progress": _explain_progress,
    "query.html": _html,
    "query.display": _display,
    "context.verify": _verify,
}


def install() -> None:
    """Install every implementation above (idempotent)."""
    for name, fn in IMPLEMENTATIONS.items():
        extensions.install(name, fn)
