"""Chat models from `provider:model` strings, built once per setting and shared by the graph's
nodes and the LLM reranker, so both talk to the same configured model."""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from langchain_core.language_models import BaseChatModel

RETRY_KWARGS_PROVIDERS = {"openai", "anthropic", "azure_openai", "groq", "mistralai", "xai"}
"""Providers whose chat classes take `timeout` and `max_retries`."""

_models: dict[tuple[str, str, float, int], BaseChatModel] = {}
_lock = threading.Lock()


def chat_model(
    model: str, *, base_url: str = "", timeout_s: float = 60.0, max_retries: int = 2
) -> BaseChatModel:
    """The chat model for an init_chat_model string (e.g. `openai:gpt-4.1-mini`, or
    `openai/gpt-4.1-mini`); a ProviderProblem says in one line what is wrong with it."""
    key = (model, base_url, timeout_s, max_retries)
    with _lock:
        if key not in _models:
            from footnote.models.providers import init_chat, normalize_spec

            spec = normalize_spec(model, "chat")
            kwargs: dict[str, Any] = {}
            if base_url:
                kwargs["base_url"] = base_url
            if spec.split(":", 1)[0] in RETRY_KWARGS_PROVIDERS:
                kwargs["timeout"] = timeout_s
                kwargs["max_retries"] = max_retries
            _models[key] = init_chat(spec, **kwargs)
        return _models[key]
