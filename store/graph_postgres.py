"""The entity graph of a PostgreSQL index: the same graph as store/graph_files.py's, held in
tables beside the chunks and changed in the ingest's own transaction, so a reader sees the
graph of exactly the version it reads.

    footnote_NAME_mentions   chunk -> entity edges: (row_id, key, kind, name, weight, rank),
                             one per chunk and entity key (key = store/entities.key_hash);
                             `rank` orders a chunk's entities as the pair count does; the
                             ingest deletes a chunk's rows with it (no foreign key: a chunks
                             table dropped by hand is damage the writer reports, not an error
                             of the DROP)
    footnote_NAME_entities   per key, its strongest kind and display name over all mentions
    footnote_NAME_pairs      co-occurrence counts per (lo key, hi key, access JSON)
    footnote_NAME_entity_communities   (key, community) for each entity in a community
    footnote_NAME_chunk_communities    (row_id, community, centrality) for each chunk in one

An ingest changes only what the changed documents contribute: the rows that go take their
pairs with them, the fresh rows bring theirs, and the kept rows whose title links may have
changed (a title that came or went, found by its words in the chunk's keyword terms) are
worked out again. The entities of every key touched are recomputed from the mentions. The
result equals a rebuild: every row's edges are a function of its chunk and the corpus's
titles, and every table above is a sum or a minimum over rows. Rows are read and written a
batch at a time, so no step holds the whole graph in Python objects.

The communities (store/communities.py) are a partition of the whole graph, so each ingest
computes them again from the tables it has just brought up to date, with the files backend's
algorithm and seed, and replaces both community tables in the same transaction: a reader
sees the communities of exactly the graph it reads, and the same ones the files backend
holds for the same corpus. Like the files, the tables hold no text.

A reader loads the tables once per version as the files backend's arrays (`GraphArrays`,
rows indexed by row_id), with binary COPY into numpy, never a Python object per edge.
"""

from __future__ import annotations

import json
import re
import struct
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from footnote.store.communities import (
    Communities,
    check_communities,
    community_info,
    compute_communities,
)
from footnote.store.entities import KINDS, Mention, TitleMatcher, chunk_mentions, key_hash
from footnote.store.graph_files import (
    GRAPH_FORMAT,
    PAIR_ENTITIES,
    GraphArrays,
    check_graph,
    shown_names,
)
from footnote.store.text import keyword_tokens
from footnote.store.types import Chunk, IndexCorrupt

_JOINED = re.compile("[_.]")
BATCH_ROWS = 2_000
"""Chunks whose graph rows are worked out and written at once."""
PG_GRAPH_FORMAT = GRAPH_FORMAT + "+postgresql"


@dataclass(frozen=True)
class GraphTables:
    name: str

    @property
    def mentions(self) -> str:
        return f"footnote_{self.name}_mentions"

    @property
    def entities(self) -> str:
        return f"footnote_{self.name}_entities"

    @property
    def pairs(self) -> str:
        return f"footnote_{self.name}_pairs"

    @property
    def entity_communities(self) -> str:
        return f"footnote_{self.name}_entity_communities"

    @property
    def chunk_communities(self) -> str:
        return f"footnote_{self.name}_chunk_communities"

    @property
    def all(self) -> tuple[str, ...]:
        return (self.mentions, self.entities, self.pairs, self.entity_communities,
                self.chunk_communities)  # fmt: skip


def drop_tables(conn: Any, tables: GraphTables) -> None:
    for table in tables.all:
        conn.execute(f"DROP TABLE IF EXISTS {table}")


def create_tables(conn: Any, tables: GraphTables) -> None:
    conn.execute(
        f"""CREATE TABLE {tables.mentions} (
            row_id bigint NOT NULL,
            key bigint NOT NULL,
            kind smallint NOT NULL,
            name text NOT NULL,
            weight real NOT NULL,
            rank smallint NOT NULL,
            PRIMARY KEY (row_id, key))"""
    )
    conn.execute(f"CREATE INDEX {tables.mentions}_key ON {tables.mentions} (key)")
    conn.execute(
        f"CREATE TABLE {tables.entities} (key bigint PRIMARY KEY, kind smallint NOT NULL, "
        "name text NOT NULL)"
    )
    conn.execute(
        f"CREATE TABLE {tables.pairs} (lo bigint NOT NULL, hi bigint NOT NULL, "
        "access text NOT NULL, count int NOT NULL, PRIMARY KEY (lo, hi, access))"
    )
    conn.execute(
        f"CREATE TABLE {tables.entity_communities} (key bigint PRIMARY KEY, community int NOT NULL)"
    )
    conn.execute(
        f"CREATE TABLE {tables.chunk_communities} (row_id bigint PRIMARY KEY, "
        "community int NOT NULL, centrality real NOT NULL)"
    )


