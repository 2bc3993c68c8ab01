"""A loopback stand-in for the parts of Google Drive's REST API (v3) the Drive connector reads,
shaped from Drive's public reference (developers.google.com/drive/api/reference/rest/v3):
`files.get` (metadata, or the content with `alt=media`), `files.export`, `files.list` with a
`q` of `'ID' in parents` and `trashed = false` over `corpora=user` or `corpora=drive&driveId=`,
`permissions.list`, `changes.getStartPageToken` and `changes.list` (`removed` for a file
deleted for good, the file with `trashed: true` for one in the trash). Listings are paged by
`nextPageToken`; the change feed ends with `newStartPageToken`. Errors have Drive's shape
(`{"error": {"code", "message", "errors": [{"domain", "reason", "message"}]}}`). The token is
read from `Authorization: Bearer` (401 authError for any other); `POST /token` grants it to a
service account's signed assertion. It can answer 429, or 403 rateLimitExceeded, with
`Retry-After: 1` once, or a redirect to another host once, hold the requests a pattern
matches until released (so a test can kill the client mid-sync), and records each request's
path and query."""

from __future__ import annotations

import datetime as dt
import json
import re
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

from tests.request_hold import RequestHold

PAGE_SIZE = 2
"""Items per page whatever `pageSize` asks, so every listing of a few items pages."""
FOLDER = "application/vnd.google-apps.folder"
DOC = "application/vnd.google-apps.document"


def stamp(minute: int) -> str:
    when = dt.datetime(2026, 11, 2, 9, 0, tzinfo=dt.UTC) + dt.timedelta(minutes=minute)
    return when.strftime("%Y-%m-%dT%H:%M:%S.000Z")


@dataclass
class StubFile:
    id: str
    name: str
    mime: str
    parents: list[str]
    content: bytes = b""
    modified: str = field(default_factory=lambda: stamp(0))
    owner: str | None = "octo@acme.example"
    modifier: str = "octo@acme.example"
    permissions: list[dict[str, Any]] = field(default_factory=list)
    trashed: bool = False
    version: int = 1
    drive: str | None = None
    permissions_status: int = 200
    """Answer `permissions.list` with this status (403: the caller may not list them)."""


def user(email: str, role: str = "reader") -> dict[str, Any]:
    return {"type": "user", "emailAddress": email, "role": role}


