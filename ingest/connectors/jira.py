"""The Jira connector: the issues of one project with their comments, read through
atlassian-python-api's client over Jira's REST API (v2, `/rest/api/2/...`), each readable
only by those Jira lets browse it.

`jira+https://HOST?project=KEY`. One document per issue: its summary and description, then
each comment as a section cited by its own link (`/browse/KEY-1?focusedCommentId=ID`).
A sync lists what JQL finds updated since the checkpoint and reads those alone; the listing
of every issue's key and update time prunes deleted or moved issues. Readers: those the
project's permission scheme lets browse it (users, groups, project roles' actors), narrowed
by the issue's security level, if it has one, to that level's members; readers that cannot
be read make the issue no one's.
"""

from __future__ import annotations

import datetime as dt
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from footnote.ingest.connectors import atlassian
from footnote.ingest.connectors.atlassian import Api, Grant, Readers, Refused, Site
from footnote.ingest.connectors.base import Batch, Checkpoint, Permissions, SourceDocument
from footnote.ingest.connectors.identities import IdentityMap
from footnote.ingest.documents import ParsedDocument, ParseError, Section

SCHEMES = ("jira+https", "jira+http")
SETTING = "project"
_LISTED = "summary,updated,security,reporter,assignee"
_POLL_OVERLAP = dt.timedelta(days=1)
_ISSUE_KEY = re.compile(r"[A-Za-z][A-Za-z0-9_]*-[0-9]+")
"""An issue key goes into a request's path: only Jira's own form is accepted."""


def parse_source(value: str) -> Site:
    return atlassian.parse_site(value, "jira", SETTING)


def identify(value: str) -> tuple[str, str]:
    site = parse_source(value)
    return site.id, site.label


def served(value: str, checked_path: Any) -> str:
    return atlassian.served_site(parse_source(value))


def open_connector(opening: atlassian.Opening) -> JiraConnector:
    site = parse_source(opening.source)
    atlassian.check_reachable(site, opening)
    return JiraConnector(site, identities=IdentityMap.from_env())


@dataclass(frozen=True)
class LevelGrant:
    """An issue security level's members: a grant, plus whether the issue's own reporter
    and assignee are members (they differ from issue to issue)."""

    grant: Grant
    reporter: bool = False
    assignee: bool = False


