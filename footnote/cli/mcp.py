"""`footnote mcp`: the parser only; the server (and the MCP SDK) load when it runs."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any


def _run(args: argparse.Namespace) -> int:
    from footnote.mcp.stdio import cmd_mcp

    return cmd_mcp(args)


def add_command(sub: Any, default_index: Callable[[], str]) -> None:
    p = sub.add_parser(
        "mcp",
        help="serve Footnote's MCP tools over stdio (for a desktop client or an editor)",
        description=(
            "Speak MCP on stdin/stdout: the tools search, ask, list_sources and fetch over "
            "--index, as a caller in --groups (`everyone` is always added). With --admin, "
            "also add_source, remove_source and sync_sources. Served, the same tools are at "
            "/mcp of `footnote serve`."
        ),
    )
    p.add_argument(
        "--index",
        default=default_index(),
        help="index directory or postgresql:// URL (default: %(default)s)",
    )
    p.add_argument("--groups", default="", help="comma-separated access groups of the caller")
    p.add_argument("--admin", action="store_true", help="see every document; add the admin tools")
    p.add_argument("--model", default="", metavar="PROVIDER:MODEL", help="chat model for ask")
    p.add_argument("--base-url", default="", help="OpenAI-compatible server for --model")
    p.add_argument(
        "--embeddings", default="", metavar="PROVIDER:MODEL", help="must match the index"
    )
    p.set_defaults(func=_run)
