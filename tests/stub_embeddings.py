"""A loopback OpenAI-compatible embeddings server for tests and benchmarks.

    with StubEmbeddings(latency=0.1, rate_limited=3, retry_after="1") as stub:
        # OPENAI_BASE_URL=stub.base_url; init_embeddings("openai:stub-embed")...

POST /v1/embeddings answers after `latency` seconds with deterministic 16-dimension vectors
(from each input's hash, so a test can check which vector came back for which text). The
first `rate_limited` requests get HTTP 429 with `Retry-After: retry_after` instead; a request
while `hang` is set gets no answer for `hang` seconds, or until the stub stops. The stub
records every request's inputs and time, and the most requests it ever had in flight at once.
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import numpy as np

DIMENSION = 16


def stub_vector(text: str) -> list[float]:
    raw = np.frombuffer(hashlib.sha256(text.encode()).digest()[:DIMENSION], dtype=np.uint8)
    vector = raw.astype(np.float32) + 1.0
    return (vector / np.linalg.norm(vector)).tolist()


class StubEmbeddings:
    def __init__(
        self,
        *,
        latency: float = 0.0,
        rate_limited: int = 0,
        retry_after: str | None = "1",
        hang: float = 0.0,
    ) -> None:
        self.latency = latency
        self.rate_limited = rate_limited
        self.retry_after = retry_after
        self.hang = hang
        self.requests: list[tuple[float, int, list[str]]] = []
        """(arrival time, HTTP status sent, inputs) per request."""
        self.in_flight = 0
        self.max_in_flight = 0
        self._lock = threading.Lock()
        self._stopped = threading.Event()
        """Set on exit, so a hanging request ends with the stub rather than outliving it."""
        stub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:  # noqa: N802 (http.server's naming)
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                stub._serve(self, body)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    def __enter__(self) -> StubEmbeddings:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stopped.set()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    @property
    def ok_inputs(self) -> list[str]:
        return [text for _, status, inputs in self.requests if status == 200 for text in inputs]

    def _serve(self, handler: BaseHTTPRequestHandler, body: dict[str, Any]) -> None:
        inputs = body["input"] if isinstance(body["input"], list) else [body["input"]]
        with self._lock:
            limited = self.rate_limited > 0
            if limited:
                self.rate_limited -= 1
            status = 429 if limited else 200
            self.requests.append((time.monotonic(), status, list(inputs)))
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
        counted = True

        def leave() -> None:
            """The request stops counting as in flight: before its response is written, since
            the client may send its next request the moment it has read this one's (counted
            after, a loaded machine showed two in flight from a client sending one at a time)."""
            nonlocal counted
            if counted:
                with self._lock:
                    self.in_flight -= 1
                counted = False

        try:
            if self.hang and self._stopped.wait(self.hang):
                return
            if limited:
                payload: dict[str, Any] = {
                    "error": {"message": "Rate limit reached", "type": "rate_limit_exceeded"}
                }
                headers = {"Retry-After": self.retry_after} if self.retry_after else {}
            else:
                time.sleep(self.latency)
                payload = {
                    "object": "list",
                    "model": body.get("model", "stub"),
                    "data": [
                        {"object": "embedding", "index": i, "embedding": stub_vector(text)}
                        for i, text in enumerate(inputs)
                    ],
                    "usage": {"prompt_tokens": 0, "total_tokens": 0},
                }
                headers = {}
            data = json.dumps(payload).encode()
            handler.send_response(status)
            handler.send_header("Content-Type", "application/json")
            handler.send_header("Content-Length", str(len(data)))
            for name, value in headers.items():
                handler.send_header(name, value)
            leave()
            handler.end_headers()
            handler.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client gave up (its timeout)
        finally:
            leave()
