"""The quickstart notebook runs top to bottom on the offline default and is committed clean."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import nbformat
import pytest
from jupyter_client import KernelManager
from nbclient import NotebookClient

REPO = Path(__file__).resolve().parents[1]
QUICKSTART = REPO / "notebooks" / "quickstart.ipynb"
KERNEL = "python3"


def read_quickstart() -> nbformat.NotebookNode:
    return nbformat.read(QUICKSTART, as_version=4)


def test_committed_notebook_has_no_outputs() -> None:
    nb = read_quickstart()
    nbformat.validate(nb)
    code = [cell for cell in nb.cells if cell.cell_type == "code"]

    assert code
    for cell in code:
        assert cell.outputs == [], cell.source
        assert cell.execution_count is None, cell.source


def test_kernel_runs_this_interpreter() -> None:
    """The `python3` kernel must be this environment's Python, where Footnote is installed."""
    command = KernelManager(kernel_name=KERNEL).format_kernel_cmd()

    assert os.path.samefile(command[0], sys.executable), command


@pytest.mark.integration
def test_quickstart_runs_and_answers_the_worked_example() -> None:
    nb = read_quickstart()
    client = NotebookClient(
        nb, kernel_name=KERNEL, timeout=300, resources={"metadata": {"path": str(REPO)}}
    )

    client.execute()

    (worked,) = [cell for cell in nb.cells if "worked-example" in cell.metadata.get("tags", [])]
    text = "".join(out.get("text", "") for out in worked.outputs if out.output_type == "stream")
    assert "90 days" in text
    errors = [
        out for cell in nb.cells for out in cell.get("outputs", []) if out.output_type == "error"
    ]
    assert not errors
