"""A loopback OpenAI-compatible server for tests: scripted chat completions over real HTTP.

The real `openai` client (inside langchain-openai) talks to it like to any provider, so
tests see what the client sends (tools, response_format, retries, timeouts) and how it
copes with what comes back (tool calls, structured output, streaming, errors, silence).

    with StubOpenAI() as stub:
        stub.script(tool_call("search_documents", {"query": "keys"}), text("Done [1]."))
        ChatOpenAI(base_url=stub.base_url, api_key="x", model="stub-model")...

Each POST /v1/chat/completions takes the next reply from the script (a reply, or a function
of the request body returning one), else `stub.default`; with neither it answers HTTP 400
"stub script exhausted", which the client does not retry.

`StubOpenAI(dialect="llama.cpp")` behaves like llama-cpp-python's server (0.3.x, seen with
SmolLM2): a json_schema `response_format` or an assistant message with null content is
refused with HTTP 500 before any scripted reply is used; `max_tokens` cuts the reply (in
whitespace-separated words) with finish_reason "length", `max_completion_tokens` is ignored;
tools are ignored unless `tool_choice` names one, so a scripted tool call comes back as text.
`dialect="no-tool-choice"` refuses any request naming a tool in `tool_choice` (HTTP 400), and
`dialect="json-only"` refuses json_schema and tools alike (HTTP 400), like servers that have
only JSON mode.
"""

from __future__ import annotations

import json
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

HANG_LIMIT_S = 30.0
"""A hanging reply gives up on its own after this long, even if nobody releases it."""

LLAMA_CPP_RESPONSE_FORMAT_ERROR = "Input should be 'text' or 'json_object'"
LLAMA_CPP_NULL_CONTENT_ERROR = "Input should be a valid string"
IGNORED_TOOLS_TEXT = "I will look that up in the documents for you."
"""What the llama.cpp dialect says instead of a tool call it was not forced to make."""


@dataclass(frozen=True)
class Reply:
    """One scripted answer: a message, an HTTP error, or no answer at all."""

    kind: str
    """"message", "structured", "error" or "hang"."""
    content: str | None = None
    tool_calls: tuple[tuple[str, str, str], ...] = ()
    """(id, function name, JSON arguments) of each tool call."""
    status: int = 200
    error: dict[str, Any] = field(default_factory=dict)
    headers: dict[str, str] = field(default_factory=dict)


Responder = Reply | Callable[[dict[str, Any]], Reply]


def text(content: str) -> Reply:
    """A plain assistant message."""
    return Reply("message", content=content)


def tool_call(name: str, args: dict[str, Any], call_id: str = "call_stub_1") -> Reply:
    """An assistant message calling one function with JSON arguments."""
    return Reply("message", tool_calls=((call_id, name, json.dumps(args)),))


def structured(value: Any) -> Reply:
    """Structured output, answered the way the request asked for it.

    A request with a json_schema/json_object `response_format` gets the JSON as message
    content; one that forces a function (`tool_choice`, the function-calling method) gets a
    call to that function with the JSON as arguments.
    """
    return Reply("structured", content=json.dumps(value))


def malformed(raw: str) -> Reply:
    """Structured output that is not valid for the schema: `raw` verbatim (bad JSON, wrong
    shape), in the same place `structured` would put it."""
    return Reply("structured", content=raw)


def error(
    status: int,
    message: str,
    *,
    type_: str = "server_error",
    code: str | None = None,
    headers: dict[str, str] | None = None,
) -> Reply:
    """An HTTP error with an OpenAI-style body: {"error": {"message", "type", ...}}."""
    body = {"message": message, "type": type_, "param": None, "code": code}
    return Reply("error", status=status, error=body, headers=dict(headers or {}))


def rate_limited(retry_after_ms: int = 10) -> Reply:
    """HTTP 429, asking the client to retry after `retry_after_ms` milliseconds."""
    return error(
        429,
        "Rate limit reached for stub-model (stub).",
        type_="requests",
        code="rate_limit_exceeded",
        headers={"retry-after-ms": str(retry_after_ms)},
    )


def server_error(retry_after_ms: int = 10) -> Reply:
    """HTTP 500, asking the client to retry after `retry_after_ms` milliseconds."""
    return error(
        500,
        "The server had an error while processing your request (stub).",
        headers={"retry-after-ms": str(retry_after_ms)},
    )


def hang() -> Reply:
    """No answer until the stub closes (or HANG_LIMIT_S): for client timeouts."""
    return Reply("hang")


@dataclass
class Recorded:
    """One request the stub received."""

    method: str
    path: str
    headers: dict[str, str]
    body: dict[str, Any]
    at: float = field(default_factory=time.monotonic)
    """When it arrived (time.monotonic)."""


def prompt_of(body: dict[str, Any]) -> str:
    """The text of every message in a chat completions request, joined by newlines."""
    parts = []
    for message in body.get("messages", []):
        content = message.get("content")
        if isinstance(content, list):
            content = " ".join(p.get("text", "") for p in content if isinstance(p, dict))
        parts.append(content or "")
    return "\n".join(parts)


