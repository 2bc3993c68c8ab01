"""Which local paths a served admin may add as sources.

An admin of a served deployment is a network client: their key lets them manage the index,
not read the server's disk. Without a limit, `add /srv/footnote/postgres/password` (or a file
of keys) would publish the file to every reader of the index. So a served add of a local
path is held to the folders the operator names:

- the upload folder (`$FOOTNOTE_UPLOAD_DIR`), where the server itself writes uploads, and
- the source folders in `$FOOTNOTE_SOURCE_ROOTS` (absolute folders, separated by `:`),

and, even inside those, never the server's own files: the indexes, the state folder (the
embedding cache, the key file's default home), the deployment's data folder (the trial
database with its superuser password, the logs) and the files named by the key, audit and
feedback settings. A path is judged after resolving every symbolic link and `..`, and what is
added is that resolved path, so a link cannot point a source elsewhere later.

The in-process host (a program embedding the graph, `footnote` on the command line, the
stdio MCP server its host starts) is the operator: it is not checked here.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from footnote.ingest.connectors.base import ConnectorError
from footnote.ingest.roots import connector_scheme, is_url
from footnote.store.backends import is_postgres
from footnote.store.private import state_dir

SOURCE_ROOTS_ENV = "FOOTNOTE_SOURCE_ROOTS"
"""Folders whose files a served admin may add as sources, separated by `os.pathsep`."""
DATA_DIR_ENV = "FOOTNOTE_DATA_DIR"
"""The deployment's data folder (`serve --production --data-dir`): never a source."""
PROTECTED_FILE_ENVS = (
    "FOOTNOTE_API_KEYS",
    "FOOTNOTE_AUDIT_LOG",
    "FOOTNOTE_FEEDBACK_DB",
    DATA_DIR_ENV,
    "FOOTNOTE_STATE_DIR",
)
"""Settings that name the server's own files and folders (keys, audit log, feedback
records, data and state folders): whatever they name is never read as a source."""


class SourceRefused(ValueError):
    """A served admin named a local path outside what the operator allows. A ValueError, as
    every invalid request to the indexer is, so that both runtimes show its reason to the
    admin (the dev server hides the message of exception kinds it does not know)."""


def roots_from_setting(raw: str) -> tuple[str, ...]:
    """The folders of a `$FOOTNOTE_SOURCE_ROOTS` value; blanks dropped."""
    return tuple(part.strip() for part in raw.split(os.pathsep) if part.strip())


def _resolved(value: str | Path) -> Path:
    return Path(os.path.realpath(os.path.expanduser(str(value))))


def _inside(path: Path, folder: Path) -> bool:
    return path == folder or folder in path.parents


@dataclass(frozen=True)
class ServedSourcePolicy:
    """The operator's limits on the local paths a served admin may add."""

    upload_dir: Path
    source_roots: tuple[Path, ...]
    protected: tuple[Path, ...]

    @classmethod
    def from_settings(
        cls,
        *,
        upload_dir: str,
        source_roots: Iterable[str],
        indexes: Iterable[str],
        env: Mapping[str, str] | None = None,
    ) -> ServedSourcePolicy:
        """The policy for a server whose upload folder, source folders and indexes are
        these; the server's own files are read from `env` (the process environment)."""
        env = os.environ if env is None else env
        roots = []
        for root in source_roots:
            if not os.path.isabs(os.path.expanduser(root)):
                raise SourceRefused(
                    f"{SOURCE_ROOTS_ENV}: {root!r} is not an absolute folder; the operator "
                    "must name source folders by absolute path"
                )
            roots.append(_resolved(root))
        protected = [_resolved(state_dir())]
        protected += [_resolved(env[name]) for name in PROTECTED_FILE_ENVS if env.get(name)]
        served_indexes = [*indexes, *_indexes_named_in(env)]
        protected += [_resolved(i) for i in served_indexes if i and not is_postgres(i)]
        return cls(_resolved(upload_dir), tuple(roots), tuple(protected))

    def checked(self, value: str) -> str:
        """The path to add for `value` (URLs unchanged; a local path resolved; a connector
        source as its connector allows, a local repository held to the same folders as a
        local path), or SourceRefused saying why it may not be added."""
        if is_url(value):
            return value
        if connector_scheme(value) is not None:
            # The registry imports every connector and the parsers they use (a fifth of a
            # second); this module's constants are read by the command line's parser, which
            # should not pay for that, so the registry is loaded when a connector is judged.
            from footnote.ingest.connectors.registry import kind_of

            try:
                return kind_of(value).served(value, self._local_path)
            except ConnectorError as exc:
                raise SourceRefused(f"source {_shown(value)}: {exc}") from None
        return self._local_path(value)

    def _local_path(self, value: str) -> str:
        """A local path resolved, once it is inside the allowed folders and holds none of
        the server's own files."""
        if not os.path.isabs(os.path.expanduser(value)):
            raise SourceRefused(
                f"source {_shown(value)}: a served add takes an absolute path under "
                f"{self._allowed()} (or a URL)"
            )
        path = _resolved(value)
        if _inside(path, self.upload_dir):
            # The upload folder may sit inside a protected one (the data folder's uploads/):
            # only what is protected inside the upload folder itself is refused there.
            guarded = [m for m in self.protected if _inside(m, self.upload_dir)]
        elif any(_inside(path, root) for root in self.source_roots):
            guarded = list(self.protected)
        else:
            raise SourceRefused(
                f"source {_shown(value)} is outside the folders this server may read "
                f"({self._allowed()}); the operator names them in {SOURCE_ROOTS_ENV}"
            )
        if any(_inside(path, mine) or _inside(mine, path) for mine in guarded):
            raise SourceRefused(
                f"source {_shown(value)} is or holds the server's own files (indexes, "
                "keys, database, logs, state); they are never sources"
            )
        return str(path)

    def _allowed(self) -> str:
        folders = [self.upload_dir, *self.source_roots]
        return ", ".join(str(f) for f in folders)


def _indexes_named_in(env: Mapping[str, str]) -> list[str]:
    """The server's index folders (`$FOOTNOTE_INDEX`, `$FOOTNOTE_INDEXES`): all protected,
    not only the one this run manages. The server refuses to start on a malformed
    `$FOOTNOTE_INDEXES`, so one that does not parse here names nothing."""
    named = [env.get("FOOTNOTE_INDEX", "")]
    try:
        more = json.loads(env.get("FOOTNOTE_INDEXES", "") or "{}")
    except ValueError:
        more = {}
    if isinstance(more, dict):
        named += [v for v in more.values() if isinstance(v, str)]
    return [n for n in named if n]


def _shown(value: str) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."
