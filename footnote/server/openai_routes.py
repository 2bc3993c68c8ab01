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

Every answer reports `usage` (in a stream, with `stream_options: {"include_usage": true}`, as a
last chunk whose `choices` is empty, as OpenAI sends it). The tokens are the model's own count
when the answer's messages carry one (LangChain's `usage_metadata`); otherwise, offline or with
a model that reports none, they are counted with the default embedding model's WordPiece
tokenizer (MiniLM's, shipped with Footnote): prompt tokens are the request's user and assistant
turns, completion tokens the answer text sent. `footnote.usage_counted_by` says which
(`model` or `minilm-wordpiece`).
"""

from __future__ import annotations

import asyncio
import functools
import json
import re
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from importlib import resources
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route, Router

from footnote.graph.prompts import NOT_COVERED
from footnote.graph.state import planned_route
from footnote.server.bodies import BodyTooLarge, limited_body
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
    try:
        raw = await limited_body(request, MAX_BODY)
    except BodyTooLarge as exc:
        raise OpenAIError(413, str(exc), "invalid_request_error", None) from None
    try:
        body = json.loads(raw)
    except RecursionError:  # 100,000 `[` fit under the size limit: a 400, not a 500
        raise _invalid("the request body is JSON nested too deeply", "invalid_json") from None
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


USAGE_FROM_MODEL = "model"
USAGE_COUNTED = "minilm-wordpiece"


@functools.cache
def _wordpieces() -> Any:
    """The default embedding model's WordPiece tokenizer, shipped with Footnote: a count
    any client can reproduce, with no model and no download."""
    from tokenizers import Tokenizer

    spec = resources.files("footnote.models") / "data" / "minilm_tokenizer.json"
    tokenizer = Tokenizer.from_str(spec.read_text(encoding="utf-8"))
    tokenizer.no_truncation()
    tokenizer.no_padding()
    return tokenizer


def counted_tokens(text: str) -> int:
    """The text's word pieces, no special tokens."""
    return len(_wordpieces().encode(text, add_special_tokens=False).ids) if text else 0


def _count(value: Any) -> int | None:
    return value if type(value) is int and value >= 0 else None


def _reported_usage(messages: Any) -> tuple[int, int] | None:
    """Input and output tokens summed over the messages whose model reported them
    (`usage_metadata`); None when none did."""
    spent: tuple[int, int] | None = None
    for message in messages if isinstance(messages, list) else []:
        meta = message.get("usage_metadata") if isinstance(message, dict) else None
        if not isinstance(meta, dict):
            continue
        prompt, completion = _count(meta.get("input_tokens")), _count(meta.get("output_tokens"))
        if prompt is not None and completion is not None:
            before = spent or (0, 0)
            spent = (before[0] + prompt, before[1] + completion)
    return spent


def usage(
    turns: list[dict[str, str]], output: dict[str, Any], text: str
) -> tuple[dict[str, int], str]:
    """OpenAI's `usage` for this answer, and how it was counted (USAGE_FROM_MODEL or
    USAGE_COUNTED: the request's turns as the prompt, the text sent as the completion)."""
    reported = _reported_usage(output.get("messages"))
    if reported is not None:
        prompt, completion = reported
        how = USAGE_FROM_MODEL
    else:
        prompt = sum(counted_tokens(turn["content"]) for turn in turns)
        completion = counted_tokens(text)
        how = USAGE_COUNTED
    spent = {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
    }
    return spent, how


def _include_usage(body: dict[str, Any]) -> bool:
    """`stream_options.include_usage`, checked: an object with a true or false flag."""
    options = body.get("stream_options")
    if options is None:
        return False
    if not isinstance(options, dict):
        raise _invalid("'stream_options' must be an object")
    include = options.get("include_usage", False)
    if not isinstance(include, bool):
        raise _invalid("'stream_options.include_usage' must be true or false")
    return include


async def _answer(request: Request, turns: list[dict[str, str]], index: str) -> dict[str, Any]:
    api = OwnApi(loopback_url(request.scope), credentials_of(request.headers))
    try:
        return await api.answer(turns, index=index)
    except ApiRefused as exc:
        status = exc.status if 400 <= exc.status < 500 else 502
        kind = "permission_error" if status == 403 else "api_error"
        raise OpenAIError(status, exc.detail, kind, None) from None


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
    include_usage = _include_usage(body)
    output = await _answer(request, turns, index)
    completion_id = f"chatcmpl-{uuid.uuid4().hex}"
    created = int(time.time())
    text = answer_text(output)
    spent, counted_by = await asyncio.to_thread(usage, turns, output, text)
    extra = {**extension(output), "usage_counted_by": counted_by}
    if stream:
        head = Completion(completion_id, created, model)
        return StreamingResponse(
            _chunks(head, text, extra, spent if include_usage else None),
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
            "usage": spent,
            "footnote": extra,
        },
        headers=_NO_STORE,
    )


_PIECES = re.compile(r"\S+\s*|\s+")


@dataclass(frozen=True)
class Completion:
    """What every chunk of one streamed answer repeats."""

    id: str
    created: int
    model: str


async def _chunks(
    head: Completion, text: str, extra: dict[str, Any], spent: dict[str, int] | None
) -> AsyncIterator[str]:
    """chat.completion.chunk events: the role, the checked answer a few words at a time, the
    finish with Footnote's fields, then (when asked for) the usage with no choices, as
    OpenAI sends it, then [DONE]."""
    usage_field = {} if spent is None else {"usage": None}

    def event(choices: list[dict[str, Any]], **more: Any) -> str:
        chunk = {
            "id": head.id,
            "object": "chat.completion.chunk",
            "created": head.created,
            "model": head.model,
            "choices": choices,
            **usage_field,
            **more,
        }
        return f"data: {json.dumps(chunk, ensure_ascii=False)}\n\n"

    def choice(delta: dict[str, Any], finish: str | None = None) -> list[dict[str, Any]]:
        return [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}]

    yield event(choice({"role": "assistant", "content": ""}))
    pieces = _PIECES.findall(text)
    for start in range(0, len(pieces), 8):
        yield event(choice({"content": "".join(pieces[start : start + 8])}))
    yield event(choice({}, "stop"), footnote=extra)
    if spent is not None:
        yield event([], usage=spent)
    yield "data: [DONE]\n\n"


router = Router(
    routes=[
        Route("/v1/models", list_models, methods=["GET"]),
        Route("/v1/models/{model:path}", one_model, methods=["GET"]),
        Route("/v1/chat/completions", chat_completions, methods=["POST"]),
    ]
)
"""Included by `footnote.server.webapp` (the dev runtime's `http.app`, and Aegra's app)."""
