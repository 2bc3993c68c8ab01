"""A loopback stand-in for the parts of GitHub's REST API the GitHub connector reads,
shaped from GitHub's public reference (docs.github.com/rest): the repository, its issues
listing (`state`, `sort=updated`, `direction`, `since`, pages linked by `Link` headers), an
issue's comments, its collaborators and teams. It checks the token (401 "Bad credentials"
otherwise), can answer 429 with Retry-After once, hold the requests a pattern matches until
released (so a test can kill the client mid-sync), and records each request's path."""

from __future__ import annotations

import datetime as dt
import json
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

from tests.request_hold import RequestHold

PAGE_SIZE = 2
"""Items per page whatever `per_page` asks, so every listing of a few items pages."""


def stamp(minute: int) -> str:
    return (dt.datetime(2026, 11, 2, 9, 0, tzinfo=dt.UTC) + dt.timedelta(minutes=minute)).strftime(
        "%Y-%m-%dT%H:%M:%SZ"
    )


@dataclass
class StubIssue:
    number: int
    title: str
    body: str
    author: str
    updated: str
    comments: list[dict[str, Any]] = field(default_factory=list)
    pull: bool = False


@dataclass
class StubRepo:
    owner: str
    name: str
    private: bool
    collaborators: list[str] = field(default_factory=list)
    teams: list[str] = field(default_factory=list)
    issues: dict[int, StubIssue] = field(default_factory=dict)
    collaborators_status: int = 200
    """Answer the collaborators listing with this status (403: the token may not read it)."""


