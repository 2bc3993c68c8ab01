"""Gathering a run's candidates: which roots it reads (`RootPlan`), and every document
they give now (`gather_candidates`): files found by `discover` under folder and file roots,
pages under URL roots, and the documents handed in for `documents:` roots."""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from footnote.ingest.candidates import Candidate
from footnote.ingest.documents import ParseError
from footnote.ingest.options import IngestOptions, RunScope
from footnote.ingest.parsers import parse_bytes, unsupported_reason
from footnote.ingest.roots import CONNECTOR_KINDS, SourceRoot, merge_roots
from footnote.ingest.summary import IngestSummary
from footnote.store.base import PreviousState


@dataclass(frozen=True)
class SourceFile:
    path: Path
    source: str
    """Path relative to its root, with `/` (the root's own name for a file root)."""
    root: Path = Path()


def discover(
    paths: list[Path],
    summary: IngestSummary,
    *,
    follow_symlinks: bool = False,
    selected: Callable[[str], bool] = lambda source: True,
    boundary_roots: list[Path] | None = None,
) -> Iterator[SourceFile]:
    """Walk the given roots once each; every path not yielded gets a reason in `summary`.

    The roots are a boundary. Symlinks found inside them are not followed unless
    `follow_symlinks`, and then only when they resolve inside one of the roots, so a link to
    `/etc/passwd` or `/proc/self/status` is never read. Special files (FIFOs, devices,
    sockets) are never opened. A root named on the command line is the caller's choice and
    is used as given, link or not. `selected` keeps a file by its relative path (a
    source's include/exclude globs); `boundary_roots` widens the boundary to other roots.
    """
    boundary = [os.path.realpath(p) for p in (boundary_roots or paths)]
    seen_dirs: set[str] = set()

    def accept(path: Path, source: str) -> Iterator[SourceFile]:
        if unsupported := unsupported_reason(path):
            summary.skipped[source] = unsupported
        elif not selected(source):
            summary.skipped[source] = "left out by the source's --include/--exclude globs"
        else:
            yield SourceFile(path, source, root)

    for root in paths:
        try:
            mode = os.stat(root).st_mode
        except OSError as exc:
            summary.failed[str(root)] = _stat_reason(root, exc)
            continue
        if stat.S_ISREG(mode):
            yield from accept(root, root.name)
            continue
        if not stat.S_ISDIR(mode):
            summary.skipped[str(root)] = _special_reason(mode)
            continue
        stack = [root]
        while stack:
            folder = stack.pop()
            real = os.path.realpath(folder)
            if real in seen_dirs:
                continue
            seen_dirs.add(real)
            try:
                entries = sorted(os.scandir(folder), key=lambda e: e.name)
            except OSError as exc:
                summary.failed[_rel(Path(folder), root)] = f"cannot list folder: {exc.strerror}"
                continue
            for entry in entries:
                path = Path(entry.path)
                source = _rel(path, root)
                try:
                    mode = entry.stat(follow_symlinks=False).st_mode
                    if entry.is_symlink():
                        mode = _symlink_target_mode(path, real, boundary, follow_symlinks)
                except _Refused as refused:
                    if refused.failed:
                        summary.failed[source] = str(refused)
                    else:
                        summary.skipped[source] = str(refused)
                    continue
                except OSError as exc:
                    summary.failed[source] = _stat_reason(path, exc)
                    continue
                if entry.name.startswith("."):
                    hidden = "hidden folder" if stat.S_ISDIR(mode) else "hidden file"
                    summary.skipped[source] = f"{hidden} (its name starts with a dot)"
                elif stat.S_ISDIR(mode):
                    stack.append(path)
                elif stat.S_ISREG(mode):
                    yield from accept(path, source)
                else:
                    summary.skipped[source] = _special_reason(mode)


class _Refused(Exception):
    """A path discovery will not follow; `failed` marks a broken one (loop, dead link)."""

    def __init__(self, reason: str, *, failed: bool = False) -> None:
        super().__init__(reason)
        self.failed = failed


