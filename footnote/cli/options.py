"""Options several commands share, declared once: the same flag has the same name, default
and help wherever it appears, and a setting the answer graph reads (`Context`) is described
only by its field in graph/context.py."""

from __future__ import annotations

import argparse
import os
from collections.abc import Sequence
from dataclasses import fields
from typing import Any

INDEX_HELP = "index directory or postgresql:// URL (default: %(default)s)"


def add_index_option(parser: argparse.ArgumentParser) -> None:
    """--index: the index a command reads or writes ($FOOTNOTE_INDEX, else .footnote/index)."""
    from footnote.store.backends import resolve_index

    parser.add_argument("--index", default=resolve_index(), help=INDEX_HELP)


def add_index_filter(parser: argparse.ArgumentParser) -> None:
    """--index for a command that reads records about many indexes: keeps those about one."""
    parser.add_argument("--index", default="", help="only the records about this index")


def comma_list(value: str) -> list[str] | None:
    """argparse type for a comma-separated list; empty means "not given"."""
    return value.split(",") if value else None


def _reranker(value: str) -> str:
    from footnote.cli.console import reranker_spec

    return reranker_spec(value)


CONTEXT_OPTIONS: dict[str, dict[str, Any]] = {
    "model": {"aliases": (), "metavar": "PROVIDER:MODEL", "env": "FOOTNOTE_MODEL"},
    "model_base_url": {"aliases": ("--base-url",), "env": "FOOTNOTE_MODEL_BASE_URL"},
    "embeddings": {"aliases": (), "metavar": "PROVIDER:MODEL"},
    "hyde": {"aliases": (), "action": "store_true"},
    "web_search": {"aliases": ("--web",), "action": "store_true"},
    "retrieve_k": {"aliases": ("-k",), "type": int, "metavar": "K"},
    "max_retrieval_attempts": {"aliases": ("--attempts",), "type": int, "metavar": "N"},
    "user_groups": {"aliases": ("--groups",), "type": comma_list, "metavar": "GROUPS"},
    "strict_groups": {"aliases": (), "action": "store_true"},
    "reranker": {"aliases": (), "type": _reranker, "metavar": "NAME"},
    "max_answer_tokens": {"aliases": (), "type": int, "metavar": "N"},
    "model_timeout_s": {"aliases": ("--timeout",), "type": float, "metavar": "SECONDS"},
    "planner": {"aliases": (), "choices": ("model", "rules")},
    "max_searches_per_turn": {"aliases": ("--max-searches",), "type": int, "metavar": "N"},
}
"""How each `Context` field the command line sets is typed; its help is the field's own
description. The flag is the field's name; `aliases` are the shorter names the command line
had before, still accepted."""


def context_descriptions() -> dict[str, str]:
    """Each `Context` field's description: the one text Studio's form, the docs and the
    command line's help all show."""
    from footnote.graph.context import Context  # light: no graph, no models

    return {f.name: f.metadata["description"] for f in fields(Context)}


def add_context_options(parser: argparse.ArgumentParser, names: Sequence[str]) -> None:
    """--FIELD-NAME for each named `Context` field (and its old aliases), stored under the
    field's name. A flag left out stores None (or its environment variable's value), so
    `context_settings` passes only what was given and the rest keeps `Context`'s defaults."""
    descriptions = context_descriptions()
    for name in names:
        spec = dict(CONTEXT_OPTIONS[name])
        aliases = spec.pop("aliases")
        env = spec.pop("env", None)
        default = (os.environ.get(env) or None) if env else None
        parser.add_argument(
            "--" + name.replace("_", "-"),
            *aliases,
            dest=name,
            default=default,
            help=descriptions[name].replace("%", "%%"),
            **spec,
        )


def context_settings(args: argparse.Namespace, names: Sequence[str]) -> dict[str, Any]:
    """The named `Context` fields the command line gave, by field name."""
    given = {name: getattr(args, name) for name in names}
    return {name: value for name, value in given.items() if value is not None}
