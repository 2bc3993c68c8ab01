"""The server's own API, called from a route beside it with the caller's own credentials.

Feedback, MCP's `ask` and the OpenAI-compatible endpoint all answer through the API the
server already guards (`footnote.server.auth` on the dev runtime, `footnote.server.aegra_auth`
on the production one): thread ownership, the operator's pinned context and the caller's
access come from there, not from a second copy of the rules. Each request goes to the replica
that received the caller's request, over loopback.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

import httpx
from starlette.types import Scope

from footnote.server.credentials import Credentials
from footnote.server.settings import ServerSettings

CREDENTIAL_HEADERS = ("authorization", "x-api-key")
ANSWER_GRAPH = "footnote"
RUN_TIMEOUT_S = 900.0
"""An answer on a CPU-only host with a local model can take minutes."""


@functools.cache
def served_credentials() -> Credentials:
    """The server's credentials, read from its environment once per process, scoping each
    caller by the served indexes' revocation logs as the API's own auth does."""
    return Credentials.from_env(indexes=served_settings().indexes.values())


@functools.cache
def served_settings() -> ServerSettings:
    """The server's settings, read from its environment once per process."""
    return ServerSettings.from_env()


class ApiRefused(Exception):
    """The API refused or failed the call: its status and its one-line reason."""

    def __init__(self, status: int, detail: str) -> None:
        super().__init__(detail)
        self.status, self.detail = status, detail


def loopback_url(scope: Scope) -> str:
    """Where the server that received this request listens, reached over loopback."""
    host, port = scope.get("server") or ("127.0.0.1", 80)
    if host in ("0.0.0.0", "::", ""):  # listening everywhere: loopback reaches it
        host = "127.0.0.1"
    elif ":" in host:
        host = f"[{host}]"
    return f"http://{host}:{port}"


def credentials_of(headers: Mapping[str, str]) -> dict[str, str]:
    """The request's credential headers, to forward unchanged (and nothing else)."""
    return {k: v for k, v in headers.items() if k.lower() in CREDENTIAL_HEADERS}


def _detail(response: httpx.Response) -> str:
    try:
        body = response.json()
    except ValueError:
        return f"HTTP {response.status_code}"
    detail = body.get("detail") or body.get("message") if isinstance(body, dict) else None
    return " ".join(str(detail or f"HTTP {response.status_code}").split())[:300]


class OwnApi:
    """A client of this server's API acting as one caller."""

    def __init__(self, base_url: str, credentials: Mapping[str, str]) -> None:
        self.base_url = base_url
        self.credentials = dict(credentials)

    async def get(self, path: str, timeout_s: float = 60.0) -> Any:
        """The JSON the API answers; ApiRefused for an error status."""
        return await self._call("GET", path, None, timeout_s)

    async def post(self, path: str, body: Any, timeout_s: float = RUN_TIMEOUT_S) -> Any:
        """The JSON the API answers; ApiRefused for an error status or a failed run."""
        return await self._call("POST", path, body, timeout_s)

    async def _call(self, method: str, path: str, body: Any, timeout_s: float) -> Any:
        async with httpx.AsyncClient(
            base_url=self.base_url, headers=self.credentials, timeout=timeout_s, trust_env=False
        ) as client:
            response = await client.request(method, path, json=body)
        if response.status_code >= 400:
            raise ApiRefused(response.status_code, _detail(response))
        data = response.json()
        if isinstance(data, dict) and isinstance(data.get("__error__"), dict):
            error = data["__error__"]
            raise ApiRefused(500, " ".join(str(error.get("message") or "the run failed").split()))
        return data

    async def answer(
        self, messages: list[dict[str, str]], *, index: str, thread_id: str | None = None
    ) -> dict[str, Any]:
        """One answer to `messages` (the last user message is the question): on the caller's
        thread when given, else stateless."""
        run = {
            "assistant_id": ANSWER_GRAPH,
            "input": {"messages": messages},
            "context": {"index_dir": index},
        }
        path = f"/threads/{thread_id}/runs/wait" if thread_id else "/runs/wait"
        output = await self.post(path, run)
        if not isinstance(output, dict):
            raise ApiRefused(502, "the answer graph returned no values")
        return output

    async def new_thread(self, metadata: Mapping[str, str] | None = None) -> str:
        """A new thread of the caller's. Its metadata says where it came from (`source`): the
        chat page lists only its own unless asked for the others, each marked."""
        body = {"metadata": dict(metadata or {})}
        return str((await self.post("/threads", body, timeout_s=60.0))["thread_id"])
