"""The files backend: one directory of inspectable files, written atomically, loaded without
pickle, searched from memory-mapped files (FAISS for vectors, bm25s for keywords).

    DIR/CURRENT                 name of the live version (replaced atomically)
    DIR/versions/<v>/manifest.json   format, embedding model, chunking, counts, dense index
                                     kind and parameters, columns' value counts, checksums
    DIR/versions/<v>/chunks.sqlite   row i = FAISS id i = BM25 doc i, read per hit
                                     (store/chunkdb.py)
    DIR/versions/<v>/columns/        row sets of access, source, section, metadata and dates,
                                     their distinct values, chunk positions: the caller's and
                                     filters' row masks (store/columns.py)
    DIR/versions/<v>/files.json      per source file: content hash and chunk ids
    DIR/versions/<v>/vectors.faiss   inner-product index: exact flat below DENSE_IVF_FROM
                                     chunks, IVF (flat lists, direct map) from there on;
                                     memory-mapped, not read into memory
    DIR/versions/<v>/bm25/           bm25s arrays (.npy, allow_pickle=False, memory-mapped)
                                     and vocab json

Loading checks every part (store/file_checks.py) and reads only headers, the columns and the
BM25 vocabulary, so it costs about the same at a million chunks as at a hundred.

A new version is built beside the live one and published by replacing CURRENT, so readers
see the old index or the new one, never a mix, and a killed ingest leaves the old one live.
It is written a batch of $FOOTNOTE_WRITE_BATCH chunks at a time and never held whole
(`_StagedParts`, store/dense_writer.py, store/keyword_writer.py).
"""

from __future__ import annotations

import itertools
import json
import os
import shutil
import sqlite3
import stat
import tempfile
import time
from collections.abc import Callable, Iterable, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np

from footnote.store import jsonfile
from footnote.store.base import FileFailure, Lookup, PreviousState, remembered_settings
from footnote.store.chunkdb import ChunkDbWriter, ChunkTable
from footnote.store.columns import (
    DICTIONARY_COLUMNS,
    ColumnsBuilder,
    MaskColumns,
    load_columns,
    read_values,
    save_columns,
)
from footnote.store.dense_writer import VectorSpool, write_dense
from footnote.store.file_checks import (
    KEY_ENV,
    NPY_HEADERS,
    VERSION_NAME,
    DeferredChecksums,
    check_bm25_arrays,
    check_checksums,
    check_faiss_header,
    check_manifest_fields,
    check_npy_header,
    check_sqlite_header,
    damaged,
    list_parts,
    read_current,
    read_files,
    read_manifest,
    sha256_file,
    signature,
    verify_signature,
    version_dir,
)
from footnote.store.graph_files import GraphArrays, GraphBuilder, graph_enabled, load_graph
from footnote.store.graph_files import required_parts as graph_parts
from footnote.store.keyword_writer import EMPTY_DOCUMENT, KeywordPostings
from footnote.store.lock import writer_lock
from footnote.store.mention_cache import CACHE_FILE as MENTION_CACHE
from footnote.store.private import make_private, private_dir, write_private_text
from footnote.store.text import embedding_text, keyword_tokens
from footnote.store.types import (
    Caller,
    Chunk,
    FileRecord,
    Filters,
    IndexCorrupt,
    IndexMismatch,
    IndexNotFound,
    Ranked,
    check_embeddings,
)

if TYPE_CHECKING:
    import bm25s
    import faiss

# faiss and bm25s load with the first index read or written: an ingest with nothing to do
# never needs them.

KEYWORD_TOKENIZER = "footnote-keyword-v1"
FORMAT_VERSION = 2
"""The files backend's layout (2: chunks in SQLite, mask columns, IVF above a size)."""
DENSE_IVF_FROM = 50_000
"""From this many chunks the dense index is IVF (benchmarks/dense_threshold.py,
docs/scaling.md: exact flat search costs about N/10,000 ms per query on 2 cores)."""
IVF_NPROBE = 32
"""IVF lists scanned per query: recall@10 against exact search is measured by
benchmarks/scale_files.py."""
WRITE_BATCH_ENV = "FOOTNOTE_WRITE_BATCH"
DEFAULT_WRITE_BATCH = 10_000
"""Rows the writer takes in at a time: its memory is bounded by this, not by the corpus
(benchmarks/scale_files.py, docs/scaling.md)."""
KEYWORD_POSTINGS_PER_ROW = 128
"""Keyword postings the writer fills per pass, per row of its batch (a chunk holds ~100)."""
EXACT_BELOW_EXPECTED = 4
"""An approximate dense pass is skipped for an exact one when fewer than this many times k
allowed rows are expected among the rows it scans (the filter is too selective for it)."""

