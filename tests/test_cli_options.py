"""One command line: every option that sets a `Context` field says what the field's own
description says (one text for the CLI, Studio's form and the docs), the shorter flag names
users already type still parse to the same setting, every command that reads or writes an
index takes the same --index, and no module outside footnote/cli declares options."""

from __future__ import annotations

import argparse
import ast
from dataclasses import fields
from pathlib import Path

import pytest

from footnote.cli.ask import ANSWER_SETTINGS
from footnote.cli.main import build_parser
from footnote.cli.options import INDEX_HELP, context_settings
from footnote.graph.context import Context

ROOT = Path(__file__).resolve().parent.parent
PACKAGE_FOLDERS = ["footnote", "graph", "ingest", "tools", "store", "models"]

OLD_FLAGS = {
    "--base-url": ("model_base_url", "http://127.0.0.1:8080/v1", "http://127.0.0.1:8080/v1"),
    "--web": ("web_search", None, True),
    "-k": ("retrieve_k", "3", 3),
    "--attempts": ("max_retrieval_attempts", "4", 4),
    "--groups": ("user_groups", "hr,it", ["hr", "it"]),
    "--timeout": ("model_timeout_s", "7.5", 7.5),
    "--max-searches": ("max_searches_per_turn", "2", 2),
}
"""Each flag `ask` had before its options were named after the Context fields: the field it
sets, a value as typed (None: a switch) and the value the Context gets."""


def subcommands() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    (commands,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(commands.choices)


def options_by_dest(parser: argparse.ArgumentParser) -> dict[str, argparse.Action]:
    return {action.dest: action for action in parser._actions if action.option_strings}


@pytest.mark.parametrize("command", ["ask", "chat"])
def test_each_context_flag_is_named_after_its_field_and_helps_with_its_description(
    command: str,
) -> None:
    descriptions = {f.name: f.metadata["description"] for f in fields(Context)}
    actions = options_by_dest(subcommands()[command])
    for name in ANSWER_SETTINGS:
        action = actions[name]
        assert action.option_strings[0] == "--" + name.replace("_", "-"), name
        assert action.help is not None
        assert action.help.replace("%%", "%") == descriptions[name], name


@pytest.mark.parametrize("flag", sorted(OLD_FLAGS))
def test_old_flag_names_still_set_the_same_context_field(flag: str) -> None:
    field_name, typed, expected = OLD_FLAGS[flag]
    argv = ["ask", "why?", flag] + ([typed] if typed is not None else [])
    args = build_parser().parse_args(argv)
    assert getattr(args, field_name) == expected
    assert context_settings(args, ANSWER_SETTINGS)[field_name] == expected
    Context(index_dir=args.index, **context_settings(args, ANSWER_SETTINGS))  # valid


def test_flags_left_out_keep_the_context_defaults() -> None:
    args = build_parser().parse_args(["ask", "why?"])
    given = context_settings(args, ANSWER_SETTINGS)
    assert set(given) <= {"model", "model_base_url"}  # only what the environment sets


def test_every_index_option_is_the_shared_one() -> None:
    """Same flag, same help wherever --index names the index a command works on; `audit`
    filters records by index and `eval` builds its own, so theirs mean something else."""
    checked = 0
    for name, parser in subcommands().items():
        for sub in [parser, *nested_subcommands(parser)]:
            index = options_by_dest(sub).get("index")
            if index is None or name in ("audit", "eval"):
                continue
            assert index.help == INDEX_HELP, name
            checked += 1
    assert checked >= 12


def nested_subcommands(parser: argparse.ArgumentParser) -> list[argparse.ArgumentParser]:
    return [
        sub
        for action in parser._actions
        if isinstance(action, argparse._SubParsersAction)
        for sub in action.choices.values()
    ]


def test_only_the_command_line_imports_argparse() -> None:
    importers = []
    for folder in PACKAGE_FOLDERS:
        for path in sorted((ROOT / folder).rglob("*.py")):
            relative = path.relative_to(ROOT)
            if relative.parts[:2] == ("footnote", "cli"):
                continue
            tree = ast.parse(path.read_text(encoding="utf-8"))
            for node in ast.walk(tree):
                names = (
                    [alias.name for alias in node.names]
                    if isinstance(node, ast.Import)
                    else [node.module or ""]
                    if isinstance(node, ast.ImportFrom)
                    else []
                )
                if any(name.split(".")[0] == "argparse" for name in names):
                    importers.append(str(relative))
    assert importers == []
