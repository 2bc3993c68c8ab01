"""Sources an index remembers: each root (folder, file, URL, site, a batch of LangChain
documents) with how it was added, so `sync` can read it again the same way.

The list lives in the index manifest under `sources`, so both backends keep it with the
version it describes and publish it atomically with the chunks.
"""

from __future__ import annotations

import datetime as dt
import fnmatch
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

Kind = Literal[
    "folder", "file", "url", "site", "documents",
    "git", "github", "gitlab", "mediawiki", "slack", "confluence", "jira", "gdrive",
]  # fmt: skip
CONNECTOR_KINDS: tuple[Kind, ...] = (
    "git", "github", "gitlab", "mediawiki", "slack", "confluence", "jira", "gdrive",
)  # fmt: skip
"""The kinds a connector reads (ingest/connectors/registry.py names each by its scheme)."""


@dataclass(kw_only=True)
class SourceRoot:
    """One root and the settings it was added with."""

    id: str
    """Absolute path, URL, `documents:NAME` for documents handed in from Python, or a
    connector's source (`git+file:///srv/repo`, `git+https://host/repo.git`)."""
    kind: Kind
    label: str
    """Readable prefix for its documents' names when another root already gives a name."""
    access: list[str] | None = None
    """Groups for its documents that state none; None: the index's default."""
    follow_symlinks: bool = False
    include: list[str] = field(default_factory=list)
    """Globs on the relative path (`*` also matches `/`); empty keeps every file."""
    exclude: list[str] = field(default_factory=list)
    crawl: dict[str, Any] = field(default_factory=dict)
    """For a site: max_depth, max_pages, same_host, sitemap, max_bytes, timeout."""
    allow_private: bool = False
    """A URL, site or clone URL added with `--allow-private`: it may reach loopback, private and
    link-local addresses, on every later `sync` too (a run can still decide otherwise)."""
    added_at: str = ""
    checkpoint: dict[str, Any] = field(default_factory=dict)
    """A connector's position when the index last published what it gave (its commit):
    the next sync reads what changed since. Published with the chunks, so a sync killed
    before its publish resumes from here."""

    def selected(self, relative: str) -> bool:
        """Whether the root's include/exclude globs keep this relative path."""
        if self.include and not any(fnmatch.fnmatchcase(relative, g) for g in self.include):
            return False
        return not any(fnmatch.fnmatchcase(relative, g) for g in self.exclude)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SourceRoot:
        known = {k: v for k, v in data.items() if k in cls.__dataclass_fields__}
        return cls(**known)


def now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def is_url(value: str) -> bool:
    return value.startswith(("http://", "https://"))


def connector_scheme(value: str) -> str | None:
    """The connector scheme a source names (`git+file`, `git+https`...), else None."""
    from footnote.ingest.connectors.registry import scheme_of

    return scheme_of(value)


def root_for(
    value: str | Path,
    *,
    access: list[str] | None = None,
    follow_symlinks: bool = False,
    include: list[str] | None = None,
    exclude: list[str] | None = None,
    crawl: dict[str, Any] | None = None,
    allow_private: bool = False,
) -> SourceRoot:
    """The root record for a path or URL as a user names it."""
    text = str(value)
    if connector_scheme(text) is not None:
        from footnote.ingest.connectors.registry import kind_of

        connector = kind_of(text)
        kind: Kind = next(k for k in CONNECTOR_KINDS if k == connector.name)
        root_id, label = connector.identify(text)
    elif is_url(text):
        kind = "site" if crawl else "url"
        label = text.split("://", 1)[1].split("/", 1)[0]
        root_id = text
    else:
        path = Path(os.path.abspath(text))
        kind = "folder" if path.is_dir() else "file"
        label = path.name or "root"
        root_id = str(path)
    return SourceRoot(
        id=root_id,
        kind=kind,
        label=label,
        access=access,
        follow_symlinks=follow_symlinks,
        include=list(include or []),
        exclude=list(exclude or []),
        crawl=dict(crawl or {}),
        allow_private=allow_private and (is_url(text) or kind in CONNECTOR_KINDS),
        added_at=now(),
    )


def read_roots(manifest: dict[str, Any] | None) -> list[SourceRoot]:
    """The roots a manifest records; an older index without the list has none."""
    raw = (manifest or {}).get("sources")
    if not isinstance(raw, list):
        return []
    return [SourceRoot.from_dict(item) for item in raw if isinstance(item, dict) and "id" in item]


def merge_roots(
    before: list[SourceRoot], given: list[SourceRoot], forget: set[str]
) -> list[SourceRoot]:
    """The list after adding or updating `given` (by id; the first added date kept) and
    dropping the ids in `forget`."""
    merged = {r.id: r for r in before if r.id not in forget}
    for root in given:
        old = merged.get(root.id)
        if old is not None and old.added_at:
            root = SourceRoot.from_dict({**root.to_dict(), "added_at": old.added_at})
        merged[root.id] = root
    return list(merged.values())