T = TypeVar("T")


def read_part(root: Path, part: str, read: Callable[[], T]) -> T:
    """Run a read of one part of the index; anything unexpected is reported as damage."""
    try:
        return read()
    except IndexCorrupt:
        raise
    except (OSError, ValueError, TypeError, KeyError, AttributeError, RuntimeError,
            sqlite3.Error) as exc:  # fmt: skip
        raise damaged(root, f"{part} cannot be read ({exc})") from exc


@dataclass(kw_only=True)
class Index:
    """A loaded index version: chunks, vectors, keyword index and mask columns, row-aligned.

    Only what every query needs is opened at load; chunk texts are read per hit and the file
    records (for ingest) on first use, once their checksum is verified."""

    path: Path
    version: str
    manifest: dict[str, Any]
    chunks: ChunkTable
    vectors: faiss.Index
    bm25: bm25s.BM25
    columns: MaskColumns
    checksums: DeferredChecksums
    _files: dict[str, FileRecord] | None = None
    _row_of: dict[str, int] | None = None
    _graph: GraphArrays | None = None

    def graph(self) -> GraphArrays | None:
        """The version's entity graph (store/graph_files.py), opened on first use; None for
        a version built without one."""
        entry = self.manifest.get("graph")
        if entry is None:
            return None
        if self._graph is None:
            self.check()
            vdir = self.path / "versions" / self.version / "graph"
            rows = int(self.manifest["counts"]["chunks"])
            with NPY_HEADERS:
                self._graph = read_part(self.path, "graph/", lambda: load_graph(vdir, rows, entry))
        return self._graph

    @property
    def embedding_model(self) -> str:
        return str(self.manifest["embedding"]["model"])

    @property
    def dimension(self) -> int:
        return int(self.manifest["embedding"]["dimension"])

    @property
    def dense(self) -> dict[str, Any]:
        """The dense index's kind (`flat` or `ivf`) and parameters, as the manifest records."""
        return dict(self.manifest.get("dense") or {"kind": "flat"})

    @property
    def files(self) -> dict[str, FileRecord]:
        if self._files is None:
            self.checksums.wait()  # never parsed before its checksum is verified
            vdir = self.path / "versions" / self.version
            ids = set(self.chunk_ids())
            self._files = read_files(self.path, vdir / "files.json", ids)
        return self._files

    def check(self) -> None:
        """IndexCorrupt once a deferred checksum was found not to match."""
        self.checksums.check()

    def chunk_ids(self) -> list[str]:
        return read_part(self.path, "chunks.sqlite", self.chunks.ids)

    def read_chunks(self, rows: Sequence[int]) -> list[Chunk]:
        """The chunks at these rows, in order, each checked to be well-formed."""
        self.check()
        return read_part(self.path, "chunks.sqlite", lambda: self.chunks.many(rows))

    def row(self, chunk_id: str) -> int | None:
        if self._row_of is None:
            self._row_of = {cid: i for i, cid in enumerate(self.chunk_ids())}
        return self._row_of.get(chunk_id)

    def vectors_at(self, rows: Sequence[int] | np.ndarray) -> np.ndarray:
        found = np.asarray(rows, dtype=np.int64)
        if len(found) == 0:
            return np.zeros((0, self.dimension), dtype=np.float32)
        self.check()
        return self.vectors.reconstruct_batch(found)

    def all_vectors(self) -> np.ndarray:
        if self.vectors.ntotal == 0:
            return np.zeros((0, self.dimension), dtype=np.float32)
        return self.vectors.reconstruct_n(0, self.vectors.ntotal)


