"""The Confluence connector: the pages of one space, read through atlassian-python-api's
client over Confluence's REST API (v1, `/rest/api/...`, as Server, Data Center and Cloud
serve it), each readable only by those Confluence lets read it.

`confluence+https://HOST/wiki?space=KEY`. One document per page: its storage-format body as
text, cut at its headings, cited by the page's link, with its last author, update time and
version. A sync lists what CQL finds modified since the checkpoint; the listing of every
page (ids, versions, ancestors and read restrictions, one paged request) prunes deleted
pages and finds permission changes. Readers: those the space's permissions let view it,
narrowed by the read restrictions on the page and on each of its ancestors; readers that
cannot be read make the page no one's.
"""

from __future__ import annotations

import datetime as dt
import json
from typing import Any
from urllib.parse import quote

from footnote.ingest.connectors import atlassian
from footnote.ingest.connectors.atlassian import Api, Grant, Readers, Refused, Site
from footnote.ingest.connectors.base import Batch, Checkpoint, Permissions, SourceDocument
from footnote.ingest.connectors.identities import IdentityMap
from footnote.ingest.documents import ParsedDocument, ParseError, Section

SCHEMES = ("confluence+https", "confluence+http")
SETTING = "space"
_LISTING_EXPAND = (
    "version,ancestors,restrictions.read.restrictions.user,restrictions.read.restrictions.group"
)
_POLL_OVERLAP = dt.timedelta(days=1)
_HEADINGS = ("h1", "h2", "h3", "h4", "h5", "h6")


def parse_source(value: str) -> Site:
    return atlassian.parse_site(value, "confluence", SETTING)


def identify(value: str) -> tuple[str, str]:
    site = parse_source(value)
    return site.id, site.label


def served(value: str, checked_path: Any) -> str:
    return atlassian.served_site(parse_source(value))


def open_connector(opening: atlassian.Opening) -> ConfluenceConnector:
    site = parse_source(opening.source)
    atlassian.check_reachable(site, opening)
    return ConfluenceConnector(site, identities=IdentityMap.from_env())


