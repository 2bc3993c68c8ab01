"""Feedback and "why this answer" over HTTP, beside the LangGraph API on the same server.

    GET   /feedback/me                 who the caller is, and whether it may review
    POST  /feedback                    rate an answer {thread_id, message_id, rating, comment,
                                       wrong_citations}; again for the same answer replaces it
    GET   /feedback                    the caller's feedback, newest first; admins:
                                       ?scope=all|review, &rating=up|down, &not_covered=1|0
    GET   /feedback/{id}               one row (owner, under the access it was rated with;
                                       or admin); ids are random, not a count
    PATCH /feedback/{id}               edit rating, comment, wrong_citations (owner);
                                       should_cover (admin, on a "not covered" answer)
    GET   /feedback/why?thread_id=&message_id=

Callers are identified exactly as by the API (`footnote.server.credentials`, the same keys and
tokens), and answers are read through the API itself, with the caller's own credentials: a
user can rate and ask "why" only about answers the server lets them read, and what is stored
is what the run recorded, not what the client says. A user sees and edits only their own
feedback; admins see everyone's, and read another user's "why" from what was recorded when
that answer was rated (admins cannot open other users' threads). Someone else's feedback or
answer is a 404, like someone else's thread.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import re
from typing import Any

import httpx
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route, Router

from footnote.feedback.records import (
    FeedbackError,
    FeedbackStore,
    Filters,
    check_comment,
    check_flags,
    check_rating,
    feedback_location,
    send_to_langsmith,
)
from footnote.feedback.why import MAX_HISTORY, AnswerNotFound, answer_record, shown
from footnote.server.bodies import BodyTooLarge, limited_body
from footnote.server.credentials import Identity, Unauthenticated
from footnote.server.own_api import credentials_of, loopback_url, served_credentials
from footnote.store import jsonfile

log = logging.getLogger("footnote.feedback")
MAX_BODY = 16_384
_ID = re.compile(r"[A-Za-z0-9_.:-]{1,128}")
_NO_STORE = {"Cache-Control": "no-store", "X-Content-Type-Options": "nosniff"}


@functools.cache
def store() -> FeedbackStore:
    """Opened (and migrated) on first use."""
    return FeedbackStore(feedback_location())


async def _db(method: str, *args: Any, **kwargs: Any) -> Any:
    """A store call in a worker thread: opening, migrating and querying all block."""
    return await asyncio.to_thread(lambda: getattr(store(), method)(*args, **kwargs))


def _error(status: int, detail: str) -> JSONResponse:
    return JSONResponse({"detail": detail}, status_code=status, headers=_NO_STORE)


def _ok(data: Any, status: int = 200) -> JSONResponse:
    return JSONResponse(data, status_code=status, headers=_NO_STORE)


class Refused(Exception):
    def __init__(self, status: int, detail: str) -> None:
        self.status, self.detail = status, detail


async def _identity(request: Request) -> Identity:
    try:
        return await asyncio.to_thread(
            lambda: served_credentials().identify(
                request.headers.get("authorization"), request.headers.get("x-api-key")
            )
        )
    except Unauthenticated as exc:
        raise Refused(401, str(exc)) from None


async def _body(request: Request) -> dict[str, Any]:
    try:
        raw = await limited_body(request, MAX_BODY)  # a 100 MB upload is not read to refuse it
    except BodyTooLarge as exc:
        raise Refused(413, str(exc)) from None
    try:
        data = jsonfile.loads(raw or b"{}")  # 16,000 `[` fit: a ValueError, not a 500
    except ValueError:
        raise Refused(422, "the body is not JSON") from None
    if not isinstance(data, dict):
        raise Refused(422, "the body must be a JSON object")
    return data


def _checked_id(value: Any, name: str) -> str:
    if not isinstance(value, str) or not _ID.fullmatch(value):
        raise Refused(422, f"{name} must be an id (letters, digits, _.:-)")
    return value


async def _read_answer(request: Request, thread_id: str, message_id: str) -> dict[str, Any]:
    """The answer as the caller may read it, through the server's own API."""
    forwarded = credentials_of(request.headers)
    async with httpx.AsyncClient(base_url=loopback_url(request.scope), timeout=30) as client:
        response = await client.post(
            f"/threads/{thread_id}/history", json={"limit": MAX_HISTORY}, headers=forwarded
        )
    if response.status_code in (403, 404):
        raise Refused(404, "no such answer")
    if response.status_code != 200:
        raise Refused(502, f"reading the thread failed with HTTP {response.status_code}")
    try:
        record = answer_record(response.json(), thread_id, message_id)
    except AnswerNotFound:
        raise Refused(404, "no such answer") from None
    record["index_version"] = await asyncio.to_thread(_index_version, record["index_name"])
    return record