def _exists(conn: Any, table: str) -> bool:
    return bool(conn.execute("SELECT to_regclass(%s) IS NOT NULL", (table,)).fetchone()[0])


def sorted_mentions(chunk: Chunk, matcher: TitleMatcher) -> list[Mention]:
    """A chunk's entities in the order the pair count takes them (titles and links first)."""
    found = chunk_mentions(chunk.title, chunk.section, chunk.text, matcher).values()
    return sorted(found, key=lambda m: (m.kind, m.key))


def access_text(chunk: Chunk) -> str:
    """A chunk's access as the pairs are keyed by (the files backend's access values)."""
    return json.dumps(chunk.access, ensure_ascii=False, sort_keys=True)


def chunk_pairs(hashes: Sequence[int]) -> Iterable[tuple[int, int]]:
    """The co-occurrence pairs one chunk counts: among its first PAIR_ENTITIES entities."""
    head = hashes[:PAIR_ENTITIES]
    for i, a in enumerate(head):
        for b in head[i + 1 :]:
            yield (min(a, b), max(a, b))


class GraphUpdate:
    """The graph's part of one ingest transaction (PostgresWriter.publish calls it):
    `begin` before the rows that go are deleted, `finish` once the fresh rows are in."""

    def __init__(self, conn: Any, tables: GraphTables, chunks: str) -> None:
        self.conn = conn
        self.tables = tables
        self.chunks = chunks
        self.rebuild = False
        self.old_titles: set[str] = set()
        self.before = 0

    def begin(self, gone: str, params: Any) -> None:
        """Tables made when missing (an index from before the graph: built in full); the
        pairs of the rows matching `gone` (a SQL condition on the chunks) subtracted."""
        conn, t = self.conn, self.tables
        if not all(_exists(conn, table) for table in t.all):
            drop_tables(conn, t)
            create_tables(conn, t)
            self.rebuild = True
        self.old_titles = self._titles()
        self._scratch()
        if not self.rebuild:
            rows = conn.execute(f"SELECT row_id FROM {self.chunks} WHERE {gone}", params)
            self._forget([int(r[0]) for r in rows.fetchall()])
        row = conn.execute(f"SELECT coalesce(max(row_id), 0) FROM {self.chunks}").fetchone()
        self.before = int(row[0])

    def finish(self) -> dict[str, Any]:
        """Edges for the fresh rows (above the row ids `begin` saw) and for kept rows whose
        title links may have changed; pairs and entities brought up to date; returns the
        manifest's `graph` entry."""
        conn, t = self.conn, self.tables
        titles = self._titles()
        matcher = TitleMatcher(titles)
        if self.rebuild:
            redo = self._row_ids(f"row_id <= {self.before}", {})
        else:
            redo = self._relinked(TitleMatcher(self.old_titles), matcher)
            self._forget(redo)
        fresh = self._row_ids(f"row_id > {self.before}", {})
        for start in range(0, len(redo) + len(fresh), BATCH_ROWS):
            rows = (redo + fresh)[start : start + BATCH_ROWS]
            self._add(rows, matcher)
        conn.execute(
            f"INSERT INTO {t.pairs} (lo, hi, access, count) "
            "SELECT lo, hi, access, sum(n) FROM graph_pair_delta GROUP BY lo, hi, access "
            "ON CONFLICT (lo, hi, access) DO UPDATE SET count = "
            f"{t.pairs}.count + excluded.count"
        )
        conn.execute(f"DELETE FROM {t.pairs} WHERE count <= 0")
        conn.execute(f"DELETE FROM {t.entities} WHERE key IN (SELECT key FROM graph_touched)")
        conn.execute(
            f"INSERT INTO {t.entities} (key, kind, name) "
            f"SELECT DISTINCT ON (key) key, kind, name FROM {t.mentions} "
            "WHERE key IN (SELECT DISTINCT key FROM graph_touched) "
            'ORDER BY key, kind, name COLLATE "C"'
        )
        conn.execute("DROP TABLE graph_pair_delta")
        conn.execute("DROP TABLE graph_touched")
        entry = self.entry()
        entry["communities"] = self._communities(entry)
        return entry

    def entry(self) -> dict[str, Any]:
        t = self.tables
        row = self.conn.execute(
            f"SELECT (SELECT count(*) FROM {t.entities}), (SELECT count(*) FROM {t.mentions}), "
            f"(SELECT count(*) FROM {t.pairs}), (SELECT count(DISTINCT access) FROM {t.pairs})"
        ).fetchone()
        entities, mentions, pairs, access = (int(x) for x in row)
        return {"format": PG_GRAPH_FORMAT, "entities": entities, "mentions": mentions,
                "pairs": pairs, "access_values": access}  # fmt: skip

    def _communities(self, entry: dict[str, Any]) -> int:
        """The communities of the graph as the tables now hold it, computed as the files
        backend computes them, written over the previous ones; returns how many."""
        conn, t = self.conn, self.tables
        arrays, rows, _ = read_arrays(conn, t, self.chunks, entry)
        chunks = int(conn.execute(f"SELECT count(*) FROM {self.chunks}").fetchone()[0])
        found = compute_communities(arrays, rows, chunks)
        conn.execute(f"DELETE FROM {t.entity_communities}")
        conn.execute(f"DELETE FROM {t.chunk_communities}")
        keys = arrays["entities.keys"]
        members = np.flatnonzero(found.entity >= 0)
        with conn.cursor().copy(f"COPY {t.entity_communities} (key, community) FROM STDIN") as cp:
            for entity in members.tolist():
                cp.write_row((int(keys[entity]), int(found.entity[entity])))
        placed = np.flatnonzero(found.chunk >= 0)
        columns = "row_id, community, centrality"
        with conn.cursor().copy(f"COPY {t.chunk_communities} ({columns}) FROM STDIN") as cp:
            for row in placed.tolist():
                cp.write_row((row, int(found.chunk[row]), float(found.centrality[row])))
        return found.count

    def _scratch(self) -> None:
        self.conn.execute(
            "CREATE TEMP TABLE graph_pair_delta (lo bigint, hi bigint, access text, n int) "
            "ON COMMIT DROP"
        )
        self.conn.execute("CREATE TEMP TABLE graph_touched (key bigint) ON COMMIT DROP")

    def _titles(self) -> set[str]:
        rows = self.conn.execute(
            f"SELECT DISTINCT doc->>'title' FROM {self.chunks} WHERE doc->>'title' <> ''"
        ).fetchall()
        return {str(r[0]) for r in rows if r[0]}

    def _row_ids(self, condition: str, params: Any) -> list[int]:
        rows = self.conn.execute(
            f"SELECT row_id FROM {self.chunks} WHERE {condition} ORDER BY row_id", params
        ).fetchall()
        return [int(r[0]) for r in rows]

    def _relinked(self, old: TitleMatcher, new: TitleMatcher) -> list[int]:
        """Kept rows whose title links may differ under the new titles: those holding every
        keyword term of a title form that came, went or now names another title."""
        changed = [w for w in old.names.keys() | new.names.keys()
                   if old.names.get(w) != new.names.get(w)]  # fmt: skip
        found: set[int] = set()
        for words in changed:
            # a dotted or underscored name's parts are always among the terms, it may not be
            terms = sorted({t for w in words for t in keyword_tokens(w) if not _JOINED.search(t)})
            condition = "terms @> %(t)s::text[]" if terms else "TRUE"
            found.update(self._row_ids(f"row_id <= {self.before} AND {condition}", {"t": terms}))
            if not terms:
                break  # every kept row is a candidate already
        return sorted(found)

    def _forget(self, rows: list[int]) -> None:
        """Take these rows' pairs off the counts and their edges out (the chunks stay)."""
        t = self.tables
        for start in range(0, len(rows), BATCH_ROWS):
            batch = rows[start : start + BATCH_ROWS]
            found = self.conn.execute(
                f"SELECT c.row_id, c.doc->'access', "
                f"array_agg(m.key ORDER BY m.rank) FILTER (WHERE m.rank < {PAIR_ENTITIES}), "
                "array_agg(m.key) "
                f"FROM {self.chunks} c JOIN {t.mentions} m ON m.row_id = c.row_id "
                "WHERE c.row_id = ANY(%s) GROUP BY c.row_id",
                (batch,),
            ).fetchall()
            delta: Counter[tuple[int, int, str]] = Counter()
            touched: set[int] = set()
            for _row, access, head, keys in found:
                text = json.dumps(access, ensure_ascii=False, sort_keys=True)
                for lo, hi in chunk_pairs(head or []):
                    delta[(lo, hi, text)] -= 1
                touched.update(keys)
            self._write_delta(delta, touched)
            self.conn.execute(f"DELETE FROM {t.mentions} WHERE row_id = ANY(%s)", (batch,))

    def _add(self, rows: list[int], matcher: TitleMatcher) -> None:
        found = self.conn.execute(
            f"SELECT row_id, doc FROM {self.chunks} WHERE row_id = ANY(%s)", (rows,)
        ).fetchall()
        delta: Counter[tuple[int, int, str]] = Counter()
        touched: set[int] = set()
        columns = "row_id, key, kind, name, weight, rank"
        with self.conn.cursor().copy(f"COPY {self.tables.mentions} ({columns}) FROM STDIN") as cp:
            for row, doc in found:
                chunk = Chunk.from_dict(doc)
                mentions = sorted_mentions(chunk, matcher)
                hashes = [key_hash(m.key) for m in mentions]
                for rank, (m, h) in enumerate(zip(mentions, hashes, strict=True)):
                    cp.write_row((row, h, m.kind, m.name, m.weight, rank))
                access = access_text(chunk)
                for lo, hi in chunk_pairs(hashes):
                    delta[(lo, hi, access)] += 1
                touched.update(hashes)
        self._write_delta(delta, touched)

    def _write_delta(self, delta: Counter[tuple[int, int, str]], touched: set[int]) -> None:
        with self.conn.cursor().copy("COPY graph_pair_delta (lo, hi, access, n) FROM STDIN") as cp:
            for (lo, hi, access), n in delta.items():
                if n:
                    cp.write_row((lo, hi, access, n))
        with self.conn.cursor().copy("COPY graph_touched (key) FROM STDIN") as cp:
            for key in touched:
                cp.write_row((key,))