class JiraConnector:
    """One project's issues: the `Connector` protocol over Jira's REST API."""

    def __init__(
        self,
        site: Site,
        *,
        identities: IdentityMap | None = None,
        budget_s: float = atlassian.RATE_LIMIT_BUDGET_S,
    ) -> None:
        self.site = site
        self.api = Api(site, "Jira", budget_s)
        self.readers = Readers(
            "jira", identities or IdentityMap({}), self._groups_of, self._members_of
        )
        self._listing: dict[str, dict[str, Any]] | None = None
        self._browse: Grant | Refused | None = None
        self._levels: dict[str, LevelGrant | Refused] = {}
        self._scheme: str | Refused | None = None
        self._memberships: dict[str, frozenset[str]] = {}
        self._permissions: dict[str, Permissions] = {}
        self._classic_search = False
        """The site has no `search/jql` (Server, Data Center): `search` with `startAt`."""

    # -- the Connector protocol --------------------------------------------------------

    def full_load(self) -> Batch:
        return self._batch(list(self._everything().values()), "")

    def poll(self, since: Checkpoint) -> Batch:
        """The issues JQL finds updated since the checkpoint; deletions and permission
        changes are found by `list_ids`."""
        date = atlassian.query_date(since.cursor, _POLL_OVERLAP) if since.cursor else None
        if date is None:
            return self.full_load()
        jql = f'project = "{self.site.key}" AND updated >= "{date}" ORDER BY updated ASC'
        changed = self._search(jql, "updated")
        listing = self._everything()
        issues = [
            listing[i["key"]] for i in changed if isinstance(i, dict) and i.get("key") in listing
        ]
        return self._batch(issues, since.cursor)

    def list_ids(self) -> dict[str, str]:
        return {key: self._version(issue) for key, issue in self._everything().items()}

    def permissions(self, doc_id: str) -> Permissions:
        if doc_id not in self._permissions:
            self._permissions[doc_id] = self._read_permissions(doc_id)
        return self._permissions[doc_id]

    # -- reading the project -----------------------------------------------------------

    def _everything(self) -> dict[str, dict[str, Any]]:
        if self._listing is None:
            jql = f'project = "{self.site.key}" ORDER BY updated ASC'
            found = self._search(jql, _LISTED)
            self._listing = {
                str(i["key"]): i
                for i in found
                if isinstance(i, dict) and _ISSUE_KEY.fullmatch(str(i.get("key")))
            }
        return self._listing

    def _search(self, jql: str, fields: str) -> list[Any]:
        """Every issue a JQL search finds: Jira Cloud's `search/jql` (pages linked by
        `nextPageToken`), or, where the site has none (Server, Data Center: 404), `search`
        paged by `startAt`."""
        if not self._classic_search:
            try:
                return list(_token_pages(self.api, jql, fields))
            except Refused as exc:
                if exc.status != 404:
                    raise
                self._classic_search = True
        params = {"jql": jql, "fields": fields}
        return list(self.api.paged("rest/api/2/search", params, "issues"))

    def _read_permissions(self, key: str) -> Permissions:
        what = f"{self.site.label} issue {key}"
        browse = self._browse_grant()
        if isinstance(browse, Refused):
            return Permissions.nobody(
                f"Jira did not list who may browse project {self.site.key} ({browse.status}); "
                "credentials that may read its permission scheme are needed"
            )
        issue = self._everything().get(key)
        if issue is None:
            return Permissions.nobody(f"{what}: not in the project's listing")
        fields = issue.get("fields") or {}
        if "security" not in fields:  # not shown: taken for none, it would widen the issue
            return Permissions.nobody(f"{what}: its security level was not listed")
        security = fields["security"]
        grants = [browse]
        if security is not None:
            if not isinstance(security, dict) or security.get("id") is None:
                return Permissions.nobody(f"{what}: a malformed security level")
            level = self._level(str(security["id"]))
            if isinstance(level, Refused):
                return Permissions.nobody(
                    f"{what}: Jira did not list the members of its security level ({level.status})"
                )
            extra = [
                atlassian.user_key(fields.get(role), self.readers.emails)
                for role, member in (("reporter", level.reporter), ("assignee", level.assignee))
                if member
            ]
            grants.append(level.grant | Grant(users=frozenset(u for u in extra if u)))
        return self.readers.resolve(grants, what)

    def _browse_grant(self) -> Grant | Refused:
        """Who the project's permission scheme lets browse it (BROWSE_PROJECTS)."""
        if self._browse is None:
            try:
                scheme = self.api.get(f"rest/api/2/project/{self.site.key}/permissionscheme")
                scheme_id = quote(str(scheme["id"]), safe="")
                granted = self.api.get(f"rest/api/2/permissionscheme/{scheme_id}/permission")
                holders = [
                    p.get("holder")
                    for p in (granted or {}).get("permissions") or []
                    if isinstance(p, dict) and p.get("permission") == "BROWSE_PROJECTS"
                ]
                self._browse = self._holders(holders).grant
            except Refused as exc:
                self._browse = exc
            except (KeyError, TypeError):
                self._browse = Refused(f"{self.site.label}: a malformed permission scheme", 0)
        return self._browse

    def _level(self, level_id: str) -> LevelGrant | Refused:
        if level_id not in self._levels:
            try:
                scheme = self._security_scheme()
                members = self.api.paged(
                    f"rest/api/2/issuesecurityschemes/{scheme}/members",
                    {"issueSecurityLevelId": level_id},
                    "values",
                )
                self._levels[level_id] = self._holders(
                    [m.get("holder") for m in members if isinstance(m, dict)]
                )
            except Refused as exc:
                self._levels[level_id] = exc
        return self._levels[level_id]

    def _security_scheme(self) -> str:
        if self._scheme is None:
            try:
                found = self.api.get(f"rest/api/2/project/{self.site.key}/issuesecuritylevelscheme")
                self._scheme = quote(str(found["id"]), safe="")
            except Refused as exc:
                self._scheme = exc
            except (KeyError, TypeError):
                self._scheme = Refused(f"{self.site.label}: a malformed security scheme", 0)
        if isinstance(self._scheme, Refused):
            raise self._scheme
        return self._scheme

    def _holders(self, holders: list[Any]) -> LevelGrant:
        """A permission's or a security level's holders as a grant. Holders the connector
        cannot name people by (a project lead, a custom field) grant no one here."""
        grant, reporter, assignee = Grant(), False, False
        for holder in holders:
            if not isinstance(holder, dict):
                continue
            kind, value = holder.get("type"), holder.get("parameter")
            if kind == "anyone":
                grant = grant | Grant(everyone=True)
            elif kind == "group" and isinstance(value, str) and value:
                grant = grant | Grant(groups=frozenset([value]))
            elif kind == "user":
                key = atlassian.user_key(holder.get("user"), self.readers.emails) or value
                grant = grant | Grant(
                    users=frozenset([key] if isinstance(key, str) and key else [])
                )
            elif kind == "projectRole" and value is not None:
                grant = grant | self._role(quote(str(value), safe=""))
            elif kind == "applicationRole":
                grant = grant | Grant(groups=frozenset([f"application:{value or 'any'}"]))
            reporter = reporter or kind == "reporter"
            assignee = assignee or kind == "assignee"
        return LevelGrant(grant, reporter, assignee)

    def _role(self, role_id: str) -> Grant:
        role = self.api.get(f"rest/api/2/project/{self.site.key}/role/{role_id}")
        users, groups = set(), set()
        actors = role.get("actors") if isinstance(role, dict) else None
        for actor in actors if isinstance(actors, list) else []:
            if not isinstance(actor, dict):
                continue
            if actor.get("type") == "atlassian-group-role-actor":
                name = (actor.get("actorGroup") or {}).get("name") or actor.get("name")
                if isinstance(name, str) and name:
                    groups.add(name)
            elif actor.get("type") == "atlassian-user-role-actor":
                key = atlassian.user_key(actor.get("actorUser"), self.readers.emails) or actor.get(
                    "name"
                )
                if isinstance(key, str) and key:
                    users.add(key)
        return Grant(users=frozenset(users), groups=frozenset(groups))

    def _groups_of(self, user: str) -> frozenset[str]:
        if user not in self._memberships:
            try:
                found = self.api.get("rest/api/2/user/groups", atlassian.user_query(user))
            except Refused:  # not told: the user passes by name only
                found = []
            self._memberships[user] = frozenset(
                g["name"]
                for g in (found if isinstance(found, list) else [])
                if isinstance(g, dict) and isinstance(g.get("name"), str)
            )
        return self._memberships[user]

    def _members_of(self, group: str) -> list[str]:
        try:
            members = list(
                self.api.paged("rest/api/2/group/member", {"groupname": group}, "values")
            )
        except Refused:
            return []
        keys = (atlassian.user_key(m, self.readers.emails) for m in members)
        return [k for k in keys if k]

    def _version(self, issue: dict[str, Any]) -> str:
        readers = self.permissions(str(issue["key"]))
        updated = atlassian.iso((issue.get("fields") or {}).get("updated"))
        return f"{updated}/{atlassian.readers_digest(readers)}"

    def _batch(self, issues: list[dict[str, Any]], cursor: str) -> Batch:
        documents = [self._document(issue) for issue in issues]
        whens = [atlassian.iso((i.get("fields") or {}).get("updated")) for i in issues]
        latest = max([cursor, *whens])
        detail = {"project": self.site.key, "changed": len(issues)}
        return Batch(documents=documents, checkpoint=Checkpoint(latest, atlassian.now(), detail))

    def _document(self, issue: dict[str, Any]) -> SourceDocument:
        key = str(issue["key"])
        readers = self.permissions(key)
        fields = issue.get("fields") or {}

        def read() -> bytes:
            try:
                record = self._issue_record(key)
            except atlassian.ConnectorError as exc:
                raise ParseError(str(exc)) from None
            record["readers"] = atlassian.readers_record(readers)
            return json.dumps(record, ensure_ascii=False, sort_keys=True).encode("utf-8")

        def parse(data: bytes, source: str) -> ParsedDocument:
            return _parsed(json.loads(data), source, readers)

        return SourceDocument(
            id=key,
            name=f"{self.site.key}/{key}",
            version=self._version(issue),
            link=f"{self.site.base}/browse/{key}",
            read=read,
            parse=parse,
            author=_name(fields.get("reporter")),
            updated=atlassian.iso(fields.get("updated")) or None,
            permissions=readers,
        )

    def _issue_record(self, key: str) -> dict[str, Any]:
        issue = self.api.get(
            f"rest/api/2/issue/{key}", {"fields": "summary,description,reporter,updated,status"}
        )
        fields = (issue.get("fields") if isinstance(issue, dict) else None) or {}
        link = f"{self.site.base}/browse/{key}"
        comments = [
            {
                "author": _name(c.get("author")),
                "body": str(c.get("body") or ""),
                "created": atlassian.iso(c.get("created")),
                "link": f"{link}?focusedCommentId={c['id']}#comment-{c['id']}",
            }
            for c in self.api.paged(f"rest/api/2/issue/{key}/comment", {}, "comments")
            if isinstance(c, dict) and str(c.get("id", "")).isdigit() and not c.get("visibility")
        ]  # a comment shown only to a role or group is left out: never wider than Jira
        return {
            "key": key,
            "summary": str(fields.get("summary") or ""),
            "description": str(fields.get("description") or ""),
            "author": _name(fields.get("reporter")),
            "status": str((fields.get("status") or {}).get("name") or ""),
            "updated": atlassian.iso(fields.get("updated")),
            "link": link,
            "comments": comments,
        }


