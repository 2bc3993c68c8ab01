"""Footnote's MCP tools served over Streamable HTTP at `/mcp`, on both runtimes.

Stateless (`stateless_http`): every request carries its own credentials and is served by a
fresh transport, so replicas behind a load balancer need no shared session. The caller is
identified before the MCP layer sees the request, exactly as the API identifies it (the same
API keys and JWT bearer tokens, `footnote.server.credentials`): without valid credentials the
answer is 401, not an MCP session. Search, list and fetch read the index in this process with
the caller's groups; `ask` and the admin tools go through the server's own API as the caller
(`footnote.server.own_api`), so threads, pinned settings and the admin check are the API's.
The index is chosen by name among the operator's (`FOOTNOTE_INDEX`, `FOOTNOTE_INDEXES`); a
path or URL in a tool's arguments is refused with the reason.

Before the MCP SDK sees a POST, its body is read under MAX_BODY (413 past it, from the
Content-Length or as a chunked body arrives) and JSON nested too deeply for Python's parser is
a 400 parse error, not a 500. `GET /mcp` (a server-to-client event stream) answers 405: a
stateless server has nothing to send on it, and the stream would otherwise never close.
"""

from __future__ import annotations

import asyncio
import functools
import json
from typing import Any

from mcp.server.lowlevel import Server
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.types import PARSE_ERROR
from starlette.requests import Request
from starlette.types import Message, Receive, Scope, Send

from footnote.mcp.tools import FootnoteTools, McpSession, ToolRefused, make_server
from footnote.server.bodies import BodyTooLarge, limited_body
from footnote.server.credentials import CredentialsError, Unauthenticated
from footnote.server.own_api import (
    ApiRefused,
    OwnApi,
    credentials_of,
    loopback_url,
    served_credentials,
    served_settings,
)
from footnote.server.settings import ContextRefused
from footnote.store.types import Caller

SESSION_KEY = "footnote.mcp_session"
"""Where the authenticated caller's session rides in the request's ASGI scope."""
MAX_BODY = 1_000_000
"""A JSON-RPC message: a tool call's arguments are a question, a query or a source's URL."""


def index_location(name: str) -> str:
    """The operator's index of that name; ToolRefused, with the reason, for anything else
    (another name, a path or a URL, even the operator's own)."""
    settings = served_settings()
    if name in settings.indexes:
        return settings.indexes[name]
    try:
        settings.index_location(name)
    except ContextRefused as exc:
        raise ToolRefused(exc.message.replace("index_dir", "index")) from None
    names = ", ".join(sorted(settings.indexes))
    raise ToolRefused(f"index takes an index name ({names}); paths are not accepted")


class ServedAnswerer:
    """`ask` and the admin tools through the server's own API, as the caller."""

    async def answer(
        self, session: McpSession, question: str, thread_id: str | None, index: str
    ) -> dict[str, Any]:
        api = OwnApi(session.base_url, session.forward)
        try:
            if thread_id:  # one of the caller's: a run on any other id could create it
                await api.get(f"/threads/{thread_id}")
            thread = thread_id or await api.new_thread({"source": "mcp"})
            output = await api.answer(
                [{"role": "user", "content": question}], index=index, thread_id=thread
            )
        except ApiRefused as exc:
            if exc.status == 404 and thread_id:
                raise ToolRefused("no such thread (thread_id names none of yours)") from None
            raise ToolRefused(exc.detail) from None
        return {**output, "thread_id": thread}

    async def manage(
        self, session: McpSession, request: dict[str, Any], index: str
    ) -> dict[str, Any]:
        api = OwnApi(session.base_url, session.forward)
        run = {"assistant_id": "indexer", "input": request, "context": {"index_dir": index}}
        try:
            output = await api.post("/runs/wait", run)
        except ApiRefused as exc:
            raise ToolRefused(exc.detail) from None
        return dict(output.get("result") or {})


def _session_of(server: Server[Any, Any]) -> McpSession:
    request = server.request_context.request
    session = getattr(request, "scope", {}).get(SESSION_KEY)
    if not isinstance(session, McpSession):  # only `McpEndpoint` below makes requests reach here
        raise ToolRefused("this request was not authenticated")
    return session


async def _refuse(
    send: Send, status: int, detail: str, payload: dict[str, Any] | None = None
) -> None:
    body = json.dumps(payload or {"detail": detail}).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(body))]
    if status == 401:
        headers.append((b"www-authenticate", b"Bearer"))
    if status == 405:
        headers.append((b"allow", b"POST"))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def _parse_error(message: str) -> dict[str, Any]:
    """A JSON-RPC parse error shaped as the MCP SDK shapes its own."""
    return {
        "jsonrpc": "2.0",
        "id": "server-error",
        "error": {"code": PARSE_ERROR, "message": message},
    }


async def _checked_body(scope: Scope, receive: Receive, send: Send) -> Receive | None:
    """A POST's body read under MAX_BODY and checked to be parseable, handed on as a
    `receive` that replays it; None once the request has been refused."""
    try:
        body = await limited_body(Request(scope, receive), MAX_BODY)
    except BodyTooLarge as exc:
        await _refuse(send, 413, str(exc))
        return None
    try:
        json.loads(body)
    except RecursionError:
        await _refuse(send, 400, "", _parse_error("Parse error: JSON nested too deeply"))
        return None
    except ValueError:
        pass  # the SDK answers malformed JSON with its own parse error
    replayed = False

    async def replay() -> Message:
        nonlocal replayed
        if replayed:
            return await receive()  # the client's disconnect, when it comes
        replayed = True
        return {"type": "http.request", "body": body, "more_body": False}

    return replay


class McpEndpoint:
    """The ASGI app at `/mcp`: authenticate, then one stateless Streamable HTTP exchange."""

    @functools.cached_property
    def server(self) -> Server[Any, Any]:
        """Made on first use: the operator's settings are read in the serving process."""
        settings = served_settings()
        tools = FootnoteTools(
            index_location,
            ServedAnswerer(),
            embeddings=settings.embeddings,
            stage=settings.search_stage,
        )
        return make_server(tools, _session_of)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        try:
            identity = await asyncio.to_thread(
                served_credentials().identify,
                headers.get("authorization"),
                headers.get("x-api-key"),
            )
        except Unauthenticated as exc:
            await _refuse(send, 401, str(exc))
            return
        except CredentialsError:
            await _refuse(send, 401, "the server's credentials are misconfigured")
            return
        if scope["method"] == "GET":
            await _refuse(send, 405, "stateless: no event stream here; send requests by POST")
            return
        if scope["method"] == "POST":
            replay = await _checked_body(scope, receive, send)
            if replay is None:
                return
            receive = replay
        session = McpSession(
            Caller(
                groups=frozenset(identity.groups),  # `everyone` is in them already
                admin=identity.admin and identity.method != "anonymous",
            ),
            forward=credentials_of(headers),
            base_url=loopback_url(scope),
        )
        # One manager per request: stateless, nothing outlives the exchange, and no server
        # lifespan (the runtimes differ there) has to start it.
        manager = StreamableHTTPSessionManager(app=self.server, stateless=True, json_response=True)
        async with manager.run():
            await manager.handle_request({**scope, SESSION_KEY: session}, receive, send)
