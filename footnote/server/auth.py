"""The served trust boundary, as LangGraph custom auth (`auth.path` in langgraph.json).

Served, a caller is who its credentials say (`footnote.server.credentials`: API keys, JWT / OIDC,
or anonymous when the operator configured neither), and it owns what it creates: threads,
runs and assistants carry `owner` and `access_scope` metadata, and every read, search,
update, delete, run and stream is filtered by both. Nobody, admins included, reaches another
caller's threads: `admin` widens which documents a caller may see, not whose conversations.

The scope (the caller's groups, or `admin`) makes a thread's history safe to serve: a thread
holds text its owner could see when it was written, so it is served only while the owner
still has exactly that access. If the operator changes someone's groups, their earlier
threads stop being served (not deleted: they come back if the access does). So do they when
a source takes a document from one of their groups (a permission sync publishing a narrower
reader list): the scope then carries the time of that revocation (`footnote.store.
revocations`), and threads written before it are no longer served, even if the access
comes back at the source.

An owner is named with its issuer (`api_key:alice`, `jwt:alice`): with both a key file and
JWT configured, the same name from the other issuer is someone else. Metadata the server sets
or filters on (`owner`, `access_scope`, `created_by`) is refused from callers, and a run's
webhook is refused unless its origin is on the operator's FOOTNOTE_WEBHOOKS allowlist.

Crons and the store are closed. A run's context is checked against the operator's settings
(`footnote.server.settings`): server-owned fields are pinned, a caller's own choices validated, and
anything refused is a 4xx before the run starts. The graph reads identity from the
authenticated user the server injects (`langgraph_auth_user`), never from the context.

Misconfiguration (a malformed key file, an unreadable JWT key, bad FOOTNOTE_INDEXES) stops
the server at start with one line that says what is wrong.
"""

from __future__ import annotations

import asyncio
from typing import Any
from uuid import UUID, uuid5

from langgraph_sdk import Auth

from footnote.ingest import audit
from footnote.server.credentials import Credentials, CredentialsError, Unauthenticated
from footnote.server.settings import ContextRefused, ServerSettings, SettingsError

OWNER = "owner"
SCOPE = "access_scope"
_METHODS = {"api_key", "jwt", "anonymous"}
_ASSISTANT_PER_RUN = ("index_dir", "model", "web_search")
RESERVED_METADATA = ("created_by",)
"""Set only by the server (`created_by: system` marks its own assistants, readable by all)."""


def _load() -> tuple[Credentials, ServerSettings]:
    try:
        settings = ServerSettings.from_env()
        return Credentials.from_env(indexes=settings.indexes.values()), settings
    except (CredentialsError, SettingsError) as exc:
        raise SystemExit(f"footnote: the server cannot start: {exc}") from None


CREDENTIALS, SETTINGS = _load()

auth = Auth()


def _header(headers: dict[bytes, bytes] | None, name: bytes) -> str | None:
    value = (headers or {}).get(name)
    return value.decode("latin-1") if value is not None else None


@auth.authenticate  # type: ignore[type-var]  # sync on purpose, see below
def authenticate(headers: dict[bytes, bytes] | None) -> Auth.types.MinimalUserDict:
    """Identify the caller from `Authorization: Bearer ...` or `x-api-key`.

    Synchronous on purpose: the server runs it in a thread pool, and the key file's
    change check (a stat) must not block the event loop.
    """
    try:
        identity = CREDENTIALS.identify(
            _header(headers, b"authorization"), _header(headers, b"x-api-key")
        )
    except Unauthenticated as exc:
        raise Auth.exceptions.HTTPException(status_code=401, detail=str(exc)) from None
    return identity.as_user()  # type: ignore[return-value]


def user_field(user: Any, name: str) -> Any:
    """A field of the authenticated user: a dict under `langgraph dev`, a model under Aegra."""
    return user.get(name) if hasattr(user, "get") else getattr(user, name, None)


def _owned(ctx: Auth.types.AuthContext) -> dict[str, str]:
    """The metadata that marks the caller's own resources: its identity and access scope.

    Only users made by `authenticate` above qualify. Studio's `x-auth-scheme: langsmith`
    bypass (closed in langgraph.json) would produce one it never saw: such a caller owns
    nothing and reaches nothing.
    """
    user = ctx.user
    if isinstance(user, Auth.types.StudioUser) or user_field(user, "auth_method") not in _METHODS:
        raise Auth.exceptions.HTTPException(
            status_code=403, detail="this caller was not authenticated by Footnote"
        )
    owner = f"{user_field(user, 'auth_method')}:{user.identity}"  # one namespace per issuer
    return {OWNER: owner, SCOPE: str(user_field(user, "scope") or "")}


