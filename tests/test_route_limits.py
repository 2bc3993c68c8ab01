"""The small limits of the routes served beside the API (`/v1` OpenAI-compatible, `/feedback`,
`/mcp`), driven as ASGI apps with a `receive` that counts what the route reads: an oversized
body is refused 413 without being read (a declared Content-Length) or as soon as it passes
the limit (a chunked body); JSON nested past Python's parser is a 400 with the reason, not a
500; and `GET /mcp` answers 405 at once instead of an event stream that never closes."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from footnote.server import feedback_routes, openai_routes
from footnote.server import mcp_route as mcp_http
from footnote.server.credentials import Credentials
from footnote.server.settings import ServerSettings

ANONYMOUS = Credentials(None, None)
CHUNK = 65_536
HUNDRED_MB = 100 * 1024 * 1024
DEEP = b"[" * 100_000 + b"]" * 100_000


@pytest.fixture(autouse=True)
def anonymous_server(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No credentials configured (every caller is anonymous) and one default index."""
    settings = ServerSettings.from_env({"FOOTNOTE_INDEX": str(tmp_path / "index")})
    monkeypatch.setattr(openai_routes, "served_credentials", lambda: ANONYMOUS)
    monkeypatch.setattr(openai_routes, "served_settings", lambda: settings)
    monkeypatch.setattr(mcp_http, "served_credentials", lambda: ANONYMOUS)
    monkeypatch.setattr(mcp_http, "served_settings", lambda: settings)
    monkeypatch.setattr(feedback_routes, "served_credentials", lambda: ANONYMOUS)


@dataclass
class Exchange:
    """One request driven through an ASGI app: what it answered and how much it read."""

    status: int = 0
    body: bytes = b""
    read: int = 0
    headers: dict[str, str] = field(default_factory=dict)

    def json(self) -> Any:
        return json.loads(self.body)


def chunks_of(total: int) -> Iterator[bytes]:
    """`total` bytes of a JSON-looking body, made only as the route asks for them."""
    yield b'{"model": "footnote", "padding": "'
    sent = 0
    while sent < total:
        yield b"x" * CHUNK
        sent += CHUNK


async def drive(
    app: Any,
    method: str,
    path: str,
    chunks: Iterator[bytes],
    *,
    content_length: int | None = None,
    accept: bytes = b"application/json",
) -> Exchange:
    exchange = Exchange()
    pending = iter(chunks)
    finished = False

    async def receive() -> dict[str, Any]:
        nonlocal finished
        if finished:
            await asyncio.sleep(3600)  # the client stays connected
        chunk = next(pending, None)
        if chunk is None:
            finished = True
            return {"type": "http.request", "body": b"", "more_body": False}
        exchange.read += len(chunk)
        return {"type": "http.request", "body": chunk, "more_body": True}

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            exchange.status = message["status"]
            exchange.headers = {k.decode(): v.decode() for k, v in message["headers"]}
        elif message["type"] == "http.response.body":
            exchange.body += message.get("body", b"")

    headers = [(b"content-type", b"application/json"), (b"accept", accept)]
    if content_length is not None:
        headers.append((b"content-length", str(content_length).encode()))
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": method,
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "root_path": "",
        "query_string": b"",
        "headers": headers,
        "server": ("127.0.0.1", 8123),
        "client": ("127.0.0.1", 50000),
    }
    await asyncio.wait_for(app(scope, receive, send), timeout=30)
    return exchange


ROUTES = [
    pytest.param(openai_routes.router, "/v1/chat/completions", openai_routes.MAX_BODY, id="openai"),
    pytest.param(feedback_routes.router, "/feedback", feedback_routes.MAX_BODY, id="feedback"),
    pytest.param(mcp_http.McpEndpoint(), "/mcp", mcp_http.MAX_BODY, id="mcp"),
]


@pytest.mark.parametrize(("app", "path", "limit"), ROUTES)
async def test_a_declared_oversized_body_is_refused_unread(app: Any, path: str, limit: int) -> None:
    answer = await drive(app, "POST", path, chunks_of(HUNDRED_MB), content_length=HUNDRED_MB)
    assert answer.status == 413, answer.body
    assert answer.read == 0
    assert f"over {limit} bytes" in answer.body.decode()


@pytest.mark.parametrize(("app", "path", "limit"), ROUTES)
async def test_a_chunked_body_is_read_only_up_to_the_limit(app: Any, path: str, limit: int) -> None:
    answer = await drive(app, "POST", path, chunks_of(HUNDRED_MB))
    assert answer.status == 413, answer.body
    assert answer.read <= limit + CHUNK


async def test_deeply_nested_json_is_a_400_on_the_openai_route() -> None:
    answer = await drive(openai_routes.router, "POST", "/v1/chat/completions", iter([DEEP]))
    assert answer.status == 400, answer.body
    error = answer.json()["error"]
    assert error["code"] == "invalid_json" and "nested too deeply" in error["message"]


async def test_deeply_nested_json_is_a_400_on_mcp() -> None:
    answer = await drive(mcp_http.McpEndpoint(), "POST", "/mcp", iter([DEEP]))
    assert answer.status == 400, answer.body
    error = answer.json()["error"]
    assert error["code"] == -32700 and "nested too deeply" in error["message"]


async def test_get_on_mcp_answers_405_at_once() -> None:
    answer = await drive(
        mcp_http.McpEndpoint(), "GET", "/mcp", iter([]), accept=b"text/event-stream"
    )
    assert answer.status == 405
    assert answer.headers["allow"] == "POST"


async def test_mcp_still_answers_a_post_whose_body_it_checked() -> None:
    """The checked body is handed on to the SDK: an `initialize` round trip still works."""
    transport = httpx.ASGITransport(app=mcp_http.McpEndpoint())
    async with httpx.AsyncClient(transport=transport, base_url="http://footnote.test") as client:
        response = await client.post(
            "/mcp",
            json={
                "jsonrpc": "2.0",
                "id": 1,
                "method": "initialize",
                "params": {
                    "protocolVersion": "2025-06-18",
                    "capabilities": {},
                    "clientInfo": {"name": "limits-test", "version": "0"},
                },
            },
            headers={"accept": "application/json, text/event-stream"},
        )
    assert response.status_code == 200, response.text
    assert response.json()["result"]["serverInfo"]["name"]