def current_version(root: Path) -> str | None:
    """The live version's name, checked (see file_checks.read_current); None if no index."""
    return read_current(root)


@dataclass(kw_only=True)
class Catalogue:
    """The checked part of a version: the manifest, with every part's checksum, header and
    size checked (the large parts' checksums in the background: `checksums`); the vectors,
    the keyword index and the file records are not opened (a no-change ingest never needs
    the first two; `read_files` reads the last)."""

    version: str
    directory: Path
    manifest: dict[str, Any]
    checksums: DeferredChecksums


def read_catalogue(
    root: str | Path, *, embedding_model: str | None = None, dimension: int | None = None
) -> Catalogue:
    """Open the live version's manifest, checking every part first (store/file_checks.py)
    and (if given) the embedding model.

    A writer prunes old versions; a reader that read CURRENT just before a publish can find
    its version gone, so a version that fails to load is retried once CURRENT has moved on.
    """
    root = Path(root)
    for attempt in range(3):
        version = read_current(root)
        if version is None:
            raise IndexNotFound(
                f"no index at {root}: build one with `footnote ingest PATH --index {root}`"
            )
        try:
            return _read_catalogue(root, version, embedding_model, dimension)
        except IndexCorrupt:
            if attempt == 2 or read_current(root) == version:
                raise
    raise AssertionError("unreachable")


def _read_catalogue(
    root: Path, version: str, embedding_model: str | None, dimension: int | None
) -> Catalogue:
    try:
        vdir = version_dir(root, version)
        parts = list_parts(root, vdir)
        manifest = read_manifest(root, vdir)
        if manifest.get("format_version") != FORMAT_VERSION:
            raise IndexMismatch(
                f"index {root} has format version {manifest.get('format_version')}, this "
                f"Footnote reads version {FORMAT_VERSION}: rebuild it with "
                "`footnote ingest --rebuild`"
            )
        size, count = check_manifest_fields(root, manifest)
        verify_signature(root, manifest)
        check_embeddings(manifest, root, embedding_model, dimension)
        deferred = check_checksums(root, vdir, manifest, parts)
        check_faiss_header(root, vdir / "vectors.faiss", size, count, manifest.get("dense"))
        check_bm25_arrays(root, vdir, count)
        check_sqlite_header(root, vdir / "chunks.sqlite")
        if "graph" in manifest:
            listed = manifest["checksums"]
            unlisted = [p for p in graph_parts(manifest["graph"]) if p not in listed]
            if unlisted:
                raise damaged(root, f"the manifest has no checksum for {unlisted[0]}")
        for name in manifest["checksums"]:
            if name.startswith(("columns/", "graph/")) and name.endswith(".npy"):
                check_npy_header(root, vdir / name)
    except OSError as exc:  # a part vanished or cannot be read
        raise damaged(root, f"{Path(exc.filename or '?').name} cannot be read") from exc
    checksums = DeferredChecksums(root, vdir, manifest["checksums"], deferred)
    return Catalogue(version=version, directory=vdir, manifest=manifest, checksums=checksums)


def load_index(
    root: str | Path, *, embedding_model: str | None = None, dimension: int | None = None
) -> Index:
    """Open the live version: the checked catalogue, then its vectors and keyword index."""
    root = Path(root)
    for attempt in range(3):
        catalogue = read_catalogue(root, embedding_model=embedding_model, dimension=dimension)
        try:
            return _load_searchable(root, catalogue)
        except IndexCorrupt:
            if attempt == 2 or read_current(root) == catalogue.version:
                raise
    raise AssertionError("unreachable")


