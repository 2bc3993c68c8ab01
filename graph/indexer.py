"""The indexer graph: add, remove and sync an index's sources over the API, as the LangGraph
retrieval templates serve indexing beside answering (`indexer` in langgraph.json).

Served, only admins may run it: `footnote/server/auth.py` refuses anyone else's run with a 403
before it starts, and the node checks the injected user again. The index, the upload folder
and whether URLs may reach private addresses come from the server's context, never from the
caller. `library` beside it lists, for any signed-in caller, the documents they may read.
"""

from __future__ import annotations

import base64
import binascii
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from langgraph.config import get_stream_writer
from langgraph.graph import END, START, StateGraph
from langgraph.runtime import Runtime

from footnote.graph.search_tool import _served_user, _user_field, served_caller
from footnote.ingest import audit, corpus
from footnote.ingest.jobs import run_job
from footnote.ingest.pipeline import DEFAULT_MAX_BYTES
from footnote.ingest.source_policy import (
    SOURCE_ROOTS_ENV,
    ServedSourcePolicy,
    roots_from_setting,
)
from footnote.ingest.sync_schedule import failed_sources
from footnote.store.backends import open_writer, resolve_index
from footnote.store.types import Caller, IndexError_

Action = Literal["add", "remove", "sync", "sources"]
UPLOAD_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9 ._-]{0,120}")


@dataclass(kw_only=True)
class IndexerInput:
    """What an admin asks of the index."""

    action: Action = "sources"
    """add: the `sources` and `uploads` given; remove: the `sources` named (names, globs,
    roots); sync: every remembered source; sources: list them."""
    permissions_only: bool = False
    """With sync: only ask each connector who reads its indexed documents and publish the
    changed access; nothing read or embedded (`footnote sync --permissions-only`). Anything
    but true or false, or true with another action, is refused."""
    sources: list[str] = field(default_factory=list)
    """Paths or URLs to add, or names, globs and roots to remove."""
    uploads: list[dict[str, str]] = field(default_factory=list)
    """Files to add: `{"name": "x.md", "content": BASE64}`, saved in the server's upload
    folder and added as sources."""
    access: list[str] = field(default_factory=list)
    """Groups for added documents that state none; empty: the index's default."""
    include: list[str] = field(default_factory=list)
    exclude: list[str] = field(default_factory=list)
    crawl: dict[str, Any] | None = None
    """For a URL: crawl the site (`max_depth`, `max_pages`, `same_host`)."""


@dataclass(kw_only=True)
class IndexerOutput:
    result: dict[str, Any] = field(default_factory=dict)
    """The summary of what changed and why (add/remove/sync), or the listing (sources)."""


@dataclass(kw_only=True)
class IndexerState(IndexerInput, IndexerOutput):
    pass


@dataclass(kw_only=True)
class IndexerContext:
    """Set by the server's operator; a served caller cannot change any of it."""

    index_dir: str = field(
        default_factory=resolve_index,
        metadata={"description": "The index to manage (a directory or a postgresql:// URL)."},
    )
    embeddings: str = field(default="", metadata={"description": "Must match the index."})
    upload_dir: str = field(
        default_factory=lambda: os.environ.get("FOOTNOTE_UPLOAD_DIR", ".footnote/uploads"),
        metadata={"description": "Where uploaded files are kept (they are sources to sync)."},
    )
    source_roots: list[str] = field(
        default_factory=lambda: list(roots_from_setting(os.environ.get(SOURCE_ROOTS_ENV, ""))),
        metadata={
            "description": "Folders whose files a served admin may add as sources, besides "
            f"the upload folder (${SOURCE_ROOTS_ENV}, absolute, separated by ':'). Empty: "
            "uploads only. The in-process host is not limited."
        },
    )
    allow_private: bool = field(
        default_factory=lambda: os.environ.get("FOOTNOTE_ALLOW_PRIVATE_URLS") == "1",
        metadata={
            "description": "Whether URL sources may reach loopback, private and link-local "
            "addresses (FOOTNOTE_ALLOW_PRIVATE_URLS=1). Off by default."
        },
    )


class NotAllowed(PermissionError):
    """A served caller who is not an admin ran the indexer."""


def _context(runtime: Runtime[Any]) -> IndexerContext:
    value = runtime.context
    if isinstance(value, IndexerContext):
        return value
    known = IndexerContext.__dataclass_fields__
    given = value if isinstance(value, Mapping) else {}
    return IndexerContext(**{k: v for k, v in given.items() if k in known})


