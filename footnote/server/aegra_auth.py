"""Footnote's served trust boundary (`footnote.server.auth`) under Aegra's auth contract.

The rules are `footnote.server.auth`'s, reused; only the calling convention differs:

- `authenticate` is async and receives headers keyed by `str`; the key file's stat check
  runs in a thread so it never blocks the event loop;
- the user handed to `@auth.on` handlers is a pydantic model with attributes, not a dict;
- `threads.create_run` gets the run request flat (`value["context"]`, no `kwargs`), and
  Aegra applies only what a handler *returns*: in-place edits of the context are dropped.
  So the checked context is returned, and what a caller may not set is refused (403), not
  dropped, because anything left in the request would still reach the run;
- thread metadata (owner, access scope) is likewise returned as `{"metadata": ...}`, which
  Aegra both stores on create and applies as a filter on reads.

- Aegra stores `user.identity` as a thread's `user_id` and `owner` itself, so the identity it
  gets is already the issuer-namespaced owner (`api_key:alice`, `jwt:alice`: `aegra_user`);
- Aegra has no oracle-free create: a thread or assistant id taken by someone else answers
  409 there, so the create handlers answer 404 first (`_taken_by_another`);
- Aegra's run models drop `webhook` silently (it delivers none): `footnote.server.aegra_app`
  refuses one from the raw request, as the dev server's `create_run` does.

Aegra *fails open* when this module cannot be imported (every caller becomes `anonymous`):
`footnote.server.production` refuses to serve unless an unauthenticated probe is refused.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

from langgraph_sdk import Auth

from footnote.graph.context import Context
from footnote.server import auth as served
from footnote.server.credentials import Identity, Unauthenticated
from footnote.server.settings import ContextRefused

auth = Auth()

_METHODS = {"api_key", "jwt", "anonymous"}
_RUN_KEYS = ("thread_id", "checkpoint_id", "checkpoint_ns", "run_id", "assistant_id")
"""configurable keys every client (RemoteGraph, the SDK) may send: not settings."""


@auth.authenticate
async def authenticate(headers: Mapping[str, str] | None) -> Auth.types.MinimalUserDict:
    """Identify the caller from `Authorization: Bearer ...` or `x-api-key`."""
    found = {str(k).lower(): v for k, v in (headers or {}).items()}
    try:
        identity = await asyncio.to_thread(
            served.CREDENTIALS.identify, found.get("authorization"), found.get("x-api-key")
        )
    except Unauthenticated as exc:
        raise Auth.exceptions.HTTPException(status_code=401, detail=str(exc)) from None
    return aegra_user(identity)  # type: ignore[return-value]


def aegra_user(identity: Identity) -> dict[str, Any]:
    """The user Aegra gets: `identity` is the owner, one namespace per issuer, because Aegra
    files threads and assistants under it (`footnote.server.auth._owned` adds the issuer itself)."""
    return {**identity.as_user(), "identity": identity.owner}


def owned(ctx: Auth.types.AuthContext) -> dict[str, str]:
    """The caller's owner name and access scope; 403 for a user `authenticate` did not make."""
    user = ctx.user
    if served.user_field(user, "auth_method") not in _METHODS:
        raise Auth.exceptions.HTTPException(
            status_code=403, detail="this caller was not authenticated by Footnote"
        )
    return {
        served.OWNER: str(served.user_field(user, "identity")),
        served.SCOPE: str(served.user_field(user, "scope")),
    }


async def _taken_by_another(kind: str, resource_id: Any, owner: str) -> bool:
    """Whether a thread or assistant id exists under another owner (the server's own
    assistants included): its create answers 404, as for any id the caller cannot see."""
    if not resource_id:
        return False
    from aegra_api.core.orm import Assistant, Thread, get_session_maker
    from sqlalchemy import select

    table: Any = Thread if kind == "threads" else Assistant
    column = table.thread_id if kind == "threads" else table.assistant_id
    async with get_session_maker()() as session:
        found = await session.scalar(select(table.user_id).where(column == str(resource_id)))
    return found is not None and found != owner


