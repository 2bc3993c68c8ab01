"""Which connector reads a source string, by its scheme (`git+file://...`,
`git+https://...`; later `mediawiki+https://...`, `github://...`), and where connectors keep
what they fetch for an index.

A scheme is added here with three functions: how a value becomes the source's recorded id
and label (refusing a malformed one), how a served admin's value is checked against the
operator's policy, and how the recorded source is opened for a sync.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from footnote.ingest.connectors import (
    confluence,
    gdrive,
    git,
    github,
    gitlab,
    jira,
    mediawiki,
    slack,
)
from footnote.ingest.connectors.base import Connector, ConnectorError
from footnote.models.embedding_choice import record_key
from footnote.store.backends import is_postgres
from footnote.store.private import private_dir, state_dir

_PORTS = {"https": 443, "ssh": 22}


@dataclass(frozen=True)
class Opening:
    """What opening a recorded source for a sync is given."""

    source: str
    index: str
    access: list[str] | None
    selected: Callable[[str], bool]
    max_bytes: int
    check_host: Callable[[str, int], None]
    """Refuses (ConnectorError) a host the source may not reach: by the guard web pages
    have, so a source cannot make the server fetch from its own network."""


@dataclass(frozen=True)
class ConnectorKind:
    name: str
    """What `footnote sources` calls its sources (the source list's `kind`)."""
    identify: Callable[[str], tuple[str, str]]
    """value -> (the source's id, its label); ConnectorError for a malformed value."""
    served: Callable[[str, Callable[[str], str]], str]
    """(value, the policy's check of a local path) -> the value a served admin may add."""
    open: Callable[[Opening], Connector]


def _git_identify(value: str) -> tuple[str, str]:
    source = git.parse_source(value)
    return source.id, source.label


def _git_served(value: str, checked_path: Callable[[str], str]) -> str:
    """A served admin's git source: a local repository only inside the operator's folders
    (judged before anything about the path is told, then resolved, as any local path), a
    remote only over https or ssh (`parse_source` knows no other transport)."""
    local = value.removeprefix("git+file://")
    if local != value:
        if not local.startswith("/"):
            raise ConnectorError(
                f"{value[:200]}: a local repository is named git+file:///ABSOLUTE/PATH"
            )
        value = f"git+file://{checked_path(local)}"
    return git.parse_source(value).id


def _git_open(opening: Opening) -> Connector:
    source = git.parse_source(opening.source)
    cache = None
    if source.remote is not None:
        parts = urlsplit(source.remote)
        opening.check_host(parts.hostname or "", parts.port or _PORTS.get(parts.scheme, 443))
        cache = connector_state(opening.index) / "git" / git.cache_name(source)
    return git.GitConnector(
        source,
        cache=cache,
        access=opening.access,
        selected=opening.selected,
        max_bytes=opening.max_bytes,
    )


KINDS: dict[str, ConnectorKind] = {
    scheme: ConnectorKind("git", _git_identify, _git_served, _git_open) for scheme in git.SCHEMES
}
"""Scheme -> the connector that reads it."""
KINDS[github.SCHEME] = ConnectorKind(
    "github", github.identify, github.served, github.open_connector
)
for _scheme in gitlab.SCHEMES:
    KINDS[_scheme] = ConnectorKind("gitlab", gitlab.identify, gitlab.served, gitlab.open_connector)
for _scheme in mediawiki.SCHEMES:
    KINDS[_scheme] = ConnectorKind(
        "mediawiki", mediawiki.identify, mediawiki.served, mediawiki.open_connector
    )
KINDS[slack.SCHEME] = ConnectorKind("slack", slack.identify, slack.served, slack.open_connector)
KINDS[gdrive.SCHEME] = ConnectorKind(
    "gdrive", gdrive.identify, gdrive.served, gdrive.open_connector
)
for _scheme in confluence.SCHEMES:
    KINDS[_scheme] = ConnectorKind(
        "confluence", confluence.identify, confluence.served, confluence.open_connector
    )
for _scheme in jira.SCHEMES:
    KINDS[_scheme] = ConnectorKind("jira", jira.identify, jira.served, jira.open_connector)


def scheme_of(value: str) -> str | None:
    """The connector scheme a source string names, or None for a path or plain URL."""
    scheme, sep, _ = value.partition("://")
    return scheme if sep and scheme in KINDS else None


def kind_of(value: str) -> ConnectorKind:
    scheme = scheme_of(value)
    if scheme is None:
        raise ConnectorError(f"{value[:200]}: no connector reads this source")
    return KINDS[scheme]


def connector_state(index: str) -> Path:
    """The private folder (0700) where connectors keep what they fetch for `index`: inside
    a folder index, or, for a PostgreSQL index, under the user's state folder by a digest
    of its address (never its password)."""
    if is_postgres(index):
        digest = hashlib.sha256(record_key(index).encode("utf-8")).hexdigest()[:24]
        return private_dir(state_dir() / "connectors" / digest)
    return private_dir(Path(index) / "connectors")
