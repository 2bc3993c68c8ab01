"""The GitHub connector: a repository's issues and pull requests with their comments, read
through PyGithub, each readable only by those GitHub lets read the repository.

`github://OWNER/REPO` reads github.com's API; `?pulls=0` or `?issues=0` leaves one kind out,
`?token=NAME` names the environment variable holding the token (default `GITHUB_TOKEN`; only
its name is recorded, never its value) and `?api=URL` (command line only) points at a GitHub
Enterprise API, as `$FOOTNOTE_GITHUB_API` does for every source. One document per issue or
pull request: its body and each comment a section, cited by the issue's or the comment's
link. A sync lists what changed since the checkpoint (`since=` on the issues listing); the
cheap id listing prunes deleted or transferred issues. Readers: everyone for a public
repository, else its collaborators and teams, mapped to Footnote identities by
`connectors.identities`; readers that cannot be read make the documents no one's.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import os
import re
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol
from urllib.parse import parse_qsl, urlencode, urlsplit

from footnote.ingest.connectors.base import (
    Batch,
    Checkpoint,
    ConnectorError,
    Permissions,
    SourceDocument,
)
from footnote.ingest.connectors.identities import IdentityMap
from footnote.ingest.documents import ParsedDocument, ParseError, Section

if TYPE_CHECKING:
    from github.Issue import Issue
    from github.Repository import Repository

SCHEME = "github"
API_ENV = "FOOTNOTE_GITHUB_API"
DEFAULT_API = "https://api.github.com"
DEFAULT_TOKEN_ENV = "GITHUB_TOKEN"
RATE_LIMIT_BUDGET_S = 120.0
"""How long one sync may wait in all for GitHub's rate limits before it gives up."""
_NAME = re.compile(r"[A-Za-z0-9_.-]{1,100}")
_ENV_NAME = re.compile(r"[A-Z_][A-Z0-9_]{0,63}")
_FLAGS = ("issues", "pulls")


@dataclass(frozen=True)
class GithubSource:
    """A GitHub source as the index records it: `id` is what `footnote sources` shows."""

    owner: str
    repo: str
    issues: bool = True
    pulls: bool = True
    token_env: str = DEFAULT_TOKEN_ENV
    api: str | None = None
    """The API the command line named (`?api=`); None: `$FOOTNOTE_GITHUB_API` or github.com."""

    @property
    def id(self) -> str:
        query = {
            **{flag: "0" for flag in _FLAGS if not getattr(self, flag)},
            **({"token": self.token_env} if self.token_env != DEFAULT_TOKEN_ENV else {}),
            **({"api": self.api} if self.api else {}),
        }
        tail = f"?{urlencode(sorted(query.items()))}" if query else ""
        return f"{SCHEME}://{self.owner}/{self.repo}{tail}"

    @property
    def full_name(self) -> str:
        return f"{self.owner}/{self.repo}"


def parse_source(value: str) -> GithubSource:
    """The GitHub source a user names, or ConnectorError saying what is wrong with it."""
    shown = value[:200]
    try:
        parts = urlsplit(value)
    except ValueError as exc:
        raise ConnectorError(f"{shown}: malformed source: {exc}") from None
    names = [parts.netloc, *parts.path.strip("/").split("/")]
    if (
        parts.scheme != SCHEME
        or parts.fragment
        or len(names) != 2
        or not all(_NAME.fullmatch(n) and n not in (".", "..") for n in names)
    ):
        raise ConnectorError(f"{shown}: a GitHub source is github://OWNER/REPO")
    settings: dict[str, Any] = {}
    for key, raw in parse_qsl(parts.query, keep_blank_values=True):
        if key in settings or key not in (*_FLAGS, "token", "api"):
            raise ConnectorError(f"{shown}: unknown or repeated setting {key[:40]!r}")
        settings[key] = _setting(shown, key, raw)
    source = GithubSource(owner=names[0], repo=names[1], **_renamed(settings))
    if not (source.issues or source.pulls):
        raise ConnectorError(f"{shown}: issues=0 and pulls=0 leave nothing to read")
    return source


