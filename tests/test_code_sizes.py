"""No function over 100 lines and no class over 300 anywhere in the package (tests/code_sizes.py),
so no room grows back past what a reader can hold; `./dev check` prints the longest."""

from __future__ import annotations

import ast
import textwrap
from pathlib import Path

from tests import code_sizes


def test_no_function_or_class_in_the_package_is_over_the_limits() -> None:
    assert code_sizes.over_the_limits() == []


def test_every_package_folder_is_measured() -> None:
    names = {folder.name for folder in code_sizes.package_folders()}
    assert names == {"footnote", "graph", "tools", "ingest", "models", "store"}


def test_a_long_function_or_class_is_reported_with_where_it_is(tmp_path: Path) -> None:
    body = "\n".join(f"    x{i} = {i}" for i in range(code_sizes.FUNCTION_LINES))
    (tmp_path / "long.py").write_text(f"def long_one():\n{body}\n", encoding="utf-8")
    methods = "\n".join(
        textwrap.indent(f"def m{i}(self):\n" + "\n".join(["    pass"] * 9), "    ")
        for i in range(code_sizes.CLASS_LINES // 10)
    )
    (tmp_path / "big.py").write_text(f"class Big:\n{methods}\n", encoding="utf-8")
    found = code_sizes.over_the_limits([tmp_path])
    assert len(found) == 2
    assert any("long_one: 101 lines" in line for line in found)
    assert any("Big:" in line for line in found)
    ast.parse((tmp_path / "big.py").read_text(encoding="utf-8"))
