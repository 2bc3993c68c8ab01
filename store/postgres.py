"""The PostgreSQL backend: pgvector for dense search, full-text search for keywords; its
writer (incremental ingest) and its reader live here.

`--index postgresql://user@host:port/db?index=NAME` names a database and an index in it
(NAME defaults to `footnote`). Each index is one table of chunks (text, JSONB metadata,
access groups, an HNSW-indexed vector and a GIN-indexed tsvector) plus a table of source
files; `footnote_indexes` holds each index's manifest and live version, and
`footnote_schema` the schema version this module migrates to.

An ingest is one transaction: chunks of changed and deleted files go, new chunks come, the
files table and the manifest row are replaced, then COMMIT. A killed ingest rolls back and
leaves the previous state; a reader's statement sees the old version or the new one.
"""

from __future__ import annotations

import atexit
import json
import os
import re
import threading
import time
from collections.abc import Iterable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import numpy as np

from footnote.store.base import STORED, FileFailure, PreviousState, remembered_settings
from footnote.store.graph_files import graph_enabled
from footnote.store.graph_postgres import (
    GraphTables,
    GraphUpdate,
    PgGraph,
    copy_fixed,
    drop_tables,
    load_graph,
)
from footnote.store.redaction import redact
from footnote.store.text import embedding_text, keyword_tokens
from footnote.store.types import (
    FORMAT_VERSION,
    REBUILD_HINT,
    Caller,
    Chunk,
    FileRecord,
    Filters,
    IndexCorrupt,
    IndexError_,
    IndexMismatch,
    IndexNotFound,
    IndexUnreachable,
    Ranked,
    access_groups,
    chunk_position,
    parse_date,
    require_date,
)

SCHEMA_VERSION = 1
TEXT_SEARCH_CONFIG = "english"
DEFAULT_INDEX_NAME = "footnote"
_NAME = re.compile(r"[a-z][a-z0-9_]{0,39}")
EF_SEARCH = 100
"""HNSW candidate list (pgvector's default is 40); raised to 2k for deeper searches."""
MAX_SCAN_TUPLES = 200_000
"""How far an iterative HNSW scan may go under a selective filter before the exact rerun."""

Where = tuple[str, dict[str, Any]]
"""A reader's selection: SQL conditions (AND-ed) and their parameters."""


class PostgresUnavailable(IndexUnreachable):
    """The database cannot be reached; the message says where and why."""


class PostgresDriverMissing(IndexError_):
    """psycopg is not installed (the `postgres` extra): exit status 2, naming the extra."""


DRIVER_MODULES = ("psycopg", "psycopg_pool")
"""What every `postgresql://` index needs: the base install leaves them to the extra."""


def require_driver(*also: str) -> None:
    """Raise PostgresDriverMissing, naming the extra and its pip command, unless psycopg, its
    pool and `also` (e.g. the LangGraph saver) can be imported: without this the first use
    fails with a bare ModuleNotFoundError deep in a command."""
    from importlib import import_module

    missing = []
    for module in (*DRIVER_MODULES, *also):
        try:
            import_module(module)
        except ImportError:
            missing.append(module)
    if missing:
        from footnote.store.extras import install_command

        raise PostgresDriverMissing(
            f"a postgresql:// database needs the footnote-rag[postgres] extra (missing: "
            f"{', '.join(missing)}): {install_command('postgres')}"
        )


CONNECT_TIMEOUT_S = 3
"""How long the first connection to a database may take before the index counts as
unreachable (psycopg's `connect_timeout`, whole seconds), unless its URL sets one."""


@dataclass(frozen=True)
class Location:
    """A parsed `postgresql://` index URL: connection string and index name."""

    conninfo: str
    name: str

    @property
    def chunks(self) -> str:
        return f"footnote_{self.name}_chunks"

    @property
    def files(self) -> str:
        return f"footnote_{self.name}_files"

    @property
    def graph(self) -> GraphTables:
        return GraphTables(self.name)