def _require_admin() -> None:
    user = _served_user()
    if user is not None and _user_field(user, "admin") is not True:
        raise NotAllowed("403: only admins may manage the index's sources")


MAX_UPLOAD_BYTES = DEFAULT_MAX_BYTES
"""An upload's size once decoded: ingest's own per-file limit, checked before decoding."""
_DECODE_STEP = 4 << 20
"""Base64 characters decoded and written at a time (a multiple of 4)."""


def _save_uploads(uploads: list[dict[str, str]], folder: Path) -> list[Path]:
    """Write uploaded files under `folder`, by a plain file name only (no path from the
    request reaches the file system beyond it). Every upload's size is checked from its
    base64 length before anything is decoded or written, and each is decoded a step at a
    time into its file, so an oversized one costs neither memory nor disk."""
    checked = []
    for upload in uploads:
        name = str(upload.get("name", ""))
        if not UPLOAD_NAME.fullmatch(name) or ".." in name:
            raise ValueError(f"upload name {name[:60]!r} must be a plain file name")
        content = upload.get("content", "")
        if not isinstance(content, str):
            raise ValueError(f"upload {name!r}: content is not base64")
        if len(content) // 4 * 3 > MAX_UPLOAD_BYTES:
            raise ValueError(f"upload {name!r} is over the limit of {MAX_UPLOAD_BYTES} bytes")
        checked.append((name, content))
    saved = []
    if checked:
        # Uploads hold document text, for the server's user alone (mode 700, files 600).
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        folder.chmod(0o700)
    for name, content in checked:
        path = folder / name
        tmp = folder / f".{name}.part"
        tmp.unlink(missing_ok=True)
        try:
            with os.fdopen(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "wb") as out:
                for start in range(0, len(content), _DECODE_STEP):
                    out.write(
                        base64.b64decode(content[start : start + _DECODE_STEP], validate=True)
                    )
        except (binascii.Error, ValueError) as exc:
            tmp.unlink(missing_ok=True)
            raise ValueError(f"upload {name!r}: content is not base64") from exc
        os.replace(tmp, path)
        saved.append(path)
    return saved


def manage(state: IndexerState, runtime: Runtime[IndexerContext]) -> dict[str, Any]:
    """Run the admin's action through the same write path as `footnote add/remove/sync`;
    every change asked for, done, refused or failed, goes to the audit log
    (`footnote.ingest.audit`), under the caller's authenticated identity. A listing is a
    view, not a change: neither it nor its refusal is recorded. A permission-only sync is
    recorded as `footnote sync --permissions-only` records it: `sync-permissions`, with its
    counts and the sources that failed."""
    context = _context(runtime)
    index = context.index_dir
    changes = state.action != "sources"
    light = state.action == "sync" and state.permissions_only is True
    trail = {
        "who": _actor(),
        "action": "sync-permissions" if light else state.action,
        "index": index,
        "sources": state.sources,
        "uploads": [str(u.get("name", "")) for u in state.uploads if isinstance(u, dict)],
    }
    where = audit.audit_location()
    try:
        _require_admin()
    except NotAllowed as exc:
        if changes:
            audit.record_quietly(where, **trail, result="refused", reason=str(exc))
        raise
    try:
        result = _act(state, context)
    except Exception as exc:
        if changes:
            audit.record_quietly(where, **trail, result="error", reason=str(exc))
        raise
    if changes:
        problems = failed_sources(result) if light else ""
        audit.record_quietly(where, **trail, result="ok", summary=result, reason=problems)
    return {"result": result}


def _actor() -> str:
    """Who runs this: the served caller as the server names its owner (`api_key:root`), or
    the local operator when the graph runs embedded."""
    user = _served_user()
    if user is None:
        return audit.local_operator()
    name = _user_field(user, "display_name") or _user_field(user, "identity")
    return f"{_user_field(user, 'auth_method')}:{name}"


class IndexProblem(ValueError):
    """An index error (damaged, missing, locked, ...) as a served admin receives it: the dev
    server shows the message only of the exception kinds it knows, ValueError among them,
    so the `--rebuild` hint of a damaged index would otherwise read "internal error"."""


