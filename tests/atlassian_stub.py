"""Loopback stand-ins for the parts of Confluence's and Jira's REST APIs the connectors read,
shaped from Atlassian's public references (developer.atlassian.com: Confluence REST API v1,
Jira REST API v2).

Confluence, under the context path `/wiki`: the content listing (`spaceKey`, `type`,
`expand`), a CQL content search (`lastmodified >= "yyyy/MM/dd HH:mm"`), a page with its
storage body, a space with its permissions, a user's groups and a group's members; every
listing pages by `start`/`limit` with `_links.next`. Jira: the JQL search (`updated >=`),
an issue, its comments, the project's permission scheme and its grants, a project role's
actors, the issue security scheme and a level's members, a user's groups and a group's
members; listings page by `startAt`/`maxResults`/`total`.

Both check the credentials (basic, or a bearer personal access token; 401 otherwise), can
answer one 429 with Retry-After or a redirect, hold the requests a pattern matches until
released (so a test can kill the client mid-sync), and record each request's path and query."""

from __future__ import annotations

import base64
import datetime as dt
import json
import re
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

from tests.request_hold import RequestHold

PAGE_SIZE = 2
"""Items per page whatever `limit` or `maxResults` asks, so every listing of a few pages."""
Answer = tuple[int, Any, dict[str, str]]
Query = dict[str, list[str]]


def when(day: int) -> dt.datetime:
    return dt.datetime(2026, 10, 1, 9, 0, tzinfo=dt.UTC) + dt.timedelta(days=day)


def iso(day: int) -> str:
    """The UTC ISO time the connectors record for `day`."""
    return when(day).strftime("%Y-%m-%dT%H:%M:%SZ")


