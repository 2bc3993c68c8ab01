"""The length of every function and class in the package, measured with `ast` over the source.

The project's limits are 100 lines for a function and 300 for a class, so that each unit can be
read alone. `./dev check` prints the longest of each (`python -m tests.code_sizes`) and
tests/test_code_sizes.py fails when one is over; nothing is imported or run to measure.
"""

from __future__ import annotations

import ast
import sys
import tomllib
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
FUNCTION_LINES = 100
CLASS_LINES = 300
FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)
CLASSES = (ast.ClassDef,)


def package_folders() -> list[Path]:
    """The folders that install as the `footnote` package (pyproject's package-dir)."""
    config = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
    folders = config["tool"]["setuptools"]["package-dir"].values()
    return sorted({REPO / folder for folder in folders})


def definitions(
    kinds: tuple[type[ast.AST], ...], folders: list[Path] | None = None
) -> Iterator[tuple[str, int]]:
    """`path:name` and length in lines (decorators aside) of every definition of these kinds."""
    for folder in folders or package_folders():
        for path in sorted(folder.rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, kinds):
                    assert isinstance(node, FUNCTIONS + CLASSES)
                    length = (node.end_lineno or node.lineno) - node.lineno + 1
                    yield f"{path.relative_to(folder.parent)}:{node.lineno} {node.name}", length


def over_the_limits(folders: list[Path] | None = None) -> list[str]:
    """Every function over FUNCTION_LINES and class over CLASS_LINES, as `where: N lines`."""
    too_long = [f"{w}: {n} lines" for w, n in definitions(FUNCTIONS, folders) if n > FUNCTION_LINES]
    too_long += [f"{w}: {n} lines" for w, n in definitions(CLASSES, folders) if n > CLASS_LINES]
    return too_long


def longest(kinds: tuple[type[ast.AST], ...], count: int = 3) -> list[tuple[str, int]]:
    return sorted(definitions(kinds), key=lambda row: (-row[1], row[0]))[:count]


def main() -> int:
    limits = (("functions", FUNCTIONS, FUNCTION_LINES), ("classes", CLASSES, CLASS_LINES))
    for label, kinds, limit in limits:
        for where, length in longest(kinds):
            print(f"longest {label} (limit {limit}): {length:4d} lines  {where}")
    too_long = over_the_limits()
    for line in too_long:
        print(f"over the limit: {line}", file=sys.stderr)
    return 1 if too_long else 0


if __name__ == "__main__":
    raise SystemExit(main())
