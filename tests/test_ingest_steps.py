"""The ingest run stays a short conductor over named steps (gather, chunk, embed, publish),
so it does not grow back into one function sharing dozens of local names. Measured with
`ast` over the source (tests/code_sizes.py), so nothing is imported or run."""

from __future__ import annotations

import ast
from pathlib import Path

from tests import code_sizes

INGEST = Path(__file__).resolve().parent.parent / "ingest"
CONDUCTOR_LINES = 40
"""`update_index`, signature and docstring included: about one line per step."""


def test_update_index_is_a_short_conductor() -> None:
    lengths = {
        where.split(" ")[1]: n
        for where, n in code_sizes.definitions((ast.FunctionDef,), [INGEST])
        if where.startswith("ingest/pipeline.py:")
    }
    assert lengths["update_index"] <= CONDUCTOR_LINES


def test_update_index_takes_an_options_object_not_a_keyword_per_setting() -> None:
    tree = ast.parse((INGEST / "pipeline.py").read_text(encoding="utf-8"))
    conductor = next(
        node
        for node in tree.body
        if isinstance(node, ast.FunctionDef) and node.name == "update_index"
    )
    arguments = conductor.args
    names = [a.arg for a in [*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs]]
    assert names == ["index_dir", "roots", "options", "scope"]
