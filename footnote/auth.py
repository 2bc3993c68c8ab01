"""The served trust boundary, as LangGraph custom auth (`auth.path` in langgraph.json).

Served, a caller is who its credentials say (`footnote.credentials`: API keys, JWT / OIDC,
or anonymous when the operator configured neither), and it owns what it creates: threads,
runs and assistants carry `owner` metadata and every read, search, update, delete, run and
stream is filtered by it. Nobody, admins included, reaches another caller's threads: `admin`
widens which documents a caller may see, not whose conversations. Crons and the store are
closed. A run's context is checked against the operator's settings (`footnote.settings`):
server-owned fields are pinned, a caller's own choices are validated, and anything refused
is a 4xx before the run starts. The graph reads identity from the authenticated user the
server injects (`langgraph_auth_user`), never from the context.

Misconfiguration (a malformed key file, an unreadable JWT key, bad FOOTNOTE_INDEXES) stops
the server at start with one line that says what is wrong.
"""

from __future__ import annotations

from typing import Any

from langgraph_sdk import Auth

from footnote.credentials import (
    Credentials,
    CredentialsError,
    Identity,
    Unauthenticated,
)
from footnote.settings import ContextRefused, ServerSettings, SettingsError

OWNER = "owner"
_METHODS = {"api_key", "jwt", "anonymous"}


def _load() -> tuple[Credentials, ServerSettings]:
    try:
        return Credentials.from_env(), ServerSettings.from_env()
    except (CredentialsError, SettingsError) as exc:
        raise SystemExit(f"footnote: the server cannot start: {exc}") from None


CREDENTIALS, SETTINGS = _load()

auth = Auth()


def _header(headers: dict[bytes, bytes] | None, name: bytes) -> str | None:
    value = (headers or {}).get(name)
    return value.decode("latin-1") if value is not None else None


@auth.authenticate
def authenticate(headers: dict[bytes, bytes] | None) -> Auth.types.MinimalUserDict:
    """Identify the caller from `Authorization: Bearer ...` or `x-api-key`.

    Synchronous on purpose: the server runs it in a thread pool, and the key file's
    change check (a stat) must not block the event loop.
    """
    try:
        identity: Identity = CREDENTIALS.identify(
            _header(headers, b"authorization"), _header(headers, b"x-api-key")
        )
    except Unauthenticated as exc:
        raise Auth.exceptions.HTTPException(status_code=401, detail=str(exc)) from None
    return identity.as_user()  # type: ignore[return-value]


def _owner(ctx: Auth.types.AuthContext) -> str:
    """The caller's identity, if it was made by `authenticate` above; 403 otherwise.

    Studio's `x-auth-scheme: langsmith` bypass (closed in langgraph.json) would produce a
    user that `authenticate` never saw: such a caller owns nothing and reaches nothing.
    """
    user = ctx.user
    method = user.get("auth_method") if hasattr(user, "get") else None
    if isinstance(user, Auth.types.StudioUser) or method not in _METHODS:
        raise Auth.exceptions.HTTPException(
            status_code=403, detail="this caller was not authenticated by Footnote"
        )
    return str(user.identity)


def _refuse(exc: ContextRefused) -> Auth.exceptions.HTTPException:
    return Auth.exceptions.HTTPException(status_code=exc.status, detail=exc.message)


def _claim(value: dict[str, Any], owner: str) -> None:
    """Tag a new resource with its owner; a caller may not name another owner."""
    metadata = value.get("metadata")
    if metadata is None:
        metadata = value["metadata"] = {}
    if metadata.get(OWNER, owner) != owner:
        raise Auth.exceptions.HTTPException(
            status_code=403, detail="metadata 'owner' is set by the server"
        )
    metadata[OWNER] = owner


@auth.on
async def deny_everything_else(ctx: Auth.types.AuthContext, value: Any) -> bool:
    """Crons, the store and anything a newer server adds: closed unless handled below."""
    raise Auth.exceptions.HTTPException(
        status_code=403, detail=f"{ctx.resource}.{ctx.action} is not available on this server"
    )


@auth.on.threads.create
async def create_thread(ctx: Auth.types.AuthContext, value: dict[str, Any]) -> dict[str, str]:
    owner = _owner(ctx)
    _claim(value, owner)
    return {OWNER: owner}


@auth.on.threads.read
@auth.on.threads.search
@auth.on.threads.delete
async def own_threads(ctx: Auth.types.AuthContext, value: Any) -> dict[str, str]:
    """Threads and their runs, state, history and streams: the caller's own only."""
    return {OWNER: _owner(ctx)}


@auth.on.threads.update
async def update_thread(ctx: Auth.types.AuthContext, value: dict[str, Any]) -> dict[str, str]:
    owner = _owner(ctx)
    if OWNER in (value.get("metadata") or {}):
        _claim(value, owner)
    return {OWNER: owner}


@auth.on.threads.create_run
async def create_run(ctx: Auth.types.AuthContext, value: dict[str, Any]) -> dict[str, str]:
    """Runs on the caller's own threads, with a context the operator allows.

    The run's context is replaced by the checked one: server-owned fields pinned to the
    operator's values (so an assistant's stored context cannot override them), the caller's
    valid choices kept, unknown fields dropped. A refused field is a 4xx with a reason.
    """
    owner = _owner(ctx)
    _claim(value, owner)  # a run that creates its thread makes it the caller's
    kwargs = value.get("kwargs")
    if not isinstance(kwargs, dict):
        raise Auth.exceptions.HTTPException(status_code=422, detail="malformed run request")
    try:
        kwargs["context"] = SETTINGS.run_context(kwargs.get("context"))
    except ContextRefused as exc:
        raise _refuse(exc) from None
    return {OWNER: owner}


@auth.on.assistants.create
@auth.on.assistants.update
async def write_assistant(ctx: Auth.types.AuthContext, value: dict[str, Any]) -> dict[str, str]:
    """An assistant may carry a caller's retrieval choices, never server-owned settings."""
    owner = _owner(ctx)
    if "metadata" in value or ctx.action == "create":
        _claim(value, owner)
    config = value.get("config") or {}
    for stored in (value.get("context"), config.get("configurable")):
        try:
            SETTINGS.check(stored)
        except ContextRefused as exc:
            raise _refuse(exc) from None
        for name in stored or {}:
            if name in ("index_dir", "model", "web_search"):
                raise Auth.exceptions.HTTPException(
                    status_code=403,
                    detail=f"choose {name!r} per run; an assistant may not store it",
                )
    return {OWNER: owner}


@auth.on.assistants.read
@auth.on.assistants.search
async def read_assistants(ctx: Auth.types.AuthContext, value: Any) -> dict[str, Any]:
    """The server's own assistants, and the caller's."""
    return {"$or": [{"created_by": "system"}, {OWNER: _owner(ctx)}]}


@auth.on.assistants.delete
async def delete_assistant(ctx: Auth.types.AuthContext, value: Any) -> dict[str, str]:
    return {OWNER: _owner(ctx)}
