"""The Slack Web API as the Slack connector reads it, through the official `slack_sdk`:
cursor-paged listings, one budget for rate-limit waits, and Slack's failures as one line.

Every call is a read (`conversations.*`, `users.info`). The token is the operator's
(`$FOOTNOTE_SLACK_TOKEN`), sent only to the API in the Authorization header, which
slack_sdk redacts in its own logs; no message here ever names it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, TypeVar

from footnote.ingest.connectors.base import ConnectorError

TOKEN_ENV = "FOOTNOTE_SLACK_TOKEN"
PAGE_LIMIT = 200
"""Items asked for a page; Slack's own advice for cursor-paged methods."""
AUTH_ERRORS = frozenset(
    {"invalid_auth", "not_authed", "token_expired", "token_revoked", "account_inactive"}
)
"""Slack's answers for a token that cannot be used: the whole sync stops, nothing changes."""

T = TypeVar("T")


class RateLimitWait(Exception):
    """Slack asked for a wait longer than what is left of the sync's budget."""

    def __init__(self, seconds: float) -> None:
        super().__init__(f"{seconds:.0f} s")
        self.seconds = seconds


class SlackFailure(Exception):
    """An answer with `ok: false` that is about one item (a channel's members), not the
    whole source: the caller decides (no readers: the channel is no one's)."""

    def __init__(self, error: str) -> None:
        super().__init__(error)
        self.error = error


class _Budget:
    """Seconds left to wait for rate limits, shared by every call of one connector."""

    def __init__(self, seconds: float) -> None:
        self.left = seconds


def budgeted_rate_limit_handler(budget: _Budget) -> Any:
    """slack_sdk's RateLimitErrorRetryHandler, whose wait (the 429's `Retry-After`) comes
    out of one budget: a wait beyond what is left stops the sync with one line rather than
    sleeping for as long as the server asks (the library's own handler has no bound)."""
    from slack_sdk.http_retry.builtin_handlers import RateLimitErrorRetryHandler

    class BudgetedRateLimit(RateLimitErrorRetryHandler):
        def prepare_for_next_attempt(
            self, *, state: Any, request: Any, response: Any = None, error: Any = None
        ) -> None:
            if response is None:
                raise error
            wait = _retry_after(response.headers)
            if wait > budget.left:
                raise RateLimitWait(wait)
            budget.left -= wait
            time.sleep(wait)
            state.next_attempt_requested = True
            state.increment_current_attempt()

    return BudgetedRateLimit(max_retry_count=5)


def _retry_after(headers: dict[str, Any]) -> float:
    """Seconds a 429 asks to wait (1 when it says nothing usable)."""
    for name, value in headers.items():
        if name.lower() == "retry-after":
            raw = value[0] if isinstance(value, list) and value else value
            try:
                return max(0.0, float(str(raw)))
            except ValueError:
                break
    return 1.0


