"""The MediaWiki connector: a wiki's pages, read through its Action API (`api.php`), each
readable by those the wiki lets read it.

`mediawiki+https://HOST/w/api.php` (or `mediawiki+http://...`) names the wiki by its API.
Settings, in the source so every later sync reads it the same way: `?ns=0,4` the namespaces
read (default: the wiki's content namespaces), `?restrict=NS:GROUP,GROUP` (repeatable) a
namespace only those wiki groups may read (as Lockdown-style settings make it),
`?user=NAME&password=NAME` the environment variables holding a bot password (default
`FOOTNOTE_MEDIAWIKI_USER` / `FOOTNOTE_MEDIAWIKI_PASSWORD`; only their names are recorded).

One document per page, its id the page id (stable across moves), its version the last
revision id and a digest of its readers: the text is cut at its section headings, each
section cited by the page's link and the heading's anchor. A sync reads the wiki's recent
changes since the checkpoint (edits, new pages, moves, deletions and restores from the log)
and re-reads those pages alone; the id listing prunes pages deleted or moved out since.
"""

from __future__ import annotations

import datetime as dt
import functools
import hashlib
import json
import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol
from urllib.parse import parse_qsl, quote, urlencode, urlsplit

import httpx

from footnote.ingest.connectors.base import (
    Batch,
    Checkpoint,
    CheckpointLost,
    ConnectorError,
    Permissions,
    SourceDocument,
)
from footnote.ingest.connectors.identities import IdentityMap
from footnote.ingest.connectors.mediawiki_api import ApiError, WaitTooLong, WikiApi
from footnote.ingest.connectors.mediawiki_text import sections
from footnote.ingest.documents import ParsedDocument, ParseError, Section

SCHEMES = ("mediawiki+https", "mediawiki+http")
USER_ENV = "FOOTNOTE_MEDIAWIKI_USER"
PASSWORD_ENV = "FOOTNOTE_MEDIAWIKI_PASSWORD"
HOSTS_ENV = "FOOTNOTE_MEDIAWIKI_HOSTS"
"""The hosts a served admin may name while the operator's bot password is set."""
RATE_LIMIT_BUDGET_S = 120.0
RECENT_CHANGES_DAYS = 89
"""MediaWiki keeps recent changes 90 days by default: an older checkpoint reads in full."""
CONTENT_BATCH = 50
_ENV_NAME = re.compile(r"[A-Z_][A-Z0-9_]{0,63}")
_GROUP = re.compile(r"[A-Za-z0-9_-]{1,64}")
_SETTINGS = ("ns", "restrict", "user", "password")


@dataclass(frozen=True)
class MediawikiSource:
    """A wiki as the index records it: `id` is what `footnote sources` shows."""

    api: str
    namespaces: tuple[int, ...] = ()
    """The namespaces read; empty: the wiki's content namespaces."""
    restrict: tuple[tuple[int, tuple[str, ...]], ...] = ()
    """Namespace -> the wiki groups that alone may read it."""
    user_env: str = USER_ENV
    password_env: str = PASSWORD_ENV

    @property
    def id(self) -> str:
        query: list[tuple[str, str]] = []
        if self.namespaces:
            query.append(("ns", ",".join(map(str, self.namespaces))))
        query += [("restrict", f"{ns}:{','.join(groups)}") for ns, groups in self.restrict]
        if self.user_env != USER_ENV:
            query.append(("user", self.user_env))
        if self.password_env != PASSWORD_ENV:
            query.append(("password", self.password_env))
        return f"mediawiki+{self.api}" + (f"?{urlencode(query)}" if query else "")

    @property
    def host(self) -> str:
        return urlsplit(self.api).hostname or ""