class GithubStub(RequestHold):
    """The stub's state and server; `base` is the API address to hand PyGithub."""

    def __init__(self, token: str) -> None:
        self.token = token
        self.repos: dict[str, StubRepo] = {}
        self.requests: list[str] = []
        self.rate_limit_once: str | None = None
        """A path prefix whose next request is answered 429 with Retry-After: 1."""
        RequestHold.__init__(self)
        self.lock = threading.Lock()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def start(self) -> GithubStub:
        self.thread.start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(5)

    def add_comment(self, repo: StubRepo, number: int, author: str, body: str, minute: int) -> None:
        issue = repo.issues[number]
        comment_id = 9000 + sum(len(i.comments) for i in repo.issues.values())
        issue.comments.append(
            {
                "id": comment_id,
                "author": author,
                "body": body,
                "created": stamp(minute),
                "html_url": f"https://github.com/{repo.owner}/{repo.name}/issues/{number}"
                f"#issuecomment-{comment_id}",
            }
        )
        issue.updated = stamp(minute)

    # -- answers ------------------------------------------------------------------------

    def answer(self, path: str, query: dict[str, list[str]], auth: str) -> tuple[int, Any, dict]:
        request = path + ("?" + urlencode(query, doseq=True) if query else "")
        with self.lock:
            self.requests.append(request)
            if self.rate_limit_once and path.startswith(self.rate_limit_once):
                self.rate_limit_once = None
                return 429, {"message": "API rate limit exceeded"}, {"Retry-After": "1"}
            if auth != f"token {self.token}":
                return 401, {"message": "Bad credentials", "documentation_url": "x"}, {}
            held = self.catches(path, request)
        self.wait_if(held)
        with self.lock:
            return self._route(path.strip("/").split("/"), query)

    def _route(self, parts: list[str], query: dict[str, list[str]]) -> tuple[int, Any, dict]:
        if len(parts) < 3 or parts[0] != "repos" or f"{parts[1]}/{parts[2]}" not in self.repos:
            return 404, {"message": "Not Found"}, {}
        repo = self.repos[f"{parts[1]}/{parts[2]}"]
        rest = parts[3:]
        if not rest:
            return 200, self._repo_json(repo), {}
        if rest == ["issues"]:
            return self._page(
                "/".join(["", *parts]), query, self._issues(repo, query), self._issue_json
            )
        if len(rest) == 3 and rest[0] == "issues" and rest[2] == "comments":
            issue = repo.issues.get(int(rest[1])) if rest[1].isdigit() else None
            if issue is None:
                return 404, {"message": "Not Found"}, {}
            return self._page("/".join(["", *parts]), query, issue.comments, _comment_json)
        if rest == ["collaborators"]:
            if repo.collaborators_status != 200:
                return repo.collaborators_status, {"message": "Must have push access"}, {}
            return self._page("/".join(["", *parts]), query, repo.collaborators, _user_json)
        if rest == ["teams"]:
            return self._page("/".join(["", *parts]), query, repo.teams, _team_json)
        return 404, {"message": "Not Found"}, {}

    def _issues(self, repo: StubRepo, query: dict[str, list[str]]) -> list[Any]:
        since = query.get("since", [""])[0]
        issues = [
            (repo, i)
            for i in repo.issues.values()
            if not since or dt.datetime.fromisoformat(i.updated) >= dt.datetime.fromisoformat(since)
        ]
        return sorted(issues, key=lambda pair: (pair[1].updated, pair[1].number))

    def _page(
        self, path: str, query: dict[str, list[str]], items: list[Any], shape: Any
    ) -> tuple[int, Any, dict]:
        """One page of a listing, with GitHub's `Link` header to the next and last pages."""
        page = int(query.get("page", ["1"])[0])
        last = max(1, -(-len(items) // PAGE_SIZE))
        chosen = items[(page - 1) * PAGE_SIZE : page * PAGE_SIZE]
        links = []

        def link(number: int, rel: str) -> str:
            params = {k: v[0] for k, v in query.items() if k != "page"}
            return f'<{self.base}{path}?{urlencode({**params, "page": number})}>; rel="{rel}"'

        if page < last:
            links += [link(page + 1, "next"), link(last, "last")]
        if page > 1:
            links += [link(1, "first"), link(page - 1, "prev")]
        headers = {"Link": ", ".join(links)} if links else {}
        return 200, [shape(item) for item in chosen], headers

    def _repo_json(self, repo: StubRepo) -> dict[str, Any]:
        full = f"{repo.owner}/{repo.name}"
        return {
            "id": abs(hash(full)) % 10**8,
            "name": repo.name,
            "full_name": full,
            "private": repo.private,
            "visibility": "private" if repo.private else "public",
            "owner": _user_json(repo.owner),
            "url": f"{self.base}/repos/{full}",
            "html_url": f"https://github.com/{full}",
        }

    def _issue_json(self, pair: tuple[StubRepo, StubIssue]) -> dict[str, Any]:
        repo, issue = pair
        full = f"{repo.owner}/{repo.name}"
        kind = "pull" if issue.pull else "issues"
        data = {
            "id": 100000 + issue.number,
            "number": issue.number,
            "url": f"{self.base}/repos/{full}/issues/{issue.number}",
            "repository_url": f"{self.base}/repos/{full}",
            "comments_url": f"{self.base}/repos/{full}/issues/{issue.number}/comments",
            "html_url": f"https://github.com/{full}/{kind}/{issue.number}",
            "title": issue.title,
            "body": issue.body,
            "user": _user_json(issue.author),
            "state": "open",
            "labels": [],
            "comments": len(issue.comments),
            "created_at": stamp(0),
            "updated_at": issue.updated,
        }
        if issue.pull:
            data["pull_request"] = {
                "url": f"{self.base}/repos/{full}/pulls/{issue.number}",
                "html_url": f"https://github.com/{full}/pull/{issue.number}",
            }
        return data


def _comment_json(comment: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": comment["id"],
        "html_url": comment["html_url"],
        "body": comment["body"],
        "user": _user_json(comment["author"]),
        "created_at": comment["created"],
        "updated_at": comment["created"],
    }


def _user_json(login: str) -> dict[str, Any]:
    return {"login": login, "id": abs(hash(login)) % 10**6, "type": "User"}


def _team_json(slug: str) -> dict[str, Any]:
    return {"id": abs(hash(slug)) % 10**6, "slug": slug, "name": slug, "permission": "pull"}


def _handler(stub: GithubStub) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            parts = urlsplit(self.path)
            status, body, headers = stub.answer(
                parts.path, parse_qs(parts.query), self.headers.get("Authorization", "")
            )
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json; charset=utf-8")
            self.send_header("Content-Length", str(len(data)))
            for name, value in headers.items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    return Handler
