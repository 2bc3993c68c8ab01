"""`footnote settings`: every setting of the answer graph, from the one place it is described.

The same `Context` field descriptions fill LangGraph Studio's form, `footnote ask --help` and
docs/settings.md (written by `footnote settings --markdown`; a test keeps the file current)."""

from __future__ import annotations

import argparse
import json
import textwrap
from dataclasses import asdict
from typing import Any

from footnote.cli.options import CONTEXT_OPTIONS

MARKDOWN_HEADER = """\
# Settings of the answer graph

Each setting is a field of the graph's runtime context (`graph/context.py`), set per run:
`context={...}` when invoking the compiled graph, the context form in LangGraph Studio, the
`context` of a served run, or the `footnote ask` flag shown. Values are checked, never
coerced: a wrong type or a value out of range fails the run with the field named. A served
caller may not set `user_groups`, `strict_groups` or `admin`: who is asking comes from
authentication. This page is written by `footnote settings --markdown`.
"""


def ask_flags(name: str) -> list[str]:
    """The `footnote ask` flags that set a field: its own name first, then older aliases."""
    if name not in CONTEXT_OPTIONS:
        return []
    return ["--" + name.replace("_", "-"), *CONTEXT_OPTIONS[name]["aliases"]]


def _rows() -> list[dict[str, Any]]:
    from footnote.graph.context import settings_reference  # light: no graph, no models

    return [{**asdict(s), "ask_flags": ask_flags(s.name)} for s in settings_reference()]


def markdown() -> str:
    """docs/settings.md: one section per setting, in the context's own order."""
    parts = [MARKDOWN_HEADER]
    for row in _rows():
        facts = [f"{row['kind']}", f"default `{row['default']}`"]
        if row["allowed"]:
            facts.append(f"allowed {row['allowed']}")
        if row["ask_flags"]:
            facts.append("`footnote ask` " + ", ".join(f"`{f}`" for f in row["ask_flags"]))
        parts.append(f"## `{row['name']}`\n\n{'; '.join(facts)}.\n\n{row['description']}\n")
    return "\n".join(parts)


def cmd_settings(args: argparse.Namespace) -> int:
    rows = _rows()
    if args.json:
        print(json.dumps(rows, indent=2))
    elif args.markdown:
        print(markdown(), end="")
    else:
        for row in rows:
            flags = f"  [{', '.join(row['ask_flags'])}]" if row["ask_flags"] else ""
            allowed = f", {row['allowed']}" if row["allowed"] else ""
            print(f"{row['name']} = {row['default']}  ({row['kind']}{allowed}){flags}")
            print(textwrap.fill(row["description"], 88, initial_indent="    ",
                                subsequent_indent="    "))  # fmt: skip
    return 0


def register(sub: Any) -> None:
    p = sub.add_parser(
        "settings",
        help="every setting of the answer graph: default, range, flag and what it does",
        description=(
            "List the answer graph's settings (its runtime context): each one's type, "
            "default, allowed range, the `footnote ask` flag that sets it, and what it does. "
            "The same descriptions fill LangGraph Studio's form."
        ),
        epilog="examples:\n  footnote settings\n  footnote settings --json | jq '.[].name'\n"
        "  footnote settings --markdown > docs/settings.md",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    shape = p.add_mutually_exclusive_group()
    shape.add_argument("--json", action="store_true", help="one JSON list, for scripts")
    shape.add_argument("--markdown", action="store_true", help="the page docs/settings.md holds")
    p.set_defaults(func=cmd_settings)
