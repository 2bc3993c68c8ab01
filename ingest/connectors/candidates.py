"""A connector's documents as ingest candidates, read incrementally from its checkpoint.

The connector is polled from the checkpoint the index recorded with its last publish (read
in full when there is none, or it is lost). Whatever it lists now is a candidate, so what
it no longer lists is pruned; a document whose version the index already holds is kept
without being read. The version check, not the checkpoint alone, decides: a document that
failed last time, or a checkpoint ahead of what was published, only costs a read.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable

from footnote.ingest.candidates import Candidate
from footnote.ingest.connectors.base import (
    Batch,
    Checkpoint,
    CheckpointLost,
    Connector,
    ConnectorError,
    SourceDocument,
)
from footnote.ingest.connectors.git import updated_epoch
from footnote.ingest.connectors.registry import Opening, kind_of
from footnote.ingest.documents import ParsedDocument, ParseError
from footnote.ingest.roots import SourceRoot
from footnote.ingest.summary import IngestSummary
from footnote.store.base import PreviousState


def connector_candidates(
    root: SourceRoot,
    previous: PreviousState | None,
    summary: IngestSummary,
    *,
    max_bytes: int,
    allow_private: bool,
    reread: bool,
) -> list[Candidate] | None:
    """The candidates of a connector root, with its new checkpoint in `summary`; None (the
    root's documents stay as they are, its failure reported) when it cannot be read."""
    old = {
        r.origin: r
        for r in (previous.files.values() if previous is not None else [])
        if r.root == root.id and r.origin
    }
    try:
        connector = kind_of(root.id).open(
            Opening(
                source=root.id,
                index=summary.index,
                access=root.access,
                selected=root.selected,
                max_bytes=max_bytes,
                check_host=functools.partial(_check_host, allow_private=allow_private),
            )
        )
        batch = _changes(connector, Checkpoint.from_dict(root.checkpoint), bool(old) and not reread)
        listed = connector.list_ids()
    except ConnectorError as exc:
        summary.failed[root.id] = str(exc)
        return None
    summary.skipped.update({f"{root.label}/{k}": v for k, v in batch.skipped.items()})
    summary.checkpoints[root.id] = batch.checkpoint.to_dict()
    given = {d.id: d for d in batch.documents}
    everything = functools.cache(lambda: {d.id: d for d in connector.full_load().documents})
    candidates = []
    for doc_id, version in sorted(listed.items()):
        record = old.get(doc_id)
        kept = record is not None and (record.fetch or {}).get("version") == version
        doc = given.get(doc_id)
        if doc is None and not kept:  # changed outside what the poll saw: read it now
            try:
                doc = everything().get(doc_id)
            except ConnectorError as exc:  # the source went away mid-run: keep what it gave
                summary.failed[root.id] = str(exc)
                return None
        candidates.append(_candidate(root, doc_id, version, doc, kept, everything))
    return candidates


def _check_host(host: str, port: int, *, allow_private: bool) -> None:
    from footnote.ingest.web import FetchRefused, check_address

    try:
        check_address(host, port, allow_private)
    except FetchRefused as exc:
        raise ConnectorError(f"{host}: {exc}") from None


def _changes(connector: Connector, since: Checkpoint | None, incremental: bool) -> Batch:
    """What changed since the checkpoint, or everything when there is no usable one."""
    if since is not None and incremental:
        try:
            return connector.poll(since)
        except CheckpointLost:
            pass
    return connector.full_load()


def _candidate(
    root: SourceRoot,
    doc_id: str,
    version: str,
    doc: SourceDocument | None,
    kept: bool,
    everything: Callable[[], dict[str, SourceDocument]],
) -> Candidate:
    """One listed document. One the index holds at this version is `not_modified`, and is
    read (through a full load) only if the index cannot reuse its chunks after all."""

    def document() -> SourceDocument:
        try:
            found = doc or everything().get(doc_id)
        except ConnectorError as exc:  # one document's reason; the run goes on
            raise ParseError(f"cannot read from its source: {exc}") from None
        if found is None:
            raise ParseError("no longer in its source")
        return found

    def parse(data: bytes, source: str) -> ParsedDocument:
        found = document()
        parsed = found.parse(data, source)
        problem = found.permissions.problem
        if problem is not None:  # unreadable permissions: no one but an admin, never public
            parsed.access, parsed.access_problem = [], problem
        return parsed

    when = updated_epoch(doc.updated if doc else None)
    return Candidate(
        root=root.id,
        origin=doc_id,
        name=doc.name if doc else doc_id,
        label=root.label,
        read=lambda: document().read(),
        parse=parse,
        mtime=lambda: when if when is not None else time.time(),
        access=doc.permissions.access_groups() if doc else root.access,
        fetch={"version": version, **({"link": doc.link} if doc else {})},
        not_modified=kept,
    )
