"""What Aegra serves for Footnote: the chat page as a FastAPI app, and the answer graph behind
a factory that re-checks each run's context (named by file path in the config that
`footnote.production` writes).

Aegra mounts its API on the custom app, so the app decides which meta routes exist: no
OpenAPI or docs pages, and `/info` only for an admin. `/`, `/ok`, `/health`, `/ready` and
`/live` stay public (load balancers call them; they say nothing about users or data).

The factory is defence in depth: `footnote.aegra_auth` already pins the operator's settings
when a run is created, but Aegra merges an assistant's stored context under the run's and
drops in-place edits, so the context that reaches the graph is checked again, in the process
that runs it, and a run whose context the operator would not allow fails before any node.
"""

from __future__ import annotations

import asyncio
import json
import re
from http import HTTPStatus
from typing import Any

from fastapi import FastAPI, HTTPException, Request
from fastapi.responses import JSONResponse
from langgraph.graph.state import CompiledStateGraph
from langgraph_sdk.runtime import ServerRuntime
from starlette.types import ASGIApp, Receive, Scope, Send

from footnote import auth as served
from footnote import webapp
from footnote.aegra_auth import enforce_server_settings
from footnote.credentials import Identity, Unauthenticated
from footnote.graph.graph import graph as answer_graph

ADMIN_ONLY = ("/info", "/metrics", "/docs", "/redoc", "/openapi.json")
"""Aegra's meta routes: they describe the server, so only an admin may read them."""


async def _refuse(send: Send, status: int, detail: str) -> None:
    body = json.dumps({"detail": detail}).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [(b"content-type", b"application/json")],
        }
    )
    await send({"type": "http.response.body", "body": body})


def _caller(scope: Scope) -> Identity | None:
    """Who the request's credentials name; None when they name nobody (Aegra answers 401)."""
    headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
    try:
        return served.CREDENTIALS.identify(headers.get("authorization"), headers.get("x-api-key"))
    except Unauthenticated:
        return None


class AdminOnlyMeta:
    """Refuse `ADMIN_ONLY` paths unless the caller's credentials are an admin's."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "")
        if scope["type"] == "http" and any(
            path == p or path.startswith(p + "/") for p in ADMIN_ONLY
        ):
            caller = await asyncio.to_thread(_caller, scope)
            if caller is None or not caller.admin or caller.method == "anonymous":
                await _refuse(send, 401 if caller is None else 403, "not available")
                return
        await self.app(scope, receive, send)


class OwnThreadsOnly:
    """Every `/threads/{id}...` route answers 404 unless the thread is the caller's and was
    written under the access the caller still has.

    Aegra scopes most thread routes by owner itself, but not all (listing a thread's runs
    answers `[]` to anyone), and none by Footnote's access scope: this is the one check all
    of them pass. A thread id nobody owns goes through (a run may create it).
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        found = _THREAD_PATH.match(scope.get("path", "")) if scope["type"] == "http" else None
        if found is not None:
            caller = await asyncio.to_thread(_caller, scope)
            if caller is not None and not await _may_use_thread(found.group(1), caller):
                await _refuse(send, 404, f"Thread '{found.group(1)}' not found")
                return
        await self.app(scope, receive, send)


_THREAD_PATH = re.compile(r"^/threads/(?!(?:search|prune|count)(?:/|$))([^/]+)(?:/|$)")
"""A path naming one thread (any text: Aegra's thread ids are a text column)."""


async def _may_use_thread(thread_id: str, caller: Identity) -> bool:
    from aegra_api.core.orm import Thread, get_session_maker
    from sqlalchemy import select

    async with get_session_maker()() as session:
        row = (
            await session.execute(
                select(Thread.user_id, Thread.metadata_json).where(Thread.thread_id == thread_id)
            )
        ).first()
    if row is None:
        return True
    user = caller.as_user()
    metadata = row.metadata_json or {}
    return (
        row.user_id == user["identity"]
        and metadata.get(served.OWNER) == user["identity"]
        and metadata.get(served.SCOPE) == user["scope"]
    )


async def http_error(request: Request, exc: Exception) -> JSONResponse:
    """Errors as the LangGraph API words them (`detail`, which Footnote's page and the SDK
    read), with Aegra's Agent Protocol fields beside it."""
    assert isinstance(exc, HTTPException)
    code = HTTPStatus(exc.status_code)
    return JSONResponse(
        {
            "detail": exc.detail,
            "error": code.phrase.lower().replace(" ", "_"),
            "message": str(exc.detail),
        },
        status_code=exc.status_code,
        headers=exc.headers,
    )


async def ok(request: Request) -> JSONResponse:
    """Liveness as the dev runtime answers it (`/ok`), and a root that names no version."""
    return JSONResponse({"ok": True})


app = FastAPI(title="Footnote", docs_url=None, redoc_url=None, openapi_url=None)
app.router.routes.extend(webapp.app.routes)
app.add_route("/ok", ok)
app.add_route("/", ok)
app.add_middleware(AdminOnlyMeta)
app.add_middleware(OwnThreadsOnly)
app.add_exception_handler(HTTPException, http_error)


def make_graph(runtime: ServerRuntime) -> CompiledStateGraph[Any, Any, Any, Any]:
    """The answer graph; for a run, only after its context passed `enforce_server_settings`."""
    execution = runtime.execution_runtime
    if execution is not None:
        enforce_server_settings(execution.context)
    return answer_graph
