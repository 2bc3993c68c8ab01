"""What Aegra serves for Footnote: the chat page as a FastAPI app, and the answer graph behind
a factory that re-checks each run's context (named by file path in the config that
`footnote.server.production` writes).

The custom app carries the dev runtime's own routes (`footnote.server.webapp`): the chat page,
feedback, Footnote's MCP tools at `/mcp` and the OpenAI-compatible `/v1`, each authenticating
its caller with the API's credentials itself.

Aegra mounts its API on the custom app, so the app decides which meta routes exist: no
OpenAPI or docs pages, and `/info` only for an admin. `/`, `/ok`, `/health`, `/ready` and
`/live` stay public (load balancers call them; they say nothing about users or data).
In front of Aegra's thread routes, one check that the thread is the caller's and was written
under the access the caller still has (`OwnThreadsOnly`).

Outermost of all, only the routes Footnote has vetted are served (`footnote.server.aegra_routes`):
anything else, `/threads/{id}/commands` included, answers 404 before Aegra sees it.

The factories are defence in depth: `footnote.server.aegra_auth` already pins the operator's
settings when a run is created, but Aegra merges an assistant's stored context under the
run's, drops in-place edits, and has routes that skip the run handler, so every graph
(`footnote`, `indexer`, `library`) is reached through a factory that checks the context
again, in the process that runs it: a run whose context the operator would not allow fails
before any node, whichever route started it.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from http import HTTPStatus
from typing import Any

from fastapi import FastAPI, HTTPException, Request
from fastapi.responses import JSONResponse
from langgraph.graph.state import CompiledStateGraph
from langgraph_sdk.runtime import ServerRuntime
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from footnote.graph.graph import graph as answer_graph
from footnote.graph.indexer import graph as indexer_graph
from footnote.graph.indexer import library as library_graph
from footnote.server import auth as served
from footnote.server import metrics, webapp
from footnote.server.aegra_auth import aegra_user, enforce_corpus_settings, enforce_server_settings
from footnote.server.aegra_routes import VettedRoutesOnly
from footnote.server.credentials import Identity, Unauthenticated
from footnote.server.settings import ContextRefused

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
    of them pass. A thread id nobody owns goes through; when a run asks to create it
    (`if_not_exists: "create"`), it is created here first, with the caller's owner and scope
    (Aegra's own auto-creation would store neither, and the thread would be lost to its owner);
    otherwise such a run answers 404, as LangGraph's default `if_not_exists: "reject"` does
    (Aegra ignores the field and would auto-create it). A state write (`POST .../state`) is
    refused (403) to its owner too, as the dev runtime refuses it.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        found = _THREAD_PATH.match(scope.get("path", "")) if scope["type"] == "http" else None
        if found is None:
            await self.app(scope, receive, send)
            return
        thread_id = found.group(1)
        caller = await asyncio.to_thread(_caller, scope)
        if caller is None:  # Aegra answers 401
            await self.app(scope, receive, send)
            return
        owner = await _thread_owner(thread_id)
        if owner is not None and owner != _ownership(caller):
            await _refuse(send, 404, f"Thread '{thread_id}' not found")
            return
        if scope["method"] == "POST" and _STATE_PATH.match(scope["path"]):
            # As on the dev runtime (`footnote.server.auth.update_thread`), admins included:
            # feedback and its export trust a thread's state as the record of the runs.
            await _refuse(send, 403, "a thread's state is written by its runs only")
            return
        if owner is None and scope["method"] == "POST" and _RUN_PATH.match(scope["path"]):
            body, receive = await _buffered(receive)
            try:
                wanted = json.loads(body or b"{}").get("if_not_exists") == "create"
            except (ValueError, AttributeError):
                wanted = False
            if not wanted:  # Aegra would make it without the caller's scope: lost to them
                await _refuse(send, 404, f"Thread '{thread_id}' not found")
                return
            await _create_thread(thread_id, caller)
        await self.app(scope, receive, send)


_RUN_PATH = re.compile(r"^/threads/[^/]+/runs(?:/wait|/stream)?/?$")
_STATE_PATH = re.compile(r"^/threads/[^/]+/state/?$")


async def _buffered(receive: Receive) -> tuple[bytes, Receive]:
    """The request body, and a `receive` that hands the same body on downstream."""
    chunks: list[bytes] = []
    while True:
        message = await receive()
        chunks.append(message.get("body", b""))
        if not message.get("more_body"):
            break
    body = b"".join(chunks)
    return body, _replay(body, receive)


async def _run_request(receive: Receive) -> tuple[Any, Receive]:
    """A run request's JSON body (None when it is not JSON: Aegra answers that itself), and
    a `receive` that hands the same body on downstream."""
    body, receive = await _buffered(receive)
    try:
        return json.loads(body or b"{}"), receive
    except ValueError:
        return None, receive


def _replay(body: bytes, receive: Receive) -> Receive:
    """A `receive` that hands `body` on downstream, then whatever comes next."""
    sent = False

    async def replay() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay


_THREAD_PATH = re.compile(r"^/threads/(?!(?:search|prune|count)(?:/|$))([^/]+)(?:/|$)")
"""A path naming one thread (any text: Aegra's thread ids are a text column)."""


def _ownership(caller: Identity) -> tuple[str, str, str]:
    """(user_id, owner, scope) as a thread of this caller's must carry them now."""
    user = aegra_user(caller)
    return (user["identity"], user["identity"], user["scope"])


async def _thread_owner(thread_id: str) -> tuple[str, str, str] | None:
    """The thread's (user_id, owner, scope); None if no such thread exists."""
    from aegra_api.core.orm import Thread, get_session_maker
    from sqlalchemy import select

    async with get_session_maker()() as session:
        row = (
            await session.execute(
                select(Thread.user_id, Thread.metadata_json).where(Thread.thread_id == thread_id)
            )
        ).first()
    if row is None:
        return None
    metadata = row.metadata_json or {}
    return (
        row.user_id,
        str(metadata.get(served.OWNER, "")),
        str(metadata.get(served.SCOPE, "")),
    )


async def _create_thread(thread_id: str, caller: Identity) -> None:
    """The thread a run asked to create, made as `POST /threads` would make it."""
    from aegra_api.core.orm import Thread, get_session_maker
    from sqlalchemy.dialects.postgresql import insert

    user_id, owner, scope = _ownership(caller)
    metadata = {served.OWNER: owner, served.SCOPE: scope, "thread_name": ""}
    async with get_session_maker()() as session:
        await session.execute(
            insert(Thread)
            .values(thread_id=thread_id, status="idle", metadata_json=metadata, user_id=user_id)
            .on_conflict_do_nothing(index_elements=["thread_id"])
        )
        await session.commit()


class RunWebhooks:
    """A run's `webhook` refused as the dev server refuses it (`ServerSettings.webhook`: 403
    unless on the operator's allowlist). Aegra's run models drop the field without a word and
    deliver no webhooks, so even an allowlisted one is refused here (422), not lost.

    A stateless run asking to keep its thread (`on_completion: "keep"`) is refused too (422):
    Aegra would make that thread without the caller's access scope (owned by nobody who
    could read it), and a thread always has its owner, whichever route made it."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (
            scope["type"] != "http"
            or scope["method"] != "POST"
            or not _ANY_RUN_PATH.match(scope.get("path", ""))
        ):
            await self.app(scope, receive, send)
            return
        request, receive = await _run_request(receive)
        requests = request if isinstance(request, list) else [request]
        hooks = [r.get("webhook") for r in requests if isinstance(r, dict)]
        asked = any(hook not in (None, "") for hook in hooks)
        kept = scope["path"].startswith("/runs") and any(
            isinstance(r, dict) and r.get("on_completion") == "keep" for r in requests
        )
        # Without credentials: on to Aegra, which answers 401.
        if (asked or kept) and await asyncio.to_thread(_caller, scope) is not None:
            if kept:  # Aegra would make its thread without the caller's scope
                await _refuse(
                    send, 422, "stateless runs are not kept here: create a thread and run on it"
                )
                return
            try:
                for hook in hooks:
                    served.SETTINGS.webhook(hook)
            except ContextRefused as exc:
                await _refuse(send, exc.status, exc.message)
                return
            await _refuse(send, 422, "this server's runtime does not deliver run webhooks")
            return
        await self.app(scope, receive, send)


_ANY_RUN_PATH = re.compile(r"^(?:/threads/[^/]+)?/runs(?:/wait|/stream|/batch)?/?$")
"""Paths that create a run (on a thread, or stateless)."""


class RunMetrics:
    """Each run request counted and timed (`footnote.server.metrics`) while the operator has
    metrics on: its graph, route and outcome, and for the indexer its action, as fixed label
    words (nothing else of the request is read into a metric)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "")
        if (
            scope["type"] != "http"
            or scope["method"] != "POST"
            or not _ANY_RUN_PATH.match(path)
            or not metrics.enabled()
        ):
            await self.app(scope, receive, send)
            return
        request, receive = await _run_request(receive)
        request = request if isinstance(request, dict) else {}
        run_input = request.get("input")
        action = run_input.get("action", "sources") if isinstance(run_input, dict) else None
        graph = served.corpus_graph_of(request.get("assistant_id")) or "footnote"
        route = next((r for r in ("wait", "stream") if path.rstrip("/").endswith(r)), "background")
        status = 500
        started = time.monotonic()

        async def counted(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        try:
            await self.app(scope, receive, counted)
        finally:
            metrics.observe_run(graph, route, action, status, time.monotonic() - started)


class AssistantContexts:
    """An assistant stores its checked context (`ServerSettings.check`: names the graph does
    not know dropped), as on the dev server, where `footnote.server.auth.write_assistant` rewrites
    it in place. Aegra ignores such edits, so the request body is rewritten here; a context
    that `check` refuses goes on unchanged, and `footnote.server.aegra_auth` refuses it."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path, method = scope.get("path", ""), scope.get("method")
        if scope["type"] == "http" and (
            (method == "POST" and _ASSISTANTS.match(path))
            or (method == "PATCH" and _ONE_ASSISTANT.match(path))
        ):
            body, receive = await _buffered(receive)
            checked = _checked_assistant(body)
            if checked is not None:
                receive = _replay(checked, receive)
                headers = [(k, v) for k, v in scope["headers"] if k.lower() != b"content-length"]
                headers.append((b"content-length", str(len(checked)).encode()))
                scope = {**scope, "headers": headers}
        await self.app(scope, receive, send)


_ASSISTANTS = re.compile(r"^/assistants/?$")
_ONE_ASSISTANT = re.compile(r"^/assistants/(?!(?:search|count)/?$)[^/]+/?$")


def _checked_assistant(body: bytes) -> bytes | None:
    """The request with its stored contexts checked; None to leave it as it came."""
    try:
        request = json.loads(body or b"{}")
    except ValueError:
        return None
    if not isinstance(request, dict):
        return None
    config = request.get("config")
    holders = [(request, "context")]
    if isinstance(config, dict):
        holders.append((config, "configurable"))
    try:
        for holder, key in holders:
            if isinstance(holder.get(key), dict):
                holder[key] = served.SETTINGS.check(holder[key])
    except ContextRefused:
        return None
    return json.dumps(request).encode()


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


async def _dependencies() -> dict[str, str]:
    """`ok` or `unreachable` for PostgreSQL and Redis, as this replica reaches them (no
    error text: these routes are public)."""
    from aegra_api.core.database import db_manager
    from aegra_api.core.redis_manager import redis_manager
    from sqlalchemy import text

    found = {"postgresql": "unreachable", "redis": "unreachable"}
    try:
        engine = db_manager.engine
        if engine is not None:
            async with engine.begin() as conn:
                await asyncio.wait_for(conn.execute(text("SELECT 1")), 5)
            found["postgresql"] = "ok"
    except Exception:  # noqa: BLE001 - any failure means not reachable now
        pass
    try:
        await asyncio.wait_for(redis_manager.get_client().ping(), 5)
        found["redis"] = "ok"
    except Exception:  # noqa: BLE001
        pass
    return found


async def health(request: Request) -> JSONResponse:
    """PostgreSQL and Redis as this replica sees them; 503 unless both answer."""
    found = await _dependencies()
    healthy = all(v == "ok" for v in found.values())
    return JSONResponse(
        {"status": "healthy" if healthy else "unhealthy", **found}, 200 if healthy else 503
    )


async def ready(request: Request) -> JSONResponse:
    """Readiness for a load balancer: 200 only while PostgreSQL and Redis both answer (a
    replica that cannot reach Redis cannot hand runs to the workers)."""
    found = await _dependencies()
    ready = all(v == "ok" for v in found.values())
    return JSONResponse(
        {"status": "ready" if ready else "not ready", **found}, 200 if ready else 503
    )


app = FastAPI(title="Footnote", docs_url=None, redoc_url=None, openapi_url=None)
app.router.routes.extend(webapp.app.routes)  # /ui, /feedback, /mcp, /v1: as on the dev runtime
app.add_route("/ok", ok)
app.add_route("/", ok)
app.add_route("/health", health)  # before Aegra's own, which know nothing of Redis
app.add_route("/ready", ready)
app.add_route("/metrics", metrics.metrics_page)  # admins only (AdminOnlyMeta); off: 404
app.add_middleware(AdminOnlyMeta)
app.add_middleware(OwnThreadsOnly)
app.add_middleware(RunWebhooks)
app.add_middleware(AssistantContexts)
app.add_middleware(RunMetrics)  # outside the refusals above: refused runs are counted too
app.add_middleware(VettedRoutesOnly)  # added last: the outermost layer
app.add_exception_handler(HTTPException, http_error)


def make_graph(runtime: ServerRuntime) -> CompiledStateGraph[Any, Any, Any, Any]:
    """The answer graph; for a run, only after its context passed `enforce_server_settings`."""
    execution = runtime.execution_runtime
    if execution is not None:
        enforce_server_settings(execution.context)
    return answer_graph


def make_indexer(runtime: ServerRuntime) -> CompiledStateGraph[Any, Any, Any, Any]:
    """The indexer; for a run, only an admin's, on an index the operator named, with every
    other setting (upload folder, private URLs, embeddings) the server's own."""
    execution = runtime.execution_runtime
    if execution is not None:
        try:
            enforce_corpus_settings("indexer", runtime.user, execution.context)
        except ContextRefused as exc:
            method, name = (
                served.user_field(runtime.user, f) for f in ("auth_method", "display_name")
            )
            served.audit_refused(f"{method}:{name}", None, None, exc.message)
            raise
    return indexer_graph


def make_library(runtime: ServerRuntime) -> CompiledStateGraph[Any, Any, Any, Any]:
    """The library listing; for a run, only on an index the operator named."""
    execution = runtime.execution_runtime
    if execution is not None:
        enforce_corpus_settings("library", runtime.user, execution.context)
    return library_graph