def _load_searchable(root: Path, catalogue: Catalogue) -> Index:
    import bm25s

    vdir = catalogue.directory
    manifest = catalogue.manifest
    rows = int(manifest["counts"]["chunks"])
    # The checks above bound what the parsers below get; they still run inside a net.
    chunks = read_part(root, "chunks.sqlite", lambda: ChunkTable(vdir / "chunks.sqlite", rows))
    with NPY_HEADERS:
        arrays = read_part(
            root, "columns/", lambda: load_columns(vdir / "columns", rows, manifest.get("columns"))
        )
    columns = MaskColumns(
        arrays,
        lambda name: read_part(root, "columns/", lambda: read_values(vdir / "columns", name)),
    )
    dense = manifest.get("dense", {"kind": "flat"})
    vectors = read_part(root, "vectors.faiss", lambda: _read_vectors(vdir / "vectors.faiss", dense))
    with NPY_HEADERS:
        bm25 = read_part(
            root,
            "bm25/",
            lambda: bm25s.BM25.load(str(vdir / "bm25"), load_corpus=False, allow_pickle=False,
                                    mmap=True),
        )  # fmt: skip
    if vectors.ntotal != rows:
        raise damaged(root, f"{vectors.ntotal} vectors for {rows} chunks")
    return Index(
        path=root,
        version=catalogue.version,
        manifest=manifest,
        chunks=chunks,
        vectors=vectors,
        bm25=bm25,
        columns=columns,
        checksums=catalogue.checksums,
    )


def _read_vectors(path: Path, dense: Any) -> faiss.Index:
    """Memory-mapped: a flat index maps its codes in place, an IVF index its lists. The
    type must be the one the manifest names, with the parameters it records."""
    import faiss

    kind = dense.get("kind") if isinstance(dense, dict) else None
    flags = {"flat": faiss.IO_FLAG_MMAP_IFC, "ivf": faiss.IO_FLAG_MMAP}
    if kind not in flags:
        raise ValueError(f"the manifest names no known dense index ({kind!r})")
    index = faiss.read_index(str(path), flags[kind])
    if kind == "flat" and isinstance(index, faiss.IndexFlatIP):
        return index
    if kind == "ivf" and isinstance(index, faiss.IndexIVFFlat):
        nprobe = dense.get("nprobe")
        if dense.get("nlist") != index.nlist or not isinstance(nprobe, int) or nprobe < 1:
            raise ValueError("its IVF parameters differ from the manifest's")
        index.nprobe = min(nprobe, index.nlist)
        return index
    raise ValueError(f"{type(index).__name__} is not the {kind!r} index the manifest names")


def write_batch_rows() -> int:
    """Rows the writer takes in at a time: $FOOTNOTE_WRITE_BATCH, else DEFAULT_WRITE_BATCH."""
    value = os.environ.get(WRITE_BATCH_ENV, "").strip()
    rows = int(value) if value else DEFAULT_WRITE_BATCH
    if rows < 1:
        raise ValueError(f"{WRITE_BATCH_ENV} must be a positive number of rows, not {value!r}")
    return rows


def write_index(
    root: str | Path,
    *,
    chunks: Sequence[Chunk],
    vectors: np.ndarray,
    files: dict[str, FileRecord],
    manifest: dict[str, Any],
) -> str:
    """Write a new version beside the live one and publish it; returns the version name.
    (`write_index_batches` takes the chunks and vectors a batch at a time instead.)"""
    if len(vectors) != len(chunks):
        raise ValueError(f"{len(vectors)} vectors for {len(chunks)} chunks")
    step = write_batch_rows()
    batches = ((chunks[i : i + step], vectors[i : i + step]) for i in range(0, len(chunks), step))
    return write_index_batches(root, batches=batches, files=files, manifest=manifest)


def write_index_batches(
    root: str | Path,
    *,
    batches: Iterable[tuple[Sequence[Chunk], np.ndarray]],
    files: dict[str, FileRecord],
    manifest: dict[str, Any],
    batch_rows: int | None = None,
) -> str:
    """`write_index` for chunks and their vectors given in batches (row order): each batch is
    written as it comes, so the writer's memory is bounded by `batch_rows` rows
    ($FOOTNOTE_WRITE_BATCH by default), plus a few bytes per row and the vocabulary, however
    large the corpus. `files` is read once the last batch is in (a caller may fill it as
    its batches go)."""
    root = Path(root)
    with writer_lock(root):
        return _write_version(root, batches, files, manifest, batch_rows or write_batch_rows())


