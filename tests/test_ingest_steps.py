"""The ingest run stays a short conductor over named steps (gather, chunk, embed, publish),
so it does not grow back into one function sharing dozens of local names. Measured with
`ast` over the source, like tests/test_layers.py, so nothing is imported or run."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

INGEST = Path(__file__).resolve().parent.parent / "ingest"
CONDUCTOR_LINES = 40
"""`update_index`, signature and docstring included: about one line per step."""
FUNCTION_LINES = 100
CLASS_LINES = 300
"""The project's limits on any function and any class."""


def definitions(kinds: tuple[type[ast.AST], ...]) -> Iterator[tuple[str, int]]:
    """`path:name` and length in lines of every definition of these kinds in ingest/."""
    for path in sorted(INGEST.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, kinds):
                assert isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)
                length = (node.end_lineno or node.lineno) - node.lineno + 1
                yield f"{path.relative_to(INGEST.parent)}:{node.name}", length


def test_update_index_is_a_short_conductor() -> None:
    lengths = dict(definitions((ast.FunctionDef,)))
    assert lengths["ingest/pipeline.py:update_index"] <= CONDUCTOR_LINES


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


def test_no_function_or_class_in_ingest_is_over_the_limits() -> None:
    functions = definitions((ast.FunctionDef, ast.AsyncFunctionDef))
    classes = definitions((ast.ClassDef,))
    too_long = [f"{name}: {n} lines" for name, n in functions if n > FUNCTION_LINES]
    too_long += [f"{name}: {n} lines" for name, n in classes if n > CLASS_LINES]
    assert too_long == []