# --- reading ------------------------------------------------------------------------------

_HEADER = b"PGCOPY\n\xff\r\n\x00"


def copy_fixed(
    conn: Any, sql: str, params: Any, fields: Sequence[tuple[str, str]], count: int | None = None
) -> np.ndarray:
    """The rows of a query whose columns are all fixed-width and NOT NULL, as a numpy
    structured array, through binary COPY parsed a block at a time (no Python object per
    row); a stream that is not `count` rows of `fields` is damage (ValueError)."""
    layout = [("n", ">i2")]
    for name, dtype in fields:
        layout += [(f"{name}_len", ">i4"), (name, dtype)]
    record = np.dtype(layout)
    parts: list[np.ndarray] = []
    held = bytearray()
    started = False
    with conn.cursor().copy(f"COPY ({sql}) TO STDOUT (FORMAT binary)", params) as cp:
        for block in cp:
            held += block
            if not started:
                if len(held) < 19:
                    continue
                if bytes(held[:11]) != _HEADER:
                    raise ValueError("not a binary COPY stream")
                extension = struct.unpack(">i", bytes(held[15:19]))[0]
                del held[: 19 + extension]
                started = True
            whole = len(held) // record.itemsize
            if whole:
                size = whole * record.itemsize
                parts.append(np.frombuffer(bytes(held[:size]), dtype=record))
                del held[:size]
    out = np.concatenate(parts) if parts else np.zeros(0, dtype=record)
    if bytes(held) != b"\xff\xff" or (count is not None and len(out) != count):
        raise ValueError(f"expected {count} rows, found another number")
    if len(out) and (out["n"] != len(fields)).any():
        raise ValueError("a row with another number of columns")
    return out


