"""What a caller may see of the entity graph: its entities with their documents, an entity's
neighbours by co-occurrence (PMI), and the graph's figures, for `footnote graph`.

Everything is counted over the caller's visible chunks only: an entity is shown when a chunk
the caller may read mentions it, its documents are the visible ones, and a co-occurrence
counts only pairs seen in chunks whose access the caller passes (`pairs.access`). So a name,
a title or a link found only in a restricted document never appears.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from footnote.store.entities import entity_key, key_hash
from footnote.store.types import Caller, Chunk

DOCUMENT_ROWS = 200
"""Chunks read per entity to list its documents."""


def _with_access(access: Any) -> Chunk:
    """A chunk holding only this access value, for the caller's own check (`may_see`)."""
    return Chunk(id="", text="", source="", title="", section="", access=access)


class GraphView:
    """One caller's view of one loaded graph."""

    def __init__(self, reader: Any, caller: Caller) -> None:
        graph_of = getattr(reader, "graph", None)
        self.graph = graph_of() if graph_of is not None else None
        self.reader = reader
        self.caller = caller
        if self.graph is None:
            return
        self.mask = self.graph.row_mask(reader.select(caller)).astype(np.float64)
        self.df = self.graph.binary().T @ self.mask
        self.visible = float(self.mask.sum())

    def figures(self) -> dict[str, Any]:
        if self.graph is None:
            return {"graph": False}
        entry = dict(self.reader.manifest.get("graph") or {})
        return {
            "graph": True,
            "format": entry.get("format"),
            "visible_chunks": int(self.visible),
            "visible_entities": int(np.count_nonzero(self.df)),
        }

    def top(self, limit: int) -> list[dict[str, Any]]:
        """The visible entities mentioned by most visible chunks (ties by name)."""
        if self.graph is None:
            return []
        names = self.graph.names()
        shown = np.flatnonzero(self.df > 0)
        order = sorted(shown.tolist(), key=lambda e: (-self.df[e], names[e]))[:limit]
        return [self._entity(e, names) for e in order]

    def entity(self, name: str, neighbours: int = 10) -> dict[str, Any] | None:
        """One entity by name (matched by key), its visible documents and neighbours; None
        when the caller can see no chunk that mentions it."""
        if self.graph is None:
            return None
        found = int(self.graph.lookup([key_hash(entity_key(name))])[0])
        if found < 0 or self.df[found] == 0:
            return None
        names = self.graph.names()
        by_entity = self.graph.binary().T.tocsr()
        rows = by_entity.indices[by_entity.indptr[found] : by_entity.indptr[found + 1]]
        rows = [int(r) for r in rows if self.mask[r]][:DOCUMENT_ROWS]
        documents = sorted({c.source for c in self.reader.chunks(rows)})
        out = self._entity(found, names)
        out["documents"] = documents
        out["neighbours"] = self._neighbours(found, names, neighbours)
        return out

    def _entity(self, entity: int, names: list[str]) -> dict[str, Any]:
        assert self.graph is not None
        return {"name": names[entity], "kind": self.graph.kind(entity),
                "chunks": int(self.df[entity])}  # fmt: skip

    def _neighbours(self, entity: int, names: list[str], limit: int) -> list[dict[str, Any]]:
        assert self.graph is not None
        a = self.graph.arrays
        values = self.graph.access_values()
        allowed = np.array([self.caller.may_see(_with_access(v)) for v in values], dtype=np.bool_)
        left, right = np.asarray(a["pairs.left"]), np.asarray(a["pairs.right"])
        rows = np.flatnonzero((left == entity) | (right == entity))
        counts: dict[int, int] = {}
        for row in rows.tolist():
            if not allowed[int(a["pairs.access"][row])]:
                continue
            other = int(right[row] if left[row] == entity else left[row])
            if self.df[other] > 0:
                counts[other] = counts.get(other, 0) + int(a["pairs.count"][row])
        scored = [
            (math.log(n * self.visible / (self.df[entity] * self.df[o])), n, o)
            for o, n in counts.items()
        ]
        scored.sort(key=lambda item: (-item[0], -item[1], names[item[2]]))
        return [{**self._entity(o, names), "pmi": round(p, 4), "together": n}
                for p, n, o in scored[:limit]]  # fmt: skip
