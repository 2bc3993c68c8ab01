"""`usage` on the OpenAI-compatible endpoint, read through the official `openai` client: in
every non-streamed answer, and in a stream asked for with `stream_options.include_usage` as
a last chunk with no choices. The route runs in process (ASGI); the server's own API, which
the route asks as the caller, is replaced by a recorded answer so the count is known."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, cast

import httpx
import openai
import pytest

from footnote.server import openai_routes
from footnote.server.credentials import Credentials, write_api_keys
from footnote.server.settings import ServerSettings

QUESTION = "How often do I have to change my API key?"
ANSWER = "Every ninety days [1]."


def recorded_output(usage_metadata: dict[str, Any] | None) -> dict[str, Any]:
    answer: dict[str, Any] = {"type": "ai", "content": ANSWER, "id": "answer-1"}
    if usage_metadata is not None:
        answer["usage_metadata"] = usage_metadata
    return {
        "messages": [{"type": "human", "content": QUESTION}, answer],
        "citations": [{"n": 1, "source": "keys.md"}],
        "footnote_route": ["generate"],
    }


@pytest.fixture
def served(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> dict[str, Any]:
    """The route with one user's key; `answer` is what the API returns to it."""
    keys = write_api_keys(tmp_path / "keys.json", {"alice": {"groups": []}})
    credentials = Credentials.from_env({"FOOTNOTE_API_KEYS": str(tmp_path / "keys.json")})
    settings = ServerSettings.from_env({"FOOTNOTE_INDEX": str(tmp_path / "index")})
    state: dict[str, Any] = {"answer": recorded_output(None), "key": keys["alice"]}

    class RecordedApi:
        def __init__(self, base_url: str, forwarded: dict[str, str]) -> None:
            assert forwarded == {"authorization": f"Bearer {keys['alice']}"}

        async def answer(self, turns: list[dict[str, str]], *, index: str) -> dict[str, Any]:
            return dict(state["answer"])

    monkeypatch.setattr(openai_routes, "served_credentials", lambda: credentials)
    monkeypatch.setattr(openai_routes, "served_settings", lambda: settings)
    monkeypatch.setattr(openai_routes, "OwnApi", RecordedApi)
    return state


def client(state: dict[str, Any]) -> openai.AsyncOpenAI:
    transport = httpx.ASGITransport(app=openai_routes.router)
    return openai.AsyncOpenAI(
        base_url="http://footnote.test/v1",
        api_key=state["key"],
        max_retries=0,
        http_client=cast(Any, httpx.AsyncClient(transport=transport)),
    )


def wordpieces(text: str) -> int:
    return openai_routes.counted_tokens(text)


async def test_a_plain_answer_reports_usage_counted_in_word_pieces(
    served: dict[str, Any],
) -> None:
    reply = await client(served).chat.completions.create(
        model="footnote", messages=[{"role": "user", "content": QUESTION}]
    )
    content = reply.choices[0].message.content or ""
    assert content.startswith(ANSWER) and "Sources:" in content
    assert reply.usage is not None
    assert reply.usage.prompt_tokens == wordpieces(QUESTION) > 5
    assert reply.usage.completion_tokens == wordpieces(content) > 5
    assert reply.usage.total_tokens == reply.usage.prompt_tokens + reply.usage.completion_tokens
    assert (reply.model_extra or {})["footnote"]["usage_counted_by"] == "minilm-wordpiece"


async def test_the_models_own_count_is_used_when_it_reports_one(served: dict[str, Any]) -> None:
    served["answer"] = recorded_output(
        {"input_tokens": 812, "output_tokens": 41, "total_tokens": 853}
    )
    reply = await client(served).chat.completions.create(
        model="footnote", messages=[{"role": "user", "content": QUESTION}]
    )
    assert reply.usage is not None
    assert (reply.usage.prompt_tokens, reply.usage.completion_tokens) == (812, 41)
    assert reply.usage.total_tokens == 853
    assert (reply.model_extra or {})["footnote"]["usage_counted_by"] == "model"


async def collect(stream: AsyncIterator[Any]) -> list[Any]:
    return [chunk async for chunk in stream]


async def test_a_stream_ends_with_usage_when_asked_for(served: dict[str, Any]) -> None:
    chunks = await collect(
        await client(served).chat.completions.create(
            model="footnote",
            messages=[{"role": "user", "content": QUESTION}],
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    last = chunks[-1]
    assert last.choices == [] and last.usage is not None
    assert all(chunk.usage is None for chunk in chunks[:-1])
    text = "".join(c.choices[0].delta.content or "" for c in chunks[:-1] if c.choices)
    assert last.usage.prompt_tokens == wordpieces(QUESTION)
    assert last.usage.completion_tokens == wordpieces(text)
    assert last.usage.total_tokens == last.usage.prompt_tokens + last.usage.completion_tokens
    finish = chunks[-2]
    assert finish.choices[0].finish_reason == "stop"
    assert (finish.model_extra or {})["footnote"]["usage_counted_by"] == "minilm-wordpiece"


async def test_a_stream_without_the_option_sends_no_usage(served: dict[str, Any]) -> None:
    chunks = await collect(
        await client(served).chat.completions.create(
            model="footnote", messages=[{"role": "user", "content": QUESTION}], stream=True
        )
    )
    assert chunks[-1].choices[0].finish_reason == "stop"
    assert all(chunk.usage is None and chunk.choices for chunk in chunks)


async def test_malformed_stream_options_are_refused(served: dict[str, Any]) -> None:
    with pytest.raises(openai.BadRequestError) as refused:
        await client(served).chat.completions.create(
            model="footnote",
            messages=[{"role": "user", "content": QUESTION}],
            stream=True,
            extra_body={"stream_options": {"include_usage": "yes"}},
        )
    assert "include_usage" in refused.value.message