def _symlink_target_mode(link: Path, folder: str, boundary: list[str], follow: bool) -> int:
    """The mode of what a symlink found while walking points at, if it may be followed."""
    try:
        target = os.path.realpath(link, strict=True)
        mode = os.stat(target).st_mode
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise _Refused("symlink loop", failed=True) from exc
        raise _Refused("broken symlink", failed=True) from exc
    if stat.S_ISDIR(mode) and _is_ancestor(target, folder):
        raise _Refused("symlink loop: links back to a parent folder", failed=True)
    if not follow:
        raise _Refused("symlink, not followed (--follow-symlinks follows links inside the roots)")
    if not any(_is_ancestor(root, target) for root in boundary):
        raise _Refused("symlink to a path outside the ingest roots, not followed")
    return mode


def _special_reason(mode: int) -> str:
    kinds = (
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
    )
    kind = next((name for test, name in kinds if test(mode)), "not a regular file")
    return f"special file ({kind}), not read"


def _stat_reason(path: Path, exc: OSError) -> str:
    if exc.errno == errno.ELOOP:
        return "symlink loop"
    if exc.errno == errno.ENOENT:
        return "broken symlink" if path.is_symlink() else "no such file or directory"
    return str(exc.strerror or exc)


def _is_ancestor(target: str, folder: str) -> bool:
    """Whether `target` is `folder` or above it: descending there would never end."""
    return os.path.commonpath([target, folder]) == target


def _rel(path: Path, root: Path) -> str:
    try:
        return path.relative_to(root).as_posix()
    except ValueError:
        return path.as_posix()


def _still_regular(path: Path, follow_symlinks: bool) -> os.stat_result:
    """Re-check a discovered file just before reading it: a path swapped for a link or a
    FIFO since the walk is refused, never opened."""
    info = os.stat(path) if follow_symlinks else os.lstat(path)
    if not stat.S_ISREG(info.st_mode):
        raise ParseError("no longer a regular file: it changed while ingest ran")
    return info


def file_candidates(root: SourceRoot, found: list[SourceFile], max_bytes: int) -> list[Candidate]:
    """Candidates for files `discover` found under a folder or file root."""

    def one(item: SourceFile) -> Candidate:
        def read() -> bytes:
            try:
                size = _still_regular(item.path, root.follow_symlinks).st_size
                if size > max_bytes:  # refused before reading: a huge file must not fill memory
                    raise ParseError(f"file too large: {size} bytes > limit {max_bytes}")
                return item.path.read_bytes()
            except OSError as exc:
                raise ParseError(f"cannot read: {exc.strerror}") from exc

        return Candidate(
            root=root.id,
            origin=item.source,
            name=item.source,
            label=root.label,
            read=read,
            parse=lambda data, source: parse_bytes(data, item.path, source),
            mtime=lambda: item.path.stat().st_mtime,
            access=root.access,
        )

    return [one(item) for item in found]


@dataclass(frozen=True)
class RootPlan:
    """The roots a run reads and the sources the new version records. `reread` names the
    roots whose access or globs changed: every document they give is read again."""

    roots: list[SourceRoot]
    sources: list[dict[str, Any]]
    remembered: list[dict[str, Any]]
    reread: set[str]

    @classmethod
    def make(
        cls,
        given: list[SourceRoot],
        remembered: list[SourceRoot],
        previous: PreviousState | None,
        scope: RunScope,
    ) -> RootPlan:
        roots = list(given)
        if previous is None and remembered:
            # Nothing can be reused: every remembered root is read again with the given ones,
            # so a rebuild loses no document another root gave (nor one a damaged version held).
            ids = {r.id for r in given}
            roots += [r for r in remembered if r.id not in ids and r.id not in scope.forget]
        recorded = [*(roots if scope.remember else []), *scope.unread]
        registry = merge_roots(remembered, recorded, set(scope.forget))
        before = {r.id: r for r in remembered}
        reread = {
            r.id
            for r in roots
            if r.id in before
            and (before[r.id].access, before[r.id].include, before[r.id].exclude)
            != (r.access, r.include, r.exclude)
        }
        return cls(
            roots=roots,
            sources=[r.to_dict() for r in registry],
            remembered=[r.to_dict() for r in remembered],
            reread=reread,
        )

    def record_checkpoints(self, checkpoints: dict[str, dict[str, Any]]) -> None:
        """Note each connector source's new checkpoint in the sources the version records,
        so it is published with what it read (and not at all if the run publishes nothing).
        One whose commit did not move keeps its record as it was: a sync that found nothing
        new publishes nothing."""
        for source in self.sources:
            new = checkpoints.get(source["id"])
            old = source.get("checkpoint") or {}
            if new is not None and new.get("cursor") != old.get("cursor"):
                source["checkpoint"] = new