def parse_location(url: str) -> Location:
    """Split `?index=NAME` off a libpq URL; the rest goes to the driver untouched."""
    parts = urlsplit(url)
    query = parse_qsl(parts.query, keep_blank_values=True)
    names = [v for k, v in query if k == "index"]
    name = names[-1] if names else DEFAULT_INDEX_NAME
    if not _NAME.fullmatch(name):  # match() would let a trailing newline through
        raise IndexError_(  # the name itself is not echoed: `?index=x;password=PW` holds one
            f"the index name in {redact(url)} is not one: use lowercase letters, digits and "
            "_, starting with a letter (at most 40)"
        )
    rest = urlencode([(k, v) for k, v in query if k != "index"])
    return Location(conninfo=urlunsplit(parts._replace(query=rest)), name=name)


_pools: dict[str, Any] = {}
_pools_lock = threading.Lock()


def pool(conninfo: str) -> Any:
    """One connection pool per database per process, shared by ingest and every reader."""
    require_driver()
    from psycopg_pool import ConnectionPool

    with _pools_lock:
        found = _pools.get(conninfo)
        if found is None:
            _probe(conninfo)
            found = ConnectionPool(
                conninfo,
                min_size=1,
                max_size=int(os.environ.get("FOOTNOTE_PG_POOL", "8")),
                open=False,
                name="footnote",
                # No server-side prepared statements: a plan cached while the exact-search
                # fallback had index scans off would otherwise be reused by later searches.
                kwargs={"prepare_threshold": None},
            )
            try:
                found.open(wait=True, timeout=15)
            except Exception as exc:
                found.close()
                raise PostgresUnavailable(
                    f"cannot connect to PostgreSQL at {redact(conninfo)}: {redact(str(exc))}"
                ) from exc
            _pools[conninfo] = found
        return found


def _probe(conninfo: str) -> None:
    """One connection attempt, bounded by CONNECT_TIMEOUT_S, before a pool is made: a pool
    would retry for its whole open timeout, logging a warning per attempt, before failing."""
    import psycopg
    from psycopg.conninfo import conninfo_to_dict

    try:
        given = conninfo_to_dict(conninfo)
        timeout = given.get("connect_timeout", CONNECT_TIMEOUT_S)
        psycopg.connect(conninfo, connect_timeout=timeout).close()
    except psycopg.Error as exc:
        reason = next((line.strip() for line in str(exc).splitlines() if line.strip()), "")
        raise PostgresUnavailable(
            f"cannot connect to PostgreSQL at {redact(conninfo)}: {redact(reason)}"
        ) from exc


def close_pools() -> None:
    """Close every pool (at exit, so no pool thread outlives the interpreter's shutdown)."""
    with _pools_lock:
        for found in _pools.values():
            found.close()
        _pools.clear()


atexit.register(close_pools)


MIGRATIONS: dict[int, list[str]] = {
    1: [
        "CREATE EXTENSION IF NOT EXISTS vector",
        """CREATE TABLE IF NOT EXISTS footnote_indexes (
            name text PRIMARY KEY,
            version text NOT NULL,
            manifest jsonb NOT NULL,
            updated_at timestamptz NOT NULL DEFAULT now())""",
    ],
}
"""Schema changes by version; each runs once, in order, recorded in footnote_schema."""


def migrate(conn: Any) -> None:
    """Bring the shared tables to SCHEMA_VERSION; an advisory lock serialises migrators."""
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(72450001)")
        conn.execute(
            "CREATE TABLE IF NOT EXISTS footnote_schema ("
            "version int PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())"
        )
        row = conn.execute("SELECT coalesce(max(version), 0) FROM footnote_schema").fetchone()
        current = int(row[0])
        if current > SCHEMA_VERSION:
            raise IndexError_(
                f"the database has Footnote schema version {current}; this Footnote knows "
                f"{SCHEMA_VERSION}: upgrade Footnote"
            )
        for version in range(current + 1, SCHEMA_VERSION + 1):
            for statement in MIGRATIONS[version]:
                conn.execute(statement)
            conn.execute("INSERT INTO footnote_schema (version) VALUES (%s)", (version,))


