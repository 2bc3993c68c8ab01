"""How the Google Drive connector talks to Drive: a client built by google-api-python-client
from its bundled Drive v3 discovery document (none is downloaded), over an httplib2
connection that follows no redirect, with the operator's credentials; each request run with
rate-limit waits taken from one budget a sync, and Drive's and the network's failures as one
line for the user.

The client's own retries (`execute(num_retries=...)`) back off exponentially and never read
`Retry-After`; here a 429, or a 403 whose reason is a rate limit, waits what `Retry-After`
asks (else a short backoff), taken from the budget, and a wait longer than what is left stops
the sync.
"""

from __future__ import annotations

import datetime as dt
import os
import time
import warnings
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

from footnote.ingest.connectors.base import ConnectorError, retry_after_seconds

RATE_LIMIT_BUDGET_S = 120.0
"""How long one sync may wait in all for Drive's rate limits before it gives up."""
TOKEN_ENV = "FOOTNOTE_GDRIVE_TOKEN"
"""An OAuth 2.0 access token with a Drive read scope."""
CREDENTIALS_ENV = "FOOTNOTE_GDRIVE_CREDENTIALS"
"""The path of a service account's JSON key file (used first when both are set)."""
SUBJECT_ENV = "FOOTNOTE_GDRIVE_SUBJECT"
"""With a service account: the user it acts for (domain-wide delegation), if any."""
SCOPES = ["https://www.googleapis.com/auth/drive.readonly"]
_RATE_REASONS = ("rateLimitExceeded", "userRateLimitExceeded")
_TRANSIENT = (500, 502, 503, 504)
T = TypeVar("T")


class RateLimitWait(Exception):
    """Drive asked for a wait longer than what is left of the sync's budget."""

    def __init__(self, seconds: float) -> None:
        super().__init__(f"{seconds:.0f} s")
        self.seconds = seconds


def retry_after(headers: Any, attempt: int) -> float:
    """The wait a rate-limited answer asks for, in seconds: `Retry-After` (seconds or an
    HTTP date), else a backoff of 1, 2, 4... seconds by attempt."""
    named = retry_after_seconds(str(headers.get("retry-after") or ""))
    return named if named is not None else float(min(2**attempt, 32))


def credentials_env() -> str:
    """The variable the credentials are read from, for messages: never their value."""
    return CREDENTIALS_ENV if os.environ.get(CREDENTIALS_ENV) else TOKEN_ENV


def client(api: str | None) -> Any:
    """A Drive v3 client for `api` (the API's root, `https://HOST`; None: Google's), with
    the operator's credentials: a service account's key file, else an access token."""
    import httplib2  # type: ignore[import-untyped]
    from google.oauth2 import credentials as oauth
    from google.oauth2 import service_account
    from google_auth_httplib2 import AuthorizedHttp  # type: ignore[import-untyped]

    with warnings.catch_warnings():  # google-api-core's notice about grpcio, which is not used
        warnings.simplefilter("ignore", FutureWarning)
        from googleapiclient.discovery import build  # type: ignore[import-untyped]

    key_file = os.environ.get(CREDENTIALS_ENV, "")
    token = os.environ.get(TOKEN_ENV, "")
    if key_file:
        try:
            creds: Any = service_account.Credentials.from_service_account_file(
                key_file, scopes=SCOPES
            )
        except (OSError, ValueError, KeyError) as exc:
            raise ConnectorError(
                f"${CREDENTIALS_ENV} ({key_file[:200]}) is not a service account's key "
                f"file ({type(exc).__name__})"
            ) from None
        if os.environ.get(SUBJECT_ENV):
            creds = creds.with_subject(os.environ[SUBJECT_ENV])
        refresh: tuple[int, ...] = (401,)
    elif token:
        creds, refresh = oauth.Credentials(token=token), ()  # nothing to refresh it with
    else:
        raise ConnectorError(
            f"neither ${CREDENTIALS_ENV} (a service account's key file) nor ${TOKEN_ENV} "
            "(an access token) is set"
        )
    http = httplib2.Http(timeout=30)
    http.follow_redirects = False  # the token would follow a redirect to another host
    authorized = AuthorizedHttp(creds, http=http, refresh_status_codes=refresh)
    options = {"api_endpoint": f"{api}/drive/v3/"} if api else None
    return build(
        "drive",
        "v3",
        http=authorized,
        static_discovery=True,
        cache_discovery=False,
        client_options=options,
    )


