"""The GitLab connector: a project's issues and merge requests with their notes, read through
python-gitlab over GitLab's REST API (v4), each readable only by those GitLab lets read it.

`gitlab://GROUP/PROJECT` reads gitlab.com (or the instance in `$FOOTNOTE_GITLAB_API`, as for
every such source); `gitlab+https://HOST/GROUP/PROJECT` a self-managed instance served at
HOST's root (`gitlab+http://` for loopback only). Subgroups are more segments. `?issues=0`
or `?mrs=0` leaves one kind out; `?token=NAME` names the environment variable holding the
token (default `GITLAB_TOKEN`; only its name is recorded). One document per issue or merge
request: its description and each note a section, cited by the page's or the note's link. A
sync lists what changed since the checkpoint (`updated_after=`); the listing of every iid
prunes deleted or moved ones. Readers: everyone for a public project, else its members with
Reporter access or more and the groups it is shared with at that level; a confidential
issue's are those members, its author and its assignees, public project or not. Readers
that cannot be read make the documents no one's.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar
from urllib.parse import parse_qsl, urlencode, urlsplit

from footnote.ingest.connectors import gitlab_api
from footnote.ingest.connectors.base import (
    Batch,
    Checkpoint,
    ConnectorError,
    Permissions,
    SourceDocument,
)
from footnote.ingest.connectors.identities import IdentityMap
from footnote.ingest.documents import ParsedDocument, ParseError, Section

SCHEME = "gitlab"
SCHEMES = (SCHEME, "gitlab+https", "gitlab+http")
API_ENV = "FOOTNOTE_GITLAB_API"
DEFAULT_API = "https://gitlab.com"
DEFAULT_TOKEN_ENV = "GITLAB_TOKEN"
REPORTER = 20
"""GitLab's Reporter access level: the least that reads a confidential issue."""
KINDS = {"issues": "issues", "mrs": "merge_requests"}
"""A setting -> the kind of document it reads (the path GitLab names it by)."""
_SEGMENT = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,254}")
_ENV_NAME = re.compile(r"[A-Z_][A-Z0-9_]{0,63}")
_LOOPBACK = ("127.0.0.1", "::1", "localhost")
T = TypeVar("T")


@dataclass(frozen=True)
class GitlabSource:
    """A GitLab source as the index records it: `id` is what `footnote sources` shows."""

    path: str
    """The project's full path, `group/subgroup/project`."""
    host: str | None = None
    """`https://HOST[:PORT]` for a `gitlab+https://` source; None: the operator's API."""
    issues: bool = True
    mrs: bool = True
    token_env: str = DEFAULT_TOKEN_ENV

    @property
    def id(self) -> str:
        query = {
            **{flag: "0" for flag in KINDS if not getattr(self, flag)},
            **({"token": self.token_env} if self.token_env != DEFAULT_TOKEN_ENV else {}),
        }
        tail = f"?{urlencode(sorted(query.items()))}" if query else ""
        head = f"{SCHEME}+{self.host}" if self.host else f"{SCHEME}:/"
        return f"{head}/{self.path}{tail}"

    @property
    def kinds(self) -> list[str]:
        return [kind for flag, kind in KINDS.items() if getattr(self, flag)]


def parse_source(value: str) -> GitlabSource:
    """The GitLab source a user names, or ConnectorError saying what is wrong with it."""
    shown = value[:200]
    form = "a GitLab source is gitlab://GROUP/PROJECT or gitlab+https://HOST/GROUP/PROJECT"
    try:
        parts = urlsplit(value)
        host, port = parts.hostname, parts.port
    except ValueError:
        raise ConnectorError(f"{shown}: {form}") from None
    if parts.scheme not in SCHEMES or parts.fragment or parts.username is not None:
        raise ConnectorError(f"{shown}: {form}")
    if parts.scheme == SCHEME:
        names, base = [parts.netloc, *parts.path.strip("/").split("/")], None
    else:
        names = parts.path.strip("/").split("/")
        scheme = parts.scheme.removeprefix(f"{SCHEME}+")
        if not host:
            raise ConnectorError(f"{shown}: {form}")
        if scheme == "http" and host not in _LOOPBACK:
            raise ConnectorError(f"{shown}: http is for a loopback host only; use https")
        netloc = (f"[{host}]" if ":" in host else host) + (f":{port}" if port else "")
        base = f"{scheme}://{netloc}"
    if not 2 <= len(names) <= 20 or not all(_SEGMENT.fullmatch(n) for n in names):
        raise ConnectorError(f"{shown}: {form}")
    settings: dict[str, Any] = {}
    for key, raw in parse_qsl(parts.query, keep_blank_values=True):
        if key in settings or key not in (*KINDS, "token"):
            raise ConnectorError(f"{shown}: unknown or repeated setting {key[:40]!r}")
        settings[key] = _setting(shown, key, raw)
    if "token" in settings:
        settings["token_env"] = settings.pop("token")
    source = GitlabSource(path="/".join(names), host=base, **settings)
    if not source.kinds:
        raise ConnectorError(f"{shown}: issues=0 and mrs=0 leave nothing to read")
    return source