def _create_index_tables(conn: Any, where: Location, dimension: int) -> None:
    conn.execute(
        f"""CREATE TABLE {where.chunks} (
            row_id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
            chunk_id text NOT NULL UNIQUE,
            source text NOT NULL,
            section text NOT NULL,
            position int NOT NULL,
            chunk_date date,
            metadata jsonb NOT NULL,
            access text[],
            doc jsonb NOT NULL,
            body text NOT NULL,
            terms text[] NOT NULL,
            tsv tsvector GENERATED ALWAYS AS (to_tsvector('{TEXT_SEARCH_CONFIG}', body)) STORED,
            embedding vector({int(dimension)}) NOT NULL)"""
    )
    conn.execute(
        f"CREATE INDEX {where.chunks}_hnsw ON {where.chunks} USING hnsw (embedding vector_ip_ops)"
    )
    conn.execute(f"CREATE INDEX {where.chunks}_tsv ON {where.chunks} USING gin (tsv)")
    conn.execute(f"CREATE INDEX {where.chunks}_terms ON {where.chunks} USING gin (terms)")
    conn.execute(f"CREATE INDEX {where.chunks}_access ON {where.chunks} USING gin (access)")
    conn.execute(f"CREATE INDEX {where.chunks}_source ON {where.chunks} (source)")
    conn.execute(f"CREATE TABLE {where.files} (source text PRIMARY KEY, record jsonb NOT NULL)")


def _table_exists(conn: Any, table: str) -> bool:
    row = conn.execute("SELECT to_regclass(%s) IS NOT NULL", (table,)).fetchone()
    return bool(row[0])


def vector_literal(vector: np.ndarray) -> str:
    return "[" + ",".join(f"{float(x):.8g}" for x in vector) + "]"


def read_manifest(conn: Any, where: Location) -> tuple[str, dict[str, Any]] | None:
    if not _table_exists(conn, "footnote_indexes"):
        return None
    row = conn.execute(
        "SELECT version, manifest FROM footnote_indexes WHERE name = %s", (where.name,)
    ).fetchone()
    if row is None or not _table_exists(conn, where.chunks):
        return None
    return str(row[0]), dict(row[1])


