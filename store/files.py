"""The files backend: one directory of inspectable files, written atomically, loaded without
pickle, searched in memory (FAISS for vectors, bm25s for keywords).

    DIR/CURRENT                 name of the live version (replaced atomically)
    DIR/versions/<v>/manifest.json   format, embedding model, chunking, counts, checksums
    DIR/versions/<v>/chunks.jsonl    one chunk per line, row i = FAISS id i = BM25 doc i
    DIR/versions/<v>/files.json      per source file: content hash and chunk ids
    DIR/versions/<v>/vectors.faiss   faiss.write_index of an inner-product flat index
    DIR/versions/<v>/bm25/           bm25s arrays (.npy, allow_pickle=False) and vocab json

A new version is built beside the live one and published by replacing CURRENT, so readers
see the old index or the new one, never a mix, and a killed ingest leaves the old one live.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
from collections.abc import Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from footnote.store.base import FileFailure, Lookup, PreviousState
from footnote.store.file_checks import (
    KEY_ENV,
    VERSION_NAME,
    check_bm25_arrays,
    check_checksums,
    check_faiss_header,
    check_manifest_fields,
    damaged,
    list_parts,
    read_chunks,
    read_current,
    read_files,
    read_manifest,
    sha256_file,
    signature,
    verify_signature,
    version_dir,
)
from footnote.store.lock import writer_lock
from footnote.store.text import embedding_text, keyword_tokens
from footnote.store.types import (
    FORMAT_VERSION,
    Caller,
    Chunk,
    FileRecord,
    Filters,
    Hit,
    IndexCorrupt,
    IndexError_,
    IndexMismatch,
    IndexNotFound,
    check_embeddings,
)

if TYPE_CHECKING:
    import bm25s
    import faiss

# faiss and bm25s load with the first index read or written: an ingest with nothing to do
# never needs them.

KEYWORD_TOKENIZER = "footnote-keyword-v1"


@dataclass(kw_only=True)
class Index:
    """A loaded index version: chunks, vectors and keyword index, row-aligned."""

    path: Path
    version: str
    manifest: dict[str, Any]
    chunks: list[Chunk]
    files: dict[str, FileRecord]
    vectors: faiss.Index
    bm25: bm25s.BM25
    _row_of: dict[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self._row_of = {c.id: i for i, c in enumerate(self.chunks)}

    @property
    def embedding_model(self) -> str:
        return str(self.manifest["embedding"]["model"])

    @property
    def dimension(self) -> int:
        return int(self.manifest["embedding"]["dimension"])

    def row(self, chunk_id: str) -> int | None:
        return self._row_of.get(chunk_id)

    def all_vectors(self) -> np.ndarray:
        if self.vectors.ntotal == 0:
            return np.zeros((0, self.dimension), dtype=np.float32)
        return self.vectors.reconstruct_n(0, self.vectors.ntotal)


def current_version(root: Path) -> str | None:
    """The live version's name, checked (see file_checks.read_current); None if no index."""
    return read_current(root)


@dataclass(kw_only=True)
class Catalogue:
    """The light part of a version: manifest, file records and chunks, all checked; the
    vectors and the keyword index are not loaded (a no-change ingest never needs them)."""

    version: str
    directory: Path
    manifest: dict[str, Any]
    files: dict[str, FileRecord]
    chunks: list[Chunk]