def _setting(shown: str, key: str, raw: str) -> Any:
    if key in KINDS:
        if raw not in ("0", "1"):
            raise ConnectorError(f"{shown}: {key} is 0 or 1")
        return raw == "1"
    if not _ENV_NAME.fullmatch(raw):
        raise ConnectorError(
            f"{shown}: token names the environment variable holding it (e.g. GITLAB_TOKEN)"
        )
    return raw


def check_api(value: str) -> str:
    """The instance's address (`https://HOST[/PATH]`, a trailing `/api/v4` dropped): http(s),
    a host, no credentials, query or fragment."""
    try:
        parts = urlsplit(value)
        host = parts.hostname
    except ValueError:
        host = None
    if (
        host is None
        or parts.scheme not in ("http", "https")
        or parts.username is not None
        or parts.query
        or parts.fragment
    ):
        raise ConnectorError(
            f"{value[:200]}: ${API_ENV} is GitLab's address, https://HOST, with no credentials"
        )
    return value.rstrip("/").removesuffix("/api/v4")


def identify(value: str) -> tuple[str, str]:
    source = parse_source(value)
    return source.id, source.path.rsplit("/", 1)[1]


def served(value: str, checked_path: Any) -> str:
    """A served admin's GitLab source: a project of the operator's GitLab only, with the
    operator's token. Which instance is reached and which secret is sent are the operator's
    (`$FOOTNOTE_GITLAB_API`, `$GITLAB_TOKEN`): an admin naming them could send a secret of
    the server's environment to a host of their choosing."""
    source = parse_source(value)
    operators = check_api(os.environ.get(API_ENV) or DEFAULT_API)
    if source.token_env != DEFAULT_TOKEN_ENV or source.host not in (None, operators):
        raise ConnectorError(
            f"{source.path}: a served add cannot set token= or another host; the operator "
            f"sets ${API_ENV} and ${DEFAULT_TOKEN_ENV}"
        )
    return source.id


class Opening(Protocol):
    """What opening a recorded source gives this connector (`registry.Opening`, which
    imports this module, so it is named by its shape here)."""

    @property
    def source(self) -> str: ...

    @property
    def check_host(self) -> Callable[[str, int], None]: ...


def open_connector(opening: Opening) -> GitlabConnector:
    source = parse_source(opening.source)
    api = source.host or check_api(os.environ.get(API_ENV) or DEFAULT_API)
    parts = urlsplit(api)
    opening.check_host(parts.hostname or "", parts.port or (443 if parts.scheme == "https" else 80))
    return GitlabConnector(source, api=api, identities=IdentityMap.from_env())