def gather_candidates(
    roots: list[SourceRoot],
    previous: PreviousState | None,
    summary: IngestSummary,
    options: IngestOptions,
    scope: RunScope,
    reread: frozenset[str] = frozenset(),
) -> tuple[list[Candidate], set[str]]:
    """Every document the roots give now, and the ids of the roots read in full: only those
    may lose documents they no longer give. A root that cannot be read keeps its documents,
    and so do documents handed in from Python, which cannot be read again. A connector root
    in `reread` (its access or globs changed) is read in full, not from its checkpoint."""
    candidates: list[Candidate] = []
    read_in_full: set[str] = set()
    boundary = [Path(r.id) for r in roots if r.kind in ("folder", "file")]
    for root in roots:
        if root.kind in ("folder", "file"):
            got = _file_root_candidates(root, boundary, summary, options.limits.max_bytes)
        elif root.kind in ("url", "site"):
            got = _page_candidates(root, previous, summary, options)
        elif root.kind in CONNECTOR_KINDS:
            got = _connector_candidates(root, previous, summary, options, reread)
        elif scope.documents and root.id in scope.documents:
            got = scope.documents[root.id]
            if scope.append:  # not a full re-read: the root's other documents stay
                candidates.extend(got)
                continue
        else:
            continue
        if got is None:
            continue
        candidates.extend(got)
        read_in_full.add(root.id)
    return candidates, read_in_full


def _file_root_candidates(
    root: SourceRoot, boundary: list[Path], summary: IngestSummary, max_bytes: int
) -> list[Candidate] | None:
    """A folder or file root's files; None when the root cannot be read."""
    failed_before = len(summary.failed)
    found = list(
        discover(
            [Path(root.id)],
            summary,
            follow_symlinks=root.follow_symlinks,
            selected=root.selected,
            boundary_roots=boundary,
        )
    )
    if root.id in summary.failed or (len(summary.failed) > failed_before and not found):
        return None
    return file_candidates(root, found, max_bytes)


def _connector_candidates(
    root: SourceRoot,
    previous: PreviousState | None,
    summary: IngestSummary,
    options: IngestOptions,
    reread: frozenset[str],
) -> list[Candidate] | None:
    """A connector root's documents (a git repository's files), only what changed since its
    checkpoint read; None when the source cannot be read."""
    from footnote.ingest.connectors.candidates import connector_candidates

    allow_private = options.allow_private
    return connector_candidates(
        root,
        previous,
        summary,
        max_bytes=options.limits.max_bytes,
        allow_private=root.allow_private if allow_private is None else allow_private,
        reread=root.id in reread,
    )


def _page_candidates(
    root: SourceRoot,
    previous: PreviousState | None,
    summary: IngestSummary,
    options: IngestOptions,
) -> list[Candidate] | None:
    """A URL or site root's pages (fetched again only where changed); None when unread."""
    from footnote.ingest.web import page_candidates

    old_pages = {
        r.origin: r
        for r in (previous.files.values() if previous else [])
        if r.root == root.id and r.origin
    }
    allow_private = options.allow_private
    return page_candidates(
        root,
        old_pages,
        summary.failed,
        summary.skipped,
        max_bytes=options.limits.max_bytes,
        allow_private=root.allow_private if allow_private is None else allow_private,
    )
