"""Run a coroutine to completion from synchronous code, also inside a running loop (Jupyter).

Imports nothing from datum_sql: the Context and its helpers (``sample``) share it.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

__all__ = ["run_async"]


def run_async(coro: Any) -> Any:
    """The result of ``coro``: run on this thread, or on a fresh one when this thread's
    loop is already running (a notebook cell)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    result: dict[str, Any] = {}

    def runner() -> None:
        try:
            result["value"] = asyncio.run(coro)
        except BaseException as exc:
            result["error"] = exc

    t = threading.Thread(target=runner)
    t.start()
    t.join()
    if "error" in result:
        raise result["error"]
    return result.get("value")
