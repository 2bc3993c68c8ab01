"""The routes the production server answers: Footnote's vetted list; every other path or
method answers 404, whatever Aegra (today's `/threads/{id}/commands`, the store, crons, or a
route a later release adds) would have done with it.

A route is on the list when Footnote's checks cover it (`footnote.server.aegra_auth`'s
handlers and `footnote.server.aegra_app`'s middleware) and a test exercises it through the
production runtime (tests/test_production_doors.py, tests/test_served_auth.py). To serve a
new route, vet it and add one line to `VETTED` (a route Footnote's own app adds, `/mcp` or
`/v1/chat/completions`, say, needs its line too: nothing is served by being registered).
tests/test_production_doors.py fails on a line that names no route the server has.

Aegra's outer middleware (CORS, correlation ids, logging) wraps this layer; none of it
serves a route.
"""

from __future__ import annotations

import json
import re

from starlette.types import ASGIApp, Receive, Scope, Send

VETTED = (
    # Footnote's own pages and routes (footnote.server.webapp, feedback_routes)
    "GET /",
    "GET /ok",
    "GET /health",
    "GET /ready",
    "GET /live",
    "GET /info",  # the meta routes: an admin's only (aegra_app.AdminOnlyMeta)
    "GET /metrics",
    "GET /docs",
    "GET /redoc",
    "GET /openapi.json",
    "GET /ui",
    "GET /ui/{path...}",
    "GET /feedback",
    "POST /feedback",
    "GET /feedback/me",
    "GET /feedback/why",
    "GET /feedback/{feedback_id}",
    "PATCH /feedback/{feedback_id}",
    "GET /audit",  # admins only (footnote.server.audit_routes)
    # MCP and the OpenAI-compatible API: each checks the caller's credentials itself
    # (footnote.server.mcp_route, footnote.server.openai_routes), as the allowlist runs before auth
    "GET /mcp",
    "POST /mcp",
    "DELETE /mcp",
    "GET /mcp/",
    "POST /mcp/",
    "DELETE /mcp/",
    "GET /v1/models",
    "GET /v1/models/{model...}",
    "POST /v1/chat/completions",
    # Aegra's assistants (aegra_auth.write_assistant / read_assistants)
    "POST /assistants",
    "POST /assistants/search",
    "POST /assistants/count",
    "GET /assistants/{assistant_id}",
    "PATCH /assistants/{assistant_id}",
    "DELETE /assistants/{assistant_id}",
    # threads (aegra_auth's thread handlers, aegra_app.OwnThreadsOnly)
    "POST /threads",
    "POST /threads/search",
    "GET /threads/{thread_id}",
    "PATCH /threads/{thread_id}",
    "DELETE /threads/{thread_id}",
    "GET /threads/{thread_id}/state",
    "POST /threads/{thread_id}/state",  # refused (403) to every caller: OwnThreadsOnly
    "GET /threads/{thread_id}/history",
    "POST /threads/{thread_id}/history",
    # runs (aegra_auth.create_run, aegra_app.RunWebhooks, the graph factories)
    "POST /threads/{thread_id}/runs",
    "POST /threads/{thread_id}/runs/stream",
    "POST /threads/{thread_id}/runs/wait",
    "GET /threads/{thread_id}/runs",
    "GET /threads/{thread_id}/runs/{run_id}",
    "POST /threads/{thread_id}/runs/{run_id}/cancel",
    "GET /threads/{thread_id}/runs/{run_id}/join",
    "GET /threads/{thread_id}/runs/{run_id}/stream",
    "POST /runs",
    "POST /runs/stream",
    "POST /runs/wait",
)
"""`METHOD /path`: `{name}` is one path segment, `{name...}` the rest of the path."""


def _pattern(template: str) -> re.Pattern[str]:
    parts = []
    for piece in re.split(r"(\{[a-z_]+(?:\.\.\.)?\})", template):
        if piece.endswith("...}"):
            parts.append(r".*")
        elif piece.startswith("{"):
            parts.append(r"[^/]+")
        else:
            parts.append(re.escape(piece))
    return re.compile("".join(parts) + "/?")


def _table(entries: tuple[str, ...]) -> dict[str, tuple[re.Pattern[str], ...]]:
    table: dict[str, list[re.Pattern[str]]] = {}
    for entry in entries:
        method, _, template = entry.partition(" ")
        table.setdefault(method, []).append(_pattern(template))
    return {method: tuple(patterns) for method, patterns in table.items()}


_TABLE = _table(VETTED)


def vetted(method: str, path: str) -> bool:
    """Whether `METHOD path` is a route Footnote serves (HEAD as GET; a CORS preflight,
    OPTIONS, wherever some method is served)."""
    method = "GET" if method == "HEAD" else method
    methods = list(_TABLE) if method == "OPTIONS" else [method]
    return any(p.fullmatch(path) for m in methods for p in _TABLE.get(m, ()))


class VettedRoutesOnly:
    """The outermost layer: 404 for anything not in `VETTED`, before any other code runs."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "websocket":
            await send({"type": "websocket.close", "code": 1008})
            return
        if scope["type"] == "http" and not vetted(scope["method"], scope.get("path", "")):
            body = json.dumps({"detail": "Not Found"}).encode()
            await send(
                {
                    "type": "http.response.start",
                    "status": 404,
                    "headers": [
                        (b"content-type", b"application/json"),
                        (b"content-length", str(len(body)).encode()),
                    ],
                }
            )
            await send({"type": "http.response.body", "body": body})
            return
        await self.app(scope, receive, send)