def tool_names(body: dict[str, Any]) -> list[str]:
    """Names of the functions a chat completions request offers the model."""
    return [t.get("function", {}).get("name", "") for t in body.get("tools") or []]


class StubOpenAI:
    """An OpenAI-compatible HTTP server on 127.0.0.1 (a free port), in a background thread."""

    def __init__(self, model: str = "stub-model", dialect: str = "openai") -> None:
        if dialect not in DIALECTS:
            raise ValueError(f"unknown dialect {dialect!r}; one of {sorted(DIALECTS)}")
        self.model = model
        self.dialect = dialect
        self.requests: list[Recorded] = []
        self.default: Responder | None = None
        self._script: deque[Responder] = deque()
        self._lock = threading.Lock()
        self._release = threading.Event()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _make_handler(self))
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever, args=(0.05,), name="stub-openai", daemon=True
        )

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    @property
    def base_url(self) -> str:
        """What to give the client as base_url."""
        return f"{self.url}/v1"

    @property
    def chat_requests(self) -> list[dict[str, Any]]:
        """Bodies of the chat completions requests, in order."""
        return [r.body for r in self.requests if r.path.endswith("/chat/completions")]

    def script(self, *replies: Responder) -> None:
        """Queue replies for the next chat completions requests, in order."""
        with self._lock:
            self._script.extend(replies)

    @property
    def pending(self) -> int:
        """Scripted replies not used yet."""
        return len(self._script)

    def start(self) -> StubOpenAI:
        self._thread.start()
        return self

    def close(self) -> None:
        """Release hanging requests, stop serving and free the port."""
        self._release.set()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    def __enter__(self) -> StubOpenAI:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _next_reply(self, body: dict[str, Any]) -> Reply:
        with self._lock:
            responder = self._script.popleft() if self._script else self.default
        if responder is None:
            return error(400, "stub script exhausted", type_="invalid_request_error")
        return responder(body) if callable(responder) else responder


def _make_handler(stub: StubOpenAI) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            """Quiet: tests read `stub.requests` instead."""

        def do_GET(self) -> None:
            self._record({})
            if self.path.rstrip("/").endswith("/models"):
                models = [{"id": stub.model, "object": "model", "created": 0, "owned_by": "stub"}]
                self._send_json(200, {"object": "list", "data": models})
            else:
                self._send_json(404, _error_body(f"no route GET {self.path}", "not_found"))

        def do_POST(self) -> None:
            length = int(self.headers.get("content-length") or 0)
            raw = self.rfile.read(length) if length else b""
            try:
                body = json.loads(raw or b"{}")
            except ValueError:
                self._record({"_raw": raw.decode("utf-8", "replace")})
                self._send_json(400, _error_body("request body is not JSON", "invalid_request"))
                return
            self._record(body)
            if not self.path.rstrip("/").endswith("/chat/completions"):
                self._send_json(404, _error_body(f"no route POST {self.path}", "not_found"))
                return
            refusal = _refusal(stub.dialect, body)
            reply = refusal or stub._next_reply(body)
            if reply.kind == "hang":
                stub._release.wait(HANG_LIMIT_S)
                self.close_connection = True
                return
            if reply.kind == "error":
                self._send_json(reply.status, {"error": reply.error}, reply.headers)
                return
            message = _message_for(reply, body)
            finish = None
            if stub.dialect == "llama.cpp":
                message, finish = _as_llama_cpp(message, body)
            if body.get("stream"):
                self._send_stream(message, body, finish)
            else:
                self._send_json(200, _completion(message, body, finish), reply.headers)

        def _record(self, body: dict[str, Any]) -> None:
            headers = {k.lower(): v for k, v in self.headers.items()}
            with stub._lock:
                stub.requests.append(Recorded(self.command, self.path, headers, body))

        def _send_json(
            self, status: int, payload: dict[str, Any], headers: dict[str, str] | None = None
        ) -> None:
            data = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            for name, value in (headers or {}).items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(data)

        def _send_stream(
            self, message: dict[str, Any], body: dict[str, Any], finish: str | None
        ) -> None:
            self.send_response(200)
            self.send_header("content-type", "text/event-stream")
            self.send_header("transfer-encoding", "chunked")
            self.end_headers()
            for chunk in _stream_chunks(message, body, finish):
                self._write_chunk(f"data: {json.dumps(chunk)}\n\n".encode())
            self._write_chunk(b"data: [DONE]\n\n")
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()

        def _write_chunk(self, data: bytes) -> None:
            self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
            self.wfile.flush()

    return Handler


def _error_body(message: str, type_: str) -> dict[str, Any]:
    return {"error": {"message": message, "type": type_, "param": None, "code": None}}


def _forced_function(body: dict[str, Any]) -> str | None:
    """The function a request forces with tool_choice, if any."""
    choice = body.get("tool_choice")
    if isinstance(choice, dict):
        return choice.get("function", {}).get("name")
    if isinstance(choice, str) and choice in tool_names(body):
        return choice
    return None