def read_catalogue(
    root: str | Path, *, embedding_model: str | None = None, dimension: int | None = None
) -> Catalogue:
    """Open the live version's manifest, file records and chunks, checking everything it
    reads first (store/file_checks.py) and (if given) the embedding model.

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
        check_checksums(root, vdir, manifest, parts)
        check_faiss_header(root, vdir / "vectors.faiss", size, count)
        check_bm25_arrays(root, vdir, count)
        chunks = read_chunks(root, vdir / "chunks.jsonl", count)
        files = read_files(root, vdir / "files.json", {c.id for c in chunks})
    except OSError as exc:  # a part vanished or cannot be read
        raise damaged(root, f"{Path(exc.filename or '?').name} cannot be read") from exc
    return Catalogue(
        version=version, directory=vdir, manifest=manifest, files=files, chunks=chunks
    )


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
    import faiss

    vdir = catalogue.directory
    # The checks above bound what the parsers below get; they still run inside a net.
    part = "vectors.faiss"
    try:
        vectors = faiss.read_index(str(vdir / "vectors.faiss"))
        part = "bm25/"
        bm25 = bm25s.BM25.load(str(vdir / "bm25"), load_corpus=False, allow_pickle=False)
    except (OSError, ValueError, TypeError, KeyError, AttributeError, RuntimeError) as exc:
        raise damaged(root, f"{part} cannot be read ({exc})") from exc
    return Index(
        path=root,
        version=catalogue.version,
        manifest=catalogue.manifest,
        chunks=catalogue.chunks,
        files=catalogue.files,
        vectors=vectors,
        bm25=bm25,
    )


def write_index(
    root: str | Path,
    *,
    chunks: list[Chunk],
    vectors: np.ndarray,
    files: dict[str, FileRecord],
    manifest: dict[str, Any],
) -> str:
    """Write a new version beside the live one and publish it; returns the version name."""
    root = Path(root)
    with writer_lock(root):
        return _write_version(root, chunks, vectors, files, manifest)


def _write_version(
    root: Path,
    chunks: list[Chunk],
    vectors: np.ndarray,
    files: dict[str, FileRecord],
    manifest: dict[str, Any],
) -> str:
    import faiss

    versions = root / "versions"
    versions.mkdir(parents=True, exist_ok=True)
    try:
        previous = current_version(root)
    except IndexCorrupt:
        previous = None  # a damaged pointer is replaced, not kept
    staging = Path(tempfile.mkdtemp(prefix=".staging-", dir=versions))
    try:
        with (staging / "chunks.jsonl").open("w", encoding="utf-8") as handle:
            for chunk in chunks:
                handle.write(json.dumps(chunk.to_dict(), ensure_ascii=False) + "\n")
        (staging / "files.json").write_text(
            json.dumps({s: r.__dict__ for s, r in sorted(files.items())}, indent=1), "utf-8"
        )
        flat = faiss.IndexFlatIP(int(manifest["embedding"]["dimension"]))
        if len(chunks):
            flat.add(np.ascontiguousarray(vectors, dtype=np.float32))
        faiss.write_index(flat, str(staging / "vectors.faiss"))
        _write_bm25(staging / "bm25", chunks)
        manifest = {
            **manifest,
            "format_version": FORMAT_VERSION,
            "counts": {"files": len(files), "chunks": len(chunks)},
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
        for path in staging.rglob("*"):
            if path.is_file():
                _fsync(path)
        version = (
            time.strftime("v%Y%m%dT%H%M%S", time.gmtime()) + f"-{os.getpid()}-{staging.name[-6:]}"
        )
        os.rename(staging, versions / version)
        pointer = root / f"CURRENT.{os.getpid()}.{staging.name[-6:]}.tmp"
        try:
            pointer.write_text(version + "\n", encoding="utf-8")
            _fsync(pointer)
            os.replace(pointer, root / "CURRENT")
        finally:
            pointer.unlink(missing_ok=True)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    _prune(versions, keep={version, previous} - {None})
    return version


def _write_bm25(directory: Path, chunks: list[Chunk]) -> None:
    corpus_tokens = [keyword_tokens(embedding_text(c)) or ["\x00empty"] for c in chunks]
    import bm25s

    model = bm25s.BM25()
    if chunks:
        model.index(corpus_tokens, show_progress=False)
    else:
        model.index([["\x00empty"]], show_progress=False)
    model.save(str(directory), allow_pickle=False)


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
        try:
            if current_version(self.root) is None:
                return None
            catalogue = read_catalogue(self.root)
        except IndexError_:
            return None
        return PreviousState(
            version=catalogue.version,
            manifest=catalogue.manifest,
            files=catalogue.files,
            lookup=_faiss_lookup(self.root, catalogue.version),
        )

    def publish(
        self,
        *,
        entries: list[tuple[Chunk, Any]],
        files: dict[str, FileRecord],
        manifest: dict[str, Any],
        embedding_dimension: int,
        on_failure: FileFailure | None = None,
    ) -> str:
        """Files take every chunk the pipeline checked, so `on_failure` is never called."""
        vectors = np.zeros((len(entries), embedding_dimension), dtype=np.float32)
        for i, (_, vec) in enumerate(entries):
            vectors[i] = vec
        return write_index(
            self.root,
            chunks=[chunk for chunk, _ in entries],
            vectors=vectors,
            files=files,
            manifest=manifest,
        )


def _faiss_lookup(root: Path, version: str) -> Lookup:
    """Chunks and vectors of `version`, loaded on the first call: ingest asks for them only
    when it writes a new version, so a run with nothing to do never reads the vectors."""
    loaded: dict[str, Any] = {}

    def lookup(ids: list[str], partial: bool) -> list[tuple[Chunk, Any]] | None:
        if "index" not in loaded:
            try:
                index: Index | None = load_index(root)
            except IndexError_:
                index = None
            if index is not None and index.version != version:
                index = None  # replaced since ingest started: reuse nothing from it
            loaded["index"] = index
            loaded["vectors"] = index.all_vectors() if index is not None else None
        index = loaded["index"]
        if index is None:
            return [] if partial else None
        rows = [index.row(cid) for cid in ids]
        if not partial and any(r is None for r in rows):
            return None
        return [(index.chunks[r], loaded["vectors"][r]) for r in rows if r is not None]

    return lookup


class FilesReader:
    """Searches one loaded version in memory; thread-safe, as a loaded version never changes.

    Its selection is a boolean row mask, computed once per request and shared by every
    search of that request.
    """

    def __init__(self, index: Index) -> None:
        self.index = index
        self.location = str(index.path)
        self.version = index.version
        self.manifest = index.manifest
        self._n = len(index.chunks)
        self._doc_freq = np.diff(np.asarray(index.bm25.scores["indptr"]))
        self._all_vectors: np.ndarray | None = None

    def select(self, caller: Caller, filters: Filters | None = None) -> np.ndarray:
        return np.fromiter(
            (
                caller.may_see(c) and (filters is None or filters.matches(c))
                for c in self.index.chunks
            ),
            dtype=bool,
            count=self._n,
        )

    def keyword(self, query: str, k: int, selection: np.ndarray) -> list[Hit]:
        """BM25 over the stored keyword index."""
        tokens = [t for t in keyword_tokens(query) if t in self.index.bm25.vocab_dict]
        if not tokens or self._n == 0:
            return []
        scores = np.asarray(self.index.bm25.get_scores(tokens), dtype=np.float32)[: self._n]
        return self._top(np.where(selection & (scores > 0), scores, -np.inf), k)

    def dense(self, vector: np.ndarray, k: int, selection: np.ndarray) -> list[Hit]:
        allowed = np.flatnonzero(selection)
        if len(allowed) == 0 or k <= 0:
            return []
        k = min(k, len(allowed))
        params = None
        selector = None  # must outlive the search: faiss keeps only a raw pointer to it
        if len(allowed) < self._n:
            import faiss

            selector = faiss.IDSelectorBatch(allowed.astype(np.int64))
            params = faiss.SearchParameters()
            params.sel = selector
        scores, rows = self.index.vectors.search(
            vector[None, :].astype(np.float32), k, params=params
        )
        return [
            Hit(self.index.chunks[r], float(s), int(r))
            for s, r in zip(scores[0], rows[0], strict=True)
            if r >= 0
        ]

    def vectors(self, rows: Sequence[int]) -> np.ndarray:
        if self._all_vectors is None:
            self._all_vectors = self.index.all_vectors()
        return self._all_vectors[np.asarray(rows, dtype=np.int64)]

    def document_frequencies(self, tokens: Sequence[str]) -> tuple[int, dict[str, int]]:
        vocab = self.index.bm25.vocab_dict
        return self._n, {
            t: 0 if vocab.get(t) is None else int(self._doc_freq[vocab[t]]) for t in tokens
        }

    def snapshot(self) -> AbstractContextManager[None]:
        return nullcontext()

    def _top(self, scores: np.ndarray, k: int) -> list[Hit]:
        finite = np.flatnonzero(np.isfinite(scores))
        if len(finite) == 0 or k <= 0:
            return []
        k = min(k, len(finite))
        best = finite[np.argpartition(-scores[finite], k - 1)[:k]]
        best = best[np.argsort(-scores[best], kind="stable")]
        return [Hit(self.index.chunks[r], float(scores[r]), int(r)) for r in best]