class ConfluenceConnector:
    """One space's pages: the `Connector` protocol over Confluence's REST API."""

    def __init__(
        self,
        site: Site,
        *,
        identities: IdentityMap | None = None,
        budget_s: float = atlassian.RATE_LIMIT_BUDGET_S,
    ) -> None:
        self.site = site
        self.api = Api(site, "Confluence", budget_s)
        self.readers = Readers(
            "confluence", identities or IdentityMap({}), self._groups_of, self._members_of
        )
        self._listing: dict[str, dict[str, Any]] | None = None
        self._space: Grant | None | Refused = None
        self._memberships: dict[str, frozenset[str]] = {}
        self._permissions: dict[str, Permissions] = {}

    # -- the Connector protocol --------------------------------------------------------

    def full_load(self) -> Batch:
        return self._batch(list(self._everything().values()), "")

    def poll(self, since: Checkpoint) -> Batch:
        """The pages CQL finds modified since the checkpoint; deletions and permission
        changes are found by `list_ids`."""
        date = atlassian.query_date(since.cursor, _POLL_OVERLAP) if since.cursor else None
        if date is None:
            return self.full_load()
        cql = f'space = "{self.site.key}" and type = page and lastmodified >= "{date}"'
        changed = list(self.api.pages("rest/api/content/search", {"cql": cql, "expand": "version"}))
        listing = self._everything()
        pages = [listing[str(p.get("id"))] for p in changed if str(p.get("id")) in listing]
        return self._batch(pages, since.cursor)

    def list_ids(self) -> dict[str, str]:
        return {page_id: self._version(page) for page_id, page in self._everything().items()}

    def permissions(self, doc_id: str) -> Permissions:
        if doc_id not in self._permissions:
            self._permissions[doc_id] = self._read_permissions(doc_id)
        return self._permissions[doc_id]

    # -- reading the space -------------------------------------------------------------

    def _everything(self) -> dict[str, dict[str, Any]]:
        """Every current page of the space, with its version, ancestors and restrictions."""
        if self._listing is None:
            params = {
                "spaceKey": self.site.key,
                "type": "page",
                "status": "current",
                "expand": _LISTING_EXPAND,
            }
            self._listing = {
                str(page["id"]): page
                for page in self.api.pages("rest/api/content", params)
                if isinstance(page, dict) and str(page.get("id")).isdigit()
            }  # a page id goes into a request's path: digits only, as Confluence's are
        return self._listing

    def _space_grant(self) -> Grant | Refused:
        """Who the space's permissions let view it (`read` on the space)."""
        if self._space is None:
            try:
                space = self.api.get(f"rest/api/space/{self.site.key}", {"expand": "permissions"})
            except Refused as exc:
                self._space = exc
                return exc
            if not isinstance(space, dict) or not isinstance(space.get("permissions"), list):
                self._space = Refused(f"{self.site.label}: no permissions given", 200)
            else:
                self._space = _space_grant(space, self.readers.emails)
        return self._space

    def _read_permissions(self, page_id: str) -> Permissions:
        what = f"{self.site.label} page {page_id}"
        space = self._space_grant()
        if isinstance(space, Refused):
            shown = "none given" if space.status == 200 else str(space.status)
            return Permissions.nobody(
                f"Confluence did not list the permissions of space {self.site.key} "
                f"({shown}); credentials that may read them are needed"
            )
        listing = self._everything()
        page = listing.get(page_id)
        if page is None:
            return Permissions.nobody(f"{what}: not in the space's listing")
        grants = [space]
        for ancestor in [*(page.get("ancestors") or []), page]:
            found = listing.get(str(ancestor.get("id"))) if isinstance(ancestor, dict) else None
            if found is None:
                return Permissions.nobody(f"{what}: an ancestor's restrictions could not be read")
            restriction = _restriction(found, self.readers.emails)
            if isinstance(restriction, str):
                return Permissions.nobody(f"{what}: {restriction}")
            if restriction is not None:
                grants.append(restriction)
        return self.readers.resolve(grants, what)

    def _groups_of(self, user: str) -> frozenset[str]:
        if user not in self._memberships:
            try:
                found = self.api.pages("rest/api/user/memberof", atlassian.user_query(user))
                self._memberships[user] = frozenset(
                    g["name"]
                    for g in found
                    if isinstance(g, dict) and isinstance(g.get("name"), str)
                )
            except Refused:  # not told: the user passes by name only
                self._memberships[user] = frozenset()
        return self._memberships[user]

    def _members_of(self, group: str) -> list[str]:
        try:
            members = list(self.api.pages(f"rest/api/group/{quote(group, safe='')}/member", {}))
        except Refused:
            return []
        keys = (atlassian.user_key(m, self.readers.emails) for m in members)
        return [k for k in keys if k]

    def _version(self, page: dict[str, Any]) -> str:
        readers = self.permissions(str(page["id"]))
        number = (page.get("version") or {}).get("number")
        return f"{number}/{atlassian.readers_digest(readers)}"

    def _batch(self, pages: list[dict[str, Any]], cursor: str) -> Batch:
        documents = [self._document(page) for page in pages]
        whens = [atlassian.iso((p.get("version") or {}).get("when")) for p in pages]
        latest = max([cursor, *whens])
        detail = {"space": self.site.key, "changed": len(pages)}
        return Batch(documents=documents, checkpoint=Checkpoint(latest, atlassian.now(), detail))

    def _document(self, page: dict[str, Any]) -> SourceDocument:
        page_id = str(page["id"])
        readers = self.permissions(page_id)
        version = page.get("version") or {}
        link = self._link(page)

        def read() -> bytes:
            try:
                record = self._page_record(page_id)
            except atlassian.ConnectorError as exc:
                raise ParseError(str(exc)) from None
            record["readers"] = atlassian.readers_record(readers)
            return json.dumps(record, ensure_ascii=False, sort_keys=True).encode("utf-8")

        def parse(data: bytes, source: str) -> ParsedDocument:
            return _parsed(json.loads(data), source, readers)

        return SourceDocument(
            id=page_id,
            name=f"{self.site.key}/{str(page.get('title') or page_id)[:200]}",
            version=self._version(page),
            link=link,
            read=read,
            parse=parse,
            author=_author(version.get("by")),
            updated=atlassian.iso(version.get("when")) or None,
            permissions=readers,
        )

    def _link(self, page: dict[str, Any]) -> str:
        """The page's web address: its `webui` path on the site (never another host)."""
        webui = (page.get("_links") or {}).get("webui")
        if isinstance(webui, str) and webui.startswith("/"):
            return f"{self.site.base}{webui}"
        return f"{self.site.base}/pages/viewpage.action?pageId={page['id']}"

    def _page_record(self, page_id: str) -> dict[str, Any]:
        page = self.api.get(f"rest/api/content/{page_id}", {"expand": "body.storage,version,space"})
        if not isinstance(page, dict):
            raise ParseError("Confluence gave no page")
        version = page.get("version") or {}
        body = ((page.get("body") or {}).get("storage") or {}).get("value") or ""
        return {
            "id": page_id,
            "title": str(page.get("title") or ""),
            "html": str(body),
            "author": _author(version.get("by")),
            "updated": atlassian.iso(version.get("when")),
            "version": version.get("number"),
            "link": self._link(page),
        }


