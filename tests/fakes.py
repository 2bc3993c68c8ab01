"""A scripted chat model for driving the graph's LLM path without a provider."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatResult

Responder = Callable[[list[BaseMessage]], AIMessage]


class ScriptedChatModel(BaseChatModel):
    """Answers each call with `respond(messages)` and records what it was asked.

    `bind_tools` returns the model itself, so tool calls and `with_structured_output` (which
    parses a tool call named after the schema) work as they do with a real provider.
    """

    respond: Responder
    calls: list[list[BaseMessage]] = []
    disable_streaming: bool = True

    @property
    def _llm_type(self) -> str:
        return "scripted"

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> ScriptedChatModel:  # type: ignore[override]
        return self

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        self.calls.append(list(messages))
        return ChatResult(generations=[ChatGeneration(message=self.respond(messages))])


def prompt_text(messages: list[BaseMessage]) -> str:
    return "\n".join(str(m.content) for m in messages)


def tool_call(name: str, args: dict[str, Any], call_id: str = "call_1") -> AIMessage:
    return AIMessage(
        content="", tool_calls=[{"name": name, "args": args, "id": call_id, "type": "tool_call"}]
    )


def role_of(messages: list[BaseMessage]) -> str:
    """Which of the graph's LLM roles a prompt belongs to, from its fixed wording."""
    text = prompt_text(messages)
    if "Plan how to handle the user's latest message" in text:
        return "plan"
    if "depends on something this evidence names" in text:
        return "hop"
    if "search_documents tool" in text:
        return "agent"
    if "Score how well each numbered source" in text:
        return "grade"
    if "Rewrite the user's latest question" in text:
        return "rewrite"
    if "found too little relevant evidence" in text:
        return "retry"
    if "Write a short passage" in text:
        return "hyde"
    if "Write a short report" in text:
        return "report"
    if "asks about the team's documents as a whole" in text:
        return "reduce"
    if "Sources:" in text:
        return "answer"
    raise AssertionError(f"unexpected prompt: {text[:200]}")