def _token_pages(api: Api, jql: str, fields: str) -> Iterator[Any]:
    """Jira Cloud's search, page after page by `nextPageToken`."""
    params: dict[str, Any] = {"jql": jql, "fields": fields, "maxResults": 100}
    seen: set[str] = set()
    while True:
        answer = api.get("rest/api/2/search/jql", params)
        issues = answer.get("issues") if isinstance(answer, dict) else None
        yield from issues if isinstance(issues, list) else []
        token = answer.get("nextPageToken") if isinstance(answer, dict) else None
        if not issues or not isinstance(token, str) or token in seen or answer.get("isLast"):
            return
        seen.add(token)  # a token seen before would loop for ever
        params = {**params, "nextPageToken": token}


def _name(user: Any) -> str | None:
    if not isinstance(user, dict):
        return None
    name = user.get("displayName") or user.get("name") or user.get("accountId")
    return str(name)[:200] if name else None


def _parsed(record: dict[str, Any], source: str, readers: Permissions) -> ParsedDocument:
    """The issue: summary and description first, then each comment as a section cited by
    its link. Its text is data: never read for front matter, so it cannot name its readers."""
    title = f"{record['key']}: {record['summary']}"
    opened = f"{title}\n\n{record['description']}".strip()
    meta = {"author": record["author"]} if record["author"] else {}
    sections = [Section(text=opened, headings=[title], url=record["link"], metadata=meta)]
    for comment in record["comments"]:
        if comment["body"].strip():
            heading = f"Comment by {comment['author'] or 'unknown'} on {comment['created'][:10]}"
            sections.append(
                Section(
                    text=comment["body"],
                    headings=[title, heading],
                    url=comment["link"],
                    metadata={"author": comment["author"]} if comment["author"] else {},
                )
            )
    return ParsedDocument(
        source=source,
        title=title,
        sections=sections,
        date=record["updated"][:10] or None,
        access=readers.access_groups() or [],
        access_problem=readers.problem,
        metadata={"issue": record["key"], "status": record["status"]},
    )
