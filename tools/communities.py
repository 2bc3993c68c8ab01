"""What a caller may see of the graph's communities (store/communities.py): each community's
visible chunks, its entities and an extractive summary made of its most central chunks'
sentences, cited by chunk id.

Everything is computed at query time over the caller's visible rows: a community none of
whose chunks the caller may read is not listed; its entities are those a visible chunk
mentions; its summary sentences come from visible chunks only. So an entity name, a summary
sentence or a chunk of a document the caller may not read never appears, whatever the
community's membership was computed from.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from footnote.store.entities import entity_key
from footnote.store.text import split_sentences
from footnote.store.types import Chunk

CENTRAL_CHUNKS = 6
"""Most central visible chunks a summary is chosen from."""
SUMMARY_ENTITIES = 20
"""A community's entities that a summary sentence is scored against."""
MIN_SENTENCE_WORDS = 4


@dataclass
class Sentence:
    text: str
    chunk: Chunk
    row: int


@dataclass
class Community:
    """One community as a caller sees it."""

    id: int
    rows: list[int]
    """Visible chunk rows, most central first."""
    entities: list[str]
    """Visible entity names, those in most visible chunks first."""
    summary: list[Sentence] = field(default_factory=list)

    def to_dict(self, entities: int = 10) -> dict[str, Any]:
        return {
            "id": self.id,
            "chunks": len(self.rows),
            "entities": self.entities[:entities],
            "documents": sorted({s.chunk.source for s in self.summary}),
            "summary": [
                {"text": s.text, "chunk_id": s.chunk.id, "source": s.chunk.source}
                for s in self.summary
            ],  # fmt: skip
        }


class CommunityView:
    """One caller's view of one version's communities; `selection` is what the reader's
    `select` gave for the caller (on either backend: the graph turns it into visible rows)."""

    def __init__(self, reader: Any, selection: Any) -> None:
        graph_of = getattr(reader, "graph", None)
        graph = graph_of() if graph_of is not None else None
        # a version built before communities is read like one without a graph
        self.graph = graph if graph is not None and graph.communities is not None else None
        self.reader = reader
        if self.graph is None:
            return
        self._see(self.graph.row_mask(selection))

    def _see(self, mask: np.ndarray) -> None:
        assert self.graph is not None
        self.mask = np.asarray(mask, dtype=bool)
        self.df = self.graph.binary().T @ self.mask.astype(np.float64)

    def narrowed(self, rows: np.ndarray) -> CommunityView:
        """The same caller's view over only these of their rows (a mask over the graph's)."""
        view = copy.copy(self)
        view._see(self.mask & rows)
        return view

    @property
    def available(self) -> bool:
        return self.graph is not None

    def communities(self) -> list[Community]:
        """Every community with a visible chunk: most visible chunks first, then by id."""
        if self.graph is None:
            return []
        held = self.graph.communities
        assert held is not None
        chunk = np.asarray(held.chunk)
        centrality = np.asarray(held.centrality)
        rows = np.flatnonzero(self.mask & (chunk >= 0))
        # rows by community, most central first (ties by row)
        order = rows[np.lexsort((rows, -centrality[rows], chunk[rows]))]
        found: list[Community] = []
        starts: list[int] = (
            np.flatnonzero(np.r_[True, np.diff(chunk[order]) != 0]).tolist() if len(order) else []
        )
        bounds = [*starts, len(order)]
        for start, end in zip(bounds[:-1], bounds[1:], strict=True):
            members = order[start:end]
            cid = int(chunk[members[0]])
            found.append(Community(cid, members.tolist(), self._entities(cid)))
        found.sort(key=lambda c: (-len(c.rows), c.id))
        return found

    def _entities(self, community: int) -> list[str]:
        assert self.graph is not None
        names = self.graph.names()
        assert self.graph.communities is not None
        members = np.flatnonzero((np.asarray(self.graph.communities.entity) == community)
                                 & (self.df > 0))  # fmt: skip
        ordered = sorted(members.tolist(), key=lambda e: (-self.df[e], names[e]))
        return [names[e] for e in ordered]

    def summarise(self, community: Community, sentences: int = 2) -> Community:
        """The community with its summary: the best sentence of each of its most central
        visible chunks, other documents before a second sentence from one already used."""
        central = community.rows[:CENTRAL_CHUNKS]
        chunks = self.reader.chunks(central)
        keys = [entity_key(n) for n in community.entities[:SUMMARY_ENTITIES]]
        picked: list[Sentence] = []
        spare: list[Sentence] = []
        used: set[str] = set()
        for row, chunk in zip(central, chunks, strict=True):
            best = best_sentence(chunk.text, keys)
            if best is None:
                continue
            target = spare if document_of(chunk) in used else picked
            target.append(Sentence(best, chunk, row))
            used.add(document_of(chunk))
        community.summary = (picked + spare)[:sentences]
        return community


def document_of(chunk: Chunk) -> str:
    """What counts as one document when a summary spreads over documents: its title (a
    corpus may keep one page in many files), else its source."""
    return chunk.title or chunk.source


def best_sentence(text: str, keys: list[str]) -> str | None:
    """The sentence naming most of the given entity keys (the earliest on a tie), skipping
    questions and fragments; None when the text has no such sentence."""
    best: tuple[int, int] | None = None
    chosen = None
    for position, sentence in enumerate(sentence_candidates(text)):
        padded = f" {entity_key(sentence)} "
        score = sum(1 for key in keys if key and f" {key} " in padded)
        if best is None or (score, -position) > best:
            best, chosen = (score, -position), sentence
    return chosen


def sentence_candidates(text: str) -> list[str]:
    """A chunk's sentences that can stand alone in a summary: not a question ("How do I
    ...?" titles of FAQ entries), a heading, a table row or a fragment; list marks dropped."""
    out = []
    for line in split_sentences(text):
        sentence = line.lstrip("-*• ").strip()
        if len(sentence.split()) < MIN_SENTENCE_WORDS or sentence.rstrip(" .").endswith("?"):
            continue
        if not sentence.startswith(("#", "|")):
            out.append(sentence)
    return out