@dataclass
class PgGraph(GraphArrays):
    """A PostgreSQL index's graph, loaded: the files backend's arrays over row ids (a row id
    that is no chunk of the version has no edges and is never in a mask)."""

    visible_rows: Callable[[Any], np.ndarray] | None = field(default=None, repr=False)
    _masks: dict[str, np.ndarray] = field(default_factory=dict, repr=False)

    def names(self) -> list[str]:
        assert self._names is not None
        return self._names

    def access_values(self) -> list[Any]:
        assert self._access is not None
        return self._access

    def row_mask(self, selection: Any) -> np.ndarray:
        """The rows a reader's selection (its SQL condition) passes, as a mask over row ids;
        the last few are kept (a caller's repeat queries reuse them)."""
        key = json.dumps(selection, sort_keys=True, default=str)
        with self._lock:
            held = self._masks.get(key)
        if held is None:
            assert self.visible_rows is not None
            held = np.zeros(self.rows, dtype=bool)
            ids = self.visible_rows(selection)
            held[ids[ids < self.rows]] = True
            with self._lock:
                self._masks[key] = held
                while len(self._masks) > 8:
                    self._masks.pop(next(iter(self._masks)))
        return held


def load_graph(
    conn: Any, tables: GraphTables, chunks: str, entry: Any,
    visible_rows: Callable[[Any], np.ndarray],
) -> PgGraph:  # fmt: skip
    """The graph tables as arrays, checked as the files backend checks its graph files:
    counts that differ from the manifest's entry, an edge to an unknown entity or a row that
    is no chunk, an unknown kind or a negative weight is damage (IndexCorrupt)."""
    if not isinstance(entry, dict) or entry.get("format") != PG_GRAPH_FORMAT:
        raise IndexCorrupt(f"the manifest's graph entry is not {PG_GRAPH_FORMAT}")
    try:
        return _load(conn, tables, chunks, entry, visible_rows)
    except ValueError as exc:
        raise IndexCorrupt(f"the entity graph's tables do not hold the graph: {exc}") from exc


