"""The team's chat page at /ui, with the routes served beside the LangGraph API (`http.app` in
langgraph.json): feedback, the audit log, MCP at /mcp and the OpenAI-compatible /v1.

The page is static HTML, CSS and JavaScript shipped inside this package: no CDN, nothing
fetched from elsewhere at run time. It talks to the same server's API from the browser with
the caller's own credentials, so what it shows has passed the server's authentication and
per-user authorization. Its files hold nothing secret, so serving them needs no credentials:
the page must load before it can ask for a key.
"""

from __future__ import annotations

import os
from importlib.resources import files
from urllib.parse import urlsplit

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from footnote.graph.prompts import NOT_COVERED
from footnote.server.audit_routes import ROUTES as AUDIT_ROUTES
from footnote.server.closed_routes import close_routes
from footnote.server.feedback_routes import router as feedback_router
from footnote.server.mcp_route import McpEndpoint
from footnote.server.openai_routes import router as openai_router

GRAPH_ID = "footnote"
SOURCE_BASE_URL_ENV = "FOOTNOTE_SOURCE_BASE_URL"
"""Where relative source URLs of HTML documents (`library/os.html#os.getcwd`) are published,
e.g. https://docs.python.org/3/ — the page then links each such source there."""

_ASSETS = {
    "app.js": "text/javascript; charset=utf-8",
    "library.js": "text/javascript; charset=utf-8",
    "app.css": "text/css; charset=utf-8",
    "feedback.js": "text/javascript; charset=utf-8",
    "feedback.css": "text/css; charset=utf-8",
    # Declared by the page, so browsers ask for no /favicon.ico (a 404 per page load).
    "favicon.svg": "image/svg+xml",
    "parts.js": "text/javascript; charset=utf-8",
    "markdown.js": "text/javascript; charset=utf-8",
    "parts.css": "text/css; charset=utf-8",
}
_SECURITY_HEADERS = {
    # Only this origin's own files and API: no inline script, no third-party anything.
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
        "img-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-cache",
}


def _asset(name: str) -> bytes:
    return files("footnote.server").joinpath("ui", name).read_bytes()


def source_base_url() -> str:
    """The operator's base URL for relative source links; empty unless it is http(s)."""
    value = os.environ.get(SOURCE_BASE_URL_ENV, "").strip()
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        return ""
    return value if value.endswith("/") else value + "/"


async def page(request: Request) -> Response:
    return Response(
        _asset("index.html"), media_type="text/html; charset=utf-8", headers=_SECURITY_HEADERS
    )


async def asset(request: Request) -> Response:
    name = request.path_params["name"]
    if name not in _ASSETS:  # a fixed list: no path from the request reaches the file system
        return Response("not found", status_code=404, media_type="text/plain")
    return Response(_asset(name), media_type=_ASSETS[name], headers=_SECURITY_HEADERS)


async def config(request: Request) -> Response:
    """What the page needs to know about this server, none of it secret."""
    return JSONResponse(
        {"graph_id": GRAPH_ID, "not_covered": NOT_COVERED, "source_base_url": source_base_url()},
        headers=_SECURITY_HEADERS,
    )


mcp_endpoint = McpEndpoint()
MCP_ROUTES = [
    Route(path, mcp_endpoint, methods=["GET", "POST", "DELETE"]) for path in ("/mcp", "/mcp/")
]
"""Footnote's MCP tools (footnote.server.mcp_route); the runtime's own /mcp is turned off."""

app = Starlette(
    routes=[
        Route("/ui", page),
        Route("/ui/", page),
        Route("/ui/config.json", config),
        Route("/ui/{name}", asset),
        *feedback_router.routes,  # /feedback/...: see footnote.server.feedback_routes
        *AUDIT_ROUTES,  # /audit, admins only: see footnote.server.audit_routes
        *openai_router.routes,  # /v1/...: see footnote.server.openai_routes
        *MCP_ROUTES,
    ]
)


async def not_found(request: Request) -> Response:
    """Any deeper path under /ui: a plain 404 (the server's own /ui mount would answer 500)."""
    return Response("not found", status_code=404, media_type="text/plain")


app.router.routes.append(Route("/ui/{rest:path}", not_found, methods=["GET", "HEAD"]))
close_routes(app)
