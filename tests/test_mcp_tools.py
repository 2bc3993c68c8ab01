"""The MCP tools' own rules, in process: which tools a caller sees, which arguments are
refused and why, and that fetch and search answer only with what the caller may read."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from footnote.mcp.tools import (
    TOOLS,
    FetchResult,
    FootnoteTools,
    McpSession,
    SearchResult,
    ToolRefused,
    chunk_source,
    one_line,
    visible_tools,
)
from footnote.store.types import Caller


class NoAnswers:
    async def answer(self, *args: Any) -> dict[str, Any]:
        raise AssertionError("not asked")

    async def manage(self, *args: Any) -> dict[str, Any]:
        raise AssertionError("not asked")


def tools_over(index: Path) -> FootnoteTools:
    def location(name: str) -> str:
        if name != "default":
            raise ToolRefused("no such index")
        return str(index)

    return FootnoteTools(location, NoAnswers())


def call(tools: FootnoteTools, session: McpSession, name: str, **arguments: Any) -> Any:
    return asyncio.run(tools.call(session, name, arguments))


READER = McpSession(Caller(groups=frozenset({"everyone"})))
ADMIN = McpSession(Caller(groups=frozenset({"everyone"}), admin=True))


def test_admin_tools_are_visible_to_admins_only() -> None:
    admin_only = {t.name for t in TOOLS if t.admin_only}
    assert admin_only == {"add_source", "remove_source", "sync_sources"}
    assert not admin_only & {t.name for t in visible_tools(READER.caller)}
    assert admin_only <= {t.name for t in visible_tools(ADMIN.caller)}
    for tool in TOOLS:
        definition = tool.definition()
        assert definition.outputSchema and definition.inputSchema["additionalProperties"] is False


@pytest.mark.parametrize(
    ("name", "arguments", "reason"),
    [
        ("search", {"query": "keys", "user_groups": ["hr"]}, "credentials"),
        ("search", {"query": "keys", "admin": True}, "credentials"),
        ("search", {"query": "keys", "index_dir": "/tmp"}, "by name"),
        ("search", {"query": "keys", "index": "other"}, "no such index"),
        ("search", {"query": ""}, "'query'"),
        ("search", {"query": "keys", "k": 0}, "'k'"),
        ("search", {"query": "keys", "filters": {"team": "x"}}, "no argument 'filters.team'"),
        ("ask", {"question": "hi", "thread_id": "../../etc"}, "thread_id"),
        ("sync_sources", {}, "no tool named"),
        ("nope", {}, "no tool named"),
    ],
)
def test_refused_arguments_say_why_in_one_line(
    handbook_index: Path, name: str, arguments: dict[str, Any], reason: str
) -> None:
    with pytest.raises(ToolRefused) as refused:
        call(tools_over(handbook_index), READER, name, **arguments)
    assert reason in one_line(refused.value) and "\n" not in one_line(refused.value)


def test_search_and_fetch_answer_with_citable_chunks(handbook_index: Path) -> None:
    tools = tools_over(handbook_index)
    found = call(tools, READER, "search", query="How often do I have to change my API key?", k=3)
    assert isinstance(found, SearchResult)
    first = found.results[0]
    assert (first.citation, first.source, first.chunk_id) == (
        "[1]",
        "keys.md",
        "keys.md#rotation:0",
    )

    chunk = call(tools, READER, "fetch", id=first.chunk_id)
    assert isinstance(chunk, FetchResult) and chunk.kind == "chunk"
    assert [c.chunk_id for c in chunk.chunks] == [first.chunk_id] and chunk.text == first.text
    document = call(tools, READER, "fetch", id="keys.md")
    assert document.kind == "document" and first.chunk_id in [c.chunk_id for c in document.chunks]
    with pytest.raises(ToolRefused, match="nothing readable"):
        call(tools, READER, "fetch", id="keys.md#rotation:99")


def test_a_caller_outside_every_group_reads_nothing(handbook_index: Path) -> None:
    tools = tools_over(handbook_index)
    nobody = McpSession(Caller(groups=frozenset()))
    assert call(tools, nobody, "search", query="API key").results == []
    assert call(tools, nobody, "list_sources").documents == []
    with pytest.raises(ToolRefused, match="nothing readable"):
        call(tools, nobody, "fetch", id="keys.md")


def test_chunk_ids_name_their_source() -> None:
    assert chunk_source("keys.md#rotation:0") == "keys.md"
    assert chunk_source("keys.md") == "keys.md"
    assert chunk_source("https://example.com/a#intro#setup:2") == "https://example.com/a#intro"