class DriveStub(RequestHold):
    """The stub's state and server; `base` is the API root to hand the client."""

    def __init__(self, token: str) -> None:
        self.token = token
        self.files: dict[str, StubFile] = {}
        self.changes: list[dict[str, Any]] = []
        self.requests: list[str] = []
        self.rate_limit_once: str | None = None
        """A path prefix (after /drive/v3) whose next request is answered 429."""
        self.rate_limit_status = 429
        """403 answers the rate limit as Drive's `rateLimitExceeded` 403."""
        self.redirect_once: str | None = None
        """A path prefix whose next request is answered 302 to another host."""
        RequestHold.__init__(self)
        self.lock = threading.Lock()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def start(self) -> DriveStub:
        self.thread.start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(5)

    # -- changes, each recorded in the change feed ---------------------------------------

    def put(self, file: StubFile) -> StubFile:
        self.files[file.id] = file
        self._changed(file.id)
        return file

    def edit(self, file_id: str, content: bytes, minute: int) -> None:
        file = self.files[file_id]
        file.content, file.modified = content, stamp(minute)
        self._changed(file_id)

    def unshare(self, file_id: str, email: str) -> None:
        file = self.files[file_id]
        file.permissions = [p for p in file.permissions if p.get("emailAddress") != email]
        self._changed(file_id)

    def trash(self, file_id: str) -> None:
        self.files[file_id].trashed = True
        self._changed(file_id)

    def delete(self, file_id: str) -> None:
        del self.files[file_id]
        self.changes.append({"fileId": file_id, "removed": True})

    def move(self, file_id: str, parent: str) -> None:
        self.files[file_id].parents = [parent]
        self._changed(file_id)

    def _changed(self, file_id: str) -> None:
        self.files[file_id].version += 1
        self.changes.append({"fileId": file_id, "removed": False})

    # -- answers ------------------------------------------------------------------------

    def answer(self, method: str, path: str, query: dict[str, list[str]], auth: str) -> tuple:
        request = path + ("?" + urlencode(query, doseq=True) if query else "")
        with self.lock:
            self.requests.append(request)
            if method == "POST" and path == "/token":
                return 200, {"access_token": self.token, "expires_in": 3600, "token_type": "Bearer"}
            rest = path.removeprefix("/drive/v3")
            if self.rate_limit_once and rest.startswith(self.rate_limit_once):
                self.rate_limit_once = None
                code = self.rate_limit_status
                return (
                    code,
                    _error(code, "rateLimitExceeded", "Rate Limit Exceeded"),
                    {"Retry-After": "1"},
                )
            if self.redirect_once and rest.startswith(self.redirect_once):
                self.redirect_once = None
                return 302, {}, {"Location": "http://127.0.0.2:9/drive/v3" + rest}
            if auth != f"Bearer {self.token}":
                return 401, _error(401, "authError", "Invalid Credentials"), {}
            # path and query: a download (alt=media) is told from a metadata read
            held = self.catches(request, request)
        self.wait_if(held)
        with self.lock:
            return self._route(rest.strip("/").split("/"), {k: v[0] for k, v in query.items()})

    def _route(self, parts: list[str], query: dict[str, str]) -> tuple:
        if parts == ["changes", "startPageToken"]:
            return 200, {"kind": "drive#startPageToken", "startPageToken": self._next()}, {}
        if parts == ["changes"]:
            return self._changes(query)
        if parts == ["files"]:
            return self._list(query)
        if parts[0] != "files" or len(parts) > 3:
            return 404, _error(404, "notFound", "Not Found"), {}
        file = self.files.get(parts[1])
        if file is None:
            return 404, _error(404, "notFound", f"File not found: {parts[1]}."), {}
        if len(parts) == 2 and query.get("alt") == "media":
            if file.mime.startswith("application/vnd.google-apps."):
                return 403, _error(403, "fileNotDownloadable", "Use Export"), {}
            return 200, file.content, {"Content-Type": file.mime}
        if len(parts) == 2:
            return 200, self._file_json(file), {}
        if parts[2] == "export" and file.mime == DOC:
            return 200, file.content, {"Content-Type": query.get("mimeType", "text/plain")}
        if parts[2] == "permissions":
            if file.permissions_status != 200:
                status = file.permissions_status
                return status, _error(status, "insufficientFilePermissions", "Forbidden"), {}
            return self._page(query, "permissions", [dict(p, id=f"p{n}") for n, p in
                                                     enumerate(file.permissions)])  # fmt: skip
        return 404, _error(404, "notFound", "Not Found"), {}

    def _list(self, query: dict[str, str]) -> tuple:
        q = query.get("q", "")
        parent = re.search(r"'([^']+)' in parents", q)
        drive = query.get("driveId") if query.get("corpora") == "drive" else None
        chosen = [
            f
            for f in self.files.values()
            if (parent is None or parent.group(1) in f.parents)
            and ("trashed = false" not in q or not f.trashed)
            and f.drive == drive
        ]
        chosen.sort(key=lambda f: f.name)
        return self._page(query, "files", [self._file_json(f) for f in chosen])

    def _changes(self, query: dict[str, str]) -> tuple:
        token = query.get("pageToken", "")
        if not token.isdigit() or not 1 <= int(token) <= len(self.changes) + 1:
            return 400, _error(400, "invalid", "Invalid Value"), {}
        start = int(token) - 1
        page = self.changes[start : start + PAGE_SIZE]
        body: dict[str, Any] = {"kind": "drive#changeList", "changes": []}
        for change in page:
            file = self.files.get(change["fileId"])
            entry = {"kind": "drive#change", "changeType": "file", "time": stamp(0), **change}
            if file is not None and not change["removed"]:
                entry["file"] = self._file_json(file)
            body["changes"].append(entry)
        if start + PAGE_SIZE < len(self.changes):
            body["nextPageToken"] = str(start + PAGE_SIZE + 1)
        else:
            body["newStartPageToken"] = self._next()
        return 200, body, {}

    def _next(self) -> str:
        return str(len(self.changes) + 1)

    def _page(self, query: dict[str, str], key: str, items: list[Any]) -> tuple:
        start = int(query.get("pageToken", "0").removeprefix("page"))
        body: dict[str, Any] = {key: items[start : start + PAGE_SIZE]}
        if start + PAGE_SIZE < len(items):
            body["nextPageToken"] = f"page{start + PAGE_SIZE}"
        return 200, body, {}

    def _file_json(self, file: StubFile) -> dict[str, Any]:
        kind = "document" if file.mime == DOC else "file"
        data: dict[str, Any] = {
            "kind": "drive#file",
            "id": file.id,
            "name": file.name,
            "mimeType": file.mime,
            "parents": file.parents,
            "trashed": file.trashed,
            "version": str(file.version),
            "modifiedTime": file.modified,
            "webViewLink": f"https://docs.google.com/{kind}/d/{file.id}/edit?usp=drivesdk",
            "lastModifyingUser": {"kind": "drive#user", "emailAddress": file.modifier},
        }
        if not file.mime.startswith("application/vnd.google-apps."):
            data["size"] = str(len(file.content))
        if file.drive:
            data["driveId"] = file.drive
        elif file.owner:
            data["owners"] = [{"kind": "drive#user", "emailAddress": file.owner}]
        return data


def _error(code: int, reason: str, message: str) -> dict[str, Any]:
    errors = [{"domain": "global", "reason": reason, "message": message}]
    return {"error": {"code": code, "message": message, "errors": errors}}


def _handler(stub: DriveStub) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def _serve(self, method: str) -> None:
            parts = urlsplit(self.path)
            if method == "POST":
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
            answer = stub.answer(
                method, parts.path, parse_qs(parts.query), self.headers.get("Authorization", "")
            )
            status, body = answer[0], answer[1]
            headers = answer[2] if len(answer) > 2 else {}
            data = body if isinstance(body, bytes) else json.dumps(body).encode()
            self.send_response(status)
            if "Content-Type" not in headers:
                self.send_header("Content-Type", "application/json; charset=UTF-8")
            self.send_header("Content-Length", str(len(data)))
            for name, value in headers.items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            self._serve("GET")

        def do_POST(self) -> None:  # noqa: N802
            self._serve("POST")

        def log_message(self, format: str, *args: Any) -> None:
            pass

    return Handler
