"""An OpenAI-compatible chat endpoint, so chat front ends and agents can use Footnote as a model.

    GET  /v1/models              `footnote` (the default index) and `footnote-<name>` for
                                 each of the operator's named indexes (FOOTNOTE_INDEXES)
    GET  /v1/models/{model}
    POST /v1/chat/completions    non-streaming, or `stream: true` as server-sent events in
                                 the chat.completion.chunk format, ending `data: [DONE]`

The same credentials as the API (an API key or a JWT as `Authorization: Bearer`), and the
same access: the answer is made by the server's own API as the caller
(`footnote.server.own_api`), statelessly, from the request's messages: user and assistant
turns are the conversation; system and developer messages are not instructions Footnote takes
from a client (the operator's prompt stands). The answer text carries its [n] markers and a
sources list; Footnote's own fields (`citations`, `parts`, `route`, `path`, `not_covered`) ride
in a `footnote` object that standard clients ignore. Streaming sends the answer once it has been
checked: Footnote removes unsupported claims after generating, so raw tokens could show text
the answer no longer has. Errors have OpenAI's shape, `{"error": {"message", "type", "code"}}`.
"""

from __future__ import annotations

import asyncio
import functools
import json
import re
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route, Router

from footnote.graph.prompts import NOT_COVERED
from footnote.graph.state import planned_route
from footnote.server.credentials import CredentialsError, Unauthenticated
from footnote.server.own_api import (
    ApiRefused,
    OwnApi,
    credentials_of,
    loopback_url,
    served_credentials,
    served_settings,
)
from footnote.server.settings import DEFAULT_INDEX_NAME

MODEL_PREFIX = "footnote"
MAX_BODY = 1_000_000
MAX_MESSAGES = 200
REFUSED_FIELDS = ("index", "index_dir", "user_groups", "groups", "admin", "strict_groups")
"""Request fields that would choose an index or who is asking: refused with the reason (the
model names the index; credentials name the caller). Other fields OpenAI defines (temperature,
max_tokens, user, ...) do not change a cited answer and are ignored."""
_NO_STORE = {"Cache-Control": "no-store", "X-Content-Type-Options": "nosniff"}


class OpenAIError(Exception):
    def __init__(self, status: int, message: str, kind: str, code: str | None) -> None:
        super().__init__(message)
        self.status, self.message, self.kind, self.code = status, message, kind, code

    def response(self) -> JSONResponse:
        headers = dict(_NO_STORE)
        if self.status == 401:
            headers["WWW-Authenticate"] = "Bearer"
        return JSONResponse(
            {
                "error": {
                    "message": self.message,
                    "type": self.kind,
                    "param": None,
                    "code": self.code,
                }
            },
            status_code=self.status,
            headers=headers,
        )


def served_models() -> dict[str, str]:
    """Model id -> index name: `footnote` is the default index, `footnote-<name>` the others."""
    return {
        MODEL_PREFIX if name == DEFAULT_INDEX_NAME else f"{MODEL_PREFIX}-{name}": name
        for name in served_settings().indexes
    }


async def _authenticate(request: Request) -> None:
    try:
        await asyncio.to_thread(
            served_credentials().identify,
            request.headers.get("authorization"),
            request.headers.get("x-api-key"),
        )
    except Unauthenticated as exc:
        raise OpenAIError(401, str(exc), "invalid_request_error", "invalid_api_key") from None
    except CredentialsError:
        raise OpenAIError(
            401, "the server's credentials are misconfigured", "invalid_request_error", None
        ) from None


def _model_card(model: str) -> dict[str, Any]:
    return {"id": model, "object": "model", "created": 0, "owned_by": "footnote"}


def _handler(func: Any) -> Any:
    @functools.wraps(func)
    async def wrapped(request: Request) -> Response:
        try:
            await _authenticate(request)
            response: Response = await func(request)
            return response
        except OpenAIError as exc:
            return exc.response()

    return wrapped


@_handler
async def list_models(request: Request) -> Response:
    cards = [_model_card(m) for m in served_models()]
    return JSONResponse({"object": "list", "data": cards}, headers=_NO_STORE)


@_handler
async def one_model(request: Request) -> Response:
    model = request.path_params["model"]
    if model not in served_models():
        raise _unknown_model(model)
    return JSONResponse(_model_card(model), headers=_NO_STORE)


def _unknown_model(model: Any) -> OpenAIError:
    shown = repr(model) if len(repr(model)) <= 60 else repr(model)[:57] + "..."
    offered = ", ".join(served_models())
    return OpenAIError(
        404,
        f"The model {shown} does not exist on this server; it serves: {offered}",
        "invalid_request_error",
        "model_not_found",
    )


def _invalid(message: str, code: str | None = None) -> OpenAIError:
    return OpenAIError(400, message, "invalid_request_error", code)


async def _request_body(request: Request) -> dict[str, Any]:
    raw = await request.body()
    if len(raw) > MAX_BODY:
        raise OpenAIError(413, f"request body over {MAX_BODY} bytes", "invalid_request_error", None)
    try:
        body = json.loads(raw)
    except ValueError:
        raise _invalid("the request body is not valid JSON", "invalid_json") from None
    if not isinstance(body, dict):
        raise _invalid("the request body must be a JSON object", "invalid_json")
    return body