class PostgresWriter:
    """The write side of a PostgreSQL index (see the module docstring)."""

    def __init__(self, url: str) -> None:
        self.location = url
        self.where = parse_location(url)

    @contextmanager
    def connection(self) -> Iterator[Any]:
        with pool(self.where.conninfo).connection() as conn:
            yield conn

    def writer(self) -> AbstractContextManager[None]:
        """Nothing to hold here: `publish` serialises writers with a transaction-level
        advisory lock and rolls back an ingest that lost the race."""
        return nullcontext()

    def previous(self) -> PreviousState | None:
        """None when the index has no manifest row; a row whose tables are gone or whose
        records cannot be read raises IndexCorrupt, another format IndexMismatch."""
        where = self.where
        with self.connection() as conn:
            if not _table_exists(conn, "footnote_indexes"):
                return None
            row = conn.execute(
                "SELECT version, manifest FROM footnote_indexes WHERE name = %s", (where.name,)
            ).fetchone()
            if row is None:
                return None
            if not isinstance(row[1], dict):
                raise self._damaged("its manifest row is not a JSON object")
            version, manifest = str(row[0]), dict(row[1])
            if manifest.get("format_version") != FORMAT_VERSION:
                raise IndexMismatch(
                    f"index {redact(self.location)} has format version "
                    f"{manifest.get('format_version')!r}, this Footnote writes version "
                    f"{FORMAT_VERSION}: {REBUILD_HINT.lower()}"
                )
            for table in (where.chunks, where.files):
                if not _table_exists(conn, table):
                    raise self._damaged(f"table {table} is missing")
            rows = conn.execute(f"SELECT source, record FROM {where.files}").fetchall()
        try:
            files = {str(s): FileRecord(**r) for s, r in rows}
        except TypeError as exc:
            raise self._damaged(f"a file record cannot be read ({exc})") from exc
        return PreviousState(version=version, manifest=manifest, files=files, lookup=self._lookup)

    def remembered(self) -> dict[str, Any] | None:
        """The manifest row's sources and settings: the row outlives damaged chunk tables."""
        with self.connection() as conn:
            if not _table_exists(conn, "footnote_indexes"):
                return None
            row = conn.execute(
                "SELECT manifest FROM footnote_indexes WHERE name = %s", (self.where.name,)
            ).fetchone()
        return remembered_settings(row[0]) if row is not None and isinstance(row[0], dict) else None

    def _damaged(self, what: str) -> IndexCorrupt:
        return IndexCorrupt(
            f"index {redact(self.location)}: {what}; the index was modified or damaged. "
            f"{REBUILD_HINT}"
        )

    def _lookup(self, ids: list[str], partial: bool) -> list[tuple[Chunk, Any]] | None:
        with self.connection() as conn:
            rows = conn.execute(
                f"SELECT chunk_id, doc FROM {self.where.chunks} WHERE chunk_id = ANY(%s)",
                (ids,),
            ).fetchall()
        docs = {str(cid): doc for cid, doc in rows}
        if not partial and len(docs) < len(set(ids)):
            return None
        return [(Chunk.from_dict(docs[cid]), STORED) for cid in ids if cid in docs]

    def publish(
        self,
        *,
        entries: Iterable[tuple[Chunk, Any]],
        files: dict[str, FileRecord],
        manifest: dict[str, Any],
        embedding_dimension: int,
        on_failure: FileFailure | None = None,
    ) -> str:
        where = self.where
        entries = list(entries)  # kept rows are ids only; the fresh ones go in one transaction
        version = (
            time.strftime("v%Y%m%dT%H%M%S", time.gmtime())
            + f"-{os.getpid()}-"
            + (os.urandom(3).hex())
        )
        keep = [chunk.id for chunk, vec in entries if vec is STORED]
        fresh = [(chunk, vec) for chunk, vec in entries if vec is not STORED]
        manifest = {key: value for key, value in manifest.items() if key != "graph"}
        with self.connection() as conn:
            migrate(conn)
            with conn.transaction():
                # One ingest at a time per index; readers are never blocked.
                conn.execute("SELECT pg_advisory_xact_lock(72450002, hashtext(%s))", (where.name,))
                found = read_manifest(conn, where)
                graph = (
                    GraphUpdate(conn, where.graph, where.chunks)
                    if graph_enabled(dict(os.environ))
                    else None
                )
                same_shape = (
                    found is not None
                    and found[1].get("embedding", {}).get("dimension") == embedding_dimension
                    and found[1].get("format_version") == FORMAT_VERSION
                )
                if not same_shape:
                    if keep:
                        raise IndexError_(
                            f"index {where.name!r} changed while this ingest ran: run it again"
                        )
                    drop_tables(conn, where.graph)
                    conn.execute(f"DROP TABLE IF EXISTS {where.chunks}")
                    conn.execute(f"DROP TABLE IF EXISTS {where.files}")
                    _create_index_tables(conn, where, embedding_dimension)
                    if graph is not None:
                        graph.begin("FALSE", {})
                else:  # DELETE, not TRUNCATE: readers keep reading the old rows meanwhile
                    if graph is None:
                        drop_tables(conn, where.graph)
                    else:  # the pairs of the rows that go leave with them
                        graph.begin("NOT (chunk_id = ANY(%(keep)s))", {"keep": keep})
                    conn.execute(
                        f"DELETE FROM {where.chunks} WHERE NOT (chunk_id = ANY(%s))", (keep,)
                    )
                    row = conn.execute(f"SELECT count(*) FROM {where.chunks}").fetchone()
                    if int(row[0]) != len(set(keep)):  # another ingest won the race: roll back
                        raise IndexError_(
                            f"index {where.name!r} changed while this ingest ran: run it again"
                        )
                    conn.execute(f"DELETE FROM {where.files}")
                lost = self._copy_chunks(conn, fresh, on_failure)
                files = {s: r for s, r in files.items() if s not in lost}
                stored = len(entries) - sum(1 for chunk, _ in fresh if chunk.source in lost)
                with conn.cursor().copy(f"COPY {where.files} (source, record) FROM STDIN") as cp:
                    for source, record in sorted(files.items()):
                        cp.write_row((source, json.dumps(record.__dict__)))
                if graph is not None:
                    manifest["graph"] = graph.finish()
                full = {
                    **manifest,
                    "format_version": FORMAT_VERSION,
                    "backend": "postgresql",
                    "schema_version": SCHEMA_VERSION,
                    "text_search_config": TEXT_SEARCH_CONFIG,
                    "counts": {"files": len(files), "chunks": stored},
                    "created_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                }
                conn.execute(
                    "INSERT INTO footnote_indexes (name, version, manifest) "
                    "VALUES (%s, %s, %s::jsonb) ON CONFLICT (name) DO UPDATE SET "
                    "version = excluded.version, manifest = excluded.manifest, updated_at = now()",
                    (where.name, version, json.dumps(full)),
                )
            conn.execute(f"ANALYZE {where.chunks}")
        return version

    def _copy_chunks(
        self, conn: Any, fresh: list[tuple[Chunk, Any]], on_failure: FileFailure | None
    ) -> set[str]:
        """COPY the new chunks one source file at a time, each under a savepoint: a file the
        database refuses is rolled back alone and reported, the ingest goes on. Returns the
        sources that were not stored."""
        columns = (
            "chunk_id, source, section, position, chunk_date, metadata, access, doc, body, "
            "terms, embedding"
        )
        by_source: dict[str, list[tuple[Chunk, Any]]] = {}
        for chunk, vector in fresh:
            by_source.setdefault(chunk.source, []).append((chunk, vector))
        lost: set[str] = set()
        for source, rows in by_source.items():
            try:
                with (
                    conn.transaction(),
                    conn.cursor().copy(f"COPY {self.where.chunks} ({columns}) FROM STDIN") as cp,
                ):
                    for chunk, vector in rows:
                        cp.write_row(_chunk_row(chunk, vector))
            except Exception as exc:  # psycopg.Error, or a value the driver cannot send
                lost.add(source)
                if on_failure is not None:
                    reason = (str(exc).strip().split("\n")[0] or type(exc).__name__)[:200]
                    on_failure(source, f"could not be stored: {reason}")
        return lost


def _chunk_row(chunk: Chunk, vector: Any) -> tuple[Any, ...]:
    body = embedding_text(chunk)
    return (
        chunk.id,
        chunk.source,
        chunk.section,
        chunk_position(chunk.id),
        parse_date(chunk.date),
        json.dumps(chunk.metadata),
        access_groups(chunk.access),
        json.dumps(chunk.to_dict(), ensure_ascii=False),
        body,
        sorted(set(keyword_tokens(body))),
        vector_literal(np.asarray(vector)),
    )


def drop_index(url: str) -> None:
    """Remove an index's tables and manifest row (tests and benchmarks clean up with it)."""
    where = parse_location(url)
    with pool(where.conninfo).connection() as conn, conn.transaction():
        drop_tables(conn, where.graph)
        conn.execute(f"DROP TABLE IF EXISTS {where.chunks}")
        conn.execute(f"DROP TABLE IF EXISTS {where.files}")
        if _table_exists(conn, "footnote_indexes"):
            conn.execute("DELETE FROM footnote_indexes WHERE name = %s", (where.name,))


def require_index(conn: Any, where: Location, url: str) -> tuple[str, dict[str, Any]]:
    found = read_manifest(conn, where)
    if found is None:
        raise IndexNotFound(
            f"no index {where.name!r} at {redact(url)}: build one with "
            f"`footnote ingest PATH --index {redact(url)}`"
        )
    return found


def glob_regex(pattern: str) -> str:
    """A POSIX regular expression matching what `fnmatch.fnmatchcase` matches."""
    out: list[str] = []
    i = 0
    while i < len(pattern):
        c = pattern[i]
        if c == "*":
            out.append(".*")
        elif c == "?":
            out.append(".")
        elif c == "[":
            j = i + 1
            if j < len(pattern) and pattern[j] == "!":
                j += 1
            if j < len(pattern) and pattern[j] == "]":
                j += 1
            j = pattern.find("]", j)
            if j < 0:
                out.append("\\[")
            else:
                body = pattern[i + 1 : j].replace("\\", "\\\\")
                if body.startswith("!"):
                    body = "^" + body[1:]
                out.append(f"[{body}]")
                i = j
        else:
            out.append(c if c.isalnum() else "\\" + c)
        i += 1
    return "^(" + "".join(out) + ")$"


def where_clause(caller: Caller, filters: Filters | None) -> Where:
    """SQL conditions (AND-ed, `TRUE` when none) and their parameters."""
    parts: list[str] = []
    params: dict[str, Any] = {}
    if not caller.admin:
        parts.append("access && %(f_groups)s::text[]")
        params["f_groups"] = sorted(caller.groups)
    if filters is not None:
        if filters.source:
            parts.append("source ~ %(f_source)s")
            params["f_source"] = glob_regex(filters.source)
        if filters.section:
            parts.append("strpos(lower(section), lower(%(f_section)s)) > 0")
            params["f_section"] = filters.section
        if filters.date_from:
            parts.append("chunk_date >= %(f_from)s")
            params["f_from"] = require_date(filters.date_from)
        if filters.date_to:
            parts.append("chunk_date <= %(f_to)s")
            params["f_to"] = require_date(filters.date_to)
        for i, (key, value) in enumerate(sorted(filters.metadata.items())):
            parts.append(f"coalesce(metadata -> %(f_mk{i})s, 'null'::jsonb) = %(f_mv{i})s::jsonb")
            params[f"f_mk{i}"] = key
            params[f"f_mv{i}"] = json.dumps(value)
    return (" AND ".join(parts) or "TRUE"), params


def tsquery_text(query: str) -> str:
    """The query's words OR-ed, as BM25 scores any of them; to_tsquery stems and drops
    stop words. Only word characters pass, so the text cannot be tsquery syntax."""
    words = sorted({w.lower() for w in re.findall(r"[^\W_]+", query)})
    return " | ".join(words)


class PostgresReader:
    """Searches one version of a PostgreSQL index; thread-safe, connections from the pool.

    Its selection is a SQL condition applied inside the ranking statement (a pre-filter:
    when pgvector's HNSW scan comes back short under it, the search is redone exactly).
    """

    def __init__(self, url: str) -> None:
        self.location = url
        self.where = parse_location(url)
        with pool(self.where.conninfo).connection() as conn:
            self.version, self.manifest = require_index(conn, self.where, url)
        self._local = threading.local()
        self._rows: int | None = None
        self._graph: PgGraph | None = None
        self._graph_lock = threading.Lock()

    def graph(self) -> PgGraph | None:
        """The version's entity graph (store/graph_postgres.py), loaded on first use; None
        for an index built without one. Asked inside a search's snapshot, so the version it
        checks is the one the search reads."""
        entry = self.manifest.get("graph")
        if entry is None:
            return None
        with self.snapshot(), self._conn() as conn:
            # the rows a search ranks must be the graph's: checked per search, as this
            # reader's statements see the live version, whichever it is
            row = conn.execute(
                "SELECT version FROM footnote_indexes WHERE name = %s", (self.where.name,)
            ).fetchone()
            if row is None or str(row[0]) != self.version:
                raise IndexError_(f"{redact(self.location)} changed; search again")
            with self._graph_lock:
                if self._graph is None:
                    try:
                        self._graph = load_graph(
                            conn, self.where.graph, self.where.chunks, entry, self._visible_rows
                        )
                    except IndexCorrupt as exc:
                        raise IndexCorrupt(
                            f"index {redact(self.location)}: {exc}; the index was modified or "
                            f"damaged. {REBUILD_HINT}"
                        ) from exc
                return self._graph

    def _visible_rows(self, selection: Where) -> np.ndarray:
        where, params = selection
        with self._conn() as conn:
            found = copy_fixed(
                conn, f"SELECT row_id FROM {self.where.chunks} WHERE {where}", params,
                [("row", ">i8")],
            )  # fmt: skip
        return found["row"].astype(np.int64)

    @contextmanager
    def _conn(self) -> Iterator[Any]:
        """The snapshot connection when inside one (see `snapshot`), else one from the pool."""
        held = getattr(self._local, "conn", None)
        if held is not None:
            yield held
            return
        with pool(self.where.conninfo).connection() as conn:
            yield conn

    @contextmanager
    def snapshot(self) -> Iterator[None]:
        """Every statement inside reads the same committed version of the index."""
        if getattr(self._local, "conn", None) is not None:
            yield
            return
        with pool(self.where.conninfo).connection() as conn, conn.transaction():
            conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
            self._local.conn = conn
            try:
                yield
            finally:
                self._local.conn = None

    def select(self, caller: Caller, filters: Filters | None = None) -> Where:
        return where_clause(caller, filters)

    def keyword(self, query: str, k: int, selection: Where) -> list[Ranked]:
        """Full-text search ranked by ts_rank (not BM25: no idf saturation, see docs)."""
        text = tsquery_text(query)
        if not text or k <= 0:
            return []
        where, params = selection
        sql = (
            f"SELECT row_id, doc->>'id', ts_rank(tsv, q, 1) AS score "
            f"FROM {self.where.chunks}, to_tsquery('{TEXT_SEARCH_CONFIG}', %(q)s) q "
            f"WHERE tsv @@ q AND {where} ORDER BY score DESC, row_id LIMIT %(k)s"
        )
        with self._conn() as conn:
            return _ranked(conn.execute(sql, {**params, "q": text, "k": k}).fetchall())

    def dense(self, vector: np.ndarray, k: int, selection: Where) -> list[Ranked]:
        if k <= 0:
            return []
        where, params = selection
        sql = (
            f"SELECT row_id, doc->>'id', -(embedding <#> %(v)s::vector) AS score "
            f"FROM {self.where.chunks} WHERE {where} "
            f"ORDER BY embedding <#> %(v)s::vector LIMIT %(k)s"
        )
        args = {**params, "v": vector_literal(vector), "k": k}
        with self._conn() as conn, conn.transaction():
            conn.execute(f"SET LOCAL hnsw.ef_search = {min(1000, max(EF_SEARCH, 2 * k))}")
            conn.execute("SET LOCAL hnsw.iterative_scan = relaxed_order")
            conn.execute(f"SET LOCAL hnsw.max_scan_tuples = {MAX_SCAN_TUPLES}")
            rows = conn.execute(sql, args).fetchall()
            if len(rows) < k:  # HNSW gave up early under the filter: redo it exactly
                conn.execute("SET LOCAL enable_indexscan = off")
                rows = conn.execute(sql, args).fetchall()
                conn.execute("SET LOCAL enable_indexscan = on")
        return sorted(_ranked(rows), key=lambda h: (-h.score, h.row))

    def chunks(self, rows: Sequence[int]) -> list[Chunk]:
        wanted = [int(r) for r in rows]
        with self._conn() as conn:
            found = conn.execute(
                f"SELECT row_id, doc FROM {self.where.chunks} WHERE row_id = ANY(%s)", (wanted,)
            ).fetchall()
        docs = {int(row): doc for row, doc in found}
        missing = [r for r in wanted if r not in docs]
        if missing:
            raise IndexError_(f"{self.location}: row {missing[0]} was replaced; search again")
        return [Chunk.from_dict(docs[r]) for r in wanted]

    def vectors(self, rows: Sequence[int]) -> np.ndarray:
        dimension = int(self.manifest["embedding"]["dimension"])
        with self._conn() as conn:
            found = conn.execute(
                f"SELECT row_id, embedding::real[] FROM {self.where.chunks} WHERE row_id = ANY(%s)",
                (list(rows),),
            ).fetchall()
        stored = {int(r): v for r, v in found}
        out = np.zeros((len(rows), dimension), dtype=np.float32)
        for i, row in enumerate(rows):
            if row in stored:
                out[i] = stored[row]
        return out

    def document_frequencies(self, tokens: Sequence[str]) -> tuple[int, dict[str, int]]:
        """From the stored keyword terms, counted as the files backend's BM25 counts them."""
        with self._conn() as conn:
            if self._rows is None:
                row = conn.execute(f"SELECT count(*) FROM {self.where.chunks}").fetchone()
                self._rows = int(row[0])
            if not tokens:
                return self._rows, {}
            sql = (
                f"SELECT t, (SELECT count(*) FROM {self.where.chunks} WHERE terms @> ARRAY[t]) "
                "FROM unnest(%s::text[]) AS t"
            )
            found = conn.execute(sql, (list(tokens),)).fetchall()
        return self._rows, {str(t): int(n) for t, n in found}


def _ranked(rows: list[tuple[Any, ...]]) -> list[Ranked]:
    return [Ranked(int(row), float(score), chunk_position(cid)) for row, cid, score in rows]


def current_revocations(url: str) -> tuple[str | None, Any]:
    """(live version, its revocation log as stored): one row, without the rest of the
    manifest, for the server's check on every request (`footnote.store.revocations`)."""
    where = parse_location(url)
    with pool(where.conninfo).connection() as conn:
        if not _table_exists(conn, "footnote_indexes"):
            return None, None
        row = conn.execute(
            "SELECT version, manifest -> 'revocations' FROM footnote_indexes WHERE name = %s",
            (where.name,),
        ).fetchone()
    return (None, None) if row is None else (str(row[0]), row[1])


def current_version(url: str) -> str | None:
    """The live version of the index at `url`, or None when there is none."""
    where = parse_location(url)
    with pool(where.conninfo).connection() as conn:
        found = read_manifest(conn, where)
    return found[0] if found else None
