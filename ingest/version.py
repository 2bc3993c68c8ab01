"""The new version an ingest run assembles, document by document: each kept as it is or
made fresh, the documents no root gives any more deleted, and its chunks handed to the
backend one document at a time."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from footnote.ingest.candidates import Candidate
from footnote.ingest.documents import ParseError
from footnote.ingest.gather import RootPlan
from footnote.ingest.options import RunScope
from footnote.ingest.spool import FreshSpool
from footnote.ingest.summary import IngestSummary
from footnote.store.base import PreviousState
from footnote.store.types import Chunk, FileRecord

Entries = list[tuple[Chunk, Any]]
"""Chunks with their vectors (an array, or the backend's STORED for a reused one)."""


@dataclass
class Fresh:
    """A new or changed document of this run: its chunks until they are embedded, then how
    many of them wait in the run's spool for the writer."""

    source: str
    chunks: list[Chunk]
    spooled: int = 0


@dataclass(frozen=True)
class Kept:
    """A document carried over from the live version by its chunk ids, whose chunks and
    vectors are looked up only if a new version is written (an ingest with nothing to do
    never reads them). `unchanged` is the candidate it was found unchanged as; None for a
    document that is not this run's."""

    ids: list[str]
    unchanged: Candidate | None
    source: str


ChunkDocument = Callable[[Candidate, str, bytes, str, bool], Fresh | None]
"""Chunks one document: (candidate, source, data, digest, known) -> Fresh, or None if it failed."""


class SourceNames:
    """Each candidate's name in the index, given out once per run."""

    def __init__(self, old_files: dict[str, FileRecord]) -> None:
        self.old_files = old_files
        self.by_origin = {(r.root, r.origin): s for s, r in old_files.items() if r.root}
        self.names: set[str] = set()

    def claim(self, item: Candidate) -> str:
        name = self._name_for(item)
        self.names.add(name)
        return name

    def _name_for(self, item: Candidate) -> str:
        """Its name in the last version if it had one; else its own name unless another
        document holds it; else `LABEL/name` (then `LABEL~2/name`...)."""
        old = self.by_origin.get((item.root, item.origin))
        if old is not None and old not in self.names:
            return old
        taken = self.names | {
            s for s, r in self.old_files.items()
            if r.root is not None and (r.root, r.origin) != (item.root, item.origin)
        }  # fmt: skip
        if item.name not in taken:
            return item.name
        n = 1
        while True:
            label = item.label if n == 1 else f"{item.label}~{n}"
            name = f"{label}/{item.name}"
            if name not in taken:
                return name
            n += 1


class NewVersion:
    """Every document's place in the new version, in order (`parts`), with its record
    (`files`). `claimed` holds the chunk ids already given: a second claim is refused, and
    a chunk id an older index gave twice (`ambiguous`) is never reused."""

    def __init__(
        self,
        previous: PreviousState | None,
        summary: IngestSummary,
        reread: set[str],
        max_bytes: int,
    ) -> None:
        self.previous = previous
        self.summary = summary
        self.reread = reread
        self.max_bytes = max_bytes
        self.old_files = previous.files if previous is not None else {}
        self.ambiguous = _ambiguous_ids(self.old_files)
        self.files: dict[str, FileRecord] = {}
        self.parts: list[Fresh | Kept] = []
        self.claimed: set[str] = set()

    def take(self, item: Candidate, source: str, chunk: ChunkDocument) -> None:
        """Keep a document whose content is unchanged (by its not-modified answer or its
        digest); read and `chunk` any other."""
        old = self.old_files.get(source)
        if old is not None and old.root is None:  # an older index's record: adopted
            old = FileRecord(**{**old.__dict__, "root": item.root, "origin": item.origin})
        reusable = (
            old is not None
            and item.root not in self.reread
            and self.ambiguous.isdisjoint(old.chunk_ids)
            and self.claimed.isdisjoint(old.chunk_ids)
        )
        if item.not_modified and reusable and old is not None:
            self.keep(source, old, item)
            return
        try:
            data = item.read()
        except ParseError as exc:
            self.summary.failed[source] = str(exc)
            return
        if len(data) > self.max_bytes:  # grew after the size check
            self.summary.failed[source] = f"file too large: over the limit {self.max_bytes}"
            return
        digest = hashlib.sha256(data).hexdigest()
        if reusable and old is not None and old.sha256 == digest:
            if item.fetch and item.fetch != old.fetch:
                old = FileRecord(**{**old.__dict__, "fetch": item.fetch})
            self.keep(source, old, item)
            return
        fresh = chunk(item, source, data, digest, old is not None)
        if fresh is not None:
            self.parts.append(fresh)

    def keep(self, source: str, record: FileRecord, item: Candidate | None) -> None:
        """Carry a document over as it is: unchanged (`item`), or not this run's."""
        ids = list(record.chunk_ids)
        if item is None:
            ids = [cid for cid in ids if cid not in self.ambiguous | self.claimed]
        self.parts.append(Kept(ids, item, source))
        self.claimed.update(ids)
        self.files[source] = record
        if item is not None:
            self.summary.unchanged.append(source)
            if record.restricted:
                self.summary.restricted[source] = record.restricted

    def add_fresh(self, source: str, record: FileRecord, chunks: list[Chunk], known: bool) -> None:
        """Record a document just chunked: added, or updated when the index `known` it."""
        self.claimed.update(chunk.id for chunk in chunks)
        if record.restricted:
            self.summary.restricted[source] = record.restricted
        self.files[source] = record
        (self.summary.updated if known else self.summary.added).append(source)

    def drop(self, fresh: Fresh, reason: str) -> None:
        """A fresh document fails whole: its record and chunks go, and its last good
        version, if any, stays."""
        source = fresh.source
        self.summary.failed[source] = reason
        self.summary.restricted.pop(source, None)
        for listed in (self.summary.added, self.summary.updated):
            if source in listed:
                listed.remove(source)
        self.files.pop(source, None)
        self.claimed.difference_update(chunk.id for chunk in fresh.chunks)
        fresh.chunks = []

    def unkeep(self, part: Kept) -> FileRecord:
        """Take back an unchanged document whose chunks the live version lacks, to chunk
        it again."""
        self.summary.unchanged.remove(part.source)
        self.claimed.difference_update(part.ids)
        return self.files.pop(part.source)

    def settle_deletions(self, read_in_full: set[str], scope: RunScope) -> None:
        """Delete what this run owns and no longer has: documents of a root read in full
        that it did not give, and those `scope.owned` names. A document that failed this
        time, or is not this run's to change, keeps its last good chunks."""
        for source, record in sorted(self.old_files.items()):
            if source in self.files:
                continue
            if source in self.summary.failed or not _owned(source, record, read_in_full, scope):
                self.keep(source, record, None)
                continue
            self.summary.deleted.append(source)
            self.summary.deleted_why[source] = scope.why_deleted or _gone_reason(record, self.files)

    def failures(self, live: PreviousState | None, read_in_full: set[str]) -> dict[str, str]:
        """The last failure of each document, kept until its root is read again."""
        old = dict(live.manifest.get("failures") or {}) if live is not None else {}
        failures = {
            source: reason
            for source, reason in old.items()
            if source in self.files and self.files[source].root not in read_in_full
        }
        failures.update(self.summary.failed)
        return failures

    def is_unchanged(
        self, live: PreviousState | None, plan: RootPlan, failures: dict[str, str]
    ) -> bool:
        """Whether the live version already is this one: then the summary names it, with
        its chunk count, and nothing is written."""
        previous = self.previous
        if live is None or previous is None:
            return False
        changed = (
            plan.sources != plan.remembered
            or failures != (live.manifest.get("failures") or {})
            or self.summary.deleted
            or any(isinstance(part, Fresh) and part.spooled for part in self.parts)
        )
        if changed:
            return False
        self.summary.chunks = sum(len(part.ids) for part in self.parts if isinstance(part, Kept))
        self.summary.version = previous.version
        return True

    def entries(
        self, spool: FreshSpool, chunk_again: Callable[[Kept], Entries]
    ) -> Iterator[tuple[Chunk, Any]]:
        """Every chunk of the new version with its vector, one document at a time as the
        backend writes them: a kept document's chunks are read from the live version, and a
        fresh one's from the spool, only when their turn comes, so the run never holds the
        whole index."""
        for part in self.parts:
            entries: Entries
            if isinstance(part, Fresh):
                entries = spool.take(part.source) if part.spooled else []
            else:
                assert self.previous is not None
                reused = self.previous.lookup(part.ids, part.unchanged is None)
                if reused is not None:
                    entries = reused
                elif part.unchanged is None:
                    continue
                else:  # its chunks are missing from the index: chunk it again
                    entries = chunk_again(part)
            self.summary.chunks += len(entries)
            yield from entries


def _owned(source: str, record: FileRecord, read_in_full: set[str], scope: RunScope) -> bool:
    if record.root is not None and record.root in read_in_full:
        return True
    return scope.owned is not None and scope.owned(source, record)


def _ambiguous_ids(files: dict[str, FileRecord]) -> set[str]:
    """Chunk ids an older index gave to more than one chunk: such chunks are never reused,
    since a lookup by id cannot tell them apart."""
    seen: set[str] = set()
    repeated: set[str] = set()
    for record in files.values():
        for chunk_id in record.chunk_ids:
            (repeated if chunk_id in seen else seen).add(chunk_id)
    return repeated


def _gone_reason(record: FileRecord, files: dict[str, FileRecord]) -> str:
    """Why a document its root no longer gives is deleted: renamed (same content under
    another name from the same root) or gone."""
    for source, other in files.items():
        if other.root == record.root and other.sha256 == record.sha256:
            return f"renamed to {source}"
    where = record.root or "its root"
    return f"no longer in {where}"
