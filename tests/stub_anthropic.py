"""A loopback Anthropic Messages API server for tests: the real `anthropic` client (inside
langchain-anthropic) talks to it over real HTTP, so tests see exactly what it sends.

    with StubAnthropic() as stub:
        stub.reply = lambda body: "Situated: ..."
        ChatAnthropic(base_url=stub.url, api_key="x", model="claude-stub")...

Each POST /v1/messages is recorded (`stub.requests`) and answered with the text `reply`
gives for its body. Its usage is reported as Anthropic's prompt cache would: the request's
content up to and including the last block marked `cache_control: {"type": "ephemeral"}` is
its cacheable prefix; the first request with a given prefix writes it
(`cache_creation_input_tokens`) once it is answered, later ones read it
(`cache_read_input_tokens`), and a request without the marker caches nothing. Tokens are
counted as whitespace-separated words.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

EPHEMERAL = {"type": "ephemeral"}
ANSWER_S = 0.05
"""How long each answer takes: requests sent together overlap, as they do at a provider."""


def blocks_of(body: dict[str, Any]) -> list[dict[str, Any]]:
    """The request's content blocks in order: the system prompt's, then each message's."""
    out: list[dict[str, Any]] = []
    for part in [body.get("system") or [], *(m["content"] for m in body["messages"])]:
        if isinstance(part, str):
            out.append({"type": "text", "text": part})
        else:
            out.extend(part)
    return out


def _tokens(blocks: list[dict[str, Any]]) -> int:
    return sum(len(str(b.get("text", "")).split()) for b in blocks)


class StubAnthropic:
    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.reply: Callable[[dict[str, Any]], str] = lambda body: "A stub context."
        self.cache_writes = 0
        self.cache_reads = 0
        self._cached: set[str] = set()
        self._lock = threading.Lock()
        stub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:  # quiet test output
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
                if self.path.rstrip("/") != "/v1/messages":
                    self._send(404, {"type": "error", "error": {"type": "not_found_error"}})
                    return
                self._send(200, stub._answer(body))

            def _send(self, status: int, payload: dict[str, Any]) -> None:
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def _answer(self, body: dict[str, Any]) -> dict[str, Any]:
        blocks = blocks_of(body)
        marked = [i for i, b in enumerate(blocks) if b.get("cache_control") == EPHEMERAL]
        prefix = blocks[: marked[-1] + 1] if marked else []
        key = json.dumps(prefix, sort_keys=True)
        with self._lock:
            self.requests.append(body)
            hit = bool(prefix) and key in self._cached
            written = 0 if hit else _tokens(prefix)
            read = _tokens(prefix) if hit else 0
            self.cache_writes += written
            self.cache_reads += read
        answer = self.reply(body)
        time.sleep(ANSWER_S)
        with self._lock:  # cached once answered: a request sent meanwhile misses it
            if prefix:
                self._cached.add(key)
        return {
            "id": f"msg_stub_{len(self.requests)}",
            "type": "message",
            "role": "assistant",
            "model": body.get("model", "claude-stub"),
            "content": [{"type": "text", "text": answer}],
            "stop_reason": "end_turn",
            "stop_sequence": None,
            "usage": {
                "input_tokens": _tokens(blocks) - _tokens(prefix),
                "output_tokens": len(answer.split()),
                "cache_creation_input_tokens": written,
                "cache_read_input_tokens": read,
            },
        }

    def __enter__(self) -> StubAnthropic:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)
