"""The git connector: the tracked files at the HEAD of a repository's default branch, each
chunk cited by file and line at the commit read.

`git+file:///srv/repo` reads a repository on this machine in place; `git+https://host/x.git`
(or `git+ssh://`) is fetched into a private cache folder beside the index and read there.
Only git objects are read, never the working tree: a symlink is a blob holding its target's
name and is skipped, so nothing outside the repository is ever opened. A first load reads
every file; a sync compares the recorded commit with the new one (`git diff-tree`) and
reads only the files that changed; authors and dates come from one `git log` pass.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from urllib.parse import urlsplit

from footnote.ingest.connectors.base import (
    Batch,
    Checkpoint,
    CheckpointLost,
    ConnectorError,
    Permissions,
    SourceDocument,
)
from footnote.ingest.connectors.git_cli import (
    FETCH_TIMEOUT_S,
    REMOTE_PROTOCOLS,
    GitFailed,
    run_git,
    stream_git,
    unquote_path,
)
from footnote.ingest.connectors.python_symbols import symbol_sections
from footnote.ingest.documents import ParsedDocument, ParseError
from footnote.ingest.parsers import parse_bytes, unsupported_reason
from footnote.store.private import private_dir

SCHEMES = ("git+file", "git+https", "git+ssh")
_REGULAR_MODES = ("100644", "100755")
_HEAD_REF = "refs/footnote/head"
"""Where a fetched repository's default branch is kept in the cache."""


@dataclass(frozen=True)
class GitSource:
    """A git source as the index records it: `id` is what `footnote sources` shows."""

    id: str
    path: Path | None
    """The repository on this machine (`git+file://`), else None."""
    remote: str | None
    """The clone URL without `git+` (`https://...`, `ssh://...`), else None."""

    @property
    def label(self) -> str:
        name = PurePosixPath(urlsplit(self.remote).path).name if self.remote else ""
        name = name or (self.path.name if self.path else "") or "repository"
        return name.removesuffix(".git") or name


def parse_source(value: str) -> GitSource:
    """The git source a user names, or ConnectorError saying what is wrong with it."""
    scheme, _, rest = value.partition("://")
    if scheme == "git+file":
        if not rest.startswith("/") or "#" in rest or "?" in rest:
            raise ConnectorError(
                f"{value[:200]}: a local repository is named git+file:///ABSOLUTE/PATH"
            )
        path = Path(os.path.realpath(rest))
        if not path.exists():
            raise ConnectorError(f"{value[:200]}: no such path")
        if not path.is_dir():
            raise ConnectorError(f"{value[:200]}: not a folder, so not a git repository")
        return GitSource(id=f"git+file://{path}", path=path, remote=None)
    if scheme in ("git+https", "git+ssh"):
        try:
            parts = urlsplit(value.removeprefix("git+"))
            hostname = parts.hostname
        except ValueError as exc:
            raise ConnectorError(f"{value[:200]}: malformed URL: {exc}") from None
        if (hostname or "").startswith("-") or (parts.username or "").startswith("-"):
            raise ConnectorError(f"{value[:200]}: a host or user name cannot start with '-'")
        if not hostname or parts.query or parts.fragment or not parts.path.strip("/"):
            raise ConnectorError(f"{value[:200]}: a clone URL is {scheme}://HOST/PATH")
        if parts.password is not None or (scheme == "git+https" and parts.username):
            raise ConnectorError(
                f"{scheme}://{hostname}/...: credentials in the URL would be stored with the "
                "index's sources; use an ssh key or a public URL"
            )
        remote = value.removeprefix("git+").rstrip("/")
        return GitSource(id=f"git+{remote}", path=None, remote=remote)
    raise ConnectorError(f"{value[:200]}: git sources are {', '.join(s + '://' for s in SCHEMES)}")


@dataclass(frozen=True)
class TreeEntry:
    path: str
    blob: str
    size: int


