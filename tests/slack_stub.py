"""A loopback stand-in for the parts of Slack's Web API the Slack connector reads, shaped from
Slack's public reference (api.slack.com/methods): `conversations.list`, `.history`
(`oldest`, `latest`, `inclusive`, newest first, parents with `reply_count` and
`latest_reply`), `.replies`, `.members` and `users.info`, each answered `{"ok": true, ...}`
or `{"ok": false, "error": ...}` (HTTP 200, as Slack does), listings paged by an opaque
`response_metadata.next_cursor`. It checks the bearer token (`invalid_auth`, or
`token_expired` for one marked expired), can answer one method 429 with Retry-After, and
records each call."""

from __future__ import annotations

import base64
import datetime as dt
import json
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

PAGE_SIZE = 2
"""Items per page whatever `limit` asks, so every listing of a few items pages."""
EPOCH = int(dt.datetime(2026, 11, 2, 9, 0, tzinfo=dt.UTC).timestamp())


def ts(minute: int, seq: int = 100) -> str:
    """A Slack ts `minute` minutes after 2026-11-02 09:00 UTC."""
    return f"{EPOCH + minute * 60}.{seq:06d}"


@dataclass
class StubChannel:
    id: str
    name: str
    private: bool
    members: list[str] = field(default_factory=list)
    bot_member: bool = True
    messages: dict[str, dict[str, Any]] = field(default_factory=dict)
    members_error: str | None = None
    """Answer conversations.members with this error (`missing_scope`)."""
    history_error: str | None = None
    """Answer conversations.history with this error (`missing_scope`)."""


