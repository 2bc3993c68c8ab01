"""The package's layers import downward only and no module imports itself round a loop.

    store < models < ingest < tools < graph < app (the modules of footnote/ itself)

and inside the app layer, each package only imports those below it:

    footnote (the public API's lazy facade) < feedback < evaluation < mcp < server < cli

Imports are read with `ast` from every module, including imports inside functions (a lazy
import is still a dependency), so the check needs no import side effects. An import that
ends at a package's `__init__` is an edge like any other (it runs that module), except from
inside the package itself, which Python imports first whatever the module asks for.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LAYERS = ["store", "models", "ingest", "tools", "graph", "app"]
"""Lowest first: a module may import from its own layer and the layers before it."""
FOLDERS = dict(
    zip(LAYERS, ["store", "models", "ingest", "tools", "graph", "footnote"], strict=True)
)
"""Where each layer's modules live in the repository."""


def package_modules() -> dict[str, Path]:
    """Every module of the installed package by its dotted name (`footnote.store.files`)."""
    modules: dict[str, Path] = {}
    for layer, folder in FOLDERS.items():
        prefix = ["footnote"] if layer == "app" else ["footnote", layer]
        for path in sorted((ROOT / folder).rglob("*.py")):
            parts = list(path.relative_to(ROOT / folder).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            modules[".".join(prefix + parts)] = path
    return modules


MODULES = package_modules()


APP_ORDER = ["footnote", "feedback", "evaluation", "mcp", "server", "cli"]
"""The app layer's packages, lowest first (`footnote`: the root package's own modules)."""


def layer_of(module: str) -> str:
    parts = module.split(".")
    if len(parts) > 1 and parts[1] in FOLDERS and parts[1] != "app":
        return parts[1]
    return "app"


def app_package_of(module: str) -> str:
    """Which app package a module of the app layer belongs to (`footnote` for the root's)."""
    parts = module.split(".")
    return parts[1] if len(parts) > 2 or (len(parts) == 2 and parts[1] in APP_ORDER) else "footnote"


def imported_names(path: Path, module: str) -> Iterator[str]:
    """Dotted names a module imports, anywhere in it; `from a import b` gives `a` and `a.b`."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                kept = parts[: len(parts) - node.level + 1]
                base = ".".join(kept + ([base] if base else []))
            yield base
            yield from (f"{base}.{alias.name}" for alias in node.names)


def resolve(name: str) -> str | None:
    """The package module a dotted name lives in (a module, or the one defining a name)."""
    while name:
        if name in MODULES:
            return name
        name = name.rpartition(".")[0]
    return None


def dependencies() -> dict[str, set[str]]:
    """Module -> package modules it imports, `__init__`s included, but for the packages a
    module is inside (Python runs those before the module whatever it imports)."""
    graph: dict[str, set[str]] = {m: set() for m in MODULES}
    for module, path in MODULES.items():
        for name in imported_names(path, module):
            target = resolve(name)
            if target is None or target == module:
                continue
            if MODULES[target].name == "__init__.py" and module.startswith(target + "."):
                continue
            graph[module].add(target)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start in graph:
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_every_layer_has_modules() -> None:
    assert {layer_of(m) for m in MODULES} == set(LAYERS)
    assert "footnote.store.files" in MODULES and "footnote.cli.main" in MODULES


def test_no_import_cycles() -> None:
    assert cycles(dependencies()) == []


def test_layers_import_downward_only() -> None:
    upward = [
        f"{module} ({layer_of(module)}) imports {target} ({layer_of(target)})"
        for module, targets in dependencies().items()
        for target in sorted(targets)
        if LAYERS.index(layer_of(target)) > LAYERS.index(layer_of(module))
    ]
    assert upward == []


def test_app_packages_import_downward_only() -> None:
    """cli may import any app package, server mcp, evaluation and feedback, and so on down:
    no two app packages import each other."""
    upward = [
        f"{module} imports {target}"
        for module, targets in dependencies().items()
        if layer_of(module) == "app"
        for target in sorted(targets)
        if layer_of(target) == "app"
        and APP_ORDER.index(app_package_of(target)) > APP_ORDER.index(app_package_of(module))
    ]
    assert upward == []


def test_the_checks_catch_what_they_look_for() -> None:
    """The walk sees imports inside functions, and a planted loop is reported."""
    names = set(imported_names(MODULES["footnote.store.backends"], "footnote.store.backends"))
    assert "footnote.store.postgres.PostgresWriter" in names  # imported inside a function
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []
    graph = dependencies()
    assert "footnote.ingest" in graph["footnote.graph.indexer"]  # `from footnote.ingest import`
    assert "footnote.ingest.parsers" not in graph["footnote.ingest.parsers.epub"]  # its own
    assert app_package_of("footnote.cli.main") == "cli" and app_package_of("footnote") == "footnote"


def documented_layout() -> dict[str, str]:
    """docs/layout.md's block: folder (`footnote/cli/`) -> the text that describes it."""
    layout = (ROOT / "docs" / "layout.md").read_text(encoding="utf-8")
    block = layout.split("```", 2)[1]
    entries: dict[str, str] = {}
    folder = ""
    for line in block.splitlines():
        if line[:1].strip():  # a new folder's entry starts in the first column
            folder, _, line = line.partition(" ")
        if folder:
            entries[folder] = entries.get(folder, "") + " " + line
    return entries


def test_documented_layout_names_every_module_and_only_real_ones() -> None:
    """docs/layout.md is kept true: each module is named under its folder (or under the
    folder above, for a sub-folder it lists), and each `name.py` it names exists there."""
    entries = documented_layout()
    missing = []
    for path in MODULES.values():
        if path.name == "__init__.py":
            continue
        folder = path.parent.relative_to(ROOT)
        while f"{folder.as_posix()}/" not in entries and folder != Path("."):
            folder = folder.parent
        text = entries.get(f"{folder.as_posix()}/", "")
        if not re.search(rf"\b{re.escape(path.stem)}\b", text):
            missing.append(str(path.relative_to(ROOT)))
    assert missing == [], f"modules docs/layout.md does not name: {missing}"
    invented = [
        f"{folder}{name}"
        for folder, text in entries.items()
        for name in re.findall(r"\b(\w+\.py)\b", text)
        if not (ROOT / folder / name).is_file()
    ]
    assert invented == [], f"modules docs/layout.md names that do not exist: {invented}"