def _claim(value: Any, owned: dict[str, str]) -> None:
    """Tag a new resource as the caller's; a caller may not name another owner or scope."""
    metadata = value.get("metadata")
    if metadata is None:
        metadata = value["metadata"] = {}
    refuse_reserved(metadata)
    for key, mine in owned.items():
        if metadata.get(key, mine) != mine:
            raise Auth.exceptions.HTTPException(
                status_code=403, detail=f"metadata {key!r} is set by the server"
            )
    metadata.update(owned)


def refuse_reserved(metadata: Any) -> None:
    if isinstance(metadata, dict) and (taken := sorted(set(metadata) & set(RESERVED_METADATA))):
        raise Auth.exceptions.HTTPException(
            status_code=403, detail=f"metadata {taken[0]!r} is set by the server"
        )


def _refuse(exc: ContextRefused) -> Auth.exceptions.HTTPException:
    return Auth.exceptions.HTTPException(status_code=exc.status, detail=exc.message)


@auth.on
async def deny_everything_else(ctx: Auth.types.AuthContext, value: Any) -> bool:
    """Crons, the store and anything a newer server adds: closed unless handled below."""
    raise Auth.exceptions.HTTPException(
        status_code=403, detail=f"{ctx.resource}.{ctx.action} is not available on this server"
    )


async def create_thread(ctx: Auth.types.AuthContext, value: Any) -> dict[str, str]:
    owned = _owned(ctx)
    _claim(value, owned)
    return owned


async def own_threads(ctx: Auth.types.AuthContext, value: Any) -> dict[str, str]:
    """Threads and their runs, state, history and streams: the caller's own only."""
    return _owned(ctx)


async def update_thread(ctx: Auth.types.AuthContext, value: Any) -> dict[str, str]:
    """Metadata edits and run cancels on one's own threads. A state write (`POST
    /threads/{id}/state`, the only update that carries neither metadata nor an action) is
    refused: a thread's state is what its runs wrote, and feedback and its export trust it
    as the record of what Footnote answered from which passages."""
    owned = _owned(ctx)
    if "metadata" not in value and "action" not in value:
        raise Auth.exceptions.HTTPException(
            status_code=403, detail="a thread's state is written by its runs only"
        )
    refuse_reserved(value.get("metadata"))
    if set(owned) & set(value.get("metadata") or {}):
        _claim(value, owned)
    return owned


async def create_run(ctx: Auth.types.AuthContext, value: Any) -> dict[str, str]:
    """Runs on the caller's own threads, with a context the operator allows.

    The run's context is replaced by the checked one: server-owned fields pinned to the
    operator's values (so an assistant's stored context cannot override them), the caller's
    valid choices kept, unknown fields dropped. A refused field is a 4xx with a reason.
    """
    owned = _owned(ctx)
    _claim(value, owned)  # a run that creates its thread makes it the caller's
    kwargs = value.get("kwargs")
    if not isinstance(kwargs, dict):
        raise Auth.exceptions.HTTPException(status_code=422, detail="malformed run request")
    corpus_graph = corpus_graph_of(value.get("assistant_id"))
    try:
        SETTINGS.webhook(kwargs.get("webhook"))
        if corpus_graph is not None:
            kwargs["context"] = corpus_context(ctx, corpus_graph, kwargs.get("context"))
        else:
            kwargs["context"] = SETTINGS.run_context(kwargs.get("context"))
    except ContextRefused as exc:
        if corpus_graph == "indexer":
            await asyncio.to_thread(
                audit_refused, owned[OWNER], kwargs.get("input"), kwargs.get("context"), exc.message
            )
        raise _refuse(exc) from None
    return owned