def _load(
    conn: Any, tables: GraphTables, chunks: str, entry: dict[str, Any],
    visible_rows: Callable[[Any], np.ndarray],
) -> PgGraph:  # fmt: skip
    arrays, rows, access = read_arrays(conn, tables, chunks, entry)
    names = [str(r[0]) for r in conn.execute(f"SELECT name FROM {tables.entities} ORDER BY key")]
    if len(names) != entry["entities"]:
        raise ValueError(f"{len(names)} entity names for {entry['entities']} entities")
    names = shown_names(names, arrays, tables.entities)
    communities = None
    if "communities" in entry:  # an index published before communities has none
        communities = _load_communities(conn, tables, arrays["entities.keys"], rows, entry)
    return PgGraph(directory=None, rows=rows, arrays=arrays, communities=communities,  # type: ignore[arg-type]
                   _names=names, _access=access, visible_rows=visible_rows)  # fmt: skip


def read_arrays(
    conn: Any, tables: GraphTables, chunks: str, entry: dict[str, Any]
) -> tuple[dict[str, np.ndarray], int, list[Any]]:
    """The graph tables as store/graph_files.py's arrays over row ids, checked as the files
    backend checks its own; with the number of rows (the highest row id + 1) and the access
    values `pairs.access` indexes."""
    t = tables
    entities, mentions, pairs = (entry.get(k) for k in ("entities", "mentions", "pairs"))
    if not all(isinstance(n, int) and n >= 0 for n in (entities, mentions, pairs)):
        raise ValueError("the manifest's graph counts are not counts")
    assert isinstance(entities, int) and isinstance(mentions, int) and isinstance(pairs, int)
    rows = int(conn.execute(f"SELECT coalesce(max(row_id), 0) + 1 FROM {chunks}").fetchone()[0])
    ent = copy_fixed(conn, f"SELECT key, kind FROM {t.entities} ORDER BY key", None,
                     [("key", ">i8"), ("kind", ">i2")], entities)  # fmt: skip
    keys = ent["key"].astype(np.uint64)
    if entities and (ent["kind"].min() < 0 or ent["kind"].max() >= len(KINDS)):
        raise ValueError("an entity of an unknown kind")  # before the cast to int8 wraps it
    edges = copy_fixed(
        conn, f"SELECT row_id, key, weight FROM {t.mentions} ORDER BY row_id, key", None,
        [("row", ">i8"), ("key", ">i8"), ("weight", ">f4")], mentions,
    )  # fmt: skip
    edge_rows = edges["row"].astype(np.int64)
    if mentions and (edge_rows.min() < 0 or edge_rows.max() >= rows):
        raise ValueError("an edge from a row that is no chunk")
    entity = _positions(keys, edges["key"].astype(np.uint64), "an edge to an unknown entity")
    indptr = np.zeros(rows + 1, dtype=np.int64)
    indptr[1:] = np.cumsum(np.bincount(edge_rows, minlength=rows))
    access = [str(r[0]) for r in conn.execute(
        f'SELECT DISTINCT access COLLATE "C" AS a FROM {t.pairs} ORDER BY a')]  # fmt: skip
    found = copy_fixed(
        conn,
        f'SELECT lo, hi, (dense_rank() OVER (ORDER BY access COLLATE "C") - 1)::int, count '
        f'FROM {t.pairs} ORDER BY lo, hi, access COLLATE "C"', None,
        [("lo", ">i8"), ("hi", ">i8"), ("access", ">i4"), ("count", ">i4")], pairs,
    )  # fmt: skip
    arrays: dict[str, np.ndarray] = {
        "entities.keys": keys,
        "entities.kind": ent["kind"].astype(np.int8),
        "mentions.indptr": indptr,
        "mentions.entity": entity.astype(np.int32),
        "mentions.weight": edges["weight"].astype(np.float32),
        "pairs.left": _positions(
            keys, found["lo"].astype(np.uint64), "a pair of unknown entities"
        ).astype(np.int32),  # fmt: skip
        "pairs.right": _positions(
            keys, found["hi"].astype(np.uint64), "a pair of unknown entities"
        ).astype(np.int32),  # fmt: skip
        "pairs.access": found["access"].astype(np.int32),
        "pairs.count": found["count"].astype(np.int32),
    }
    check_graph(arrays, rows, {**entry, "access_values": len(access)})
    return arrays, rows, [json.loads(a) for a in access]


