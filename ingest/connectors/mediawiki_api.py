"""MediaWiki's Action API (`api.php`) over httpx: queries followed through their
continuations, a bot-password login, and the waits a busy wiki asks for.

A 429 or 503 answer, or a `maxlag` error, names a wait in `Retry-After`; every wait of one
sync comes out of one budget, and a wait beyond what is left stops the sync with one line
rather than sleeping as long as the server asks. Redirects are not followed, so a wiki
cannot send the connector (or its session cookie) to another host. What the wiki answers is
untrusted: only JSON objects are read, and its error text is cut short before it is shown.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import httpx

USER_AGENT = "FootnoteBot/1.0 (MediaWiki connector)"
RETRIES = 5
DEFAULT_WAIT_S = 5.0
"""The wait taken when a busy answer names none."""


class ApiError(Exception):
    """The wiki answered, but with an error (`code`: MediaWiki's, or `http-STATUS`)."""

    def __init__(self, code: str, info: str) -> None:
        super().__init__(f"{code}: {info}")
        self.code = code
        self.info = info[:200]


class WaitTooLong(Exception):
    """The wiki asked for a wait longer than what is left of the sync's budget."""

    def __init__(self, seconds: float) -> None:
        super().__init__(f"{seconds:.0f} s")
        self.seconds = seconds


class WikiApi:
    """One wiki's api.php, with its session (the login cookie) and its wait budget."""

    def __init__(
        self,
        url: str,
        *,
        budget_s: float,
        timeout_s: float = 30.0,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.url = url
        self.budget_left = budget_s
        self.client = httpx.Client(
            timeout=timeout_s,
            follow_redirects=False,
            headers={"User-Agent": USER_AGENT},
            transport=transport,
        )

    def close(self) -> None:
        self.client.close()

    def call(self, params: dict[str, str], *, post: bool = False) -> dict[str, Any]:
        """One API request, its busy answers waited out within the budget."""
        params = {"format": "json", "formatversion": "2", "maxlag": "5", **params}
        for _ in range(RETRIES):
            if post:
                response = self.client.post(self.url, data=params)
            else:
                response = self.client.get(self.url, params=params)
            data = _json(response)
            if data is None and response.status_code == 200:
                raise ApiError("not-api", "the address does not answer as MediaWiki's api.php")
            data = data or {}
            error = data.get("error") if isinstance(data.get("error"), dict) else None
            busy = response.status_code in (429, 503) or (error or {}).get("code") == "maxlag"
            if busy:
                self._wait(response)
                continue
            if response.status_code != 200:
                raise ApiError(f"http-{response.status_code}", response.reason_phrase)
            if error is not None:
                raise ApiError(str(error.get("code", "unknown")), str(error.get("info", "")))
            return data
        raise ApiError("busy", f"still busy after {RETRIES} tries")

    def query(self, params: dict[str, str]) -> Iterator[dict[str, Any]]:
        """Each batch of a query (`action=query`), following `continue` to the end."""
        following: dict[str, str] = {"continue": ""}
        while True:
            data = self.call({"action": "query", **params, **following})
            query = data.get("query")
            yield query if isinstance(query, dict) else {}
            more = data.get("continue")
            if not isinstance(more, dict):
                return
            following = {str(k): str(v) for k, v in more.items()}

    def login(self, user: str, password: str) -> str | None:
        """Logs in with a bot password (`action=login`); None on success, else the wiki's
        reason. The password is sent in the request body only, never in an address."""
        tokens = self.call({"action": "query", "meta": "tokens", "type": "login"})
        token = str(((tokens.get("query") or {}).get("tokens") or {}).get("logintoken", ""))
        answer = self.call(
            {"action": "login", "lgname": user, "lgpassword": password, "lgtoken": token},
            post=True,
        ).get("login")
        if isinstance(answer, dict) and answer.get("result") == "Success":
            return None
        reason = answer.get("reason") if isinstance(answer, dict) else None
        return str(reason or "refused")[:200]

    def _wait(self, response: httpx.Response) -> None:
        try:
            wait = float(response.headers.get("Retry-After", DEFAULT_WAIT_S))
        except ValueError:
            wait = DEFAULT_WAIT_S
        wait = max(wait, 0.0)
        if wait > self.budget_left:
            raise WaitTooLong(wait)
        self.budget_left -= wait
        time.sleep(wait)


def _json(response: httpx.Response) -> dict[str, Any] | None:
    """The answer's JSON object; None for anything else (an error page, a redirect)."""
    try:
        data = response.json()
    except ValueError:
        return None
    return data if isinstance(data, dict) else None
