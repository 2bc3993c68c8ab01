"""What the nodes read of the conversation and how they label their model calls: the
human turns, the recent conversation as text, and the config of an internal call (hidden
from the streamed messages, named in traces).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from langchain_core.messages import AIMessage, AnyMessage, HumanMessage
from langchain_core.runnables import RunnableConfig

from footnote.graph.context import Context
from footnote.graph.state import (
    PartState,
)
from footnote.tools.sources import escape_source_text


def internal_call(name: str, metadata: dict[str, Any] | None = None) -> RunnableConfig:
    """Config for LLM calls whose tokens are not the answer: they must not stream to the user."""
    return {
        "tags": ["nostream", "footnote:internal"],
        "run_name": name,
        "metadata": metadata or {},
    }


def trace_metadata(context: Context, state: PartState | None = None) -> dict[str, Any]:
    """What a LangSmith trace should show about a call: which index, model and attempt."""
    meta: dict[str, Any] = {"index": context.index_dir, "model": context.model or "offline"}
    if state is not None:
        meta["attempt"] = state.attempts + 1
    return meta


def text_of(message: AnyMessage) -> str:
    content = message.content
    if isinstance(content, str):
        return content
    return " ".join(
        part.get("text", "") if isinstance(part, dict) else str(part) for part in content
    )


def human_questions(messages: Sequence[AnyMessage]) -> list[str]:
    return [text_of(m) for m in messages if isinstance(m, HumanMessage)]


def conversation_text(messages: Sequence[AnyMessage], turns: int = 6) -> str:
    """The visible conversation (questions and answers, no tool traffic) for rewriting."""
    visible = [
        m
        for m in messages
        if isinstance(m, HumanMessage) or (isinstance(m, AIMessage) and not m.tool_calls)
    ]
    # An earlier answer can quote its sources: it is escaped like them, so a quoted line
    # cannot read as another turn or a role.
    return "\n".join(
        f"User: {text_of(m)}"
        if isinstance(m, HumanMessage)
        else f"Assistant: {escape_source_text(text_of(m))}"
        for m in visible[-turns:]
    )
