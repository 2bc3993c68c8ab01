"""A loopback Tavily stub for tests: POST /search with a bearer key, as tavily-python sends it.

    with StubTavily(api_key="tvly-good") as tavily:
        monkeypatch.setenv("TAVILY_API_BASE_URL", tavily.url)

A wrong or missing key gets HTTP 401 with Tavily's error body, which tavily-python turns
into InvalidAPIKeyError; `status` forces another status (429, 500) for every search.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

CANBERRA = [
    {
        "title": "Canberra - Wikipedia",
        "url": "https://en.wikipedia.org/wiki/Canberra",
        "content": "Canberra is the capital city of Australia. It was chosen as the capital in "
        "1908 as a compromise between Sydney and Melbourne.",
        "score": 0.93,
        "raw_content": None,
    },
    {
        "title": "Australian Capital Territory",
        "url": "https://example.org/act",
        "content": "The Australian Capital Territory is a federal territory in south-eastern "
        "Australia that contains Canberra.",
        "score": 0.71,
        "raw_content": None,
    },
]
"""Results for "What is the capital of Australia?"."""


@dataclass
class Recorded:
    """One request the stub received."""

    path: str
    headers: dict[str, str]
    body: dict[str, Any]


class StubTavily:
    """A Tavily-compatible HTTP server on 127.0.0.1 (a free port), in a background thread."""

    def __init__(self, api_key: str = "tvly-stub-key", results: list[dict] | None = None) -> None:
        self.api_key = api_key
        self.results = list(CANBERRA if results is None else results)
        self.status: int | None = None
        self.requests: list[Recorded] = []
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _make_handler(self))
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever, args=(0.05,), name="stub-tavily", daemon=True
        )

    @property
    def url(self) -> str:
        """What to set as TAVILY_API_BASE_URL."""
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def start(self) -> StubTavily:
        self._thread.start()
        return self

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    def __enter__(self) -> StubTavily:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _answer(self, path: str, headers: dict[str, str], body: dict[str, Any]) -> tuple[int, Any]:
        if path.rstrip("/") != "/search":
            return 404, {"detail": {"error": f"no route {path}"}}
        if headers.get("authorization") != f"Bearer {self.api_key}":
            return 401, {"detail": {"error": "Unauthorized: missing or invalid API key."}}
        if self.status is not None:
            return self.status, {"detail": {"error": f"stub status {self.status}"}}
        limit = int(body.get("max_results") or 5)
        return 200, {
            "query": body.get("query", ""),
            "follow_up_questions": None,
            "answer": None,
            "images": [],
            "results": self.results[:limit],
            "response_time": 0.01,
            "request_id": "stub-request",
        }


def _make_handler(stub: StubTavily) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            """Quiet: tests read `stub.requests` instead."""

        def do_POST(self) -> None:
            length = int(self.headers.get("content-length") or 0)
            try:
                body = json.loads(self.rfile.read(length) or b"{}")
            except ValueError:
                body = {}
            headers = {k.lower(): v for k, v in self.headers.items()}
            stub.requests.append(Recorded(self.path, headers, body))
            status, payload = stub._answer(self.path, headers, body)
            data = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    return Handler
