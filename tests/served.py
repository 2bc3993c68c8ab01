"""A team's server for the trust-boundary tests: the sample handbook plus restricted documents,
users in different groups, and the markers that must never reach a caller outside a group."""

from __future__ import annotations

import datetime as dt
import json
import shutil
import socket
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import jwt
from cryptography.hazmat.primitives.asymmetric import rsa
from langgraph_sdk.client import SyncLangGraphClient

from footnote.server.credentials import write_api_keys

HANDBOOK = Path(__file__).resolve().parents[1] / "samples" / "handbook"
GRAPH_ID = "footnote"

EXTRA_DOCUMENTS = {
    "payroll.md": """---
title: Payroll
access: [hr]
---
# Payroll

## Pay day

Salaries are paid on the 25th of each month. Salary bands are reviewed every October by
the people team.

## Corrections

Payroll corrections above 500 EUR need a second signature from the head of people.
""",
    "budget.md": """---
title: Budget 2026
access: [finance]
---
# Budget 2026

## Travel budget

The company travel budget for 2026 is 480,000 EUR, split by department in the planning sheet.

## Large purchases

Purchases above 10,000 EUR need approval from the CFO before an order is placed.
""",
    "vault.md": """---
title: Emergency access
access: {team: security}
---
# Emergency access

## The emergency password

The emergency password is kept in a red envelope in the CTO's office safe.
""",
}
"""Restricted documents beside the handbook; vault.md's access data is malformed, so only an
admin may see it."""


SERVER_KEEP_ALIVE_S = 5
"""How long the served runtimes' uvicorn keeps an idle connection open (its default)."""


def sdk_client(url: str, headers: dict[str, str]) -> SyncLangGraphClient:
    """The SDK's synchronous client, dropping idle connections well before the server does.

    `get_sync_client` leaves httpx's keep-alive expiry at 5 s, the same as the server's, so a
    request sent on a connection idle for just under 5 s can cross the server's close and
    fail with "Server disconnected without sending a response" (seen once in 1,000 probes).
    That race is the client's to avoid; the checks here are about what a caller sees.
    """
    return SyncLangGraphClient(
        httpx.Client(
            base_url=url,
            transport=httpx.HTTPTransport(retries=5),
            limits=httpx.Limits(keepalive_expiry=SERVER_KEEP_ALIVE_S / 5),
            timeout=httpx.Timeout(connect=5, read=300, write=300, pool=5),
            headers=headers,
        )
    )


@dataclass(frozen=True)
class Restricted:
    source: str
    group: str | None
    """The group that may see it; None: admins only."""
    markers: tuple[str, ...]
    """Phrases found only in this document (and in no question)."""
    questions: tuple[str, ...]


RESTRICTED = (
    Restricted(
        "oncall.md",
        "engineering",
        ("within 5 minutes", "incident commander", "third month", "extra day off", "Monday 10:00"),
        (
            "How quickly must I acknowledge a page when I am on call?",
            "When do engineers join the on-call rotation?",
        ),
    ),
    Restricted(
        "payroll.md",
        "hr",
        ("25th of each month", "every October", "second signature from the head of people"),
        ("When are salaries paid?", "Who has to sign payroll corrections?"),
    ),
    Restricted(
        "budget.md",
        "finance",
        ("480,000", "approval from the CFO"),
        ("What is the travel budget for 2026?", "Who approves large purchases?"),
    ),
    Restricted(
        "vault.md",
        None,
        ("red envelope", "office safe"),
        ("Where is the emergency password kept?",),
    ),
)

USERS: dict[str, dict[str, Any]] = {
    "alice": {"groups": ["engineering"]},
    "bob": {"groups": ["hr"]},
    "carol": {"groups": ["finance", "hr"]},
    "dave": {"groups": []},
    "root": {"groups": [], "admin": True},
}
ADMIN_GROUP = "footnote-admins"
AUDIENCE = "footnote"
ISSUER = "https://idp.test"
PUBLIC_QUESTION = "How often do I have to change my API key?"


def may_see(user: str, document: Restricted) -> bool:
    spec = USERS[user]
    return bool(spec.get("admin")) or document.group in spec["groups"]


def forbidden_markers(user: str) -> list[str]:
    return [m for d in RESTRICTED if not may_see(user, d) for m in d.markers]


def leaked(user: str, payload: Any) -> list[str]:
    """Markers of documents `user` may not see that occur anywhere in `payload`."""
    text = payload if isinstance(payload, str) else json.dumps(payload, default=str)
    return [m for m in forbidden_markers(user) if m in text]


def build_corpus(root: Path, *, open_everything: bool = False) -> Path:
    """The handbook plus the restricted documents; `open_everything` rewrites every access
    list to [everyone] (a trap index that no served caller may ever reach)."""
    corpus = root / "corpus"
    shutil.copytree(HANDBOOK, corpus)
    for name, text in EXTRA_DOCUMENTS.items():
        (corpus / name).write_text(text, encoding="utf-8")
    if open_everything:
        for path in corpus.glob("*.md"):
            lines = path.read_text(encoding="utf-8").splitlines()
            path.write_text(
                "\n".join("access: [everyone]" if ln.startswith("access:") else ln for ln in lines)
                + "\n",
                encoding="utf-8",
            )
    return corpus


@dataclass
class Team:
    """Credentials for each user, as one auth method issues them."""

    method: str
    env: dict[str, str]
    secrets: dict[str, str]
    """user -> API key or signed token."""
    extra: dict[str, Any] = field(default_factory=dict)

    def headers(self, user: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.secrets[user]}"}


def api_key_team(directory: Path) -> Team:
    path = directory / "keys.json"
    keys = write_api_keys(path, USERS)
    return Team("api_keys", {"FOOTNOTE_API_KEYS": str(path)}, keys, {"path": path})


def jwt_team(directory: Path) -> Team:
    """An identity provider in miniature: an RSA key pair, its JWKS file, signed tokens."""
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    public = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(key.public_key()))
    jwks = directory / "jwks.json"
    jwks.write_text(json.dumps({"keys": [{**public, "kid": "idp-1", "use": "sig"}]}))
    team = Team(
        "jwt",
        {
            "FOOTNOTE_JWKS": str(jwks),
            "FOOTNOTE_JWT_AUDIENCE": AUDIENCE,
            "FOOTNOTE_JWT_ISSUER": ISSUER,
            "FOOTNOTE_JWT_ADMIN_GROUP": ADMIN_GROUP,
        },
        {},
        {"key": key},
    )
    for user, spec in USERS.items():
        groups = list(spec["groups"]) + ([ADMIN_GROUP] if spec.get("admin") else [])
        team.secrets[user] = sign(team, sub=user, groups=groups)
    return team


def sign(team: Team, *, lifetime_s: float = 3600, **claims: Any) -> str:
    now = dt.datetime.now(dt.UTC)
    body = {
        "aud": AUDIENCE,
        "iss": ISSUER,
        "iat": now,
        "exp": now + dt.timedelta(seconds=lifetime_s),
        **claims,
    }
    return jwt.encode(body, team.extra["key"], "RS256", {"kid": "idp-1"})


class Listener:
    """A loopback TCP port that records every connection (and what was sent on it)."""

    def __init__(self) -> None:
        self.socket = socket.create_server(("127.0.0.1", 0))
        self.socket.settimeout(0.2)
        self.port = self.socket.getsockname()[1]
        self.received: list[bytes] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self.socket.accept()
            except OSError:
                continue
            with conn:
                conn.settimeout(0.5)
                try:
                    self.received.append(conn.recv(65536))
                except OSError:
                    self.received.append(b"")

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self.socket.close()