class GitlabConnector:
    """One project's issues and merge requests: the `Connector` protocol over python-gitlab."""

    def __init__(
        self,
        source: GitlabSource,
        *,
        api: str = DEFAULT_API,
        identities: IdentityMap | None = None,
        budget_s: float = gitlab_api.RATE_LIMIT_BUDGET_S,
    ) -> None:
        self.source = source
        self.api = api
        self.identities = identities or IdentityMap({})
        self.budget_s = budget_s
        self._project: Any = None
        self._listing: dict[str, Any] | None = None
        self._members: Permissions | None = None

    # -- the Connector protocol --------------------------------------------------------

    def full_load(self) -> Batch:
        return self._batch(list(self._everything().values()), "")

    def poll(self, since: Checkpoint) -> Batch:
        """The issues and merge requests updated since the checkpoint (GitLab's
        `updated_after=`, on its own clock, inclusive); deletions are found by `list_ids`."""
        try:
            when = dt.datetime.fromisoformat(since.cursor) if since.cursor else None
        except ValueError:
            when = None
        if when is None:
            return self.full_load()
        changed = self._call(lambda: [i for k in self.source.kinds for i in self._list(k, when)])
        return self._batch(changed, since.cursor)

    def list_ids(self) -> dict[str, str]:
        return {doc_id: self._version(item) for doc_id, item in self._everything().items()}

    def permissions(self, doc_id: str) -> Permissions:
        """The project's readers, or for a confidential issue its own (read from the listing
        of every issue's iid, so no note is read)."""
        item = self._everything().get(doc_id)
        if item is None:
            return Permissions.nobody(f"{self.source.path}/-/{doc_id} is no longer listed")
        return self._readers(item)

    # -- reading the project -----------------------------------------------------------

    def _call(self, read: Callable[[], T]) -> T:
        return gitlab_api.call(
            read,
            where=self.source.path,
            token_env=self.source.token_env,
            api=self.api,
            budget_s=self.budget_s,
        )

    def project(self) -> Any:
        if self._project is None:
            token = os.environ.get(self.source.token_env, "")
            if not token and self.source.token_env != DEFAULT_TOKEN_ENV:
                raise ConnectorError(f"${self.source.token_env} is not set (the GitLab token)")
            self._project = self._call(
                lambda: gitlab_api.client(self.api, token, self.budget_s).projects.get(
                    self.source.path
                )
            )
        return self._project

    def _list(self, kind: str, since: dt.datetime | None) -> list[Any]:
        """One kind's listing, every state, oldest update first, pages followed."""
        manager = self.project().issues if kind == "issues" else self.project().mergerequests
        after = {"updated_after": _iso(since)} if since else {}
        return list(manager.list(iterator=True, order_by="updated_at", sort="asc", **after))

    def _everything(self) -> dict[str, Any]:
        if self._listing is None:
            self._listing = self._call(
                lambda: {_doc_id(i): i for k in self.source.kinds for i in self._list(k, None)}
            )
        return self._listing

    def _project_members(self) -> Permissions:
        """Members with Reporter access or more (inherited ones too) and the groups the
        project is shared with at that level; no one's when GitLab does not list them."""
        if self._members is not None:
            return self._members
        project = self.project()
        try:
            members = self._call(lambda: _listed(lambda: project.members_all.list(iterator=True)))
        except _Refused as exc:
            self._members = Permissions.nobody(
                f"GitLab did not list the members of {self.source.path} ({exc.status}); a "
                "token that may read them is needed"
            )
            return self._members
        users = {
            self.identities.user("gitlab", m["username"])
            for m in members
            if m.get("access_level", 0) >= REPORTER and m.get("state", "active") == "active"
        }
        groups = {
            self.identities.group("gitlab-group", g["group_full_path"])
            for g in project.attributes.get("shared_with_groups") or []
            if g.get("group_access_level", 0) >= REPORTER and g.get("group_full_path")
        }
        if not users and not groups:
            self._members = Permissions.nobody(
                f"{self.source.path} lists no members with Reporter access"
            )
        else:
            self._members = Permissions(users=tuple(sorted(users)), groups=tuple(sorted(groups)))
        return self._members

    def _readers(self, item: Any) -> Permissions:
        """Who reads one issue or merge request: everyone when the project and its feature
        are public, else the members; a confidential issue's members, author and assignees."""
        data = item.attributes
        kind = _kind(item)
        if kind == "issues" and data.get("confidential"):
            members = self._project_members()
            if members.problem is not None:
                return members
            people = [_username(data.get("author")), *map(_username, data.get("assignees") or [])]
            named = {self.identities.user("gitlab", p) for p in people if p}
            return Permissions(users=tuple(sorted({*members.users, *named})), groups=members.groups)
        project = self.project().attributes
        feature = project.get(f"{kind}_access_level") or "enabled"
        if project.get("visibility") == "public" and feature in ("enabled", "public"):
            return Permissions(public=True)
        return self._project_members()

    def _version(self, item: Any) -> str:
        """Changes with the item (its update time, its note count) and with who may read it,
        so a permission change reaches every document at the next sync."""
        digest = hashlib.sha256(json.dumps(self._readers(item).record()).encode())
        notes = item.attributes.get("user_notes_count", 0)
        return f"{_iso(_when(item.attributes.get('updated_at')))}/{notes}/{digest.hexdigest()[:16]}"

    def _batch(self, items: list[Any], cursor: str) -> Batch:
        documents = [self._document(item) for item in items]
        stamps = [_iso(_when(i.attributes.get("updated_at"))) for i in items]
        detail = {"project": self.source.path, "changed": len(items)}
        return Batch(
            documents=documents, checkpoint=Checkpoint(max([cursor, *stamps]), _now(), detail)
        )

    def _document(self, item: Any) -> SourceDocument:
        readers = self._readers(item)
        data = item.attributes

        def read() -> bytes:
            try:
                record = self._call(lambda: _item_record(item))
            except ConnectorError as exc:
                raise ParseError(str(exc)) from None
            record["readers"] = readers.record()  # a new reader changes the content
            return json.dumps(record, ensure_ascii=False, sort_keys=True).encode("utf-8")

        def parse(content: bytes, source: str) -> ParsedDocument:
            return _parsed(json.loads(content), source, readers)

        return SourceDocument(
            id=_doc_id(item),
            name=f"{self.source.path}/-/{_doc_id(item)}",
            version=self._version(item),
            link=str(data.get("web_url") or ""),
            read=read,
            parse=parse,
            author=_username(data.get("author")),
            updated=_iso(_when(data.get("updated_at"))) or None,
            permissions=readers,
        )