def _setting(shown: str, key: str, raw: str) -> Any:
    if key in _FLAGS:
        if raw not in ("0", "1"):
            raise ConnectorError(f"{shown}: {key} is 0 or 1")
        return raw == "1"
    if key == "token":
        if not _ENV_NAME.fullmatch(raw):
            raise ConnectorError(
                f"{shown}: token names the environment variable holding it (e.g. GITHUB_TOKEN)"
            )
        return raw
    return check_api(raw)


def _renamed(settings: dict[str, Any]) -> dict[str, Any]:
    if "token" in settings:
        settings["token_env"] = settings.pop("token")
    return settings


def check_api(value: str) -> str:
    """An API address: http(s), a host, no credentials, query or fragment."""
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
            f"{value[:200]}: the GitHub API is https://HOST[/api/v3], with no credentials"
        )
    return value.rstrip("/")


def identify(value: str) -> tuple[str, str]:
    source = parse_source(value)
    return source.id, source.repo


def served(value: str, checked_path: Any) -> str:
    """A served admin's GitHub source: the repository and what to read only. Which API is
    reached and which token is sent are the operator's (`$FOOTNOTE_GITHUB_API`,
    `$GITHUB_TOKEN`): an admin naming them could send a secret of the server's environment
    to a host of their choosing."""
    source = parse_source(value)
    if source.api is not None or source.token_env != DEFAULT_TOKEN_ENV:
        raise ConnectorError(
            f"{source.full_name}: a served add cannot set api= or token=; the operator "
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


def open_connector(opening: Opening) -> GithubConnector:
    source = parse_source(opening.source)
    api = check_api(source.api or os.environ.get(API_ENV) or DEFAULT_API)
    parts = urlsplit(api)
    opening.check_host(parts.hostname or "", parts.port or (443 if parts.scheme == "https" else 80))
    return GithubConnector(source, api=api, identities=IdentityMap.from_env())


class _Budget:
    """Seconds left to wait for rate limits, shared by every retry of one connector."""

    def __init__(self, seconds: float) -> None:
        self.left = seconds


class RateLimitWait(Exception):
    """GitHub asked for a wait longer than what is left of the sync's budget."""

    def __init__(self, seconds: float) -> None:
        super().__init__(f"{seconds:.0f} s")
        self.seconds = seconds


def budgeted_retry(budget_s: float) -> Any:
    """PyGithub's retry (rate-limited 403s, 5xx) that also honours a 429's Retry-After, each
    wait taken from one budget: a wait beyond what is left stops the sync with one line
    rather than sleeping for as long as the server asks."""
    from github.GithubRetry import GithubRetry

    class BudgetedRetry(GithubRetry):
        def __init__(self, budget: _Budget | None = None, **kwargs: Any) -> None:
            self.budget = budget or _Budget(budget_s)
            kwargs.setdefault("status_forcelist", [429, *range(500, 600)])
            kwargs.setdefault("max_rate_limit_wait", budget_s)
            super().__init__(**kwargs)

        def new(self, **kw: Any) -> Any:
            return super().new(budget=self.budget, **kw)

        def sleep_for_retry(self, response: Any) -> bool:
            wait = self.get_retry_after(response)
            if wait is None:
                return False
            if wait > self.budget.left:
                raise RateLimitWait(wait)
            self.budget.left -= wait
            time.sleep(wait)
            return True

    return BudgetedRetry(total=5, backoff_factor=0.5, raise_on_status=False)


class GithubConnector:
    """One repository's issues and pull requests: the `Connector` protocol over PyGithub."""

    def __init__(
        self,
        source: GithubSource,
        *,
        api: str = DEFAULT_API,
        identities: IdentityMap | None = None,
        budget_s: float = RATE_LIMIT_BUDGET_S,
    ) -> None:
        self.source = source
        self.api = api
        self.identities = identities or IdentityMap({})
        self.budget_s = budget_s
        self._repo: Repository | None = None
        self._listing: list[Issue] | None = None
        self._readers: Permissions | None = None

    # -- the Connector protocol --------------------------------------------------------

    def full_load(self) -> Batch:
        return self._batch(self._everything(), "")

    def poll(self, since: Checkpoint) -> Batch:
        """The issues updated since the checkpoint (GitHub's `since=`, on its own clock);
        deletions are found by `list_ids`."""
        try:
            when = dt.datetime.fromisoformat(since.cursor) if since.cursor else None
        except ValueError:
            when = None
        if when is None:
            return self.full_load()
        changed = self._call(lambda: list(self._wanted(self.repo().get_issues(**_listing(when)))))
        return self._batch(changed, since.cursor)

    def list_ids(self) -> dict[str, str]:
        return {str(issue.number): self._version(issue) for issue in self._everything()}

    def permissions(self, doc_id: str) -> Permissions:
        """The repository's readers: GitHub has no per-issue permissions."""
        if self._readers is None:
            self._readers = self._call(self._read_permissions)
        return self._readers

    # -- reading the repository ----------------------------------------------------------

    def client(self) -> Any:
        from github import Auth, Github

        token = os.environ.get(self.source.token_env, "")
        if not token and self.source.token_env != DEFAULT_TOKEN_ENV:
            raise ConnectorError(f"${self.source.token_env} is not set (the GitHub token)")
        return Github(
            auth=Auth.Token(token) if token else None,
            base_url=self.api,
            timeout=30,
            per_page=100,
            retry=budgeted_retry(self.budget_s),
            seconds_between_requests=None,
        )

    def repo(self) -> Repository:
        if self._repo is None:
            self._repo = self._call(lambda: self.client().get_repo(self.source.full_name))
        return self._repo

    def _everything(self) -> list[Issue]:
        if self._listing is None:
            self._listing = self._call(
                lambda: list(self._wanted(self.repo().get_issues(**_listing(None))))
            )
        return self._listing

    def _wanted(self, issues: Iterable[Issue]) -> Iterator[Issue]:
        for issue in issues:
            if self.source.pulls if _is_pull(issue) else self.source.issues:
                yield issue

    def _read_permissions(self) -> Permissions:
        from github import GithubException

        repo = self.repo()
        if not repo.private:
            return Permissions(public=True)
        try:
            logins = [user.login for user in repo.get_collaborators()]
            teams = [team.slug for team in repo.get_teams()]
        except GithubException as exc:
            if exc.status not in (403, 404):
                raise
            return Permissions.nobody(
                f"GitHub did not list the collaborators of {self.source.full_name} "
                f"({exc.status}); a token that may read them is needed"
            )
        users = sorted({self.identities.user("github", login) for login in logins})
        owner = self.source.owner
        groups = sorted({self.identities.group("github-team", f"{owner}/{t}") for t in teams})
        if not users and not groups:
            return Permissions.nobody(f"{self.source.full_name} lists no collaborators")
        return Permissions(users=tuple(users), groups=tuple(groups))

    def _call(self, read: Any) -> Any:
        """`read()`, with GitHub's and the network's failures as one line for the user."""
        try:
            from github import BadCredentialsException, GithubException, UnknownObjectException
            from requests import RequestException
        except ImportError:
            from footnote.store.extras import install_command

            raise ConnectorError(
                f"the GitHub connector needs PyGithub: {install_command('github')}"
            ) from None

        where = self.source.full_name
        try:
            return read()
        except BadCredentialsException:
            raise ConnectorError(
                f"GitHub refused the token in ${self.source.token_env} (401 Bad credentials); "
                "set a valid one and sync again (nothing indexed was changed)"
            ) from None
        except RateLimitWait as exc:
            raise ConnectorError(
                f"GitHub's rate limit asks for a wait of {exc.seconds:.0f} s, more than this "
                f"sync may wait ({self.budget_s:.0f} s in all); sync again later"
            ) from None
        except UnknownObjectException:
            raise ConnectorError(
                f"{where}: no such repository, or ${self.source.token_env} may not read it"
            ) from None
        except GithubException as exc:
            raise ConnectorError(
                f"{where}: GitHub answered {exc.status}: {_message(exc)}"
            ) from None
        except RequestException as exc:
            raise ConnectorError(
                f"{where}: cannot reach {self.api} ({type(exc).__name__})"
            ) from None

    def _version(self, issue: Issue) -> str:
        """Changes with the issue (its update time, its comment count) and with who may read
        it, so a permission change reaches every document at the next sync."""
        readers = self.permissions(str(issue.number))
        digest = hashlib.sha256(json.dumps(readers.record()).encode()).hexdigest()
        return f"{_iso(issue.updated_at)}/{issue.comments}/{digest[:16]}"

    def _batch(self, issues: list[Issue], cursor: str) -> Batch:
        documents = [self._document(issue) for issue in issues]
        latest = max([cursor, *(_iso(i.updated_at) for i in issues)])
        detail = {"repository": self.source.full_name, "changed": len(issues)}
        return Batch(documents=documents, checkpoint=Checkpoint(latest, _now(), detail))

    def _document(self, issue: Issue) -> SourceDocument:
        readers = self.permissions(str(issue.number))
        kind = "pull" if _is_pull(issue) else "issues"
        name = f"{self.source.full_name}/{kind}/{issue.number}"

        def read() -> bytes:
            try:
                record = self._call(lambda: _issue_record(issue))
            except ConnectorError as exc:
                raise ParseError(str(exc)) from None
            record["readers"] = readers.record()  # a new reader changes the content
            return json.dumps(record, ensure_ascii=False, sort_keys=True).encode("utf-8")

        def parse(data: bytes, source: str) -> ParsedDocument:
            return _parsed(json.loads(data), source, readers)

        return SourceDocument(
            id=str(issue.number),
            name=name,
            version=self._version(issue),
            link=issue.html_url,
            read=read,
            parse=parse,
            author=_login(issue.user),
            updated=_iso(issue.updated_at),
            permissions=readers,
        )


def _listing(since: dt.datetime | None) -> dict[str, Any]:
    """The issues listing's arguments: every state, oldest update first."""
    return {
        "state": "all",
        "sort": "updated",
        "direction": "asc",
        **({"since": since} if since else {}),
    }


def _issue_record(issue: Issue) -> dict[str, Any]:
    """What a document holds of an issue: its text and its comments, with their links."""
    comments = [
        {
            "author": _login(c.user),
            "body": c.body or "",
            "link": c.html_url,
            "created": _iso(c.created_at),
        }
        for c in (issue.get_comments() if issue.comments else [])
    ]
    return {
        "number": issue.number,
        "title": issue.title or "",
        "body": issue.body or "",
        "author": _login(issue.user),
        "state": issue.state,
        "link": issue.html_url,
        "updated": _iso(issue.updated_at),
        "pull": _is_pull(issue),
        "comments": comments,
    }


def _parsed(record: dict[str, Any], source: str, readers: Permissions) -> ParsedDocument:
    """The document: the body first, then each comment as a section cited by its link. Its
    text is data: it is never read for front matter, so it cannot name its own readers."""
    kind = "Pull request" if record["pull"] else "Issue"
    title = f"{kind} #{record['number']}: {record['title']}"
    opened = f"{title}\n\n{record['body']}".strip()
    sections = [
        Section(
            text=opened,
            headings=[title],
            url=record["link"],
            metadata={"author": record["author"]} if record["author"] else {},
        )
    ]
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
        access=readers.access_groups() or [],  # [] (no one): the index never widens it
        access_problem=readers.problem,
        metadata={"repository": record["link"].rsplit("/", 2)[0], "state": record["state"]},
    )


def _login(user: Any) -> str | None:
    return getattr(user, "login", None) if user is not None else None


def _message(exc: Any) -> str:
    data = exc.data if isinstance(exc.data, dict) else {}
    return str(data.get("message") or "no message")[:200]


def _iso(when: dt.datetime | None) -> str:
    if when is None:
        return ""
    if when.tzinfo is None:
        when = when.replace(tzinfo=dt.UTC)
    return when.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _now() -> str:
    return _iso(dt.datetime.now(dt.UTC))


def _is_pull(issue: Issue) -> bool:
    """Whether a listed issue is a pull request, by its page (`/pull/N`): the listing's
    `pull_request` field is absent from plain issues, and asking PyGithub for it would fetch
    each issue again."""
    return "/pull/" in (issue.html_url or "")
