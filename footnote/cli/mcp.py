"""`footnote mcp`: the parser only; the server (and the MCP SDK) load when it runs."""

from __future__ import annotations

import argparse
from typing import Any

from footnote.cli.options import add_index_option


def cmd_mcp(args: argparse.Namespace) -> int:
    """Serve the tools over stdio as the caller the starting process named, until stdin ends."""
    import asyncio

    from footnote.graph.context import Context
    from footnote.mcp.stdio import serve_stdio
    from footnote.store.types import Caller

    context = Context(
        index_dir=args.index,
        model=args.model,
        model_base_url=args.base_url,
        embeddings=args.embeddings,
    )
    groups = [g for g in args.groups.split(",") if g] if args.groups else []
    caller = Caller.of_groups(groups, admin=args.admin)
    asyncio.run(serve_stdio(context, caller))
    return 0


def register(sub: Any) -> None:
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
    add_index_option(p)
    p.add_argument("--groups", default="", help="comma-separated access groups of the caller")
    p.add_argument("--admin", action="store_true", help="see every document; add the admin tools")
    p.add_argument("--model", default="", metavar="PROVIDER:MODEL", help="chat model for ask")
    p.add_argument("--base-url", default="", help="OpenAI-compatible server for --model")
    p.add_argument(
        "--embeddings", default="", metavar="PROVIDER:MODEL", help="must match the index"
    )
    p.set_defaults(func=cmd_mcp)