class GitConnector:
    """One repository: the `Connector` protocol over git's objects."""

    def __init__(
        self,
        source: GitSource,
        *,
        cache: Path | None = None,
        access: list[str] | None = None,
        selected: Callable[[str], bool] = lambda path: True,
        max_bytes: int = 20_000_000,
        protocols: str = REMOTE_PROTOCOLS,
    ) -> None:
        self.source = source
        self.cache = cache
        self.access = access
        self.selected = selected
        self.max_bytes = max_bytes
        self.protocols = protocols
        self._head: str | None = None
        self._tree: dict[str, TreeEntry] | None = None
        self.skipped: dict[str, str] = {}

    # -- the Connector protocol --------------------------------------------------------

    def full_load(self) -> Batch:
        head = self.head()
        entries = list(self.tree().values())
        return self._batch(head, entries, None)

    def poll(self, since: Checkpoint) -> Batch:
        head = self.head()
        try:
            run_git(self.where(), ["cat-file", "-e", f"{since.cursor}^{{commit}}"])
        except GitFailed:
            raise CheckpointLost(
                f"commit {since.cursor[:12]} is no longer in the repository"
            ) from None
        changed = self._changed(since.cursor, head)
        tree = self.tree()
        return self._batch(head, [tree[p] for p in sorted(changed) if p in tree], since.cursor)

    def list_ids(self) -> dict[str, str]:
        return {path: entry.blob for path, entry in self.tree().items()}

    def permissions(self, doc_id: str) -> Permissions:
        """A repository has no per-file permissions: every file gets the source's groups
        (`footnote add ... --access`), else the index's default, as a folder's files do."""
        return Permissions(groups=tuple(self.access or ()))

    # -- reading the repository ----------------------------------------------------------

    def where(self) -> Path:
        """The repository git runs in: the local one, or the fetched cache."""
        if self.source.path is not None:
            return self.source.path
        assert self.cache is not None, "a remote repository needs a cache folder"
        return self.cache

    def head(self) -> str:
        """The commit read: HEAD of the local repository, or of the remote's default branch
        fetched now into the cache."""
        if self._head is None:
            if self.source.remote is not None:
                self._fetch()
                self._head = self._commit(_HEAD_REF)
            else:
                self._check_local()
                self._head = self._commit("HEAD")
        return self._head

    def _check_local(self) -> None:
        """The folder must be a repository of its own: git must not find one above it, nor
        follow a `.git` file to objects outside the folder the source names."""
        assert self.source.path is not None
        try:
            found = run_git(self.source.path, ["rev-parse", "--absolute-git-dir"])
        except GitFailed as exc:
            raise ConnectorError(f"not a git repository ({exc})") from None
        git_dir = Path(os.path.realpath(found.decode("utf-8", "replace").strip()))
        root = self.source.path
        if git_dir != root and root not in git_dir.parents:
            raise ConnectorError(f"its git folder is outside the repository ({git_dir}); not read")

    def _commit(self, ref: str) -> str:
        try:
            out = run_git(self.where(), ["rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}"])
        except GitFailed:
            raise ConnectorError("the repository has no commits yet") from None
        return out.decode("ascii", "replace").strip()

    def _fetch(self) -> None:
        """Fetch the remote's default branch into the cache (a bare repository, 0700)."""
        assert self.cache is not None and self.source.remote is not None
        if not (self.cache / "HEAD").exists():
            private_dir(self.cache)  # the fetched files are document text: the owner's alone
            run_git(self.cache, ["init", "--quiet", "--bare"])
        try:
            run_git(
                self.cache,
                ["fetch", "--quiet", "--no-tags", "--no-recurse-submodules", "--",
                 self.source.remote, f"+HEAD:{_HEAD_REF}"],
                timeout=FETCH_TIMEOUT_S,
                protocols=self.protocols,
            )  # fmt: skip
        except GitFailed as exc:
            raise ConnectorError(f"clone failed: {exc}") from None

    def tree(self) -> dict[str, TreeEntry]:
        """The regular files tracked at the head commit that ingest would read; every other
        entry (symlink, submodule, unsupported type, too large, left out by the source's
        globs) is in `skipped` with its reason."""
        if self._tree is None:
            raw = run_git(self.where(), ["ls-tree", "-r", "-z", "-l", "--full-tree", self.head()])
            self._tree = {}
            for item in raw.split(b"\0"):
                if item:
                    self._take_entry(item)
        return self._tree

    def _take_entry(self, item: bytes) -> None:
        assert self._tree is not None
        info, _, raw_path = item.partition(b"\t")
        mode, kind, blob, size = info.split()
        try:
            path = raw_path.decode("utf-8")
        except UnicodeDecodeError:
            self.skipped[raw_path.decode("utf-8", "replace")] = "file name is not UTF-8"
            return
        reason = _entry_reason(mode.decode(), kind.decode(), path)
        if reason is None and not self.selected(path):
            reason = "left out by the source's --include/--exclude globs"
        if reason is None and int(size) > self.max_bytes:
            reason = f"file too large: {int(size)} bytes > limit {self.max_bytes}"
        if reason is not None:
            self.skipped[path] = reason
            return
        self._tree[path] = TreeEntry(path, blob.decode(), int(size))

    def _changed(self, old: str, new: str) -> set[str]:
        """The paths added, modified or retyped between two commits (deleted ones are
        pruned by their absence from the listing)."""
        raw = run_git(
            self.where(),
            ["diff-tree", "-r", "-z", "--no-renames", "--name-status", old, new],
        )
        fields = raw.split(b"\0")
        changed = set()
        for status, path in zip(fields[0::2], fields[1::2], strict=False):
            if status and not status.startswith(b"D"):
                changed.add(path.decode("utf-8", "replace"))
        return changed

    def _batch(self, head: str, entries: list[TreeEntry], since: str | None) -> Batch:
        history = self._history({e.path for e in entries}, head, since)
        documents = [self._document(entry, head, history.get(entry.path)) for entry in entries]
        checkpoint = Checkpoint(
            cursor=head,
            reached_at=_now(),
            detail={"commit": head, "files": len(self.tree())},
        )
        return Batch(documents=documents, checkpoint=checkpoint, skipped=dict(self.skipped))

    def _history(self, paths: set[str], head: str, since: str | None) -> dict[str, tuple[str, str]]:
        """Each path's last author and date (ISO), from one `git log` pass over the commits
        since the checkpoint (or all of them), stopped once every path is found."""
        wanted = {p.encode("utf-8") for p in paths}
        found: dict[str, tuple[str, str]] = {}
        if not wanted:
            return found
        revisions = f"{since}..{head}" if since else head
        author: tuple[str, str] | None = None
        lines = stream_git(
            self.where(),
            ["log", "--no-renames", "--name-only", "--format=%x01%an%x01%aI", revisions, "--"],
        )
        for line in lines:
            line = line.rstrip(b"\n")
            if line.startswith(b"\x01"):
                name, _, when = line[1:].partition(b"\x01")
                author = (name.decode("utf-8", "replace"), when.decode("ascii", "replace"))
            elif line and author is not None:
                path = unquote_path(line)
                if path in wanted:
                    wanted.discard(path)
                    found[path.decode("utf-8")] = author
                    if not wanted:
                        break
        return found

    def _document(
        self, entry: TreeEntry, head: str, history: tuple[str, str] | None
    ) -> SourceDocument:
        author, updated = history if history else (None, None)
        where = self.where()

        def read() -> bytes:
            try:
                return run_git(where, ["cat-file", "blob", entry.blob])
            except GitFailed as exc:
                raise ParseError(f"cannot read from git: {exc}") from None

        def parse(data: bytes, source: str) -> ParsedDocument:
            doc = parse_bytes(data, Path(PurePosixPath(entry.path).name), source)
            return self._cited(doc, entry.path, head, author)

        return SourceDocument(
            id=entry.path,
            name=entry.path,
            version=entry.blob,
            link=self.link(head, entry.path),
            read=read,
            parse=parse,
            author=author,
            updated=updated,
            permissions=self.permissions(entry.path),
        )

    def _cited(
        self, doc: ParsedDocument, path: str, head: str, author: str | None
    ) -> ParsedDocument:
        """Every section linked to its lines at the commit; Python cut at its symbols."""
        sections = []
        for section in doc.sections:
            pieces = [section]
            if path.endswith((".py", ".pyi")) and section.is_code:
                pieces = symbol_sections(section, lambda a, b: self.link(head, path, a, b))
            for piece in pieces:
                if piece.url is None:
                    piece.url = self.link(head, path, piece.line_start, piece.line_end)
                sections.append(piece)
        doc.sections = sections
        doc.metadata = {
            **doc.metadata,
            "repository": self.source.id,
            "commit": head,
            **({"author": author} if author else {}),
        }
        return doc

    def link(
        self, commit: str, path: str, first: int | None = None, last: int | None = None
    ) -> str:
        """Where `path` (lines `first`-`last`) stands at `commit`: the web page of a
        GitHub- or GitLab-like https remote, else `git+...@COMMIT#PATH:Lfirst-Llast`."""
        lines = f"L{first}-L{last}" if first and last else ""
        remote = self.source.remote
        if remote is not None and remote.startswith("https://"):
            base = remote.removesuffix(".git")
            blob = "/-/blob/" if "gitlab" in (urlsplit(base).hostname or "") else "/blob/"
            return f"{base}{blob}{commit}/{path}" + (f"#{lines}" if lines else "")
        return f"{self.source.id}@{commit}#{path}" + (f":{lines}" if lines else "")


def _entry_reason(mode: str, kind: str, path: str) -> str | None:
    """Why a tree entry is not read, or None when it is a file ingest parses."""
    if mode == "120000":
        return "symlink, not followed (a repository's links are never read)"
    if kind == "commit":
        return "submodule, not read"
    if kind != "blob" or mode not in _REGULAR_MODES:
        return f"not a regular file (git mode {mode})"
    if any(part.startswith(".") for part in PurePosixPath(path).parts):
        return "hidden file (its name starts with a dot)"
    return unsupported_reason(Path(PurePosixPath(path).name))


def cache_name(source: GitSource) -> str:
    """The cache folder's name for a remote: a digest, so no URL reaches the file system."""
    return hashlib.sha256(source.id.encode("utf-8")).hexdigest()[:24]


def updated_epoch(updated: str | None) -> float | None:
    """Seconds since the epoch for an ISO 8601 time, None when absent or unreadable."""
    if not updated:
        return None
    try:
        return dt.datetime.fromisoformat(updated).timestamp()
    except ValueError:
        return None


def _now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