async def _refuse_taken(ctx: Auth.types.AuthContext, value: Any, owner: str) -> None:
    key = "thread_id" if ctx.resource == "threads" else "assistant_id"
    if await _taken_by_another(ctx.resource, value.get(key), owner):
        noun = "Thread" if ctx.resource == "threads" else "Assistant"
        raise Auth.exceptions.HTTPException(
            status_code=404, detail=f"{noun} '{value.get(key)}' not found"
        )


def _refuse(exc: ContextRefused) -> Auth.exceptions.HTTPException:
    return Auth.exceptions.HTTPException(status_code=exc.status, detail=exc.message)


def checked_context(requested: Any) -> dict[str, Any]:
    """The context a served run gets; ContextRefused for any field a caller may not set.

    Unlike the dev runtime, where the checked context replaces the request's, Aegra merges
    what we return over what was sent: a graph setting the policy would drop (`reranker`,
    say) must be refused here. Names the graph does not know stay inert (`Context.coerce`
    ignores them), as the dev runtime's dropping would leave them.
    """
    context = served.SETTINGS.run_context(requested)
    unknown = sorted(Context.known_fields(requested or {}).keys() - context.keys())
    if unknown:
        raise ContextRefused(403, f"context field {unknown[0]!r} may not be set by a caller")
    return context


def enforce_server_settings(context: Any) -> None:
    """ContextRefused unless `context` is exactly what the operator allows a served run:
    every server-owned field present with the operator's value, every other field a valid
    caller choice: what `create_run` returns, checked again by the graph factory
    (`footnote.server.aegra_app.make_graph`) in the process that runs the graph."""
    given = dict(context or {})
    expected = checked_context(given)
    wrong = sorted(k for k, v in expected.items() if given.get(k, object()) != v)
    if wrong:
        raise ContextRefused(403, f"context field {wrong[0]!r} is set by the server's operator")


def enforce_corpus_settings(graph_id: str, user: Any, context: Any) -> None:
    """ContextRefused unless a corpus graph's run context is what `create_run` gives one
    (`footnote.server.auth.corpus_context`): the indexer an admin's, `index_dir` one of the
    operator's index locations, `embeddings` the operator's, nothing else (no upload folder,
    private-URL switch, path or URL of the caller's). Checked by the graph factories
    (`footnote.server.aegra_app.make_indexer`, `make_library`) where the run executes."""
    given = dict(context or {}) if isinstance(context, Mapping) else None
    if given is None:
        raise ContextRefused(422, "context must be a JSON object")
    if graph_id == "indexer" and served.user_field(user, "admin") is not True:
        raise ContextRefused(403, "only admins may add, remove or sync the index's sources")
    unknown = sorted(set(given) - {"index_dir", "embeddings"})
    if unknown:
        raise ContextRefused(403, f"context field {unknown[0]!r} is set by the server's operator")
    if given.get("index_dir") not in served.SETTINGS.indexes.values():
        raise ContextRefused(403, "context field 'index_dir' is set by the server's operator")
    if given.get("embeddings", served.SETTINGS.embeddings) != served.SETTINGS.embeddings:
        raise ContextRefused(403, "context field 'embeddings' is set by the server's operator")


def _claim_metadata(value: Mapping[str, Any], mine: dict[str, str]) -> dict[str, Any]:
    """The request's metadata with the caller's ownership; 403 if it names another or sets
    one the server reserves (`created_by`)."""
    served.refuse_reserved(value.get("metadata"))
    metadata = dict(value.get("metadata") or {})
    for key, own in mine.items():
        if metadata.get(key, own) != own:
            raise Auth.exceptions.HTTPException(
                status_code=403, detail=f"metadata {key!r} is set by the server"
            )
    return {**metadata, **mine}