def _message_for(reply: Reply, body: dict[str, Any]) -> dict[str, Any]:
    """The assistant message (OpenAI wire form) for a reply to this request."""
    calls = list(reply.tool_calls)
    content = reply.content
    if reply.kind == "structured":
        forced = _forced_function(body)
        if forced and not body.get("response_format"):
            calls, content = [("call_stub_structured", forced, reply.content or "")], None
    message: dict[str, Any] = {"role": "assistant", "content": content, "refusal": None}
    if calls:
        message["tool_calls"] = [
            {"id": cid, "type": "function", "function": {"name": name, "arguments": args}}
            for cid, name, args in calls
        ]
    return message


def _usage(body: dict[str, Any], message: dict[str, Any]) -> dict[str, int]:
    prompt = len(prompt_of(body).split())
    completion = len((message.get("content") or "").split()) + len(message.get("tool_calls", []))
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
    }


def _finish_reason(message: dict[str, Any], finish: str | None) -> str:
    return finish or ("tool_calls" if message.get("tool_calls") else "stop")


def _completion(
    message: dict[str, Any], body: dict[str, Any], finish: str | None = None
) -> dict[str, Any]:
    return {
        "id": f"chatcmpl-stub-{time.monotonic_ns()}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": body.get("model", "stub-model"),
        "choices": [
            {
                "index": 0,
                "message": message,
                "finish_reason": _finish_reason(message, finish),
                "logprobs": None,
            }
        ],
        "usage": _usage(body, message),
    }


def _stream_chunks(
    message: dict[str, Any], body: dict[str, Any], finish: str | None = None
) -> list[dict[str, Any]]:
    """The message as chat.completion.chunk objects: role, content words, tool call parts."""
    base = {
        "id": f"chatcmpl-stub-{time.monotonic_ns()}",
        "object": "chat.completion.chunk",
        "created": int(time.time()),
        "model": body.get("model", "stub-model"),
    }

    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {**base, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}

    chunks = [chunk({"role": "assistant", "content": ""})]
    content = message.get("content") or ""
    words = content.split(" ")
    for i, word in enumerate(words):
        if word or i:
            chunks.append(chunk({"content": word if i == 0 else f" {word}"}))
    for index, call in enumerate(message.get("tool_calls", [])):
        function = call["function"]
        head = {"index": index, "id": call["id"], "type": "function"}
        head["function"] = {"name": function["name"], "arguments": ""}
        chunks.append(chunk({"tool_calls": [head]}))
        args = function["arguments"]
        middle = len(args) // 2
        for part in filter(None, (args[:middle], args[middle:])):
            piece = {"index": index, "function": {"arguments": part}}
            chunks.append(chunk({"tool_calls": [piece]}))
    chunks.append(chunk({}, _finish_reason(message, finish)))
    if (body.get("stream_options") or {}).get("include_usage"):
        chunks.append({**base, "choices": [], "usage": _usage(body, message)})
    return chunks


DIALECTS = {"openai", "llama.cpp", "no-tool-choice", "json-only"}


def _refusal(dialect: str, body: dict[str, Any]) -> Reply | None:
    """The error a server of this dialect answers before generating anything, if any."""
    response_format = (body.get("response_format") or {}).get("type")
    if dialect == "llama.cpp":
        # The server reports request validation errors as HTTP 500, in pydantic's words.
        if response_format == "json_schema":
            return error(
                500,
                "1 validation error:\n  {'type': 'literal_error', 'loc': ('body', "
                f"'response_format', 'type'), 'msg': \"{LLAMA_CPP_RESPONSE_FORMAT_ERROR}\", "
                "'input': 'json_schema'}",
            )
        for n, m in enumerate(body.get("messages", [])):
            if m.get("role") == "assistant" and m.get("content") is None:
                return error(
                    500,
                    "validation error:\n  {'type': 'string_type', 'loc': ('body', 'messages', "
                    f"{n}, 'ChatCompletionRequestAssistantMessage', 'content'), "
                    f"'msg': '{LLAMA_CPP_NULL_CONTENT_ERROR}', 'input': None}}",
                )
    if dialect == "no-tool-choice" and _forced_function(body):
        return error(400, "tool_choice is not supported", type_="invalid_request_error")
    if dialect == "json-only" and (response_format == "json_schema" or body.get("tools")):
        return error(
            400, "only response_format json_object is supported", type_="invalid_request_error"
        )
    return None


def _as_llama_cpp(
    message: dict[str, Any], body: dict[str, Any]
) -> tuple[dict[str, Any], str | None]:
    """The message as llama.cpp's server would send it: tools only when forced, cut at
    `max_tokens` (counted in words here)."""
    if message.get("tool_calls") and not _forced_function(body):
        message = {"role": "assistant", "content": IGNORED_TOOLS_TEXT, "refusal": None}
    limit = body.get("max_tokens")
    words = (message.get("content") or "").split(" ")
    if isinstance(limit, int) and message.get("content") and len(words) > limit:
        return {**message, "content": " ".join(words[:limit])}, "length"
    return message, None