class SlackApi:
    """One workspace's Web API: each method a read, each failure one line for the user."""

    def __init__(self, *, api: str, token: str, workspace: str, budget_s: float) -> None:
        self.api = api
        self.workspace = workspace
        self.budget_s = budget_s
        self._budget = _Budget(budget_s)
        self._token = token
        self._client: Any = None
        self._users: dict[str, dict[str, Any] | None] = {}

    def client(self) -> Any:
        if self._client is None:
            from slack_sdk import WebClient
            from slack_sdk.http_retry.builtin_handlers import ConnectionErrorRetryHandler

            self._client = WebClient(
                token=self._token,
                base_url=self.api if self.api.endswith("/") else f"{self.api}/",
                timeout=30,
                retry_handlers=[
                    ConnectionErrorRetryHandler(max_retry_count=2),
                    budgeted_rate_limit_handler(self._budget),
                ],
            )
        return self._client

    # -- listings ----------------------------------------------------------------------

    def channels(self) -> list[dict[str, Any]]:
        """Every public and private channel the token sees, archived ones left out."""
        return self.paged(
            "conversations.list",
            "channels",
            types="public_channel,private_channel",
            exclude_archived="true",
        )

    def history(self, channel: str, *, oldest: str = "", latest: str = "") -> list[dict]:
        """A channel's top-level messages (thread parents with their `reply_count` and
        `latest_reply`), newest first; `oldest=` / `latest=` bound them (both inclusive)."""
        bounds = {
            **({"oldest": oldest} if oldest else {}),
            **({"latest": latest} if latest else {}),
        }
        inclusive = {"inclusive": "true"} if bounds else {}
        return self.paged(
            "conversations.history", "messages", channel=channel, **bounds, **inclusive
        )

    def replies(self, channel: str, ts: str) -> list[dict[str, Any]]:
        """A thread: its parent first, then every reply, oldest first."""
        return self.paged("conversations.replies", "messages", channel=channel, ts=ts)

    def members(self, channel: str) -> list[str]:
        """A channel's member ids; SlackFailure when Slack will not list them."""
        return [str(m) for m in self.paged("conversations.members", "members", channel=channel)]

    def user(self, user_id: str) -> dict[str, Any] | None:
        """users.info for one member (cached for the sync); None for a user Slack no longer
        knows."""
        if user_id not in self._users:
            try:
                self._users[user_id] = self.call("users.info", user=user_id).get("user") or {}
            except SlackFailure as failure:
                if failure.error != "user_not_found":
                    raise
                self._users[user_id] = None
        return self._users[user_id]

    def paged(self, method: str, key: str, **params: str) -> list[Any]:
        """Every item of a cursor-paged listing (`response_metadata.next_cursor`)."""
        items: list[Any] = []
        cursor = ""
        for _ in range(100_000):
            data = self.call(
                method, limit=str(PAGE_LIMIT), **params, **({"cursor": cursor} if cursor else {})
            )
            found = data.get(key)
            items.extend(found if isinstance(found, list) else [])
            meta = data.get("response_metadata")
            cursor = str(meta.get("next_cursor") or "") if isinstance(meta, dict) else ""
            if not cursor:
                return items
        raise ConnectorError(f"{self.workspace}: {method} never stopped paging")

    def call(self, method: str, **params: str) -> dict[str, Any]:
        """One API method; Slack's `ok: false` about the item as SlackFailure, about the
        token, the rate limit or the network as ConnectorError."""
        return self.guarded(lambda: self._raw(method, params))

    def _raw(self, method: str, params: dict[str, str]) -> dict[str, Any]:
        from slack_sdk.errors import SlackApiError

        try:
            response = self.client().api_call(method, http_verb="GET", params=params)
        except SlackApiError as exc:
            data = exc.response.data if isinstance(exc.response.data, dict) else {}
            error = data.get("error") or f"HTTP {exc.response.status_code}"
            raise SlackFailure(str(error)) from None
        data = response.data
        return data if isinstance(data, dict) else {}

    def guarded(self, read: Callable[[], T]) -> T:
        """`read()`, with the token's, the rate limit's and the network's failures as one
        line for the user (a SlackFailure about an item passes through)."""
        try:
            import slack_sdk  # noqa: F401
        except ImportError:
            from footnote.store.extras import install_command

            raise ConnectorError(
                f"the Slack connector needs slack_sdk: {install_command('slack')}"
            ) from None
        try:
            return read()
        except SlackFailure as failure:
            if failure.error in AUTH_ERRORS:
                raise ConnectorError(
                    f"Slack refused the token in ${TOKEN_ENV} ({failure.error[:60]}); set a "
                    "valid one and sync again (nothing indexed was changed)"
                ) from None
            if failure.error == "ratelimited":
                raise ConnectorError(
                    f"{self.workspace}: Slack's rate limit held after 5 waits; sync again later"
                ) from None
            raise
        except RateLimitWait as exc:
            raise ConnectorError(
                f"Slack's rate limit asks for a wait of {exc.seconds:.0f} s, more than this "
                f"sync may wait ({self.budget_s:.0f} s in all); sync again later"
            ) from None
        except OSError as exc:  # urllib's URLError, a timeout, a refused connection
            raise ConnectorError(
                f"{self.workspace}: cannot reach {self.api} ({type(exc).__name__})"
            ) from None