class RequestRunner:
    """Runs a sync's requests: rate limits waited out within one budget, the rest of
    Drive's and the network's failures as one line for the user."""

    def __init__(self, *, where: str, api: str, budget_s: float = RATE_LIMIT_BUDGET_S) -> None:
        self.where = where
        self.api = api
        self.left = budget_s
        self.budget_s = budget_s
        self.sleep: Callable[[float], None] = time.sleep

    def run(self, request: Any) -> Any:
        """`request.execute()`, retried after a rate limit or a transient 5xx."""
        from googleapiclient.errors import HttpError  # type: ignore[import-untyped]

        for attempt in range(8):
            try:
                return request.execute(num_retries=0)
            except HttpError as exc:
                status = exc.status_code or exc.resp.status
                if status not in _TRANSIENT and not _rate_limited(exc):
                    raise
                wait = retry_after(exc.resp, attempt)
                if wait > self.left:
                    raise RateLimitWait(wait) from None
                self.left -= wait
                self.sleep(wait)
        return request.execute(num_retries=0)

    def pages(self, method: Callable[..., Any], key: str, **params: Any) -> Iterator[Any]:
        """Every item of a paged listing (`nextPageToken` followed)."""
        token = None
        while True:
            page = self.run(method(**params, **({"pageToken": token} if token else {})))
            yield from page.get(key) or []
            token = page.get("nextPageToken")
            if not token:
                return

    def call(self, read: Callable[[], T]) -> T:
        """`read()`, with Drive's and the network's failures as one line for the user."""
        try:
            from google.auth.exceptions import RefreshError, TransportError
            from googleapiclient.errors import HttpError
        except ImportError:
            from footnote.store.extras import install_command

            raise ConnectorError(
                "the Google Drive connector needs google-api-python-client and google-auth: "
                f"{install_command('gdrive')}"
            ) from None
        try:
            return read()
        except RateLimitWait as exc:
            raise ConnectorError(
                f"Google Drive's rate limit asks for a wait of {exc.seconds:.0f} s, more than "
                f"this sync may wait ({self.budget_s:.0f} s in all); sync again later"
            ) from None
        except RefreshError as exc:
            raise ConnectorError(
                f"no access token for the service account in ${CREDENTIALS_ENV}: "
                f"{str(exc.args[0] if exc.args else exc)[:200]}"
            ) from None
        except HttpError as exc:
            raise ConnectorError(self._said(exc)) from None
        except (TransportError, OSError) as exc:  # httplib2's errors are OSErrors or its own
            raise ConnectorError(
                f"{self.where}: cannot reach {self.api} ({type(exc).__name__})"
            ) from None
        except Exception as exc:
            if type(exc).__module__.startswith("httplib2"):
                raise ConnectorError(
                    f"{self.where}: cannot reach {self.api} ({type(exc).__name__})"
                ) from None
            raise

    def _said(self, exc: Any) -> str:
        status = exc.status_code or exc.resp.status
        if status == 401:
            return (
                f"Google Drive refused the credentials in ${credentials_env()} (401 "
                "Unauthorized: expired or revoked); set valid ones and sync again (nothing "
                "indexed was changed)"
            )
        if status == 404:
            return f"{self.where}: not found (404), or ${credentials_env()} may not read it"
        if 300 <= status < 400:
            return (
                f"{self.where}: {self.api} answered with a redirect, which is not followed "
                "(name Drive's own address)"
            )
        return f"{self.where}: Google Drive answered {status}: {str(exc._get_reason())[:200]}"


def _rate_limited(exc: Any) -> bool:
    status = exc.status_code or exc.resp.status
    if status == 429:
        return True
    details = exc.error_details if isinstance(exc.error_details, list) else []
    return status == 403 and any(
        isinstance(d, dict) and d.get("reason") in _RATE_REASONS for d in details
    )


def refused(exc: Exception) -> int | None:
    """The status of a refusal a listing may meet for one file (403, 404), else None."""
    from googleapiclient.errors import HttpError

    if isinstance(exc, HttpError) and (exc.status_code or exc.resp.status) in (403, 404):
        return int(exc.status_code or exc.resp.status)
    return None


def iso(value: Any) -> str:
    """Drive's time (`2026-11-02T09:00:00.000Z`) as `2026-11-02T09:00:00Z`; '' for none."""
    try:
        when = dt.datetime.fromisoformat(str(value)) if value else None
    except ValueError:
        return ""
    if when is None:
        return ""
    if when.tzinfo is None:
        when = when.replace(tzinfo=dt.UTC)
    return when.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def now() -> str:
    return iso(dt.datetime.now(dt.UTC).isoformat())