def _act(state: IndexerState, context: IndexerContext) -> dict[str, Any]:
    try:
        return _perform(state, context)
    except IndexError_ as exc:
        if _served_user() is None:  # the in-process host gets the index's own error
            raise
        raise IndexProblem(str(exc)) from exc


def _perform(state: IndexerState, context: IndexerContext) -> dict[str, Any]:
    index = context.index_dir
    if _permissions_only(state):
        # In this process, as a served schedule runs it: it parses nothing, and the index's
        # writer lock orders it with the jobs.
        summary = corpus.sync_permissions(
            index, allow_private=context.allow_private, embeddings=context.embeddings
        )
        return summary.to_dict()
    if state.action == "sources":
        return corpus.sources(index)
    options: dict[str, Any] = {
        "embeddings": context.embeddings,
        "allow_private": context.allow_private,
    }
    if state.action == "remove":
        options["patterns"] = list(state.sources)
    elif state.action == "add":
        sources = _allowed_sources(state.sources, context)
        if not sources and not state.uploads:
            raise ValueError("add needs sources or uploads")
        if state.uploads:  # a damaged index is refused before an upload is written
            open_writer(index).previous()
        saved = _save_uploads(state.uploads, Path(context.upload_dir))
        targets = [*sources, *map(str, saved)]
        options.update(
            paths_or_urls=targets,
            access=state.access or None,
            include=state.include,
            exclude=state.exclude,
            crawl=state.crawl,
        )
    return run_job(state.action, index, options, progress=get_stream_writer())


def _permissions_only(state: IndexerState) -> bool:
    """Whether the admin asked for a permission-only sync. Fails closed: a value that is not
    a plain true or false (a string, a number) or true with an action other than sync is
    refused, never read as a full sync or as nothing."""
    value = state.permissions_only
    if not isinstance(value, bool):
        raise ValueError(f"permissions_only takes true or false, not {str(value)[:40]!r}")
    if value and state.action != "sync":
        raise ValueError(f"permissions_only goes with the action 'sync', not {state.action!r}")
    return value


def _allowed_sources(sources: list[str], context: IndexerContext) -> list[str]:
    """The sources to add: as given for the in-process host (the operator itself); for a
    served admin, each local path held to the operator's folders and resolved
    (`footnote.ingest.source_policy`), the whole add refused if any one is not allowed."""
    if _served_user() is None:
        return list(sources)
    policy = ServedSourcePolicy.from_settings(
        upload_dir=context.upload_dir,
        source_roots=context.source_roots,
        indexes=[context.index_dir],
    )
    return [policy.checked(str(source)) for source in sources]


builder = StateGraph(
    IndexerState,
    input_schema=IndexerInput,
    output_schema=IndexerOutput,
    context_schema=IndexerContext,
)
builder.add_node(manage)
builder.add_edge(START, "manage")
builder.add_edge("manage", END)
graph = builder.compile(name="indexer")


@dataclass(kw_only=True)
class LibraryState:
    documents: list[dict[str, Any]] = field(default_factory=list)
    """The documents the caller may read: name, chunks, size, last ingested, access."""


def list_readable(state: LibraryState, runtime: Runtime[IndexerContext]) -> dict[str, Any]:
    """Every signed-in caller sees the documents their groups may read (an admin: all, with
    each failure's reason)."""
    user = _served_user()
    caller = Caller.operator() if user is None else served_caller(user)
    listing = corpus.sources(_context(runtime).index_dir)
    return {"documents": readable_documents(listing, caller)}


READER_FIELDS = ("source", "chunks", "size", "ingested_at", "access")
"""What a reader who is not an admin learns of a document they may read."""


def readable_documents(listing: Mapping[str, Any], caller: Caller) -> list[dict[str, Any]]:
    """The documents of `corpus.sources(...)` the caller may read: an admin all of them, with
    every field; anyone else those shared with one of their groups, in brief."""
    if caller.admin:
        return list(listing["documents"])
    return [
        {k: doc[k] for k in READER_FIELDS}
        for doc in listing["documents"]
        if doc["access"] and not caller.groups.isdisjoint(doc["access"]) and not doc["restricted"]
    ]


library_builder = StateGraph(LibraryState, context_schema=IndexerContext)
library_builder.add_node(list_readable)
library_builder.add_edge(START, "list_readable")
library_builder.add_edge("list_readable", END)
library = library_builder.compile(name="library")
