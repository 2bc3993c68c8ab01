"""A tiny website for crawl tests, run as its own process on a loopback port:
`python tests/site_server.py ROOT LOG`. Serves files under ROOT with an ETag (their sha256)
and answers If-None-Match with 304, redirects /old.html to /b.html, /away.html to
localhost and /malformed.html to `http:\\\\x\\y`, and appends one
`PATH STATUS` line per request to LOG. Prints its port on the first line."""

from __future__ import annotations

import hashlib
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

ROOT = Path(sys.argv[1])
LOG = Path(sys.argv[2])
TYPES = {".html": "text/html; charset=utf-8", ".xml": "application/xml", ".txt": "text/plain"}


class Handler(BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 - the http.server hook
        path = self.path.split("?", 1)[0]
        if path == "/old.html":
            return self._send(301, b"", {"Location": "/b.html"})
        if path == "/malformed.html":  # a redirect to a URL no client can parse
            return self._send(302, b"", {"Location": "http:\\\\x\\y"})
        if path == "/away.html":  # the same server under another host name
            port = self.server.server_address[1]
            return self._send(302, b"", {"Location": f"http://localhost:{port}/b.html"})
        file = ROOT / path.lstrip("/")
        if not file.is_file():
            return self._send(404, b"not found", {"Content-Type": "text/plain"})
        data = file.read_bytes()
        etag = '"' + hashlib.sha256(data).hexdigest()[:16] + '"'
        if self.headers.get("If-None-Match") == etag:
            return self._send(304, b"", {"ETag": etag})
        self._send(200, data, {"Content-Type": TYPES.get(file.suffix, "text/html"), "ETag": etag})

    def _send(self, status: int, body: bytes, headers: dict[str, str]) -> None:
        with LOG.open("a") as log:
            log.write(f"{self.path} {status}\n")
        self.send_response(status)
        for key, value in headers.items():
            self.send_header(key, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
print(server.server_address[1], flush=True)
server.serve_forever()
