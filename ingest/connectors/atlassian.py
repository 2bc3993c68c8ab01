"""What the Confluence and Jira connectors share: the site a source names, the credentials
read from the environment, the REST calls made through `atlassian-python-api` (errors as one
line, a 429's Retry-After waited out of one bounded budget, pages followed only on the
site itself), and who may read a document when several grants must all let a person in
(a space and a page's restrictions; a project and an issue's security level).

A source is `confluence+https://HOST/wiki?space=KEY` or `jira+https://HOST?project=KEY`;
`+http` is accepted for a loopback host only, so credentials never cross a network in
clear. The credentials are `$FOOTNOTE_<KIND>_TOKEN` (an API token or a personal access
token) and, for basic authentication, `$FOOTNOTE_<KIND>_USER`: read at each sync, sent only
to the source's host, never recorded, printed or logged.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import os
import re
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol
from urllib.parse import parse_qsl, urlsplit

from footnote.ingest.connectors.base import ConnectorError, Permissions
from footnote.ingest.connectors.identities import IdentityMap

RATE_LIMIT_BUDGET_S = 120.0
"""How long one sync may wait in all for a service's rate limits before it gives up."""
_KEY = re.compile(r"(?!\.*$)[A-Za-z0-9_~.-]{1,100}")
"""A space or project key: it goes into paths and queries, so no quote, slash or bare dots."""
_LOOPBACK = ("127.0.0.1", "::1", "localhost")
_MAX_TRIES = 5


class Opening(Protocol):
    """What opening a recorded source gives a connector (`registry.Opening`, which imports
    the connectors, so it is named by its shape here)."""

    @property
    def source(self) -> str: ...

    @property
    def check_host(self) -> Callable[[str, int], None]: ...


@dataclass(frozen=True)
class Site:
    """A Confluence space or Jira project as the index records it."""

    kind: str
    """`confluence` or `jira`: the scheme's prefix and the environment variables' infix."""
    base: str
    """The site's address, no trailing slash (`https://HOST/wiki`)."""
    setting: str
    """`space` or `project`."""
    key: str

    @property
    def id(self) -> str:
        return f"{self.kind}+{self.base}?{self.setting}={self.key}"

    @property
    def label(self) -> str:
        return f"{urlsplit(self.base).hostname}/{self.key}"

    @property
    def token_env(self) -> str:
        return f"FOOTNOTE_{self.kind.upper()}_TOKEN"

    @property
    def user_env(self) -> str:
        return f"FOOTNOTE_{self.kind.upper()}_USER"

    @property
    def site_env(self) -> str:
        """Where the operator names the one site a served admin may add sources of."""
        return f"FOOTNOTE_{self.kind.upper()}_URL"


def parse_site(value: str, kind: str, setting: str) -> Site:
    """The site a user names (`KIND+https://HOST[/PATH]?SETTING=KEY`), or ConnectorError
    saying what is wrong with it."""
    shown = value[:200]
    form = f"a {kind} source is {kind}+https://HOST[/PATH]?{setting}=KEY"
    try:
        parts = urlsplit(value)
        host = parts.hostname
        port = parts.port
    except ValueError:
        raise ConnectorError(f"{shown}: {form}") from None
    scheme = parts.scheme.removeprefix(f"{kind}+")
    query = parse_qsl(parts.query, keep_blank_values=True)
    if (
        scheme not in ("https", "http")
        or not parts.scheme.startswith(f"{kind}+")
        or not host
        or parts.username is not None
        or parts.fragment
        or len(query) != 1
        or query[0][0] != setting
        or not _KEY.fullmatch(query[0][1])
    ):
        raise ConnectorError(f"{shown}: {form}")
    if scheme == "http" and host not in _LOOPBACK:
        raise ConnectorError(f"{shown}: http is for a loopback host only; use https")
    netloc = f"[{host}]" if ":" in host else host
    netloc += f":{port}" if port else ""
    return Site(kind, f"{scheme}://{netloc}{parts.path.rstrip('/')}", setting, query[0][1])


def check_reachable(site: Site, opening: Opening) -> None:
    parts = urlsplit(site.base)
    opening.check_host(parts.hostname or "", parts.port or (443 if parts.scheme == "https" else 80))


def served_site(site: Site) -> str:
    """A served admin's source: only on the site the operator named (`$FOOTNOTE_<KIND>_URL`),
    since the server sends its own credentials to the host a source names."""
    allowed = os.environ.get(site.site_env, "").rstrip("/")
    if not allowed or allowed != site.base:
        raise ConnectorError(
            f"{site.label}: a served add may read only the site in ${site.site_env}"
        )
    return site.id


@dataclass(frozen=True)
class Credentials:
    user: str | None
    token: str = field(repr=False)


