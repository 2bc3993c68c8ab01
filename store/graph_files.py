"""The entity graph of a files-backend version: chunks, documents and entities as raw arrays
beside the chunks, listed in the manifest with checksums like every other part.

    graph/entities.keys.npy      uint64, sorted: each entity's key hash (store/entities.py);
                                 entity id = position, so a question's entities are found by
                                 binary search without reading any name
    graph/entities.kind.npy      int8: the strongest kind the entity was found as
    graph/entities.names.json    display names, in id order (read only to show the graph)
    graph/mentions.*.npy         chunk -> entity edges, CSR by chunk row: `indptr` (rows + 1),
                                 `entity` (int32) and `weight` (float32, by kind)
    graph/pairs.*.npy            entity <-> entity co-occurrence counts, one row per pair and
                                 access value (`left` < `right`, `access`, `count`), so a
                                 query counts only the co-occurrences its caller may read
    graph/access.values.json     the distinct chunk access values `pairs.access` indexes

A document is the set of its chunks and is named by its title entity, which every chunk of
it carries; a chunk naming another document's title carries that entity too (a `link`), so
title links are chunk -> title entity -> the titled document's chunks.

The graph is a function of the version's chunks only. The writer builds it in one pass over
the chunk database it has just written, a batch of rows at a time, holding numpy arrays (one
entry per edge) and one dictionary entry per distinct entity, never a Python object per
edge; so `add`, `remove`, `sync` and re-ingest give the graph a rebuild would.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from footnote.store.chunkdb import ChunkTable
from footnote.store.communities import PARTS as COMMUNITY_PARTS
from footnote.store.communities import Communities, build_communities, load_communities
from footnote.store.entities import (
    KINDS,
    Mention,
    TitleMatcher,
    chunk_mentions,
    key_hash,
    key_words,
)
from footnote.store.mention_cache import MentionCache, corpus_digest, decode, entry_key
from footnote.store.types import Chunk

if TYPE_CHECKING:
    from scipy.sparse import csr_matrix

GRAPH_FORMAT = "footnote-graph-v1"
GRAPH_ENV = "FOOTNOTE_GRAPH"
"""Set to 0 to build versions without a graph (to measure what the graph costs)."""
ARRAYS = {
    "entities.keys": np.uint64,
    "entities.kind": np.int8,
    "mentions.indptr": np.int64,
    "mentions.entity": np.int32,
    "mentions.weight": np.float32,
    "pairs.left": np.int32,
    "pairs.right": np.int32,
    "pairs.access": np.int32,
    "pairs.count": np.int32,
}
JSON_FILES = ("entities.names.json", "access.values.json")
PARTS = (
    tuple(f"graph/{name}.npy" for name in ARRAYS)
    + tuple(f"graph/{n}" for n in JSON_FILES)
    + COMMUNITY_PARTS
)


def required_parts(entry: Any) -> tuple[str, ...]:
    """The graph files a version's manifest must list: the community files only where its
    graph entry counts communities (versions built before them have none)."""
    has_communities = isinstance(entry, dict) and "communities" in entry
    return PARTS if has_communities else tuple(p for p in PARTS if p not in COMMUNITY_PARTS)


VISIBLE_CACHE = 8
"""Masks whose per-entity visible counts a loaded graph keeps."""
PAIR_ENTITIES = 8
"""Co-occurrence pairs are counted among a chunk's first PAIR_ENTITIES entities (titles and
links first): at most 28 pairs per chunk, so the pair list stays linear in the corpus."""


def graph_enabled(environ: dict[str, str]) -> bool:
    return environ.get(GRAPH_ENV, "1").strip() not in ("0", "false", "no", "off")


class GraphBuilder:
    """Collects the corpus's titles while the writer streams chunks in, then builds the
    graph from the finished chunk database (`finish`)."""

    def __init__(self, mention_cache: Path | None = None) -> None:
        self.titles: set[str] = set()
        self.mention_cache = mention_cache
        """Where chunks' mentions are kept between publishes (store/mention_cache.py); None:
        every chunk's are found again."""

    def add(self, chunks: Iterable[Chunk]) -> None:
        self.titles.update(c.title for c in chunks if c.title)

    def finish(self, directory: Path, table: ChunkTable, batch_rows: int) -> dict[str, Any]:
        """Write graph/ into the staging folder; returns the manifest's `graph` entry."""
        matcher = TitleMatcher(self.titles)
        corpus = corpus_digest(self.titles)
        cache = MentionCache(self.mention_cache) if self.mention_cache is not None else None
        try:
            entry = self._build(directory, table, batch_rows, matcher, corpus, cache)
        except BaseException:
            if cache is not None:
                cache.close(keep=False)
            raise
        if cache is not None:
            cache.close(keep=True)
        return entry

    def _build(
        self,
        directory: Path,
        table: ChunkTable,
        batch_rows: int,
        matcher: TitleMatcher,
        corpus: bytes,
        cache: MentionCache | None,
    ) -> dict[str, Any]:
        entities = EntitySpool(directory.parent / ".graph-entities.sqlite")
        access_ids: dict[str, int] = {}
        hashes: list[np.ndarray] = []  # one array per batch, never one per chunk or edge
        weights: list[np.ndarray] = []
        counts: list[np.ndarray] = []
        pairs = PairCounts()
        rows = len(table)
        for start in range(0, rows, batch_rows):
            batch = table.many(range(start, min(start + batch_rows, rows)))
            batch_hashes: list[int] = []
            batch_weights: list[float] = []
            batch_counts: list[int] = []
            batch_pairs: list[tuple[int, int, int]] = []
            best: dict[int, tuple[int, str]] = {}  # this batch's: key hash -> (kind, name)
            mentions = _batch_mentions(batch, matcher, corpus, cache)
            for chunk, found in zip(batch, mentions, strict=True):
                row_hashes = [key_hash(m.key) for m in found]
                for mention, h in zip(found, row_hashes, strict=True):
                    held = best.get(h)
                    if held is None or (mention.kind, mention.name) < held:
                        best[h] = (mention.kind, mention.name)
                batch_hashes.extend(row_hashes)
                batch_weights.extend(m.weight for m in found)
                batch_counts.append(len(found))
                access = json.dumps(chunk.access, ensure_ascii=False, sort_keys=True)
                acc = access_ids.setdefault(access, len(access_ids))
                batch_pairs.extend(_pairs(row_hashes[:PAIR_ENTITIES], acc))
            hashes.append(np.asarray(batch_hashes, dtype=np.uint64))
            weights.append(np.asarray(batch_weights, dtype=np.float32))
            counts.append(np.asarray(batch_counts, dtype=np.int64))
            pairs.add(batch_pairs)
            entities.add(best)
        pairs_table = pairs.table()
        keys, kinds = entities.arrays()
        ordered_access = sorted(access_ids)
        remap = np.zeros(len(access_ids), dtype=np.int32)
        for new, value in enumerate(ordered_access):
            remap[access_ids[value]] = new
        arrays = _mention_arrays(keys, hashes, weights, counts, rows)
        arrays |= _pair_arrays(keys, pairs_table, remap)
        arrays["entities.keys"] = keys
        arrays["entities.kind"] = kinds
        directory.mkdir()
        for name, dtype in ARRAYS.items():
            np.save(directory / f"{name}.npy", np.asarray(arrays[name], dtype=dtype),
                    allow_pickle=False)  # fmt: skip
        entities.write_names(directory / "entities.names.json")
        entities.close()
        (directory / "access.values.json").write_text(
            "[" + ",".join(ordered_access) + "]", encoding="utf-8"
        )
        communities = build_communities(directory, arrays, rows)
        return {
            "format": GRAPH_FORMAT,
            "communities": communities["communities"],
            "entities": len(keys),
            "mentions": int(arrays["mentions.indptr"][-1]),
            "pairs": len(arrays["pairs.left"]),
            "access_values": len(ordered_access),
        }