def parse_source(value: str) -> MediawikiSource:
    """The wiki a user names, or ConnectorError saying what is wrong with it."""
    shown = value[:200]
    scheme, _, rest = value.partition("://")
    try:
        parts = urlsplit(f"{scheme.removeprefix('mediawiki+')}://{rest}")
        host = parts.hostname
    except ValueError:
        host = None
    if scheme not in SCHEMES or not host or parts.username is not None or parts.fragment:
        raise ConnectorError(
            f"{shown}: a wiki is mediawiki+https://HOST/PATH/api.php, with no credentials"
        )
    settings: dict[str, Any] = {"restrict": []}
    for key, raw in parse_qsl(parts.query, keep_blank_values=True):
        if key not in _SETTINGS or (key != "restrict" and key in settings):
            raise ConnectorError(f"{shown}: unknown or repeated setting {key[:40]!r}")
        settings[key] = _setting(shown, key, raw, settings["restrict"])
    return MediawikiSource(
        api=parts._replace(query="").geturl(),
        namespaces=settings.get("ns", ()),
        restrict=tuple(sorted(settings["restrict"])),
        user_env=settings.get("user", USER_ENV),
        password_env=settings.get("password", PASSWORD_ENV),
    )


def _setting(shown: str, key: str, raw: str, restrict: list[Any]) -> Any:
    if key == "ns":
        if not re.fullmatch(r"\d{1,6}(,\d{1,6})*", raw):
            raise ConnectorError(f"{shown}: ns is a list of namespace numbers (ns=0,4)")
        return tuple(sorted({int(n) for n in raw.split(",")}))
    if key == "restrict":
        ns, _, groups = raw.partition(":")
        names = tuple(sorted(set(groups.split(","))))
        if not ns.isdigit() or not all(_GROUP.fullmatch(g) for g in names):
            raise ConnectorError(f"{shown}: restrict is NS:GROUP,GROUP (restrict=4:sysop)")
        if any(seen == int(ns) for seen, _ in restrict):
            raise ConnectorError(f"{shown}: namespace {ns} is restricted twice")
        restrict.append((int(ns), names))
        return restrict
    if not _ENV_NAME.fullmatch(raw):
        raise ConnectorError(f"{shown}: {key} names an environment variable (e.g. {USER_ENV})")
    return raw


def identify(value: str) -> tuple[str, str]:
    source = parse_source(value)
    return source.id, source.host


def served(value: str, checked_path: Any) -> str:
    """A served admin's wiki: which secret is sent is the operator's (no `user=` or
    `password=`), and while the operator's bot password is set, only to the hosts the
    operator lists in `$FOOTNOTE_MEDIAWIKI_HOSTS`: an admin naming any wiki could otherwise
    have the server send its password to a host of their choosing."""
    source = parse_source(value)
    if source.user_env != USER_ENV or source.password_env != PASSWORD_ENV:
        raise ConnectorError(
            f"{source.host}: a served add cannot set user= or password=; the operator sets "
            f"${USER_ENV} and ${PASSWORD_ENV}"
        )
    hosts = {h.strip().lower() for h in os.environ.get(HOSTS_ENV, "").split(",") if h.strip()}
    if os.environ.get(USER_ENV) and source.host.lower() not in hosts:
        raise ConnectorError(
            f"{source.host}: not a wiki the operator's bot password may be sent to (${HOSTS_ENV})"
        )
    return source.id


class Opening(Protocol):
    """What opening a recorded source gives this connector (`registry.Opening`)."""

    @property
    def source(self) -> str: ...

    @property
    def check_host(self) -> Callable[[str, int], None]: ...


def open_connector(opening: Opening) -> MediawikiConnector:
    source = parse_source(opening.source)
    parts = urlsplit(source.api)
    opening.check_host(parts.hostname or "", parts.port or (443 if parts.scheme == "https" else 80))
    return MediawikiConnector(source, identities=IdentityMap.from_env())


@dataclass(frozen=True)
class Page:
    """A page as the listing gives it: its last revision, who made it and when."""

    id: str
    title: str
    ns: int
    revid: int
    user: str | None
    timestamp: str
    url: str


@dataclass
class Site:
    """What siteinfo says of the wiki: its clock, namespaces and who may read it."""

    now: str
    content_namespaces: list[int]
    anonymous_read: bool
    read_groups: list[str] | None
    """The groups holding the `read` right; None when the wiki did not list them."""
    namespace_names: dict[int, str] = field(default_factory=dict)