def _index_version(name: str) -> str:
    """The version of the named index now: what the answer was most likely made from."""
    from footnote.server.settings import ServerSettings
    from footnote.store.backends import current_version

    try:
        return current_version(ServerSettings.from_env().index_location(name)) or ""
    except Exception:  # noqa: BLE001 - the version is a note on the row, not a condition
        return ""


def _handler(func: Any) -> Any:
    @functools.wraps(func)
    async def wrapped(request: Request) -> Response:
        try:
            identity = await _identity(request)
            return await func(request, identity)
        except Refused as exc:
            return _error(exc.status, exc.detail)
        except FeedbackError as exc:
            return _error(422, str(exc))

    return wrapped


def readable(row: Any, identity: Identity) -> bool:
    """The thread's rule: its owner, while they still have the access it was rated under
    (their groups changed: 404, as their thread is); admins review everyone's."""
    if identity.admin:
        return True
    return bool(row.user_id == identity.owner and row.access_scope == identity.scope)


async def _visible(identity: Identity, feedback_id: Any) -> Any:
    if not isinstance(feedback_id, str) or not _ID.fullmatch(feedback_id):
        raise Refused(404, "no such feedback")
    row = await _db("get", feedback_id)
    if row is None or not readable(row, identity):
        raise Refused(404, "no such feedback")
    return row


@_handler
async def me(request: Request, identity: Identity) -> Response:
    return _ok({"user": identity.user, "admin": identity.admin})


@_handler
async def rate(request: Request, identity: Identity) -> Response:
    body = await _body(request)
    thread_id = _checked_id(body.get("thread_id"), "thread_id")
    message_id = _checked_id(body.get("message_id"), "message_id")
    rating = check_rating(body.get("rating"))
    comment = check_comment(body.get("comment", ""))
    answer = await _read_answer(request, thread_id, message_id)
    flags = check_flags(body.get("wrong_citations", []), answer["citations"])
    if "rating" not in body:  # recorded for review, unrated: never replaces a rating
        mine = [
            r for r in await _db("for_answer", thread_id, message_id) if r.user_id == identity.owner
        ]
        if mine and readable(mine[0], identity):
            return _ok(mine[0].public())
    row = await _db(
        "record",
        user=identity.owner,
        answer=answer,
        rating=rating,
        comment=comment,
        wrong_citations=flags,
        access_scope=identity.scope,  # the thread was just read under it
    )
    await _to_langsmith(row)
    return _ok(row.public(), status=201)


async def _to_langsmith(row: Any) -> None:
    try:
        await asyncio.to_thread(send_to_langsmith, row)
    except Exception as exc:  # noqa: BLE001 - tracing must never cost the user their rating
        log.warning("footnote: feedback not sent to LangSmith: %s", exc)