class SlackStub:
    """The stub's state and server; `api` is the base URL to hand slack_sdk's WebClient."""

    def __init__(self, token: str) -> None:
        self.token = token
        self.expired: set[str] = set()
        self.users: dict[str, dict[str, Any]] = {}
        self.channels: dict[str, StubChannel] = {}
        self.calls: list[tuple[str, dict[str, str]]] = []
        self.rate_limit_once: str | None = None
        """A method whose next call is answered 429 with Retry-After."""
        self.retry_after = 1
        self.hold: str | None = None
        """A method whose calls wait (outside the lock) until `released` is set."""
        self.released = threading.Event()
        self.lock = threading.Lock()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def api(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/api/"

    def start(self) -> SlackStub:
        self.thread.start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(5)

    # -- the workspace -----------------------------------------------------------------

    def add_user(self, uid: str, name: str, email: str, **extra: Any) -> None:
        self.users[uid] = {
            "id": uid,
            "name": name,
            "real_name": name.title(),
            "deleted": False,
            "is_bot": False,
            "profile": {"email": email, "real_name": name.title()},
            **extra,
        }

    def post(
        self, channel: str, minute: int, user: str, text: str, thread: str | None = None
    ) -> str:
        stamp = ts(minute, 100 + len(self.channels[channel].messages))
        message = {"type": "message", "ts": stamp, "user": user, "text": text}
        if thread is not None:
            message["thread_ts"] = thread
        self.channels[channel].messages[stamp] = message
        return stamp

    def edit(self, channel: str, stamp: str, minute: int, text: str) -> None:
        message = self.channels[channel].messages[stamp]
        message["text"] = text
        message["edited"] = {"user": message["user"], "ts": ts(minute)}

    def delete_thread(self, channel: str, stamp: str) -> None:
        """A message and, for a thread's parent, its replies."""
        messages = self.channels[channel].messages
        for key in [k for k, m in messages.items() if k == stamp or m.get("thread_ts") == stamp]:
            del messages[key]

    def called(self, method: str) -> list[dict[str, str]]:
        return [params for name, params in self.calls if name == method]

    # -- answers ------------------------------------------------------------------------

    def answer(self, method: str, params: dict[str, str], auth: str) -> tuple[int, Any, dict]:
        if self.hold == method:
            with self.lock:
                self.calls.append((f"held:{method}", params))
            self.released.wait(60)
        with self.lock:
            self.calls.append((method, params))
            if self.rate_limit_once == method:
                self.rate_limit_once = None
                headers = {"Retry-After": str(self.retry_after)}
                return 429, {"ok": False, "error": "ratelimited"}, headers
            given = auth.removeprefix("Bearer ")
            if given in self.expired:
                return 200, {"ok": False, "error": "token_expired"}, {}
            if auth != f"Bearer {self.token}":
                return 200, {"ok": False, "error": "invalid_auth"}, {}
            route = getattr(self, "_" + method.replace(".", "_"), None)
            if route is None:
                return 200, {"ok": False, "error": "unknown_method"}, {}
            return 200, route(params), {}

    def _conversations_list(self, params: dict[str, str]) -> dict[str, Any]:
        channels = [
            {
                "id": c.id,
                "name": c.name,
                "is_channel": True,
                "is_private": c.private,
                "is_archived": False,
                "is_member": c.bot_member,
            }
            for c in self.channels.values()
        ]
        return self._page(params, "channels", channels)

    def _conversations_history(self, params: dict[str, str]) -> dict[str, Any]:
        channel = self._readable(params)
        if isinstance(channel, dict):
            return channel
        if channel.history_error:
            return {"ok": False, "error": channel.history_error}
        inclusive = params.get("inclusive") in ("true", "1")
        oldest, latest = float(params.get("oldest") or 0), float(params.get("latest") or 9e12)

        def within(stamp: str) -> bool:
            value = float(stamp)
            if inclusive:
                return oldest <= value <= latest
            return oldest < value < latest

        top = [
            self._listed(channel, m)
            for m in channel.messages.values()
            if m.get("thread_ts") in (None, m["ts"]) and within(m["ts"])
        ]
        top.sort(key=lambda m: float(m["ts"]), reverse=True)
        return self._page(params, "messages", top)

    def _listed(self, channel: StubChannel, message: dict[str, Any]) -> dict[str, Any]:
        replies = [m for m in channel.messages.values() if m.get("thread_ts") == message["ts"]]
        replies = [m for m in replies if m["ts"] != message["ts"]]
        if not replies:
            return dict(message)
        return {
            **message,
            "thread_ts": message["ts"],
            "reply_count": len(replies),
            "reply_users": sorted({m["user"] for m in replies}),
            "latest_reply": max((m["ts"] for m in replies), key=float),
        }

    def _conversations_replies(self, params: dict[str, str]) -> dict[str, Any]:
        channel = self._readable(params)
        if isinstance(channel, dict):
            return channel
        parent = channel.messages.get(params.get("ts", ""))
        if parent is None:
            return {"ok": False, "error": "thread_not_found"}
        replies = [m for m in channel.messages.values() if m.get("thread_ts") == parent["ts"]]
        thread = [self._listed(channel, parent), *(r for r in replies if r is not parent)]
        thread.sort(key=lambda m: float(m["ts"]))
        return self._page(params, "messages", thread)

    def _conversations_members(self, params: dict[str, str]) -> dict[str, Any]:
        channel = self._readable(params)
        if isinstance(channel, dict):
            return channel
        if channel.members_error:
            return {"ok": False, "error": channel.members_error}
        return self._page(params, "members", list(channel.members))

    def _users_info(self, params: dict[str, str]) -> dict[str, Any]:
        user = self.users.get(params.get("user", ""))
        return {"ok": True, "user": user} if user else {"ok": False, "error": "user_not_found"}

    def _readable(self, params: dict[str, str]) -> StubChannel | dict[str, Any]:
        channel = self.channels.get(params.get("channel", ""))
        if channel is None:
            return {"ok": False, "error": "channel_not_found"}
        if not channel.bot_member:
            return {"ok": False, "error": "not_in_channel"}
        return channel

    def _page(self, params: dict[str, str], key: str, items: list[Any]) -> dict[str, Any]:
        """One page, its cursor opaque (base64 of an offset) as Slack's are."""
        cursor = params.get("cursor") or ""
        start = int(base64.b64decode(cursor).decode().split(":")[1]) if cursor else 0
        end = start + PAGE_SIZE
        more = end < len(items)
        following = base64.b64encode(f"offset:{end}".encode()).decode() if more else ""
        return {
            "ok": True,
            key: items[start:end],
            "has_more": more,
            "response_metadata": {"next_cursor": following},
        }


def _handler(stub: SlackStub) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def _serve(self, body: bytes) -> None:
            parts = urlsplit(self.path)
            params = {k: v[0] for k, v in parse_qs(parts.query).items()}
            params.update({k: v[0] for k, v in parse_qs(body.decode()).items()})
            method = parts.path.removeprefix("/api/")
            status, answer, headers = stub.answer(
                method, params, self.headers.get("Authorization", "")
            )
            data = json.dumps(answer).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json; charset=utf-8")
            self.send_header("Content-Length", str(len(data)))
            for name, value in headers.items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            self._serve(b"")

        def do_POST(self) -> None:  # noqa: N802 (http.server's name)
            length = int(self.headers.get("Content-Length") or 0)
            self._serve(self.rfile.read(length))

        def log_message(self, format: str, *args: Any) -> None:
            pass

    return Handler