def _batch_mentions(
    batch: Sequence[Chunk], matcher: TitleMatcher, corpus: bytes, cache: MentionCache | None
) -> list[list[Mention]]:
    """Each chunk's mentions, sorted by (kind, key): from the cache where it holds a sound
    entry for the chunk, found from the text (and cached) where not."""
    keys = [entry_key(corpus, chunk) for chunk in batch] if cache is not None else []
    held = cache.get(keys) if cache is not None else {}
    out: list[list[Mention]] = []
    for i, chunk in enumerate(batch):
        payload = held.get(keys[i]) if cache is not None else None
        found = decode(payload, chunk) if payload is not None else None
        if found is None:
            found = sorted(
                chunk_mentions(chunk.title, chunk.section, chunk.text, matcher).values(),
                key=lambda m: (m.kind, m.key),
            )
            if cache is not None:
                cache.put(keys[i], found)
        out.append(found)
    return out


def _pairs(hashes: Sequence[int], access: int) -> Iterable[tuple[int, int, int]]:
    for i, a in enumerate(hashes):
        for b in hashes[i + 1 :]:
            yield (min(a, b), max(a, b), access)


class EntitySpool:
    """Each entity's strongest (kind, name) so far, in a scratch SQLite table rather than a
    Python dict: a corpus of millions of distinct names is held on disk, and read back in
    key order a block at a time. SQLite's text order (bytes of UTF-8) is Python's."""

    def __init__(self, path: Path) -> None:
        import sqlite3

        self.path = path
        self.db = sqlite3.connect(path)
        self.db.execute("PRAGMA journal_mode = OFF")
        self.db.execute("PRAGMA synchronous = OFF")
        self.db.execute("CREATE TABLE e (key INTEGER PRIMARY KEY, kind INTEGER, name TEXT)")

    def add(self, best: dict[int, tuple[int, str]]) -> None:
        self.db.executemany(
            "INSERT INTO e VALUES (?, ?, ?) ON CONFLICT (key) DO UPDATE SET "
            "kind = excluded.kind, name = excluded.name "
            "WHERE (excluded.kind, excluded.name) < (e.kind, e.name)",
            ((key, kind, name) for key, (kind, name) in best.items()),
        )

    def arrays(self) -> tuple[np.ndarray, np.ndarray]:
        """Keys (sorted; key hashes are below 2**63, so signed order is unsigned order) and
        kinds, as arrays."""
        count = int(self.db.execute("SELECT count(*) FROM e").fetchone()[0])
        keys = np.fromiter((r[0] for r in self.db.execute("SELECT key FROM e ORDER BY key")),
                           dtype=np.int64, count=count).astype(np.uint64)  # fmt: skip
        kinds = np.fromiter((r[0] for r in self.db.execute("SELECT kind FROM e ORDER BY key")),
                            dtype=np.int8, count=count)  # fmt: skip
        return keys, kinds

    def write_names(self, path: Path) -> None:
        """The names in key order as one JSON list, written as they are read."""
        with path.open("w", encoding="utf-8") as out:
            out.write("[")
            for i, (name,) in enumerate(self.db.execute("SELECT name FROM e ORDER BY key")):
                out.write(("," if i else "") + json.dumps(name, ensure_ascii=False))
            out.write("]")

    def close(self) -> None:
        self.db.close()
        self.path.unlink(missing_ok=True)