def credentials(site: Site) -> Credentials:
    token = os.environ.get(site.token_env, "")
    if not token:
        raise ConnectorError(f"${site.token_env} is not set (the {site.kind} API token)")
    return Credentials(os.environ.get(site.user_env) or None, token)


class Refused(ConnectorError):
    """The service answered 403 or 404: not allowed to read this, or no such thing."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.status = status


class Api:
    """REST calls to one site through an atlassian-python-api client, each failure one line
    for the user; a 429 is waited out of one budget shared by every call of a sync."""

    def __init__(self, site: Site, service: str, budget_s: float = RATE_LIMIT_BUDGET_S) -> None:
        self.site = site
        self.service = service
        self.budget_s = budget_s
        self.budget_left = budget_s
        self._client: Any = None

    def client(self) -> Any:
        if self._client is None:
            try:
                from atlassian import ConfluenceServer, Jira
            except ImportError:
                from footnote.store.extras import install_command

                raise ConnectorError(
                    f"the {self.service} connector needs atlassian-python-api: "
                    f"{install_command('atlassian')}"
                ) from None
            made = credentials(self.site)
            auth: dict[str, Any] = (
                {"username": made.user, "password": made.token}
                if made.user
                else {"token": made.token}
            )
            kind = ConfluenceServer if self.site.kind == "confluence" else Jira
            self._client = kind(
                self.site.base,
                timeout=30,
                retry_with_header=False,
                backoff_and_retry=False,
                **auth,
            )
            # No redirect is followed: the host was checked, a redirect's target was not.
            self._client.session.max_redirects = 0
        return self._client

    def get(self, path: str, params: dict[str, Any] | None = None) -> Any:
        """GET `path` on the site (relative, or the site's own absolute address)."""
        from requests import HTTPError, RequestException

        absolute = path.startswith(self.site.base + "/")
        for _ in range(_MAX_TRIES):
            try:
                return self.client().get(path, params=params, absolute=absolute)
            except HTTPError as exc:
                response = exc.response
                status = response.status_code if response is not None else 0
                if status == 429 and self._waited(response):
                    continue
                raise self._failure(status) from None
            except RequestException as exc:
                raise ConnectorError(
                    f"{self.site.label}: cannot reach {self.site.base} ({type(exc).__name__})"
                ) from None
        raise self._failure(429)

    def _waited(self, response: Any) -> bool:
        """Sleeps for a 429's Retry-After when the budget allows; a longer wait stops the
        sync with one line rather than sleeping for as long as the server asks."""
        try:
            wait = max(0.0, float(response.headers.get("Retry-After", "")))
        except ValueError:
            return False
        if wait > self.budget_left:
            raise ConnectorError(
                f"{self.service}'s rate limit asks for a wait of {wait:.0f} s, more than this "
                f"sync may wait ({self.budget_s:.0f} s in all); sync again later"
            )
        self.budget_left -= wait
        time.sleep(wait)
        return True

    def _failure(self, status: int) -> ConnectorError:
        if status == 401:
            return ConnectorError(
                f"{self.service} refused the credentials in ${self.site.token_env} (401 "
                "Unauthorized); set valid ones and sync again (nothing indexed was changed)"
            )
        message = f"{self.site.label}: {self.service} answered {status}"
        if status in (403, 404):
            return Refused(message, status)
        return ConnectorError(message)

    def pages(self, path: str, params: dict[str, Any], *, limit: int = 50) -> Iterator[Any]:
        """Every item of a listing paged Confluence's way (`start`/`limit`, `results`, the
        next page's address in `_links.next`, followed only below the site's REST root)."""
        answer = self.get(path, {**params, "start": 0, "limit": limit})
        while True:
            results = answer.get("results") if isinstance(answer, dict) else None
            yield from results if isinstance(results, list) else []
            nxt = (answer.get("_links") or {}).get("next") if isinstance(answer, dict) else None
            if not isinstance(nxt, str) or not nxt.startswith("/rest/api/") or not results:
                return
            answer = self.get(f"{self.site.base}{nxt}")

    def paged(
        self, path: str, params: dict[str, Any], items: str, *, limit: int = 50
    ) -> Iterator[Any]:
        """Every item of a listing paged Jira's way (`startAt`/`maxResults`/`total`)."""
        start = 0
        while True:
            answer = self.get(path, {**params, "startAt": start, "maxResults": limit})
            got = answer.get(items) if isinstance(answer, dict) else None
            if not isinstance(got, list) or not got:
                return
            yield from got
            start += len(got)
            total = answer.get("total")
            if answer.get("isLast") is True or (isinstance(total, int) and start >= total):
                return


@dataclass(frozen=True)
class Grant:
    """One condition on who may read: everyone, or these users (by their key on the site)
    and members of these groups. A document's readers pass every grant it is under."""

    everyone: bool = False
    users: frozenset[str] = frozenset()
    groups: frozenset[str] = frozenset()

    def __or__(self, other: Grant) -> Grant:
        return Grant(
            self.everyone or other.everyone, self.users | other.users, self.groups | other.groups
        )


class Readers:
    """Footnote readers of a document under several grants: a group passes when every grant
    names it; a user when every grant names them or a group they belong to (asked of the
    site once a sync). Someone the site's answers do not show passing is left out: the
    result is never wider than the site's own rule."""

    def __init__(
        self,
        system: str,
        identities: IdentityMap,
        groups_of: Callable[[str], frozenset[str]],
        members_of: Callable[[str], list[str]],
    ) -> None:
        self.system = system
        self.identities = identities
        self.groups_of = groups_of
        self.members_of = members_of
        self.emails: dict[str, str] = {}
        """User key -> e-mail address, when the site told it: the mapping file may name either."""

    def resolve(self, grants: list[Grant], what: str) -> Permissions:
        if not grants:
            return Permissions.nobody(f"{what}: no grant of who may read it could be read")
        if all(g.everyone for g in grants):
            return Permissions(public=True)
        groups = {g for grant in grants for g in grant.groups if _all_name(grants, g)}
        candidates = {u for grant in grants for u in grant.users}
        for grant in grants[1:]:
            for group in sorted(grant.groups - groups):
                candidates.update(self.members_of(group))
        users = {u for u in candidates if all(self._passes(u, grant) for grant in grants)}
        if not users and not groups:
            return Permissions.nobody(f"{what}: no one passes every grant of who may read it")
        return Permissions(
            users=tuple(sorted({self.user(u) for u in users})),
            groups=tuple(
                sorted({self.identities.group(f"{self.system}-group", g) for g in groups})
            ),
        )

    def user(self, key: str) -> str:
        email = self.emails.get(key)
        if email and f"{self.system}:{email}" in self.identities.names:
            return self.identities.user(self.system, email)
        return self.identities.user(self.system, key)

    def _passes(self, user: str, grant: Grant) -> bool:
        if grant.everyone or user in grant.users:
            return True
        return bool(grant.groups) and bool(self.groups_of(user) & grant.groups)


def _all_name(grants: list[Grant], group: str) -> bool:
    return all(g.everyone or group in g.groups for g in grants)


def user_key(user: Any, emails: dict[str, str]) -> str | None:
    """A user's key on the site (Server's user name, Cloud's account id), noting their
    e-mail address when the site gives it."""
    if not isinstance(user, dict):
        return None
    key = user.get("username") or user.get("name") or user.get("accountId")
    if not isinstance(key, str) or not key:
        return None
    email = user.get("email") or user.get("emailAddress")
    if isinstance(email, str) and email:
        emails[key] = email
    return key


def user_query(key: str) -> dict[str, str]:
    """How the site is asked about a user: Cloud's account ids hold a colon or are 24 hex
    digits; anything else is a Server user name."""
    cloud = ":" in key or re.fullmatch(r"[0-9a-f]{24}", key) is not None
    return {"accountId": key} if cloud else {"username": key}


def readers_digest(readers: Permissions) -> str:
    """Part of each document's version, so a change of readers reaches it at the next sync."""
    record = [list(readers.users), list(readers.groups), readers.public, readers.problem]
    return hashlib.sha256(json.dumps(record).encode()).hexdigest()[:16]


def readers_record(readers: Permissions) -> dict[str, Any]:
    return {
        "users": list(readers.users),
        "groups": list(readers.groups),
        "public": readers.public,
        "problem": readers.problem,
    }


def iso(value: Any) -> str:
    """A service's timestamp (`2026-11-02T09:00:00.000Z`, `...+0100`) in UTC, ISO 8601."""
    if not isinstance(value, str) or not value:
        return ""
    text = value.replace("Z", "+00:00")
    text = re.sub(r"([+-]\d\d)(\d\d)$", r"\1:\2", text)
    try:
        when = dt.datetime.fromisoformat(text)
    except ValueError:
        return ""
    if when.tzinfo is None:
        when = when.replace(tzinfo=dt.UTC)
    return when.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def query_date(cursor: str, overlap: dt.timedelta) -> str | None:
    """A checkpoint as CQL's and JQL's date (`"yyyy/MM/dd HH:mm"`), moved back by `overlap`:
    both read it in the account's own time zone, which the connector does not know, so a
    poll lists a little more than changed (what it lists at a held version is not read)."""
    try:
        when = dt.datetime.fromisoformat(cursor.replace("Z", "+00:00"))
    except ValueError:
        return None
    return (when - overlap).strftime("%Y/%m/%d %H:%M")


def now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