auth.on(served.deny_everything_else)  # crons, the store, anything newer: closed, as served


async def create_thread(ctx: Auth.types.AuthContext, value: Any) -> dict[str, Any]:
    mine = owned(ctx)
    claimed = _claim_metadata(value, mine)
    await _refuse_taken(ctx, value, mine[served.OWNER])
    return {"metadata": claimed}


async def read_threads(ctx: Auth.types.AuthContext, value: Any) -> dict[str, Any]:
    """Threads, their state, history and streams: the caller's own, while its access holds."""
    return {"metadata": owned(ctx)}


async def update_thread(ctx: Auth.types.AuthContext, value: Any) -> None:
    """Metadata edits on one's own thread (Aegra checks ownership); owner and scope fixed."""
    _claim_metadata(value, owned(ctx))


async def create_run(ctx: Auth.types.AuthContext, value: Any) -> dict[str, Any]:
    """A run with the operator's settings pinned and the caller's choices validated; on a
    corpus graph (`footnote.server.auth.CORPUS_GRAPHS`), the context `footnote.server.auth`
    gives it."""
    mine = owned(ctx)
    _claim_metadata(value, mine)
    config = value.get("config") or {}
    configurable = config.get("configurable") or {}
    if not isinstance(configurable, dict):
        raise Auth.exceptions.HTTPException(status_code=422, detail="malformed run config")
    chosen = {k: v for k, v in configurable.items() if k not in _RUN_KEYS}
    corpus_graph = served.corpus_graph_of(value.get("assistant_id"))
    try:
        if corpus_graph is not None:
            served.corpus_context(ctx, corpus_graph, chosen)
            context = served.corpus_context(ctx, corpus_graph, value.get("context"))
        else:
            checked_context(chosen)
            context = checked_context(value.get("context"))
    except ContextRefused as exc:
        if corpus_graph == "indexer":
            await asyncio.to_thread(
                served.audit_refused,
                mine[served.OWNER],
                value.get("input"),
                value.get("context"),
                exc.message,
            )
        raise _refuse(exc) from None
    return {"context": context}


async def write_assistant(ctx: Auth.types.AuthContext, value: Any) -> dict[str, str]:
    """An assistant may carry a caller's retrieval choices, never server-owned settings, and
    none runs a corpus graph (those run only through the server's own assistants)."""
    mine = owned(ctx)
    served.refuse_reserved(value.get("metadata"))
    if value.get("graph_id") in served.CORPUS_GRAPHS:
        raise Auth.exceptions.HTTPException(
            status_code=403, detail="the corpus graphs run only through the server's assistants"
        )
    if ctx.action == "create":
        await _refuse_taken(ctx, value, mine[served.OWNER])
    if "metadata" in value or ctx.action == "create":
        value["metadata"] = _claim_metadata(value, mine)  # Aegra keeps this edit
    config = value.get("config") or {}
    for stored in (value.get("context"), config.get("configurable")):
        try:
            checked_context(stored)
        except ContextRefused as exc:
            raise _refuse(exc) from None
        if per_run := sorted(set(stored or {}) & set(served._ASSISTANT_PER_RUN)):
            raise Auth.exceptions.HTTPException(
                status_code=403,
                detail=f"choose {per_run[0]!r} per run; an assistant may not store it",
            )
    return mine


async def read_assistants(ctx: Auth.types.AuthContext, value: Any) -> None:
    """Aegra serves a caller its own assistants and the server's (`user_id` system) only."""
    owned(ctx)


auth.on.threads.create(create_thread)
auth.on.threads.read(read_threads)
auth.on.threads.search(read_threads)
auth.on.threads.delete(read_threads)
auth.on.threads.update(update_thread)
auth.on.threads.create_run(create_run)
auth.on.assistants.create(write_assistant)
auth.on.assistants.update(write_assistant)
auth.on.assistants.read(read_assistants)
auth.on.assistants.search(read_assistants)
auth.on.assistants.delete(read_assistants)