PAIR_MERGE_ROWS = 1 << 18
"""Pair rows gathered before they are counted together (a merge sorts everything held)."""


class PairCounts:
    """The running (left, right, access, count) table: batches are gathered and merged once
    they outgrow what is held, so the sorting stays O(P log P) overall, not per batch."""

    def __init__(self) -> None:
        self.held = np.zeros((0, 4), dtype=np.uint64)
        self.pending: list[np.ndarray] = []
        self.pending_rows = 0

    def add(self, new: list[tuple[int, int, int]]) -> None:
        if not new:
            return
        batch = np.asarray(new, dtype=np.uint64)
        self.pending.append(np.column_stack([batch, np.ones(len(batch), dtype=np.uint64)]))
        self.pending_rows += len(batch)
        if self.pending_rows >= max(PAIR_MERGE_ROWS, len(self.held) // 4):
            self._merge()

    def table(self) -> np.ndarray:
        self._merge()
        return self.held

    def _merge(self) -> None:
        if not self.pending:
            return
        table = np.concatenate([self.held, *self.pending])
        self.pending, self.pending_rows = [], 0
        unique, inverse = np.unique(table[:, :3], axis=0, return_inverse=True)
        summed = np.bincount(inverse.ravel(), weights=table[:, 3].astype(np.float64))
        self.held = np.column_stack([unique, summed.astype(np.uint64)])


def _mention_arrays(
    keys: np.ndarray,
    hashes: list[np.ndarray],
    weights: list[np.ndarray],
    counts: list[np.ndarray],
    rows: int,
) -> dict[str, np.ndarray]:
    per_row = np.concatenate(counts) if counts else np.zeros(0, dtype=np.int64)
    indptr = np.zeros(rows + 1, dtype=np.int64)
    indptr[1:] = np.cumsum(per_row)
    flat = np.concatenate(hashes) if hashes else np.zeros(0, dtype=np.uint64)
    entity = np.searchsorted(keys, flat).astype(np.int32)
    weight = np.concatenate(weights) if weights else np.zeros(0, dtype=np.float32)
    # within a row, edges sorted by entity id: one canonical layout whatever the input order
    row_of = np.repeat(np.arange(rows, dtype=np.int64), per_row)
    order = np.lexsort((entity, row_of))
    return {"mentions.indptr": indptr, "mentions.entity": entity[order],
            "mentions.weight": weight[order]}  # fmt: skip


def _pair_arrays(keys: np.ndarray, pairs: np.ndarray, remap: np.ndarray) -> dict[str, np.ndarray]:
    left = np.searchsorted(keys, pairs[:, 0]).astype(np.int32)
    right = np.searchsorted(keys, pairs[:, 1]).astype(np.int32)
    access = remap[pairs[:, 2].astype(np.int64)] if len(pairs) else np.zeros(0, np.int32)
    order = np.lexsort((access, right, left))
    return {
        "pairs.left": left[order],
        "pairs.right": right[order],
        "pairs.access": access[order],
        "pairs.count": pairs[:, 3][order].astype(np.int32),
    }


@dataclass
class GraphArrays:
    """A loaded graph, memory-mapped; checked once at load (`load_graph`)."""

    directory: Path
    rows: int
    arrays: dict[str, np.ndarray]
    communities: Communities | None = None
    """None for a version built before communities existed: it is read without them (the
    global route then groups hits by document) until the next publish adds them."""
    _names: list[str] | None = None
    _access: list[Any] | None = None
    _matrix: Any = field(default=None, repr=False)
    _binary: Any = field(default=None, repr=False)
    _by_entity: Any = field(default=None, repr=False)
    _visible: dict[Any, tuple[np.ndarray, np.ndarray, np.ndarray]] = field(
        default_factory=dict, repr=False
    )
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @property
    def entities(self) -> int:
        return len(self.arrays["entities.keys"])

    def lookup(self, hashes: Sequence[int]) -> np.ndarray:
        """Entity ids of these key hashes; -1 where the graph has no such entity."""
        keys = self.arrays["entities.keys"]
        wanted = np.asarray(hashes, dtype=np.uint64)
        at = np.searchsorted(keys, wanted)
        inside = at < len(keys)
        hit = np.zeros(len(wanted), dtype=bool)
        hit[inside] = keys[at[inside]] == wanted[inside]
        return np.where(hit, at, -1).astype(np.int64)

    def matrix(self, power: float = 1.0) -> csr_matrix:
        """The chunk x entity mention matrix, its weights raised to `power` (built once per
        loaded version and power)."""
        if self._matrix is None or self._matrix[0] != power:
            from scipy.sparse import csr_matrix

            a = self.arrays
            weights = np.asarray(a["mentions.weight"], dtype=np.float64) ** power
            matrix = csr_matrix(
                (weights, np.asarray(a["mentions.entity"]), np.asarray(a["mentions.indptr"])),
                shape=(self.rows, self.entities),
            )
            self._matrix = (power, matrix)
        return self._matrix[1]

    def binary(self) -> csr_matrix:
        """The mention matrix with every edge weighing one (counts chunks per entity)."""
        if self._binary is None:
            from scipy.sparse import csr_matrix

            a = self.arrays
            ones = np.ones(len(a["mentions.entity"]), dtype=np.float64)
            self._binary = csr_matrix(
                (ones, np.asarray(a["mentions.entity"]), np.asarray(a["mentions.indptr"])),
                shape=(self.rows, self.entities),
            )
        return self._binary

    def by_entity(self) -> csr_matrix:
        """Entity x chunk, every edge one: the chunks that mention an entity, in row order."""
        if self._by_entity is None:
            self._by_entity = self.binary().T.tocsr()
        return self._by_entity

    def visible_weights(
        self, mask: np.ndarray, power: float, hub_share: float, hub_min: int
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Per entity, over the rows `mask` sets: how many chunks mention it, the sum of
        their mention weights as `matrix(power)` weighs them, and its idf (zero for an entity
        in none of them, or in more than `hub_share` of them and more than `hub_min`). Kept
        for the last few masks: a caller's repeat queries reuse them."""
        digest = hashlib.blake2b(np.packbits(mask).tobytes(), digest_size=16).digest()
        key = (digest, power, hub_share, hub_min)
        with self._lock:
            held = self._visible.get(key)
        if held is None:
            weights = np.asarray(mask, dtype=np.float64)
            visible = float(weights.sum())
            df = self.binary().T @ weights
            idf = np.where(df > 0, np.log1p(visible / np.maximum(df, 1.0)), 0.0)
            idf[(df > hub_min) & (df > hub_share * visible)] = 0.0
            held = (df, self.matrix(power).T @ weights, idf)
            with self._lock:
                self._visible[key] = held
                while len(self._visible) > VISIBLE_CACHE:
                    self._visible.pop(next(iter(self._visible)))
        return held

    def names(self) -> list[str]:
        if self._names is None:
            names = json.loads((self.directory / "entities.names.json").read_bytes())
            if not isinstance(names, list) or len(names) != self.entities:
                raise ValueError("graph/entities.names.json does not name every entity")
            if not all(isinstance(n, str) for n in names):
                raise ValueError("graph/entities.names.json holds a name that is not a string")
            self._names = shown_names(names, self.arrays, "graph/entities.names.json")
        return self._names

    def access_values(self) -> list[Any]:
        if self._access is None:
            values = json.loads((self.directory / "access.values.json").read_bytes())
            if not isinstance(values, list):
                raise ValueError("graph/access.values.json is not a JSON list")
            self._access = values
        return self._access

    def row_mask(self, selection: Any) -> np.ndarray:
        """The rows a reader's selection passes, as a mask over the graph's rows (the files
        backend's selection is that mask already)."""
        return np.asarray(selection, dtype=bool)

    def kind(self, entity: int) -> str:
        return KINDS[int(self.arrays["entities.kind"][entity])]

    def chunk_entities(self, row: int) -> np.ndarray:
        indptr = self.arrays["mentions.indptr"]
        return np.asarray(self.arrays["mentions.entity"][indptr[row] : indptr[row + 1]])


def shown_names(names: list[str], arrays: dict[str, np.ndarray], where: str) -> list[str]:
    """The names as a caller may be shown them: each link's cut to the words of its key
    (store/entities.py `key_words`), which every chunk naming it holds. A graph built when
    links were named by the whole title they matched held a restricted document's later
    title words there; a link named by other words is damage (ValueError, naming `where`).
    Shared by both backends."""
    keys = arrays["entities.keys"]
    links = np.flatnonzero(np.asarray(arrays["entities.kind"]) == KINDS.index("link"))
    for entity in links.tolist():
        shown = key_words(names[entity], int(keys[entity]))
        if shown is None:
            raise ValueError(f"{where} names a link by words that are not its key's")
        names[entity] = shown
    return names


def load_graph(directory: Path, rows: int, entry: Any) -> GraphArrays:
    """The graph's arrays, memory-mapped and checked against each other and the manifest's
    entry: a wrong type or shape, an id out of range or offsets that do not cover the chunk
    rows is damage (ValueError)."""
    if not isinstance(entry, dict) or entry.get("format") != GRAPH_FORMAT:
        raise ValueError(f"the manifest's graph entry is not {GRAPH_FORMAT}")
    a = {name: np.load(directory / f"{name}.npy", mmap_mode="r", allow_pickle=False)
         for name in ARRAYS}  # fmt: skip
    check_graph(a, rows, entry)
    communities = None
    if "communities" in entry:
        communities = load_communities(directory, rows, int(entry["entities"]))
        if communities.count != entry["communities"]:
            raise ValueError("graph/communities.json does not match the manifest")
    return GraphArrays(directory=directory, rows=rows, arrays=a, communities=communities)


def check_graph(a: dict[str, np.ndarray], rows: int, entry: dict[str, Any]) -> None:
    """The graph's arrays checked against each other, the chunk rows and the manifest's
    counts (ValueError): shared by both backends' loaders."""
    for name, dtype in ARRAYS.items():
        if a[name].dtype != np.dtype(dtype) or a[name].ndim != 1:
            raise ValueError(f"graph/{name}.npy is not a {np.dtype(dtype)} vector")
    entities, mentions, pairs = (entry.get(k) for k in ("entities", "mentions", "pairs"))
    keys = a["entities.keys"]
    if len(keys) != entities or len(a["entities.kind"]) != entities:
        raise ValueError(f"graph/entities.* do not hold {entities} entities")
    if len(keys) > 1 and np.any(keys[1:] <= keys[:-1]):
        raise ValueError("graph/entities.keys.npy is not sorted and distinct")
    kinds = a["entities.kind"]
    if entities and (kinds.min() < 0 or kinds.max() >= len(KINDS)):
        raise ValueError("graph/entities.kind.npy names an unknown kind")
    indptr = a["mentions.indptr"]
    if indptr.shape != (rows + 1,) or indptr[0] != 0 or indptr[-1] != mentions:
        raise ValueError(f"graph/mentions.indptr.npy does not cover {rows} rows")
    if np.any(np.diff(indptr) < 0):
        raise ValueError("graph/mentions.indptr.npy is not increasing")
    for name in ("mentions.entity", "mentions.weight"):
        if len(a[name]) != mentions:
            raise ValueError(f"graph/{name}.npy does not hold {mentions} edges")
    _check_ids(a["mentions.entity"], entities, "mentions.entity")
    weight = a["mentions.weight"]
    if mentions and not (np.isfinite(weight).all() and weight.min() >= 0):
        raise ValueError("graph/mentions.weight.npy holds a negative or non-finite weight")
    for name in ("pairs.left", "pairs.right", "pairs.access", "pairs.count"):
        if len(a[name]) != pairs:
            raise ValueError(f"graph/{name}.npy does not hold {pairs} pairs")
    _check_ids(a["pairs.left"], entities, "pairs.left")
    _check_ids(a["pairs.right"], entities, "pairs.right")
    _check_ids(a["pairs.access"], entry.get("access_values"), "pairs.access")
    if pairs and a["pairs.count"].min() < 1:
        raise ValueError("graph/pairs.count.npy holds a count below one")


def _check_ids(array: np.ndarray, bound: Any, name: str) -> None:
    if not isinstance(bound, int) or (len(array) and (array.min() < 0 or array.max() >= bound)):
        raise ValueError(f"graph/{name}.npy names ids outside the graph")


def canonical(graph: GraphArrays, chunk_ids: Sequence[str]) -> dict[str, Any]:
    """The graph by chunk id and entity name, independent of row and id order: two versions
    hold the same graph when these are equal (the rebuild test compares them)."""
    names = graph.names()
    access = graph.access_values()
    a = graph.arrays
    indptr = a["mentions.indptr"]
    mentions = {}
    for row in range(graph.rows):
        edges = slice(int(indptr[row]), int(indptr[row + 1]))
        entities = a["mentions.entity"][edges].tolist()
        weights = a["mentions.weight"][edges].tolist()
        mentions[chunk_ids[row]] = sorted(
            (names[e], float(w)) for e, w in zip(entities, weights, strict=True)
        )
    pairs = sorted(
        (names[int(x)], names[int(y)], json.dumps(access[int(c)]), int(n))
        for x, y, c, n in zip(a["pairs.left"], a["pairs.right"], a["pairs.access"],
                              a["pairs.count"], strict=True)
    )  # fmt: skip
    kinds = sorted((names[i], graph.kind(i)) for i in range(graph.entities))
    return {"mentions": mentions, "pairs": pairs, "kinds": kinds}
