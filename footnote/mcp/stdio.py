"""`footnote mcp --index PATH`: Footnote's MCP tools over stdio, for a desktop client or an
editor that starts Footnote as a subprocess.

The process that starts it is an embedding host: trusted, like the command line. It says
whose access the tools use (`--groups`, `--admin`, as `footnote ask` does) and which index
they read; the tools answer in this process, with the answer graph's conversations kept in
memory for `ask`'s follow-ups while the process lives. A tool's arguments still cannot
choose another index, groups or admin: those belong to whoever started the process.
"""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import replace
from typing import Any

from langchain_core.messages import HumanMessage
from langgraph.checkpoint.memory import InMemorySaver

from footnote.graph.context import Context
from footnote.graph.graph import make_graph
from footnote.graph.indexer import IndexerContext, IndexerInput
from footnote.graph.indexer import graph as indexer_graph
from footnote.graph.state import InputState
from footnote.mcp.tools import FootnoteTools, McpSession, ToolRefused, make_server
from footnote.store.types import Caller

DEFAULT_INDEX_NAME = "default"


class LocalAnswerer:
    """`ask` and the admin tools in this process, over the host's one index."""

    def __init__(self, context: Context) -> None:
        self.context = context
        self.graph = make_graph(checkpointer=InMemorySaver(), name="footnote mcp")

    async def answer(
        self, session: McpSession, question: str, thread_id: str | None, index: str
    ) -> dict[str, Any]:
        thread = thread_id or str(uuid.uuid4())
        caller = session.caller  # the graph's context carries it as the host would say it
        context = replace(
            self.context, user_groups=sorted(caller.groups), strict_groups=True, admin=caller.admin
        )

        def run() -> dict[str, Any]:
            return dict(
                self.graph.invoke(
                    InputState(messages=[HumanMessage(question)]),
                    {"configurable": {"thread_id": thread}, "run_name": "footnote mcp ask"},
                    context=context,
                )
            )

        output = await asyncio.to_thread(run)
        return {**output, "thread_id": thread}

    async def manage(
        self, session: McpSession, request: dict[str, Any], index: str
    ) -> dict[str, Any]:
        context = IndexerContext(
            index_dir=self.context.index_dir, embeddings=self.context.embeddings
        )
        output: dict[str, Any] = await asyncio.to_thread(
            lambda: dict(indexer_graph.invoke(IndexerInput(**request), context=context))
        )
        return dict(output.get("result") or {})


def local_tools(context: Context) -> FootnoteTools:
    def index_location(name: str) -> str:
        if name != DEFAULT_INDEX_NAME:
            raise ToolRefused(
                f"this server has one index, {DEFAULT_INDEX_NAME!r}: the host chose it "
                "(footnote mcp --index)"
            )
        return context.index_dir

    return FootnoteTools(
        index_location,
        LocalAnswerer(context),
        embeddings=context.embeddings,
        stage=context.search_stage,
    )


async def serve_stdio(context: Context, caller: Caller) -> None:
    from mcp.server.stdio import stdio_server

    session = McpSession(caller)
    server = make_server(local_tools(context), lambda _server: session)
    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())
