"""What every group of nodes shares: the chat models (one per role, or none offline), the
part's own model, the budget notice, the search update and a plain model call.
"""

from __future__ import annotations

from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, HumanMessage

from footnote.graph.context import Context
from footnote.graph.model_calls import ChatModels, Role
from footnote.graph.nodes.messages import internal_call, text_of
from footnote.graph.search_tool import SEARCH_CALLS
from footnote.graph.state import (
    CLEAR,
    PartState,
)


class ModelNodes:
    """The chat models the nodes use, and the helpers every group of nodes shares."""

    def __init__(self, chat_model: BaseChatModel | None = None) -> None:
        self.models = ChatModels(chat_model)

    def chat_model(self, context: Context, role: Role = "internal") -> BaseChatModel | None:
        """The model for this run: the one given to the factory, else the context's string."""
        return self.models.get(context, role)

    def _part_model(
        self, context: Context, state: PartState, role: Role = "internal"
    ) -> BaseChatModel | None:
        """The model for a part's next call, or None when offline or the part's share of the
        model-call budget is spent (the part then continues offline)."""
        model = self.chat_model(context, role)
        if model is None or state.model_calls >= state.max_model_calls:
            return None
        return model

    @staticmethod
    def _budget_notice(state: PartState) -> list[str]:
        return [
            f'Model-call budget spent while researching "{state.question}": continued offline '
            "(max_model_calls_per_turn)."
        ]

    @staticmethod
    def _search_update(state: PartState, call: AIMessage, step: str) -> dict[str, Any]:
        return {
            SEARCH_CALLS: [CLEAR, call],
            "candidates": CLEAR,
            "searches": state.searches + len(call.tool_calls),
            "route": [step],
        }

    def _ask(self, model: BaseChatModel, prompt: str, name: str) -> str:
        response = model.invoke([HumanMessage(prompt)], config=internal_call(name))
        return text_of(response).strip()