class Stub(RequestHold):
    """A threaded loopback server: `answer` checks credentials and the one 429, `route`
    (each service's) answers the rest."""

    def __init__(self, user: str, token: str) -> None:
        self.user = user
        self.token = token
        self.requests: list[str] = []
        self.rate_limit_once: str | None = None
        """A path prefix whose next request is answered 429 with Retry-After: 1."""
        self.redirects: dict[str, str] = {}
        """A path whose requests are answered 302 to the address given."""
        RequestHold.__init__(self)
        self.lock = threading.Lock()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def origin(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def start(self) -> Stub:
        self.thread.start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(5)

    def answer(self, path: str, query: Query, auth: str) -> Answer:
        request = path + ("?" + urlencode(query, doseq=True) if query else "")
        with self.lock:
            self.requests.append(request)
            if self.rate_limit_once and path.startswith(self.rate_limit_once):
                self.rate_limit_once = None
                return 429, {"message": "Rate limit exceeded"}, {"Retry-After": "1"}
            basic = base64.b64encode(f"{self.user}:{self.token}".encode()).decode()
            if auth not in (f"Basic {basic}", f"Bearer {self.token}"):
                return 401, {"statusCode": 401, "message": "Unauthorized"}, {}
            held = self.catches(path, request)
        self.wait_if(held)
        with self.lock:
            return self.redirect(path, query) or self.route(path, query)

    def route(self, path: str, query: Query) -> Answer:
        raise NotImplementedError

    def redirect(self, path: str, query: Query) -> Answer | None:
        """A redirect the test asked for (`redirects`: path -> address), else None."""
        target = self.redirects.get(path)
        return (302, {}, {"Location": target}) if target else None


def _since(text: str) -> dt.datetime | None:
    """The date a CQL `lastmodified >=` or JQL `updated >=` clause names (read as UTC)."""
    found = re.search(r'(?:lastmodified|updated) >= "(\d{4}/\d\d/\d\d \d\d:\d\d)"', text)
    if found is None:
        return None
    return dt.datetime.strptime(found.group(1), "%Y/%m/%d %H:%M").replace(tzinfo=dt.UTC)


def _user(name: str, emails: dict[str, str]) -> dict[str, Any]:
    return {
        "type": "known",
        "username": name,
        "userKey": f"key-{name}",
        "displayName": name.title(),
        **({"email": emails[name]} if name in emails else {}),
    }


# -- Confluence -------------------------------------------------------------------------


@dataclass
class StubPage:
    id: int
    title: str
    html: str
    author: str
    day: int
    version: int = 1
    parent: int | None = None
    read_users: list[str] = field(default_factory=list)
    read_groups: list[str] = field(default_factory=list)


class ConfluenceStub(Stub):
    """One space; `base` is the site address a source names (with its `/wiki` context)."""

    def __init__(self, user: str, token: str, space: str) -> None:
        super().__init__(user, token)
        self.space = space
        self.pages: dict[int, StubPage] = {}
        self.space_users: list[str] = []
        self.space_groups: list[str] = []
        self.anonymous = False
        self.space_status = 200
        self.gives_permissions = True
        """False: the space answers without `permissions`, as a site that no longer expands them."""
        self.lists_restrictions = True
        """False: the content listing leaves out `restrictions`, as if not expanded."""
        self.groups: dict[str, list[str]] = {}
        self.emails: dict[str, str] = {}

    @property
    def base(self) -> str:
        return f"{self.origin}/wiki"

    def edit(self, page_id: int, html: str, day: int) -> None:
        page = self.pages[page_id]
        page.html, page.day, page.version = html, day, page.version + 1

    def route(self, path: str, query: Query) -> Answer:
        rest = path.removeprefix("/wiki/rest/api/")
        if rest == path:
            return 404, {"message": "Not Found"}, {}
        parts = rest.strip("/").split("/")
        if parts == ["content"]:
            if query.get("spaceKey") != [self.space]:
                return 200, self._listing([], "/rest/api/content", query), {}
            pages = sorted(self.pages.values(), key=lambda p: p.id)
            return 200, self._listing(pages, "/rest/api/content", query), {}
        if parts == ["content", "search"]:
            since = _since(query.get("cql", [""])[0])
            pages = [p for p in self.pages.values() if since is None or when(p.day) >= since]
            pages.sort(key=lambda p: (p.day, p.id))
            return 200, self._listing(pages, "/rest/api/content/search", query), {}
        if len(parts) == 2 and parts[0] == "content" and parts[1].isdigit():
            page = self.pages.get(int(parts[1]))
            if page is None:
                return 404, {"message": "No content found with id"}, {}
            return 200, {**self._page(page), "body": {"storage": {"value": page.html}}}, {}
        if parts == ["space", self.space]:
            if self.space_status != 200:
                return self.space_status, {"message": "Not permitted to view permissions"}, {}
            space = {"key": self.space, "name": self.space}
            return (
                200,
                {**space, "permissions": self._grants()} if self.gives_permissions else space,
                {},
            )
        if parts == ["user", "memberof"]:
            name = query.get("username", [""])[0]
            groups = [{"type": "group", "name": g} for g, m in self.groups.items() if name in m]
            return 200, self._listing(groups, "/rest/api/user/memberof", query, raw=True), {}
        if len(parts) == 3 and parts[0] == "group" and parts[2] == "member":
            members = [_user(m, self.emails) for m in self.groups.get(parts[1], [])]
            return (
                200,
                self._listing(members, f"/rest/api/group/{parts[1]}/member", query, raw=True),
                {},
            )
        return 404, {"message": "Not Found"}, {}

    def _listing(self, items: list[Any], path: str, query: Query, raw: bool = False) -> Any:
        """One page of a listing with Confluence's `_links.next` (relative to the context)."""
        start = int(query.get("start", ["0"])[0])
        chosen = items[start : start + PAGE_SIZE]
        links: dict[str, str] = {"base": self.base, "context": "/wiki"}
        if start + PAGE_SIZE < len(items):
            params = {k: v[0] for k, v in query.items() if k != "start"}
            links["next"] = f"{path}?{urlencode({**params, 'start': start + PAGE_SIZE})}"
        results = chosen if raw else [self._page(p) for p in chosen]
        return {
            "results": results,
            "start": start,
            "limit": PAGE_SIZE,
            "size": len(chosen),
            "_links": links,
        }

    def _page(self, page: StubPage) -> dict[str, Any]:
        ancestors = []
        parent = page.parent
        while parent is not None:
            ancestors.insert(
                0, {"id": str(parent), "type": "page", "title": self.pages[parent].title}
            )
            parent = self.pages[parent].parent
        restrictions = {
            "user": {"results": [_user(u, self.emails) for u in page.read_users]},
            "group": {"results": [{"type": "group", "name": g} for g in page.read_groups]},
        }
        return {
            "id": str(page.id),
            "type": "page",
            "status": "current",
            "title": page.title,
            "version": {
                "number": page.version,
                "when": when(page.day).strftime("%Y-%m-%dT%H:%M:%S.000Z"),
                "by": _user(page.author, self.emails),
            },
            "ancestors": ancestors,
            **(
                {"restrictions": {"read": {"operation": "read", "restrictions": restrictions}}}
                if self.lists_restrictions
                else {}
            ),
            "_links": {
                "webui": f"/spaces/{self.space}/pages/{page.id}/{page.title.replace(' ', '+')}",
                "self": f"{self.base}/rest/api/content/{page.id}",
            },
        }

    def _grants(self) -> list[dict[str, Any]]:
        read = {"operation": "read", "targetType": "space"}
        grants: list[dict[str, Any]] = [
            {
                "subjects": {"user": {"results": [_user(u, self.emails)], "size": 1}},
                "operation": read,
            }
            for u in self.space_users
        ]
        grants += [
            {
                "subjects": {"group": {"results": [{"type": "group", "name": g}], "size": 1}},
                "operation": read,
            }
            for g in self.space_groups
        ]
        grants.append({"operation": read, "anonymousAccess": self.anonymous})
        edit = {"operation": "create", "targetType": "page"}
        grants.append(
            {"subjects": {"user": {"results": [_user("mallory", self.emails)]}}, "operation": edit}
        )
        return grants


# -- Jira -------------------------------------------------------------------------------


@dataclass
class StubIssue:
    key: str
    summary: str
    description: str
    reporter: str
    day: int
    security: str | None = None
    assignee: str | None = None
    comments: list[dict[str, Any]] = field(default_factory=list)


class JiraStub(Stub):
    """One project; `base` is the site address a source names."""

    SCHEME = 10000
    SECURITY = 10100

    def __init__(self, user: str, token: str, project: str) -> None:
        super().__init__(user, token)
        self.project = project
        self.issues: dict[str, StubIssue] = {}
        self.browse: list[dict[str, Any]] = []
        """BROWSE_PROJECTS holders: {"type": "group", "parameter": "jira-devs"}..."""
        self.roles: dict[str, list[dict[str, Any]]] = {}
        self.levels: dict[str, list[dict[str, Any]]] = {}
        self.groups: dict[str, list[str]] = {}
        self.emails: dict[str, str] = {}
        self.scheme_status = 200
        self.lists_security = True
        """False: the search leaves out the `security` field, as if not given."""
        self.cloud = False
        """True: the JQL search is Cloud's `search/jql` (nextPageToken); else Server's `search`."""

    @property
    def base(self) -> str:
        return self.origin

    def comment(self, key: str, author: str, body: str, day: int) -> None:
        issue = self.issues[key]
        comment_id = 10000 + sum(len(i.comments) for i in self.issues.values())
        issue.comments.append({"id": str(comment_id), "author": author, "body": body, "day": day})
        issue.day = day

    def route(self, path: str, query: Query) -> Answer:
        rest = path.removeprefix("/rest/api/2/")
        parts = rest.strip("/").split("/")
        project = ["project", self.project]
        if parts == ["search", "jql"] and self.cloud:
            return 200, self._token_search(query), {}
        if parts == ["search"] and not self.cloud:
            return 200, self._search(query), {}
        if len(parts) == 2 and parts[0] == "issue" and parts[1] in self.issues:
            return 200, self._issue(self.issues[parts[1]]), {}
        if len(parts) == 3 and parts[0] == "issue" and parts[2] == "comment":
            issue = self.issues.get(parts[1])
            if issue is None:
                return 404, {"errorMessages": ["Issue does not exist"]}, {}
            comments = [self._comment(c) for c in issue.comments]
            return 200, _paged(comments, "comments", query), {}
        if parts == [*project, "permissionscheme"]:
            if self.scheme_status != 200:
                return self.scheme_status, {"errorMessages": ["You cannot view this"]}, {}
            return 200, {"id": self.SCHEME, "name": "Default scheme"}, {}
        if parts == ["permissionscheme", str(self.SCHEME), "permission"]:
            grants = [
                {"id": n, "holder": h, "permission": "BROWSE_PROJECTS"}
                for n, h in enumerate(self.browse)
            ]
            grants.append(
                {
                    "id": 99,
                    "holder": {"type": "user", "parameter": "mallory"},
                    "permission": "EDIT_ISSUES",
                }
            )
            return 200, {"permissions": grants}, {}
        if len(parts) == 4 and parts[:3] == [*project, "role"] and parts[3] in self.roles:
            return (
                200,
                {"id": int(parts[3]), "name": "Developers", "actors": self.roles[parts[3]]},
                {},
            )
        if parts == [*project, "issuesecuritylevelscheme"]:
            return 200, {"id": self.SECURITY, "name": "Security"}, {}
        if parts == ["issuesecurityschemes", str(self.SECURITY), "members"]:
            level = query.get("issueSecurityLevelId", [""])[0]
            members = [
                {"id": n, "issueSecurityLevelId": int(level), "holder": h}
                for n, h in enumerate(self.levels.get(level, []))
            ]
            return 200, _paged(members, "values", query), {}
        if parts == ["user", "groups"]:
            name = query.get("username", [""])[0]
            return 200, [{"name": g} for g, m in self.groups.items() if name in m], {}
        if parts == ["group", "member"]:
            members = [
                {
                    "name": m,
                    "displayName": m.title(),
                    **({"emailAddress": self.emails[m]} if m in self.emails else {}),
                }
                for m in self.groups.get(query.get("groupname", [""])[0], [])
            ]
            return 200, _paged(members, "values", query), {}
        return 404, {"errorMessages": ["Not found"]}, {}

    def _token_search(self, query: Query) -> Any:
        """Cloud's search: the next page named by an opaque token."""
        start = int(query.get("nextPageToken", ["0"])[0].removeprefix("tok-") or 0)
        found = self._search({**query, "startAt": [str(start)]})
        done = start + PAGE_SIZE >= found["total"]
        token = {} if done else {"nextPageToken": f"tok-{start + PAGE_SIZE}"}
        return {"issues": found["issues"], "isLast": done, **token}

    def _search(self, query: Query) -> Any:
        jql = query.get("jql", [""])[0]
        since = _since(jql)
        issues = [
            i for i in self.issues.values()
            if f'project = "{self.project}"' in jql and (since is None or when(i.day) >= since)
        ]  # fmt: skip
        issues.sort(key=lambda i: (i.day, i.key))
        return _paged([self._listed(i) for i in issues], "issues", query)

    def _person(self, name: str | None) -> dict[str, Any] | None:
        if name is None:
            return None
        return {"name": name, "key": f"key-{name}", "displayName": name.title(),
                **({"emailAddress": self.emails[name]} if name in self.emails else {})}  # fmt: skip

    def _listed(self, issue: StubIssue) -> dict[str, Any]:
        fields: dict[str, Any] = {
            "summary": issue.summary,
            "updated": when(issue.day).strftime("%Y-%m-%dT%H:%M:%S.000+0000"),
            "reporter": self._person(issue.reporter),
            "assignee": self._person(issue.assignee),
            "security": None,
        }
        if issue.security is not None:
            fields["security"] = {"id": issue.security, "name": f"Level {issue.security}"}
        if not self.lists_security:
            del fields["security"]
        return {"id": str(abs(hash(issue.key)) % 10**6), "key": issue.key, "fields": fields}

    def _issue(self, issue: StubIssue) -> dict[str, Any]:
        listed = self._listed(issue)
        listed["fields"].update({"description": issue.description, "status": {"name": "Open"}})
        return listed

    def _comment(self, comment: dict[str, Any]) -> dict[str, Any]:
        stamp = when(comment["day"]).strftime("%Y-%m-%dT%H:%M:%S.000+0000")
        return {
            "id": comment["id"],
            "author": self._person(comment["author"]),
            "body": comment["body"],
            "created": stamp,
            "updated": stamp,
            **({"visibility": comment["visibility"]} if "visibility" in comment else {}),
        }


def _paged(items: list[Any], name: str, query: Query) -> dict[str, Any]:
    start = int(query.get("startAt", ["0"])[0])
    chosen = items[start : start + PAGE_SIZE]
    return {
        "startAt": start,
        "maxResults": PAGE_SIZE,
        "total": len(items),
        "isLast": start + PAGE_SIZE >= len(items),
        name: chosen,
    }


def _handler(stub: Stub) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            parts = urlsplit(self.path)
            status, body, headers = stub.answer(
                parts.path, parse_qs(parts.query), self.headers.get("Authorization", "")
            )
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json;charset=UTF-8")
            self.send_header("Content-Length", str(len(data)))
            for name, value in headers.items():
                self.send_header(name, value)
            try:
                self.end_headers()
                self.wfile.write(data)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client is gone: killed while its request was held

        def log_message(self, format: str, *args: Any) -> None:
            pass

    return Handler
