"""A loopback stand-in for the parts of GitLab's REST API (v4) the GitLab connector reads,
shaped from GitLab's public reference (docs.gitlab.com/api): a project by its URL-encoded
path or id (`visibility`, feature access levels, `shared_with_groups`), its issues and merge
requests listings (`order_by=updated_at`, `sort`, `updated_after`, inclusive), an item's
notes, and `members/all`. Listings are paged as GitLab pages them: a `Link` header (next,
prev, first, last) and `X-Page`, `X-Next-Page`, `X-Per-Page`, `X-Total`, `X-Total-Pages`.
The token is read from `PRIVATE-TOKEN` (401 "401 Unauthorized" for any other; none at all:
anonymous, public projects only, no confidential issue). It can answer 429 with Retry-After
once, or a redirect to another host once, hold the requests a pattern matches until released
(so a test can kill the client mid-sync), and records each request's path and query."""

from __future__ import annotations

import datetime as dt
import json
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, unquote, urlencode, urlsplit

from tests.request_hold import RequestHold

PAGE_SIZE = 2
"""Items per page whatever `per_page` asks, so every listing of a few items pages."""
WEB = "https://gitlab.example"


def stamp(minute: int) -> str:
    when = dt.datetime(2026, 11, 2, 9, 0, tzinfo=dt.UTC) + dt.timedelta(minutes=minute)
    return when.strftime("%Y-%m-%dT%H:%M:%S.000Z")


@dataclass
class StubItem:
    """An issue, or a merge request when `merge` is set."""

    iid: int
    title: str
    description: str
    author: str
    updated: str
    notes: list[dict[str, Any]] = field(default_factory=list)
    merge: bool = False
    confidential: bool = False
    assignees: list[str] = field(default_factory=list)


@dataclass
class StubProject:
    id: int
    path: str
    visibility: str = "private"
    members: dict[str, int] = field(default_factory=dict)
    """username -> access level (10 Guest, 20 Reporter, 30 Developer, 40 Maintainer)."""
    shared_with_groups: dict[str, int] = field(default_factory=dict)
    """group full path -> the access level it is shared with."""
    issues: dict[int, StubItem] = field(default_factory=dict)
    merge_requests: dict[int, StubItem] = field(default_factory=dict)
    members_status: int = 200
    """Answer `members/all` with this status (403: the token may not read it)."""

    def items(self, merge: bool) -> dict[int, StubItem]:
        return self.merge_requests if merge else self.issues


