"""The routes `langgraph dev` serves outside its auth middleware, closed by Footnote.

The development runtime registers its meta and internal routes beside the authenticated API,
so the custom app (`http.app`) carries this middleware: the server makes a custom app's
middleware the outermost layer of the whole application, so it sees every request first.

    public          GET /ok and GET / (health), the chat page and its files under /ui
    admin only      /info, /metrics, /docs, /openapi.json (401 without credentials, 403 if
                    the caller is not an admin)
    closed to all   /internal/* (a raw thread of anyone's, delete everything) and /deploy*
                    (spawns a deployment): 404, admins included, since an admin does not
                    reach other callers' conversations either
    refused to all  /store/* (closed by the auth handler too): 401 without credentials, else
                    403, before the server parses a body it could fail on with a 500
    everything else passes to the server's own auth (`footnote/server/auth.py`)

It also answers 404 where the server would tell a caller that an id it may not see exists
(409 "already exists" when creating a thread or an assistant with someone else's id).
"""

from __future__ import annotations

import json
import re
from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from footnote.server.credentials import Credentials, CredentialsError, Identity, Unauthenticated

ADMIN_ONLY = frozenset({"/info", "/metrics", "/docs", "/openapi.json"})
CLOSED_PREFIXES = ("/internal", "/deploy")
REFUSED_PREFIXES = ("/store",)
NO_EXISTENCE_ORACLE = frozenset({"/threads", "/assistants"})
"""POST here with an id that is taken answers 404, whoever holds it."""
_SLASHES = re.compile(r"/{2,}")


def route_path(path: str) -> str:
    """The path as the router will match it: repeated and trailing slashes folded."""
    folded = _SLASHES.sub("/", path)
    return folded.rstrip("/") or "/"


def verdict(path: str) -> str:
    """`closed`, `refused`, `admin` or `pass` for a request path."""
    folded = route_path(path)
    if any(folded == p or folded.startswith(p + "/") for p in CLOSED_PREFIXES):
        return "closed"
    if any(folded == p or folded.startswith(p + "/") for p in REFUSED_PREFIXES):
        return "refused"
    return "admin" if folded in ADMIN_ONLY else "pass"


def _header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope.get("headers", []):
        if key.lower() == name:
            return bytes(value).decode("latin-1")
    return None


async def _answer(send: Send, status: int, detail: str) -> None:
    body = json.dumps({"detail": detail}).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


class ClosedRoutes:
    """ASGI middleware enforcing the table in this module's docstring."""

    def __init__(self, app: ASGIApp, credentials: Credentials | None = None) -> None:
        self.app = app
        self._credentials = credentials

    def credentials(self) -> Credentials:
        """The operator's credentials, read on first use (the server validates them at start)."""
        if self._credentials is None:
            self._credentials = Credentials.from_env()
        return self._credentials

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        path = scope.get("path", "")
        decision = verdict(path)
        if decision == "closed":
            if scope["type"] == "websocket":
                await send({"type": "websocket.close", "code": 1008})
                return
            await _answer(send, 404, "Not Found")
            return
        if decision == "refused":
            unknown = await self._refusal(scope)
            if scope["type"] == "websocket":
                await send({"type": "websocket.close", "code": 1008})
                return
            if unknown is not None and unknown[0] == 401:
                await _answer(send, *unknown)
                return
            await _answer(send, 403, "the store is not available on this server")
            return
        if decision == "admin":
            refused = await self._refusal(scope)
            if refused is not None:
                if scope["type"] == "websocket":
                    await send({"type": "websocket.close", "code": 1008})
                    return
                await _answer(send, *refused)
                return
        if scope.get("method") == "POST" and route_path(path) in NO_EXISTENCE_ORACLE:
            await self.app(scope, receive, _conflict_as_not_found(send))
            return
        await self.app(scope, receive, send)

    async def _refusal(self, scope: Scope) -> tuple[int, str] | None:
        try:
            identity: Identity = await run_in_threadpool(
                self.credentials().identify,
                _header(scope, b"authorization"),
                _header(scope, b"x-api-key"),
            )
        except Unauthenticated as exc:
            return 401, str(exc)
        except CredentialsError:
            return 401, "the server's credentials are misconfigured; ask the operator"
        if not identity.admin or identity.method == "anonymous":
            return 403, "this route is for the server's administrators"
        return None


def _conflict_as_not_found(send: Send) -> Send:
    """A `send` that turns a 409 response into a plain 404 (and drops its body)."""
    conflict = False

    async def wrapped(message: Message) -> None:
        nonlocal conflict
        if message["type"] == "http.response.start" and message["status"] == 409:
            conflict = True
            return
        if conflict:
            if message["type"] == "http.response.body" and not message.get("more_body"):
                await _answer(send, 404, "Not Found")
            return
        await send(message)

    return wrapped


def close_routes(app: Any) -> Any:
    """Put the middleware on a Starlette app (the server lifts it above every route)."""
    app.add_middleware(ClosedRoutes)
    return app