def _write_version(
    root: Path,
    batches: Iterable[tuple[Sequence[Chunk], np.ndarray]],
    files: dict[str, FileRecord],
    manifest: dict[str, Any],
    batch_rows: int,
) -> str:
    versions = private_dir(root / "versions")
    try:
        previous = current_version(root)
    except IndexCorrupt:
        previous = None  # a damaged pointer is replaced, not kept
    staging = Path(tempfile.mkdtemp(prefix=".staging-", dir=versions))
    try:
        parts = _StagedParts(staging, int(manifest["embedding"]["dimension"]), batch_rows)
        try:
            for chunks, vectors in batches:
                parts.add(chunks, vectors)
            rows, dense, dictionary, graph = parts.finish(files)
        finally:
            parts.discard_scratch()
        manifest = {key: value for key, value in manifest.items() if key != "graph"}
        if graph is not None:
            manifest["graph"] = graph
        manifest = {
            **manifest,
            "format_version": FORMAT_VERSION,
            "counts": {"files": len(files), "chunks": rows},
            "dense": dense,
            "columns": {name: len(dictionary[name]) for name in DICTIONARY_COLUMNS},
            "keyword_tokenizer": KEYWORD_TOKENIZER,
            "created_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "checksums": {
                str(p.relative_to(staging)): sha256_file(p)
                for p in sorted(staging.rglob("*"))
                if p.is_file()
            },
        }
        key = os.environ.get(KEY_ENV)
        if key:
            manifest["signature"] = signature(manifest, key)
        (staging / "manifest.json").write_text(json.dumps(manifest, indent=1), "utf-8")
        make_private(staging)  # NumPy, FAISS and SQLite write with the process umask
        for path in staging.rglob("*"):
            if path.is_file():
                _fsync(path)
        version = (
            time.strftime("v%Y%m%dT%H%M%S", time.gmtime()) + f"-{os.getpid()}-{staging.name[-6:]}"
        )
        os.rename(staging, versions / version)
        pointer = root / f"CURRENT.{os.getpid()}.{staging.name[-6:]}.tmp"
        try:
            write_private_text(pointer, version + "\n")
            _fsync(pointer)
            os.replace(pointer, root / "CURRENT")
        finally:
            pointer.unlink(missing_ok=True)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    _write_remembered(root, manifest)
    _prune(versions, keep={version, previous} - {None})
    make_private(root)  # what an older Footnote left readable to all (caches, versions)
    return version


REMEMBERED = "sources.json"
"""Beside the versions: the last published sources and settings (`remembered_settings`), so
a rebuild of a damaged live version still knows what to read again."""
MAX_REMEMBERED_BYTES = 16 << 20


def _write_remembered(root: Path, manifest: dict[str, Any]) -> None:
    pointer = root / f"{REMEMBERED}.{os.getpid()}.tmp"
    try:
        write_private_text(pointer, json.dumps(remembered_settings(manifest), indent=1))
        _fsync(pointer)
        os.replace(pointer, root / REMEMBERED)
    finally:
        pointer.unlink(missing_ok=True)