class GitlabStub(RequestHold):
    """The stub's state and server; `base` is the address to hand python-gitlab."""

    def __init__(self, token: str) -> None:
        self.token = token
        self.projects: dict[str, StubProject] = {}
        self.requests: list[str] = []
        self.rate_limit_once: str | None = None
        """A path prefix (after /api/v4) whose next request is answered 429, Retry-After: 1."""
        self.redirect_once: str | None = None
        """A path prefix whose next request is answered 302 to another host."""
        RequestHold.__init__(self)
        self.lock = threading.Lock()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self._note_ids = 7000

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def start(self) -> GitlabStub:
        self.thread.start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(5)

    def add_note(self, item: StubItem, author: str, body: str, minute: int, **flags: Any) -> None:
        """A note on an item (`system=True`, `internal=True` for those kinds); the item is
        updated then, as GitLab touches a noteable."""
        self._note_ids += 1
        note = {"id": self._note_ids, "author": author, "body": body, "created": stamp(minute)}
        item.notes.append({**note, "system": False, "internal": False, **flags})
        item.updated = stamp(minute)

    # -- answers ------------------------------------------------------------------------

    def answer(self, path: str, query: dict[str, list[str]], token: str | None) -> tuple:
        with self.lock:
            shown = path + ("?" + urlencode(query, doseq=True) if query else "")
            self.requests.append(shown.removeprefix("/api/v4"))
            rest = path.removeprefix("/api/v4")
            if self.rate_limit_once and rest.startswith(self.rate_limit_once):
                self.rate_limit_once = None
                headers = {"Retry-After": "1", "RateLimit-Limit": "600", "RateLimit-Remaining": "0"}
                return 429, {"message": "Retry later"}, headers
            if self.redirect_once and rest.startswith(self.redirect_once):
                self.redirect_once = None
                return 302, {}, {"Location": "http://127.0.0.2:9/api/v4" + rest}
            if token is not None and token != self.token:
                return 401, {"message": "401 Unauthorized"}, {}
            if not path.startswith("/api/v4/projects/"):
                return 404, {"message": "404 Not Found"}, {}
            held = self.catches(rest, shown.removeprefix("/api/v4"))
        self.wait_if(held)
        with self.lock:
            return self._route(rest.split("/")[2:], query, anonymous=token is None)

    def _project(self, key: str, anonymous: bool) -> StubProject | None:
        name = unquote(key)
        for project in self.projects.values():
            if name in (project.path, str(project.id)):
                return project if project.visibility == "public" or not anonymous else None
        return None

    def _route(self, parts: list[str], query: dict[str, list[str]], *, anonymous: bool) -> tuple:
        project = self._project(parts[0], anonymous)
        if project is None:
            return 404, {"message": "404 Project Not Found"}, {}
        rest = parts[1:]
        if not rest:
            return 200, self._project_json(project), {}
        if rest == ["members", "all"]:
            if project.members_status != 200:
                return project.members_status, {"message": "403 Forbidden"}, {}
            return self._page(parts, query, sorted(project.members.items()), _member_json)
        if rest[0] not in ("issues", "merge_requests"):
            return 404, {"message": "404 Not Found"}, {}
        items = project.items(rest[0] == "merge_requests")
        if len(rest) == 1:
            listed = self._listed(items, query, anonymous)
            return self._page(parts, query, [(project, i) for i in listed], self._item_json)
        item = items.get(int(rest[1])) if rest[1].isdigit() else None
        if item is None or (anonymous and item.confidential) or rest[2:] != ["notes"]:
            return 404, {"message": "404 Not found"}, {}
        return self._page(parts, query, item.notes, _note_json)

    def _listed(
        self, items: dict[int, StubItem], query: dict[str, list[str]], anonymous: bool
    ) -> list[StubItem]:
        after = query.get("updated_after", [""])[0]
        chosen = [
            i
            for i in items.values()
            if not (anonymous and i.confidential)
            and (not after or _when(i.updated) >= _when(after))
        ]
        descending = query.get("sort", ["desc"])[0] == "desc"
        return sorted(chosen, key=lambda i: (i.updated, i.iid), reverse=descending)

    def _page(self, parts: list[str], query: dict[str, list[str]], items: list, shape: Any):
        """One page of a listing, with GitLab's `Link` and `X-*` pagination headers."""
        page = int(query.get("page", ["1"])[0])
        last = max(1, -(-len(items) // PAGE_SIZE))
        chosen = items[(page - 1) * PAGE_SIZE : page * PAGE_SIZE]
        path = "/api/v4/projects/" + "/".join(parts)

        def link(number: int, rel: str) -> str:
            params = {k: v[0] for k, v in query.items() if k != "page"}
            return f'<{self.base}{path}?{urlencode({**params, "page": number})}>; rel="{rel}"'

        links = [link(page + 1, "next")] if page < last else []
        links += [link(page - 1, "prev")] if page > 1 else []
        links += [link(1, "first"), link(last, "last")]
        headers = {
            "Link": ", ".join(links),
            "X-Page": str(page),
            "X-Next-Page": str(page + 1) if page < last else "",
            "X-Prev-Page": str(page - 1) if page > 1 else "",
            "X-Per-Page": str(PAGE_SIZE),
            "X-Total": str(len(items)),
            "X-Total-Pages": str(last),
        }
        return 200, [shape(item) for item in chosen], headers

    def _project_json(self, project: StubProject) -> dict[str, Any]:
        group, _, name = project.path.rpartition("/")
        return {
            "id": project.id,
            "name": name,
            "path": name,
            "path_with_namespace": project.path,
            "web_url": f"{WEB}/{project.path}",
            "visibility": project.visibility,
            "issues_access_level": "enabled",
            "merge_requests_access_level": "enabled",
            "namespace": {"id": 7, "kind": "group", "full_path": group},
            "shared_with_groups": [
                {
                    "group_id": 100 + n,
                    "group_name": path.rsplit("/", 1)[-1],
                    "group_full_path": path,
                    "group_access_level": level,
                    "expires_at": None,
                }
                for n, (path, level) in enumerate(sorted(project.shared_with_groups.items()))
            ],
        }

    def _item_json(self, pair: tuple[StubProject, StubItem]) -> dict[str, Any]:
        project, item = pair
        kind = "merge_requests" if item.merge else "issues"
        data = {
            "id": 50000 + item.iid,
            "iid": item.iid,
            "project_id": project.id,
            "title": item.title,
            "description": item.description,
            "state": "opened",
            "created_at": stamp(0),
            "updated_at": item.updated,
            "author": _user_json(item.author),
            "assignees": [_user_json(a) for a in item.assignees],
            "user_notes_count": sum(not n["system"] for n in item.notes),
            "web_url": f"{WEB}/{project.path}/-/{kind}/{item.iid}",
        }
        if item.merge:
            data.update({"source_branch": f"topic-{item.iid}", "target_branch": "main"})
        else:
            data["confidential"] = item.confidential
        return data


def _when(text: str) -> dt.datetime:
    return dt.datetime.fromisoformat(text)


def _note_json(note: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": note["id"],
        "body": note["body"],
        "author": _user_json(note["author"]),
        "created_at": note["created"],
        "updated_at": note["created"],
        "system": note["system"],
        "internal": note["internal"],
        "confidential": note["internal"],
    }


def _member_json(pair: tuple[str, int]) -> dict[str, Any]:
    username, level = pair
    return {**_user_json(username), "access_level": level, "expires_at": None}


def _user_json(username: str) -> dict[str, Any]:
    return {
        "id": sum(map(ord, username)),
        "username": username,
        "name": username.title(),
        "state": "active",
        "web_url": f"{WEB}/{username}",
    }


def _handler(stub: GitlabStub) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            parts = urlsplit(self.path)
            status, body, headers = stub.answer(
                parts.path, parse_qs(parts.query), self.headers.get("PRIVATE-TOKEN")
            )
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            for name, value in headers.items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    return Handler
