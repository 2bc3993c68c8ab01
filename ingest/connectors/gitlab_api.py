"""How the GitLab connector talks to GitLab: a python-gitlab client whose rate-limit waits
come out of one budget a sync, that follows no redirect and keeps its own base address for
every page, and GitLab's and the network's failures as one line for the user.

python-gitlab retries a 429 itself, sleeping for its `Retry-After` (or until
`RateLimit-Reset`); the backend here sees each 429 first and takes that wait from the
budget, or stops the sync when more is asked than is left.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, MutableMapping
from typing import Any, TypeVar

from footnote.ingest.connectors.base import ConnectorError, retry_after_seconds

RATE_LIMIT_BUDGET_S = 120.0
"""How long one sync may wait in all for GitLab's rate limits before it gives up."""
T = TypeVar("T")


class RateLimitWait(Exception):
    """GitLab asked for a wait longer than what is left of the sync's budget."""

    def __init__(self, seconds: float) -> None:
        super().__init__(f"{seconds:.0f} s")
        self.seconds = seconds


def retry_after(headers: MutableMapping[str, str]) -> float:
    """The wait a 429 asks for, in seconds: `Retry-After` (seconds or an HTTP date), else
    until `RateLimit-Reset` (an epoch), else none named (python-gitlab's short backoff)."""
    named = retry_after_seconds(headers.get("Retry-After") or "")
    if named is not None:
        return named
    reset = (headers.get("RateLimit-Reset") or "").strip()
    return max(0.0, float(reset) - time.time()) if reset.isdigit() else 0.0


def client(api: str, token: str, budget_s: float) -> Any:
    """A python-gitlab client for `api` (the instance's address), sending `token` (none:
    anonymous, public projects only), 100 items a page."""
    import gitlab
    import requests
    from gitlab._backends import RequestsBackend

    class BudgetedBackend(RequestsBackend):
        """Takes each 429's wait from the budget before python-gitlab sleeps it."""

        def __init__(self, session: requests.Session | None = None) -> None:
            super().__init__(session)
            self.left = budget_s

        def http_request(self, *args: Any, **kwargs: Any) -> Any:
            response = super().http_request(*args, **kwargs)
            if response.status_code == 429:
                wait = retry_after(response.headers)
                if wait > self.left:
                    raise RateLimitWait(wait)
                self.left -= wait
                # python-gitlab reads Retry-After as whole seconds only
                response.headers["Retry-After"] = str(math.ceil(wait))
            return response

    session = requests.Session()
    session.max_redirects = 0  # the token would follow a redirect to another host
    return gitlab.Gitlab(
        api,
        private_token=token or None,
        timeout=30,
        per_page=100,
        retry_transient_errors=True,
        keep_base_url=True,  # pages are fetched from `api`, whatever GitLab calls itself
        backend=BudgetedBackend,
        session=session,
    )


def call(read: Callable[[], T], *, where: str, token_env: str, api: str, budget_s: float) -> T:
    """`read()`, with GitLab's and the network's failures as one line for the user."""
    try:
        from gitlab import exceptions
        from requests import RequestException, TooManyRedirects
    except ImportError:
        from footnote.store.extras import install_command

        raise ConnectorError(
            f"the GitLab connector needs python-gitlab: {install_command('gitlab')}"
        ) from None

    try:
        return read()
    except exceptions.GitlabAuthenticationError:
        raise ConnectorError(
            f"GitLab refused the token in ${token_env} (401 Unauthorized: expired or "
            "revoked); set a valid one and sync again (nothing indexed was changed)"
        ) from None
    except RateLimitWait as exc:
        raise ConnectorError(
            f"GitLab's rate limit asks for a wait of {exc.seconds:.0f} s, more than this "
            f"sync may wait ({budget_s:.0f} s in all); sync again later"
        ) from None
    except exceptions.GitlabError as exc:
        if exc.response_code == 404:
            raise ConnectorError(
                f"{where}: not found (404), or ${token_env} may not read it"
            ) from None
        message = str(exc.error_message or "no message")[:200]
        raise ConnectorError(f"{where}: GitLab answered {exc.response_code}: {message}") from None
    except TooManyRedirects:
        raise ConnectorError(
            f"{where}: {api} answered with a redirect, which is not followed "
            "(name GitLab's own address)"
        ) from None
    except RequestException as exc:
        raise ConnectorError(f"{where}: cannot reach {api} ({type(exc).__name__})") from None
