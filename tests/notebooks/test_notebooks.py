"""Every notebook in notebooks/ runs top to bottom in a fresh kernel, and is saved clean.

The kernel is this interpreter (``sys.executable``, i.e. the project's virtual environment),
whatever kernel specs the machine has or lacks: the test writes its own ``python3`` kernel
spec into a temporary directory and gives the kernel manager only that directory. Each
notebook runs in its own temporary working directory; a failing cell fails the test with
the cell's source and traceback.
"""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path

import nbformat
import pytest
from jupyter_client.kernelspec import KernelSpecManager
from jupyter_client.manager import AsyncKernelManager
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
TIMEOUT_S = 300
KERNEL = "python3"
ANSI = re.compile(r"\x1b\[[0-9;]*m")
#: Appended to the in-memory copy only: proves which interpreter the kernel runs.
PROBE = "import sys\nprint(sys.prefix, end='')"


def _ids(path: Path) -> str:
    return path.name


def test_there_are_notebooks() -> None:
    assert NOTEBOOKS, f"no notebooks in {ROOT / 'notebooks'}"


def _kernel_manager(tmp: Path) -> AsyncKernelManager:
    """A kernel manager that can only start this interpreter as ``python3``."""
    spec_dir = tmp / "kernels" / KERNEL
    spec_dir.mkdir(parents=True)
    spec = {
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": f"Python 3 ({sys.prefix})",
        "language": "python",
    }
    (spec_dir / "kernel.json").write_text(json.dumps(spec))
    specs = KernelSpecManager(kernel_dirs=[str(spec_dir.parent)], ensure_native_kernel=False)
    return AsyncKernelManager(
        kernel_name=KERNEL,
        kernel_spec_manager=specs,
        connection_file=str(tmp / "connection.json"),
    )


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=_ids)
def test_notebook_is_saved_without_outputs(notebook: Path) -> None:
    nb = nbformat.read(notebook, as_version=4)
    nbformat.validate(nb)
    dirty = [
        i
        for i, cell in enumerate(nb.cells)
        if cell.cell_type == "code" and (cell.outputs or cell.execution_count is not None)
    ]
    assert not dirty, (
        f"{notebook.name}: cells {dirty} are saved with outputs or execution counts; "
        "clear them before committing (e.g. jupyter nbconvert --clear-output --inplace)"
    )


@pytest.mark.timeout(TIMEOUT_S)
@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=_ids)
def test_notebook_runs(notebook: Path, tmp_path: Path) -> None:
    nb = nbformat.read(notebook, as_version=4)
    nb.cells.append(nbformat.v4.new_code_cell(PROBE))
    workdir = tmp_path / "work"
    workdir.mkdir()
    env = {
        **os.environ,
        "IPYTHONDIR": str(tmp_path / "ipython"),
        "PYDEVD_DISABLE_FILE_VALIDATION": "1",
    }
    client = NotebookClient(
        nb,
        km=_kernel_manager(tmp_path / "jupyter"),
        kernel_name=KERNEL,
        timeout=TIMEOUT_S,
        startup_timeout=120,
        resources={"metadata": {"path": str(workdir)}},
    )
    failure = None
    try:
        client.execute(env=env)
    except CellExecutionError as exc:
        failure = ANSI.sub("", str(exc))
    if failure is not None:
        pytest.fail(f"{notebook.name}: a cell failed\n{failure}", pytrace=False)
    probe = nb.cells[-1].outputs
    printed = "".join(o.get("text", "") for o in probe if o.get("output_type") == "stream")
    assert printed == sys.prefix, f"the kernel ran {printed!r}, not this interpreter"