class _Refused(Exception):
    """A listing GitLab refused (403) or hides (404) from this token."""

    def __init__(self, status: int) -> None:
        super().__init__(str(status))
        self.status = status


def _listed(listing: Callable[[], Any]) -> list[dict[str, Any]]:
    """A listing's items as dicts; a 403 or 404 as `_Refused`, anything else as it came."""
    from gitlab.exceptions import GitlabError

    try:
        return [member.attributes for member in listing()]
    except GitlabError as exc:
        if exc.response_code in (403, 404):
            raise _Refused(exc.response_code) from None
        raise


def _item_record(item: Any) -> dict[str, Any]:
    """What a document holds of an issue or merge request: its text and its notes, with their
    links. System notes (`changed the description`) and internal notes are left out."""
    data = item.attributes
    link = str(data.get("web_url") or "")
    listed = (
        item.notes.list(iterator=True, sort="asc", order_by="created_at")
        if data.get("user_notes_count")
        else []
    )
    notes = [
        {
            "author": _username(n.get("author")),
            "body": n.get("body") or "",
            "link": f"{link}#note_{n['id']}",
            "created": _iso(_when(n.get("created_at"))),
        }
        for n in (note.attributes for note in listed)
        if not (n.get("system") or n.get("internal") or n.get("confidential"))
    ]
    return {
        "iid": data["iid"],
        "kind": _kind(item),
        "title": data.get("title") or "",
        "body": data.get("description") or "",
        "author": _username(data.get("author")),
        "state": data.get("state") or "",
        "link": link,
        "updated": _iso(_when(data.get("updated_at"))),
        "notes": notes,
    }


def _parsed(record: dict[str, Any], source: str, readers: Permissions) -> ParsedDocument:
    """The document: the description first, then each note as a section cited by its link.
    Its text is data: it is never read for front matter, so it cannot name its own readers."""
    mark = "Merge request !" if record["kind"] == "merge_requests" else "Issue #"
    title = f"{mark}{record['iid']}: {record['title']}"
    sections = [
        Section(
            text=f"{title}\n\n{record['body']}".strip(),
            headings=[title],
            url=record["link"],
            metadata={"author": record["author"]} if record["author"] else {},
        )
    ]
    for note in record["notes"]:
        if note["body"].strip():
            heading = f"Note by {note['author'] or 'unknown'} on {note['created'][:10]}"
            sections.append(
                Section(
                    text=note["body"],
                    headings=[title, heading],
                    url=note["link"],
                    metadata={"author": note["author"]} if note["author"] else {},
                )
            )
    return ParsedDocument(
        source=source,
        title=title,
        sections=sections,
        date=record["updated"][:10] or None,
        access=readers.access_groups() or [],  # [] (no one): the index never widens it
        access_problem=readers.problem,
        metadata={"project": record["link"].split("/-/", 1)[0], "state": record["state"]},
    )


def _kind(item: Any) -> str:
    """`merge_requests` for a merge request (it has a source branch), else `issues`."""
    return "merge_requests" if "source_branch" in item.attributes else "issues"


def _doc_id(item: Any) -> str:
    return f"{_kind(item)}/{item.attributes['iid']}"


def _username(user: Any) -> str | None:
    return user.get("username") if isinstance(user, dict) else None


def _when(value: Any) -> dt.datetime | None:
    try:
        return dt.datetime.fromisoformat(str(value)) if value else None
    except ValueError:
        return None


def _iso(when: dt.datetime | None) -> str:
    if when is None:
        return ""
    if when.tzinfo is None:
        when = when.replace(tzinfo=dt.UTC)
    return when.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _now() -> str:
    return _iso(dt.datetime.now(dt.UTC))
