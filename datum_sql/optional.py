"""Optional dependencies (pandas, polars, IPython, matplotlib), imported by the first call
that needs them: one helper for the query handle's DataFrames and the notebook layer. Imports
nothing from datum_sql.
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = ["require"]

#: import name -> what ``pip install`` installs for it (the package itself otherwise)
_INSTALL = {
    "IPython": "'datum-sql[notebook]'",
    "matplotlib": "'datum-sql[plot]'",
    "google": "'datum-sql[server]'",
}


def require(module: str, what: str) -> Any:
    """Import optional dependency ``module``, or raise ImportError saying that ``what``
    needs it and what to install."""
    try:
        return importlib.import_module(module)
    except ImportError:
        top = module.split(".")[0]
        raise ImportError(
            f"{what} needs {top}, which is not installed: pip install {_INSTALL.get(top, top)}"
        ) from None