def _load_communities(
    conn: Any, tables: GraphTables, keys: np.ndarray, rows: int, entry: dict[str, Any]
) -> Communities:
    """The community tables as the files backend's community arrays (-1 where an entity or
    a row is in none), checked as it checks its files."""
    count = entry["communities"]
    if not isinstance(count, int) or isinstance(count, bool) or count < 0:
        raise ValueError("the manifest's graph entry does not count its communities")
    members = copy_fixed(
        conn, f"SELECT key, community FROM {tables.entity_communities} ORDER BY key", None,
        [("key", ">i8"), ("community", ">i4")],
    )  # fmt: skip
    entity = np.full(len(keys), -1, dtype=np.int32)
    entity[_positions(keys, members["key"].astype(np.uint64), "a community of an unknown entity")
           ] = members["community"]  # fmt: skip
    placed = copy_fixed(
        conn,
        f"SELECT row_id, community, centrality FROM {tables.chunk_communities} ORDER BY row_id",
        None, [("row", ">i8"), ("community", ">i4"), ("centrality", ">f4")],
    )  # fmt: skip
    at = placed["row"].astype(np.int64)
    if len(at) and (at.min() < 0 or at.max() >= rows):
        raise ValueError("a community of a row that is no chunk")
    chunk = np.full(rows, -1, dtype=np.int32)
    chunk[at] = placed["community"]
    centrality = np.zeros(rows, dtype=np.float32)
    centrality[at] = placed["centrality"]
    found = Communities(entity, chunk, centrality, community_info(count))
    held_in = {"entity": tables.entity_communities, "chunk": tables.chunk_communities,
               "centrality": tables.chunk_communities}  # fmt: skip
    return check_communities(found, held_in)


def _positions(keys: np.ndarray, wanted: np.ndarray, what: str) -> np.ndarray:
    at = np.searchsorted(keys, wanted)
    if len(wanted) and (at.max() >= len(keys) or (keys[np.minimum(at, len(keys) - 1)] != wanted
                                                  ).any()):  # fmt: skip
        raise ValueError(what)
    return at
