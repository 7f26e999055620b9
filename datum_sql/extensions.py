"""Extensions: what a layer above installs on the engine's query handle and the Context.

``q.show()``, ``q.explain()``, ``q.plot()``, ``q.explain_progress()``, a handle's notebook
rendering and ``ctx.verify()`` are implemented by the notebook layer, which imports the
Context and the handle; they must not import it back (imports run one way). So they look
the implementation up here by name, and ``datum_sql/notebook/attach.py`` installs every
name when ``datum_sql`` is imported. Imports nothing from datum_sql but the errors.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from datum_sql.errors import DatumError

__all__ = ["extension", "install"]

_INSTALLED: dict[str, Callable[..., Any]] = {}


def install(name: str, fn: Callable[..., Any]) -> None:
    """Make ``fn`` the implementation of extension ``name`` (a later install replaces it)."""
    _INSTALLED[name] = fn


def extension(name: str) -> Callable[..., Any]:
    """The installed implementation of ``name``; a clear error when none is."""
    try:
        return _INSTALLED[name]
    except KeyError:
        raise DatumError(
            f"{name} is provided by datum_sql.notebook, which has not attached itself: "
            "import datum_sql (the package) before using it"
        ) from None