def read_remembered(root: Path) -> dict[str, Any] | None:
    """The settings the last publish left beside the versions; None when there are none or
    they cannot be read (a rebuild then reads only the paths it is given)."""
    path = root / REMEMBERED
    try:
        info = os.lstat(path)
        if not stat.S_ISREG(info.st_mode) or info.st_size > MAX_REMEMBERED_BYTES:
            return None
        found = jsonfile.loads(path.read_bytes().decode("utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(found, dict):
        return None
    kept = remembered_settings(found)
    access = kept.get("default_access")
    if access is not None and not (
        isinstance(access, list) and all(isinstance(g, str) for g in access)
    ):
        kept.pop("default_access")
    for key in ("sources", "embedding", "chunking"):
        if not isinstance(kept.get(key), list if key == "sources" else dict):
            kept.pop(key, None)
    return kept


class _StagedParts:
    """A version's parts, written into its staging folder a batch at a time: chunks straight
    into SQLite, vectors and keyword postings to scratch files, column ids as a few integers
    per row. `finish` builds the dense and keyword indexes from the scratch files, reading
    them back a batch at a time."""

    def __init__(self, staging: Path, dimension: int, batch_rows: int) -> None:
        self.staging = staging
        self.batch_rows = batch_rows
        self.scratch = staging / ".scratch"
        self.scratch.mkdir()
        self.chunks = ChunkDbWriter(staging / "chunks.sqlite")
        self.columns = ColumnsBuilder()
        self.vectors = VectorSpool(self.scratch / "vectors.f32", dimension)
        self.keywords = KeywordPostings(
            self.scratch / "keywords", entries_per_pass=KEYWORD_POSTINGS_PER_ROW * batch_rows
        )
        self.graph = (
            GraphBuilder(mention_cache=staging.parent.parent / MENTION_CACHE)
            if graph_enabled(dict(os.environ))
            else None
        )

    def add(self, chunks: Sequence[Chunk], vectors: np.ndarray) -> None:
        if len(vectors) != len(chunks):
            raise ValueError(f"{len(vectors)} vectors for {len(chunks)} chunks")
        for start in range(0, len(chunks), self.batch_rows):
            batch = chunks[start : start + self.batch_rows]
            self.vectors.add(vectors[start : start + self.batch_rows])
            self.chunks.add(batch)
            self.columns.add(batch)
            if self.graph is not None:
                self.graph.add(batch)
            self.keywords.add(keyword_tokens(embedding_text(c)) or [EMPTY_DOCUMENT] for c in batch)

    def finish(
        self, files: dict[str, FileRecord]
    ) -> tuple[int, dict[str, Any], dict[str, list[str]], dict[str, Any] | None]:
        """Complete every part; (rows, the dense index's manifest entry, column values, the
        graph's manifest entry or None)."""
        staging, rows = self.staging, self.chunks.rows
        self.chunks.close()
        graph = None
        if self.graph is not None:
            table = ChunkTable(staging / "chunks.sqlite", rows)
            try:
                graph = self.graph.finish(staging / "graph", table, self.batch_rows)
            finally:
                table.close()
        arrays, dictionary = self.columns.finish()
        save_columns(staging / "columns", arrays, dictionary)
        del arrays
        with (staging / "files.json").open("w", encoding="utf-8") as handle:
            json.dump({s: r.__dict__ for s, r in sorted(files.items())}, handle, indent=1)
        self.vectors.close()
        dense = write_dense(staging / "vectors.faiss", self.vectors, ivf_from=DENSE_IVF_FROM,
                            nprobe=IVF_NPROBE, batch_rows=self.batch_rows)  # fmt: skip
        if rows == 0:
            self.keywords.add([[EMPTY_DOCUMENT]])  # bm25s cannot index no document
        _write_bm25(staging / "bm25", self.keywords)
        return rows, dense, dictionary, graph

    def discard_scratch(self) -> None:
        self.chunks.abandon()
        shutil.rmtree(self.scratch, ignore_errors=True)


def _write_bm25(directory: Path, keywords: KeywordPostings) -> None:
    keywords.write(directory)


def _fsync(path: Path) -> None:
    with path.open("rb") as handle:
        os.fsync(handle.fileno())


def _prune(versions: Path, *, keep: set[str | None]) -> None:
    """Drop versions but the live one and the one before it (a reader may have opened it a
    moment ago; a reader that loses the race retries with the new CURRENT). Only folders
    named like versions are touched; staging folders of a killed writer go after an hour.
    Runs under the writer lock, so no other writer's live or previous version is at risk."""
    for built in versions.iterdir():
        wanted = VERSION_NAME.fullmatch(built.name) and built.name not in keep
        if wanted and built.is_dir() and not built.is_symlink():
            shutil.rmtree(built, ignore_errors=True)
    for leftover in versions.glob(".staging-*"):
        try:
            stale = time.time() - leftover.lstat().st_mtime > 3600
        except OSError:
            continue
        if stale and leftover.is_dir() and not leftover.is_symlink():
            shutil.rmtree(leftover, ignore_errors=True)
    root = versions.parent
    for pointer in root.glob("CURRENT.*.tmp"):  # left by a writer killed mid-publish
        pointer.unlink(missing_ok=True)


class FilesWriter:
    """The write side of an index directory (the zero-setup default)."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)
        self.location = str(self.root)

    def writer(self) -> AbstractContextManager[None]:
        return writer_lock(self.root)

    def previous(self) -> PreviousState | None:
        """None only when there is no index: a damaged live version raises IndexCorrupt
        (and one of another format IndexMismatch), so no writer builds on it as if empty."""
        if current_version(self.root) is None:
            return None
        catalogue = read_catalogue(self.root)
        files = read_catalogue_files(self.root, catalogue)
        return PreviousState(
            version=catalogue.version,
            manifest=catalogue.manifest,
            files=files,
            lookup=_faiss_lookup(self.root, catalogue.version),
        )

    def publish(
        self,
        *,
        entries: Iterable[tuple[Chunk, Any]],
        files: dict[str, FileRecord],
        manifest: dict[str, Any],
        embedding_dimension: int,
        on_failure: FileFailure | None = None,
    ) -> str:
        """Files take every chunk the pipeline checked, so `on_failure` is never called.
        The entries go to the writer a batch at a time as they are read, never whole."""
        step = write_batch_rows()

        def batches() -> Iterable[tuple[list[Chunk], np.ndarray]]:
            stream = iter(entries)
            while batch := list(itertools.islice(stream, step)):
                vectors = np.zeros((len(batch), embedding_dimension), dtype=np.float32)
                for i, (_, vec) in enumerate(batch):
                    vectors[i] = vec
                yield [chunk for chunk, _ in batch], vectors

        return write_index_batches(
            self.root, batches=batches(), files=files, manifest=manifest, batch_rows=step
        )

    def remembered(self) -> dict[str, Any] | None:
        return read_remembered(self.root)


def read_catalogue_files(root: Path, catalogue: Catalogue) -> dict[str, FileRecord]:
    """The version's file records, once every part's checksum is verified, naming only
    chunks the version holds."""
    catalogue.checksums.wait()
    rows = int(catalogue.manifest["counts"]["chunks"])
    path = catalogue.directory / "chunks.sqlite"
    ids = read_part(root, "chunks.sqlite", lambda: ChunkTable(path, rows).ids())
    if len(set(ids)) != len(ids):
        raise damaged(root, "chunks.sqlite holds a duplicate chunk id")
    return read_files(root, catalogue.directory / "files.json", set(ids))


def _faiss_lookup(root: Path, version: str) -> Lookup:
    """Chunks and vectors of `version`, loaded on the first call: ingest asks for them only
    when it writes a new version, so a run with nothing to do never reads the vectors."""
    loaded: dict[str, Index | None] = {}

    def lookup(ids: list[str], partial: bool) -> list[tuple[Chunk, Any]] | None:
        if "index" not in loaded:
            # Damage found here raises: dropping the kept documents would publish without them.
            live = load_index(root)
            live.checksums.wait()  # reused chunks and vectors must be the verified ones
            # replaced since ingest started: reuse nothing from it
            loaded["index"] = live if live.version == version else None
        index = loaded["index"]
        if index is None:
            return [] if partial else None
        rows = [index.row(cid) for cid in ids]
        if not partial and any(r is None for r in rows):
            return None
        found = [r for r in rows if r is not None]
        chunks = index.read_chunks(found)
        return list(zip(chunks, index.vectors_at(found), strict=True))

    return lookup


class FilesReader:
    """Searches one loaded version; thread-safe, as a loaded version never changes.

    Its selection is a boolean row mask computed from the mask columns (store/columns.py),
    once per request and shared by every search of that request.
    """

    def __init__(self, index: Index) -> None:
        self.index = index
        self.location = str(index.path)
        self.version = index.version
        self.manifest = index.manifest
        self._n = len(index.chunks)
        self._doc_freq = np.diff(np.asarray(index.bm25.scores["indptr"]))
        self.dense_kind = index.dense["kind"]

    def select(self, caller: Caller, filters: Filters | None = None) -> np.ndarray:
        """Rows this caller may see that pass the filters: array operations over the columns,
        equal to `caller.may_see(c) and filters.matches(c)` for every chunk c."""
        self.index.check()  # a malformed filter is the caller's ValueError, not damage
        return self.index.columns.mask(caller, filters)

    def keyword(self, query: str, k: int, selection: np.ndarray) -> list[Ranked]:
        """BM25 over the stored keyword index; the top k found by one partition of the
        scores, not by sorting or collecting every matching row."""
        self.index.check()
        tokens = [t for t in keyword_tokens(query) if t in self.index.bm25.vocab_dict]
        if not tokens or self._n == 0 or k <= 0:
            return []
        scores = np.asarray(self.index.bm25.get_scores(tokens), dtype=np.float32)[: self._n]
        scores *= selection
        return self._ranked(*_best(scores, k))

    def dense(self, vector: np.ndarray, k: int, selection: np.ndarray) -> list[Ranked]:
        """Top k allowed rows by inner product. Exact on a flat index; on an IVF index an
        approximate pass first, re-run exactly (every list scanned) if it returns fewer than
        k allowed rows, or skipped for the exact pass when the selection is so narrow that
        too few allowed rows are expected in the lists it would scan. So a selective filter
        still gets k hits when k exist."""
        self.index.check()
        allowed = int(np.count_nonzero(selection))
        if allowed == 0 or k <= 0:
            return []
        k = min(k, allowed)
        query = np.ascontiguousarray(vector[None, :], dtype=np.float32)
        bits = None if allowed == self._n else np.packbits(selection, bitorder="little")
        vectors = self.index.vectors
        if self.dense_kind != "ivf":
            return self._ranked(*dense_search(vectors, query, k, bits, None))
        nprobe, nlist = int(vectors.nprobe), int(vectors.nlist)  # type: ignore[attr-defined]
        if allowed * nprobe / nlist >= EXACT_BELOW_EXPECTED * k:
            scores, rows = dense_search(vectors, query, k, bits, nprobe)
            if len(rows) == k:
                return self._ranked(scores, rows)
        return self._ranked(*dense_search(vectors, query, k, bits, nlist))

    def vectors(self, rows: Sequence[int]) -> np.ndarray:
        return self.index.vectors_at(rows)

    def graph(self) -> GraphArrays | None:
        """The version's entity graph, or None when it was built without one."""
        return self.index.graph()

    def document_frequencies(self, tokens: Sequence[str]) -> tuple[int, dict[str, int]]:
        vocab = self.index.bm25.vocab_dict
        return self._n, {
            t: 0 if vocab.get(t) is None else int(self._doc_freq[vocab[t]]) for t in tokens
        }

    def snapshot(self) -> AbstractContextManager[None]:
        return nullcontext()

    def chunks(self, rows: Sequence[int]) -> list[Chunk]:
        return self.index.read_chunks(rows)

    def _ranked(self, scores: np.ndarray, rows: np.ndarray) -> list[Ranked]:
        positions = self.index.columns.position[rows].tolist()
        return [
            Ranked(int(r), float(s), p)
            for r, s, p in zip(rows.tolist(), scores.tolist(), positions, strict=True)
        ]


def _best(scores: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The k best positive scores, best first, ties by row: a partition of the positive
    scores finds the k-th best, and only the rows at or above it are sorted. (Partitioning
    every row instead is slow: most scores are an equal zero.)"""
    rows = np.flatnonzero(scores > 0)
    if len(rows) > k:
        found = scores[rows]
        cut = np.partition(found, len(found) - k)[len(found) - k]
        rows = rows[found >= cut]
    best = rows[np.lexsort((rows, -scores[rows]))][:k]
    return scores[best], best.astype(np.int64)


def dense_search(
    vectors: faiss.Index, query: np.ndarray, k: int, bits: np.ndarray | None, nprobe: int | None
) -> tuple[np.ndarray, np.ndarray]:
    """One FAISS search restricted to the rows set in `bits` (a little-endian bitmap; None
    for all rows), with `nprobe` lists scanned on an IVF index; (scores, rows) found."""
    import faiss

    params = faiss.SearchParameters()
    if nprobe is not None:
        params = faiss.SearchParametersIVF()
        params.nprobe = nprobe
    selector = None  # must outlive the search: faiss keeps only a raw pointer to it
    if bits is not None:
        selector = faiss.IDSelectorBitmap(vectors.ntotal, faiss.swig_ptr(bits))
        params.sel = selector
    scores, rows = vectors.search(query, k, params=params)
    found = rows[0] >= 0
    del selector
    return scores[0][found], rows[0][found].astype(np.int64)