@_handler
async def listing(request: Request, identity: Identity) -> Response:
    query = request.query_params
    scope = query.get("scope", "mine")
    if scope not in ("mine", "all", "review"):
        raise Refused(422, "scope must be mine, all or review")
    if scope != "mine" and not identity.admin:
        raise Refused(403, "only admins see everyone's feedback")
    ratings = {"up": 1, "down": -1, None: None}
    if query.get("rating") not in ratings:
        raise Refused(422, "rating must be up or down")
    covered = {"1": True, "0": False, None: None}
    if query.get("not_covered") not in covered:
        raise Refused(422, "not_covered must be 1 or 0")
    try:
        limit = int(query.get("limit", "50"))
    except ValueError:
        raise Refused(422, "limit must be a number") from None
    before = query.get("before")
    if before is not None and not _ID.fullmatch(before):
        raise Refused(422, "before must be a feedback id")
    filters = Filters(
        user=identity.owner if scope == "mine" else (query.get("user") or None),
        rating=ratings[query.get("rating")],
        not_covered=covered[query.get("not_covered")],
        review=scope == "review",
        thread_id=query.get("thread_id") or None,
        access_scope=identity.scope if scope == "mine" else None,
        limit=limit,
        before_id=before,
    )
    rows = await _db("search", filters)
    return _ok({"items": [r.public() for r in rows]})


@_handler
async def one(request: Request, identity: Identity) -> Response:
    row = await _visible(identity, request.path_params["feedback_id"])
    return _ok(row.public())


@_handler
async def edit(request: Request, identity: Identity) -> Response:
    row = await _visible(identity, request.path_params["feedback_id"])
    body = await _body(request)
    unknown = set(body) - {"rating", "comment", "wrong_citations", "should_cover"}
    if unknown:
        raise Refused(422, f"cannot change {sorted(unknown)[0]!r}")
    mine = row.user_id == identity.owner
    if not mine and set(body) - {"should_cover"}:
        raise Refused(403, "only its author edits a rating; admins may set should_cover")
    changes: dict[str, Any] = {}
    if "rating" in body:
        changes["rating"] = check_rating(body["rating"])
    if "comment" in body:
        changes["comment"] = check_comment(body["comment"])
    if "wrong_citations" in body:
        changes["wrong_citations"] = check_flags(body["wrong_citations"], row.citations)
    if "should_cover" in body:
        if not identity.admin:
            raise Refused(403, "only admins decide what the documents should cover")
        if not row.not_covered:
            raise Refused(422, "should_cover applies to a 'not covered' answer")
        if body["should_cover"] not in (True, False, None):
            raise Refused(422, "should_cover must be true, false or null")
        changes["should_cover"] = body["should_cover"]
        changes["reviewed_by"] = identity.owner
    updated = await _db("update", row.id, changes)
    if mine and {"rating", "comment", "wrong_citations"} & set(changes):
        await _to_langsmith(updated)
    return _ok(updated.public())


@_handler
async def why(request: Request, identity: Identity) -> Response:
    """From the live run for its owner; for an admin, else from what was recorded with a
    rating of that answer."""
    thread_id = _checked_id(request.query_params.get("thread_id"), "thread_id")
    message_id = _checked_id(request.query_params.get("message_id"), "message_id")
    try:
        record = await _read_answer(request, thread_id, message_id)
        return _ok({**_summary(record), "why": shown(record["why"]), "recorded": False})
    except Refused as exc:
        if exc.status != 404 or not identity.admin:
            raise
    rows = await _db("for_answer", thread_id, message_id)
    if not rows:
        raise Refused(404, "no such answer")
    row = rows[0]
    return _ok({**_summary(row.public(with_why=True)), "why": shown(row.why), "recorded": True})


def _summary(record: dict[str, Any]) -> dict[str, Any]:
    keys = ("thread_id", "message_id", "run_id", "question", "answer", "not_covered", "citations")
    return {k: record.get(k) for k in keys}


router = Router(
    routes=[
        Route("/feedback/me", me, methods=["GET"]),
        Route("/feedback/why", why, methods=["GET"]),
        Route("/feedback", rate, methods=["POST"]),
        Route("/feedback", listing, methods=["GET"]),
        Route("/feedback/{feedback_id}", one, methods=["GET"]),
        Route("/feedback/{feedback_id}", edit, methods=["PATCH"]),
    ]
)
"""Included by `footnote.server.webapp` (the server's `http.app`)."""