def audit_refused(who: str, run_input: Any, requested: Any, reason: str) -> None:
    """An indexer run refused before it started, in the audit log, naming the index it asked
    for (the default one when it named none the operator has). A refused listing (`sources`,
    the indexer's default: what the Sources panel asks of anyone) is a view a user may
    simply not have, not an attempt to change anything, so it is not recorded; a run whose
    input is not known here (a graph factory's refusal) is."""
    asked = run_input if isinstance(run_input, dict) else {}
    action = str(asked.get("action", "sources")) if asked is run_input else "not known"
    if action == "sources":
        return
    if action == "sync" and asked.get("permissions_only") is True:
        action = "sync-permissions"  # as the indexer records the run it lets through
    name = requested.get("index_dir", "default") if isinstance(requested, dict) else "default"
    try:
        index = SETTINGS.index_location(name)
    except ContextRefused:
        index = SETTINGS.index_location("default")
    given = asked.get("uploads")
    uploads: list[Any] = given if isinstance(given, list) else []
    audit.record_quietly(
        audit.audit_location(),
        who=who,
        action=action,
        result="refused",
        reason=reason,
        index=index,
        sources=asked.get("sources"),
        uploads=[str(u.get("name", "")) for u in uploads if isinstance(u, dict)],
    )


CORPUS_GRAPHS = ("indexer", "library")
"""Graphs that manage (indexer: admins only) or list (library) the index's documents."""


GRAPH_NAMESPACE = UUID("6ba7b821-9dad-11d1-80b4-00c04fd430c8")
"""The namespace both runtimes name a graph's own assistant in (uuid5 of the graph id):
`langgraph_api.graph.NAMESPACE_GRAPH` and Aegra's `ASSISTANT_NAMESPACE_UUID` (tests compare
it with each). A constant here: importing langgraph_api outside its server needs its config."""


def corpus_graph_of(assistant_id: Any) -> str | None:
    """Which corpus graph a run's assistant is, if any. Only the server's own assistants run
    them: `write_assistant` refuses any other assistant on these graphs."""
    for graph_id in CORPUS_GRAPHS:
        if str(assistant_id) in (graph_id, str(uuid5(GRAPH_NAMESPACE, graph_id))):
            return graph_id
    return None


def corpus_context(ctx: Auth.types.AuthContext, graph_id: str, requested: Any) -> dict[str, Any]:
    """The indexer's context: admins only (403 for anyone else), the index chosen by name
    among the operator's, everything else the server's own."""
    if graph_id == "indexer" and user_field(ctx.user, "admin") is not True:
        raise ContextRefused(403, "only admins may add, remove or sync the index's sources")
    chosen = requested if isinstance(requested, dict) else {}
    unknown = sorted(set(chosen) - {"index_dir"})
    if unknown:
        raise ContextRefused(403, f"context field {unknown[0]!r} is set by the server's operator")
    index = SETTINGS.index_location(chosen.get("index_dir", "default"))
    return {"index_dir": index, "embeddings": SETTINGS.embeddings}


async def write_assistant(ctx: Auth.types.AuthContext, value: Any) -> dict[str, str]:
    """An assistant may carry a caller's retrieval choices, never server-owned settings.

    Its context is checked exactly as a run's is (refused, not trimmed), and what is stored is
    the checked context: the dicts the server will store are rewritten in place.
    """
    owned = _owned(ctx)
    refuse_reserved(value.get("metadata"))
    if value.get("graph_id") in CORPUS_GRAPHS:
        raise Auth.exceptions.HTTPException(
            status_code=403, detail="the corpus graphs run only through the server's assistants"
        )
    if "metadata" in value or ctx.action == "create":
        _claim(value, owned)
    config = value.get("config") or {}
    for stored in (value.get("context"), config.get("configurable")):
        try:
            checked = SETTINGS.check(stored)
        except ContextRefused as exc:
            raise _refuse(exc) from None
        if per_run := sorted(set(stored or {}) & set(_ASSISTANT_PER_RUN)):
            raise Auth.exceptions.HTTPException(
                status_code=403,
                detail=f"choose {per_run[0]!r} per run; an assistant may not store it",
            )
        if isinstance(stored, dict):
            stored.clear()
            stored.update(checked)
    return owned


async def read_assistants(ctx: Auth.types.AuthContext, value: Any) -> Any:
    """The server's own assistants, and the caller's."""
    return {"$or": [{"created_by": "system"}, _owned(ctx)]}


async def own_assistants(ctx: Auth.types.AuthContext, value: Any) -> dict[str, str]:
    return _owned(ctx)


auth.on.threads.create(create_thread)
auth.on.threads.read(own_threads)
auth.on.threads.search(own_threads)
auth.on.threads.delete(own_threads)
auth.on.threads.update(update_thread)
auth.on.threads.create_run(create_run)
auth.on.assistants.create(write_assistant)
auth.on.assistants.update(write_assistant)
auth.on.assistants.read(read_assistants)
auth.on.assistants.search(read_assistants)
auth.on.assistants.delete(own_assistants)