def _text(content: Any) -> str:
    """A message's text: a string, or the text parts of a content list."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = [
            p.get("text", "")
            for p in content
            if isinstance(p, dict) and p.get("type") == "text" and isinstance(p.get("text"), str)
        ]
        return "\n".join(texts)
    raise _invalid("message content must be a string or a list of content parts")


def conversation(messages: Any) -> list[dict[str, str]]:
    """The request's user and assistant turns, as the answer graph's input; the last must be
    the user's question."""
    if not isinstance(messages, list) or not messages:
        raise _invalid("'messages' must be a non-empty list", "invalid_messages")
    if len(messages) > MAX_MESSAGES:
        raise _invalid(f"at most {MAX_MESSAGES} messages", "invalid_messages")
    turns = []
    for message in messages:
        if not isinstance(message, dict) or not isinstance(message.get("role"), str):
            raise _invalid("each message must be an object with a 'role'", "invalid_messages")
        role = message["role"]
        if role in ("user", "assistant"):
            text = _text(message.get("content") or "")
            if text.strip():
                turns.append({"role": role, "content": text})
        elif role not in ("system", "developer", "tool", "function"):
            raise _invalid(f"unknown message role {role[:30]!r}", "invalid_messages")
    if not turns or turns[-1]["role"] != "user":
        raise _invalid("the last user or assistant message must be the user's question")
    return turns


def answer_text(output: dict[str, Any]) -> str:
    """The answer with its [n] markers, then the sources it cites."""
    messages = output.get("messages") or []
    content = messages[-1].get("content", "") if messages else ""
    text = content if isinstance(content, str) else _text(content)
    citations = output.get("citations") or []
    if citations:
        lines = []
        for c in citations:
            where = c.get("source", "")
            if c.get("section"):
                where += f" § {c['section']}"
            if c.get("url"):
                where += f" <{c['url']}>"
            lines.append(f"[{c.get('n')}] {where}")
        text += "\n\nSources:\n" + "\n".join(lines)
    return text


def extension(output: dict[str, Any]) -> dict[str, Any]:
    citations = list(output.get("citations") or [])
    messages = output.get("messages") or []
    last = messages[-1].get("content", "") if messages else ""
    path = [str(step) for step in output.get("footnote_route") or []]
    return {
        "citations": citations,
        "parts": list(output.get("parts") or []),
        "route": planned_route(path),
        "path": path,
        "not_covered": not citations and isinstance(last, str) and NOT_COVERED in last,
    }


@_handler
async def chat_completions(request: Request) -> Response:
    body = await _request_body(request)
    refused = [f for f in REFUSED_FIELDS if f in body]
    if refused:
        raise OpenAIError(
            403,
            f"field {refused[0]!r} is not accepted: the model names the index, and who you are "
            "comes from your credentials",
            "permission_error",
            "field_not_accepted",
        )
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise _invalid("'model' is required (see GET /v1/models)", "model_required")
    index = served_models().get(model)
    if index is None:
        raise _unknown_model(model)
    turns = conversation(body.get("messages"))
    stream = body.get("stream", False)
    if not isinstance(stream, bool):
        raise _invalid("'stream' must be true or false")
    api = OwnApi(loopback_url(request.scope), credentials_of(request.headers))
    try:
        output = await api.answer(turns, index=index)
    except ApiRefused as exc:
        status = exc.status if 400 <= exc.status < 500 else 502
        kind = "permission_error" if status == 403 else "api_error"
        raise OpenAIError(status, exc.detail, kind, None) from None
    completion_id = f"chatcmpl-{uuid.uuid4().hex}"
    created = int(time.time())
    text, extra = answer_text(output), extension(output)
    if stream:
        return StreamingResponse(
            _chunks(completion_id, created, model, text, extra),
            media_type="text/event-stream",
            headers={**_NO_STORE, "X-Accel-Buffering": "no"},
        )
    return JSONResponse(
        {
            "id": completion_id,
            "object": "chat.completion",
            "created": created,
            "model": model,
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": text, "refusal": None},
                    "logprobs": None,
                    "finish_reason": "stop",
                }
            ],
            "footnote": extra,
        },
        headers=_NO_STORE,
    )


_PIECES = re.compile(r"\S+\s*|\s+")


async def _chunks(
    completion_id: str, created: int, model: str, text: str, extra: dict[str, Any]
) -> AsyncIterator[str]:
    """chat.completion.chunk events: the role, the checked answer a few words at a time, the
    finish with Footnote's fields, then [DONE]."""

    def event(delta: dict[str, Any], finish: str | None = None, **more: Any) -> str:
        chunk = {
            "id": completion_id,
            "object": "chat.completion.chunk",
            "created": created,
            "model": model,
            "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}],
            **more,
        }
        return f"data: {json.dumps(chunk, ensure_ascii=False)}\n\n"

    yield event({"role": "assistant", "content": ""})
    pieces = _PIECES.findall(text)
    for start in range(0, len(pieces), 8):
        yield event({"content": "".join(pieces[start : start + 8])})
    yield event({}, "stop", footnote=extra)
    yield "data: [DONE]\n\n"


router = Router(
    routes=[
        Route("/v1/models", list_models, methods=["GET"]),
        Route("/v1/models/{model:path}", one_model, methods=["GET"]),
        Route("/v1/chat/completions", chat_completions, methods=["POST"]),
    ]
)
"""Included by `footnote.server.webapp` (the dev runtime's `http.app`, and Aegra's app)."""
