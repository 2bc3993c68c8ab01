"""`GET /audit`: the audit log of admin actions (`footnote.ingest.audit`), for admins only.

    GET /audit?limit=N&index=NAME   the last N records (default 100, at most 1000) of the
                                    deployment's one log (`footnote.ingest.audit`): changes
                                    to every index and to the API keys (`footnote keys`),
                                    or with `index`, only those about that index

Served beside the API on both runtimes, identifying the caller exactly as the API does
(`footnote.server.credentials`): no credentials, or the anonymous caller of a server without
any, is 401; a signed-in caller who is not an admin is 403.
"""

from __future__ import annotations

import asyncio

from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from footnote.ingest import audit
from footnote.server.credentials import Unauthenticated
from footnote.server.own_api import served_credentials, served_settings
from footnote.server.settings import ContextRefused

MAX_LIMIT = 1000
_NO_STORE = {"Cache-Control": "no-store", "X-Content-Type-Options": "nosniff"}


def _answer(status: int, data: dict[str, object]) -> JSONResponse:
    return JSONResponse(data, status_code=status, headers=_NO_STORE)


async def read_audit(request: Request) -> JSONResponse:
    try:
        caller = await asyncio.to_thread(
            served_credentials().identify,
            request.headers.get("authorization"),
            request.headers.get("x-api-key"),
        )
    except Unauthenticated as exc:
        return _answer(401, {"detail": str(exc)})
    if caller.method == "anonymous":
        return _answer(401, {"detail": "sign in as an admin to read the audit log"})
    if not caller.admin:
        return _answer(403, {"detail": "only admins may read the audit log"})
    try:
        limit = int(request.query_params.get("limit", "100"))
    except ValueError:
        return _answer(422, {"detail": "limit must be a whole number"})
    if not 1 <= limit <= MAX_LIMIT:
        return _answer(422, {"detail": f"limit must be between 1 and {MAX_LIMIT}"})
    index = None
    if "index" in request.query_params:
        try:
            index = served_settings().index_location(request.query_params["index"])
        except ContextRefused as exc:
            return _answer(exc.status, {"detail": exc.message})
    try:
        entries, damaged = await asyncio.to_thread(audit.read, audit.audit_location(), limit, index)
    except audit.AuditError:
        return _answer(500, {"detail": "the audit log cannot be read; see the server's log"})
    return _answer(200, {"items": entries, "damaged": damaged})


ROUTES = [Route("/audit", read_audit, methods=["GET"])]