class MediawikiConnector:
    """One wiki's pages: the `Connector` protocol over its Action API."""

    def __init__(
        self,
        source: MediawikiSource,
        *,
        identities: IdentityMap | None = None,
        budget_s: float = RATE_LIMIT_BUDGET_S,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.source = source
        self.identities = identities or IdentityMap({})
        self.budget_s = budget_s
        self.transport = transport
        self._api: WikiApi | None = None
        self._site: Site | None = None
        self._pages: dict[str, Page] | None = None
        self._skipped: dict[str, str] = {}
        self._texts: dict[int, str] = {}
        self._pending: list[int] = []

    # -- the Connector protocol --------------------------------------------------------

    def full_load(self) -> Batch:
        site = self.site()
        return self._batch(list(self.pages().values()), site.now, [])

    def poll(self, since: Checkpoint) -> Batch:
        """The pages the wiki's recent changes name since the checkpoint (on the wiki's own
        clock); CheckpointLost when the changes are older than the wiki keeps."""
        try:
            when = dt.datetime.fromisoformat(since.cursor.replace("Z", "+00:00"))
        except ValueError:
            return self.full_load()
        if dt.datetime.now(dt.UTC) - when > dt.timedelta(days=RECENT_CHANGES_DAYS):
            raise CheckpointLost(f"{self.source.host}: the checkpoint is older than the wiki keeps")
        site = self.site()
        ids, titles, deleted = self._call(lambda: _recent_changes(self.api(), since.cursor))
        pages = self.pages()
        changed = [p for p in pages.values() if p.id in ids or p.title in titles]
        return self._batch(changed, site.now, sorted(deleted - set(pages)))

    def list_ids(self) -> dict[str, str]:
        return {page.id: self._version(page) for page in self.pages().values()}

    def permissions(self, doc_id: str) -> Permissions:
        page = self.pages().get(doc_id)
        return self._readers(page.ns if page is not None else 0)

    # -- reading the wiki ----------------------------------------------------------------

    def api(self) -> WikiApi:
        """The API, logged in with the bot password when one is set."""
        if self._api is None:
            api = WikiApi(self.source.api, budget_s=self.budget_s, transport=self.transport)
            credentials = self._credentials()
            if credentials is not None:
                refused = self._call(lambda: api.login(*credentials))
                if refused is not None:
                    raise ConnectorError(
                        f"{self.source.host}: the wiki refused the login of "
                        f"${self.source.user_env} ({refused}); set a valid bot password and "
                        "sync again (nothing indexed was changed)"
                    )
            self._api = api
        return self._api

    def _credentials(self) -> tuple[str, str] | None:
        user = os.environ.get(self.source.user_env, "")
        password = os.environ.get(self.source.password_env, "")
        defaults = (self.source.user_env, self.source.password_env) == (USER_ENV, PASSWORD_ENV)
        if not user and not password and defaults:
            return None
        for name, value in ((self.source.user_env, user), (self.source.password_env, password)):
            if not value:
                raise ConnectorError(f"${name} is not set (the wiki's bot password)")
        return user, password

    def site(self) -> Site:
        if self._site is None:
            data = self._call(
                lambda: self.api().call(
                    {
                        "action": "query",
                        "meta": "siteinfo",
                        "siprop": "general|namespaces|usergroups",
                        "curtimestamp": "1",
                    }
                )
            )
            self._site = _site(data)
        return self._site

    def pages(self) -> dict[str, Page]:
        """Every page of the namespaces read, by id (one listing a sync)."""
        if self._pages is None:
            site = self.site()
            wanted = self.source.namespaces or tuple(site.content_namespaces)
            pages: dict[str, Page] = {}
            for ns in wanted:
                pages.update(self._call(functools.partial(self._listing, ns)))
            self._pages = pages
        return self._pages

    def _listing(self, ns: int) -> dict[str, Page]:
        merged: dict[str, dict[str, Any]] = {}
        params = {
            "generator": "allpages",
            "gapnamespace": str(ns),
            "gaplimit": "max",
            "prop": "revisions|info",
            "rvprop": "ids|timestamp|user",
            "inprop": "url",
            "gapfilterredir": "nonredirects",
        }
        for batch in self.api().query(params):
            for raw in batch.get("pages") or []:
                if isinstance(raw, dict) and "pageid" in raw:
                    merged.setdefault(str(raw["pageid"]), {}).update(raw)
        pages = {}
        for page_id, raw in merged.items():
            page = _page(page_id, raw)
            if page is None:
                self._skipped[str(raw.get("title", page_id))[:200]] = "no revision listed"
            else:
                pages[page_id] = page
        return pages

    def _readers(self, ns: int) -> Permissions:
        """Who may read a page of namespace `ns`: the groups the source restricts it to,
        else everyone on a wiki anonymous visitors read, else the wiki's groups holding
        `read` (mapped by the operator's identity map); no one when that cannot be read."""
        site = self.site()
        named = dict(self.source.restrict).get(ns)
        if named is None:
            if site.anonymous_read:
                return Permissions(public=True)
            if site.read_groups is None:
                return Permissions.nobody(
                    f"{self.source.host} did not list which groups may read it (siteinfo)"
                )
            named = tuple(site.read_groups)
        groups = sorted({self.identities.group("wiki", g) for g in named})
        if not groups:
            return Permissions.nobody(f"{self.source.host}: no group may read namespace {ns}")
        return Permissions(groups=tuple(groups))

    def _version(self, page: Page) -> str:
        """Changes with each revision (a move, a restore make one too) and with who may
        read the page, so a permission change reaches it at the next sync."""
        readers = self._readers(page.ns).record()
        digest = hashlib.sha256(json.dumps(readers, sort_keys=True).encode()).hexdigest()
        return f"{page.revid}/{digest[:16]}"

    def _batch(self, pages: list[Page], cursor: str, deleted: list[str]) -> Batch:
        self._pending = [p.revid for p in pages]
        detail = {"wiki": self.source.api, "changed": len(pages)}
        return Batch(
            documents=[self._document(p) for p in pages],
            checkpoint=Checkpoint(cursor, _now(), detail),
            deleted=deleted,
            skipped=dict(self._skipped),
        )

    def _document(self, page: Page) -> SourceDocument:
        readers = self._readers(page.ns)

        def read() -> bytes:
            record = {
                "title": page.title,
                "revision": page.revid,
                "author": page.user,
                "updated": page.timestamp,
                "link": page.url,
                "namespace": page.ns,
                "wikitext": self._text(page.revid),
                "readers": readers.record(),  # a new reader changes the content
            }
            return json.dumps(record, ensure_ascii=False, sort_keys=True).encode("utf-8")

        def parse(data: bytes, source: str) -> ParsedDocument:
            return _parsed(json.loads(data), source, readers, self.source.api)

        return SourceDocument(
            id=page.id,
            name=page.title,
            version=self._version(page),
            link=page.url,
            read=read,
            parse=parse,
            author=page.user,
            updated=page.timestamp,
            permissions=readers,
        )

    def _text(self, revid: int) -> str:
        """A revision's wikitext, fetched with the next ones this batch will ask for (50 a
        request); ParseError for one that is gone, so that page alone is skipped."""
        if revid not in self._texts:
            wanted = [revid, *(r for r in self._pending if r != revid and r not in self._texts)]
            try:
                self._texts.update(
                    self._call(lambda: _revisions(self.api(), wanted[:CONTENT_BATCH]))
                )
            except ConnectorError as exc:
                raise ParseError(f"cannot read from the wiki: {exc}") from None
        if revid not in self._texts:
            raise ParseError(f"revision {revid} is no longer readable in the wiki")
        return self._texts.pop(revid)

    def _call(self, read: Callable[[], Any]) -> Any:
        """`read()`, with the wiki's and the network's failures as one line for the user."""
        where = self.source.host
        try:
            return read()
        except WaitTooLong as exc:
            raise ConnectorError(
                f"{where}: the wiki asks for a wait of {exc.seconds:.0f} s, more than this "
                f"sync may wait ({self.budget_s:.0f} s in all); sync again later"
            ) from None
        except ApiError as exc:
            if exc.code in ("readapidenied", "mwoauth-invalid-authorization", "assertuserfailed"):
                raise ConnectorError(
                    f"{where}: the wiki lets no anonymous reader in; set ${self.source.user_env}"
                    f" and ${self.source.password_env} (a bot password)"
                ) from None
            raise ConnectorError(f"{where}: the wiki answered {exc.code}: {exc.info}") from None
        except httpx.HTTPError as exc:
            raise ConnectorError(
                f"{where}: cannot reach {self.source.api} ({type(exc).__name__})"
            ) from None


def _site(data: dict[str, Any]) -> Site:
    query = _object(data.get("query"))
    namespaces = _object(query.get("namespaces"))
    content = [
        int(ns["id"])
        for ns in namespaces.values()
        if isinstance(ns, dict) and ns.get("content") and isinstance(ns.get("id"), int)
    ]
    rights = {
        str(group.get("name")): {str(r) for r in group.get("rights") or []}
        for group in query.get("usergroups") or []
        if isinstance(group, dict)
    }
    return Site(
        now=str(data.get("curtimestamp") or _now()),
        content_namespaces=sorted(content) or [0],
        anonymous_read="read" in rights.get("*", set()),
        read_groups=sorted(g for g, r in rights.items() if "read" in r and g != "*")
        if rights
        else None,
    )


def _object(value: Any) -> dict[str, Any]:
    """A JSON object the wiki answered, or {} for anything else."""
    return value if isinstance(value, dict) else {}


def _page(page_id: str, raw: dict[str, Any]) -> Page | None:
    revisions = raw.get("revisions")
    if not isinstance(revisions, list) or not revisions or not isinstance(revisions[0], dict):
        return None
    last = revisions[0]
    if not isinstance(last.get("revid"), int):
        return None
    return Page(
        id=page_id,
        title=str(raw.get("title", page_id)),
        ns=int(raw.get("ns", 0)),
        revid=last["revid"],
        user=str(last["user"]) if last.get("user") else None,
        timestamp=str(last.get("timestamp") or ""),
        url=str(raw.get("fullurl") or ""),
    )


def _recent_changes(api: WikiApi, since: str) -> tuple[set[str], set[str], set[str]]:
    """(page ids, titles) edited, created, moved or restored since `since`, and the ids of
    pages deleted since. Every namespace is read, so a page moved in is found too."""
    ids: set[str] = set()
    titles: set[str] = set()
    deleted: set[str] = set()
    params = {
        "list": "recentchanges",
        "rcstart": since,
        "rcdir": "newer",
        "rcprop": "title|ids|timestamp|loginfo",
        "rclimit": "max",
        "rctype": "edit|new|log",
    }
    for batch in api.query(params):
        for change in batch.get("recentchanges") or []:
            if not isinstance(change, dict):
                continue
            page_id = str(change.get("pageid") or "")
            if change.get("type") == "log" and change.get("logaction") == "delete":
                deleted.add(page_id)
                continue
            ids.add(page_id)
            titles.add(str(change.get("title", "")))
            target = (change.get("logparams") or {}).get("target_title")
            if target:
                titles.add(str(target))
    return ids - {"", "0"}, titles, deleted - {"", "0"}


def _revisions(api: WikiApi, revids: list[int]) -> dict[int, str]:
    """The wikitext of these revisions (their main slot); a missing one is left out."""
    texts: dict[int, str] = {}
    params = {
        "prop": "revisions",
        "revids": "|".join(map(str, revids)),
        "rvprop": "ids|content",
        "rvslots": "main",
    }
    for batch in api.query(params):
        for page in batch.get("pages") or []:
            for revision in (page.get("revisions") or []) if isinstance(page, dict) else []:
                main = ((revision.get("slots") or {}).get("main") or {}) if revision else {}
                if isinstance(revision.get("revid"), int) and isinstance(main.get("content"), str):
                    texts[revision["revid"]] = main["content"]
    return texts


def _parsed(record: dict[str, Any], source: str, readers: Permissions, wiki: str) -> ParsedDocument:
    """The page: its lead, then each section under its heading path, cited by the page's
    link and the heading's anchor. The text is data: it is never read for front matter."""
    title, link, author = record["title"], record["link"], record["author"]
    found = [
        Section(
            text=section.text,
            headings=[title, *section.headings],
            anchor=section.anchor,
            url=f"{link}#{quote(section.anchor)}" if section.anchor and link else link or None,
            metadata={"author": author} if author else {},
        )
        for section in sections(record["wikitext"])
    ]
    return ParsedDocument(
        source=source,
        title=title,
        sections=found or [Section(text=title, headings=[title], url=link or None)],
        date=record["updated"][:10] or None,
        access=readers.access_groups() or [],  # [] (no one): the index never widens it
        access_problem=readers.problem,
        metadata={"wiki": wiki, "revision": record["revision"], "namespace": record["namespace"]},
    )


def _now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