def _space_grant(space: Any, emails: dict[str, str]) -> Grant:
    """The `read` permissions of a space (`expand=permissions`): users, groups, and anonymous
    access (everyone). Other operations (edit, admin) do not let anyone read."""
    grant = Grant()
    permissions = space.get("permissions") if isinstance(space, dict) else None
    for permission in permissions if isinstance(permissions, list) else []:
        if not isinstance(permission, dict):
            continue
        operation = permission.get("operation") or {}
        if operation.get("operation") != "read" or operation.get("targetType") != "space":
            continue
        subjects = permission.get("subjects") or {}
        users = [atlassian.user_key(u, emails) for u in _results(subjects.get("user"))]
        groups = [g.get("name") for g in _results(subjects.get("group"))]
        grant = grant | Grant(
            everyone=permission.get("anonymousAccess") is True,
            users=frozenset(u for u in users if u),
            groups=frozenset(g for g in groups if isinstance(g, str) and g),
        )
    return grant


def _restriction(page: dict[str, Any], emails: dict[str, str]) -> Grant | None | str:
    """A page's own read restriction; None when it has none (it then narrows nothing); why
    not, when the listing does not show it or names someone without a name the connector
    can use. Taking a restriction not shown for none would widen the page to the space."""
    restrictions = page.get("restrictions")
    read = restrictions.get("read") if isinstance(restrictions, dict) else None
    subjects = read.get("restrictions") if isinstance(read, dict) else None
    if not isinstance(subjects, dict):
        return f"the read restrictions of page {page.get('id')} were not listed"
    named_users, named_groups = _results(subjects.get("user")), _results(subjects.get("group"))
    users = {atlassian.user_key(u, emails) for u in named_users} - {None}
    groups = {g.get("name") for g in named_groups if isinstance(g.get("name"), str)} - {""}
    if len(users) < len({str(u) for u in named_users}) or len(groups) < len(named_groups):
        return f"a read restriction of page {page.get('id')} names someone without a usable name"
    grant = Grant(users=frozenset(str(u) for u in users), groups=frozenset(str(g) for g in groups))
    return grant if grant.users or grant.groups else None


def _results(value: Any) -> list[dict[str, Any]]:
    results = value.get("results") if isinstance(value, dict) else None
    return [r for r in results if isinstance(r, dict)] if isinstance(results, list) else []


def _author(user: Any) -> str | None:
    if not isinstance(user, dict):
        return None
    name = user.get("displayName") or user.get("publicName") or user.get("username")
    return str(name)[:200] if name else None


def _parsed(record: dict[str, Any], source: str, readers: Permissions) -> ParsedDocument:
    """The page as sections cut at its headings, each headed by the page title and the
    headings above it. Its text is data: never read for front matter or access."""
    title = record["title"] or f"Page {record['id']}"
    meta = {"author": record["author"]} if record["author"] else {}
    sections = [
        Section(text=text, headings=[title, *path], url=record["link"], metadata=dict(meta))
        for path, text in storage_sections(record["html"])
        if text.strip()
    ] or [Section(text=title, headings=[title], url=record["link"], metadata=meta)]
    return ParsedDocument(
        source=source,
        title=title,
        sections=sections,
        date=record["updated"][:10] or None,
        access=readers.access_groups() or [],
        access_problem=readers.problem,
        metadata={"space_page": record["id"], "version": str(record["version"])},
    )


def storage_sections(html: str) -> list[tuple[list[str], str]]:
    """Confluence storage format (XHTML with `ac:` macros) as (heading path, text) pieces:
    a heading starts a piece, and deeper headings nest under shallower ones."""
    from bs4 import BeautifulSoup

    soup = BeautifulSoup(f"<div>{html}</div>", "html.parser")
    for tag in soup.find_all(["ac:parameter", "script", "style"]):
        tag.decompose()
    pieces: list[tuple[list[str], str]] = []
    path: list[tuple[int, str]] = []
    lines: list[str] = []

    def flush() -> None:
        if lines:
            pieces.append(([h for _, h in path], "\n".join(lines)))
            lines.clear()

    for node in soup.find_all(True):
        if node.name in _HEADINGS:
            flush()
            level = int(node.name[1])
            path = [(lv, h) for lv, h in path if lv < level]
            path.append((level, node.get_text(" ", strip=True)))
        elif node.name in ("p", "li", "pre", "td", "th", "ac:plain-text-body") and not node.find(
            ["p", "li", "pre", "td", "th"]
        ):
            text = node.get_text(" ", strip=True)
            if text:
                lines.append(text)
    flush()
    return pieces
