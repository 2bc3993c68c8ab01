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

import hashlib
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

from footnote.store.base import Lookup, PreviousState
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


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def current_version(root: Path) -> str | None:
    try:
        name = (root / "CURRENT").read_text(encoding="utf-8").strip()
    except FileNotFoundError:
        return None
    return name or None


def _manifest_complete(manifest: Any) -> bool:
    embedding = manifest.get("embedding") if isinstance(manifest, dict) else None
    return (
        isinstance(embedding, dict)
        and isinstance(embedding.get("model"), str)
        and isinstance(embedding.get("dimension"), int)
        and isinstance(manifest.get("checksums"), dict)
    )


@dataclass(kw_only=True)
class Catalogue:
    """The light part of a version: its manifest and file records, checksums verified."""

    version: str
    directory: Path
    manifest: dict[str, Any]
    files: dict[str, FileRecord]


def read_catalogue(
    root: str | Path, *, embedding_model: str | None = None, dimension: int | None = None
) -> Catalogue:
    """Open the live version's manifest and file records, checking format, every checksum
    and (if given) the embedding model; vectors and the keyword index are not loaded."""
    root = Path(root)
    version = current_version(root)
    if version is None:
        raise IndexNotFound(
            f"no index at {root}: build one with `footnote ingest PATH --index {root}`"
        )
    vdir = root / "versions" / version
    manifest_path = vdir / "manifest.json"
    try:
        manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise IndexCorrupt(f"index {root}: unreadable manifest ({exc})") from exc
    if not isinstance(manifest, dict):
        raise IndexCorrupt(f"index {root}: the manifest is not a JSON object")
    if manifest.get("format_version") != FORMAT_VERSION:
        raise IndexMismatch(
            f"index {root} has format version {manifest.get('format_version')}, this Footnote "
            f"reads version {FORMAT_VERSION}: rebuild it with `footnote ingest --rebuild`"
        )
    if not _manifest_complete(manifest):
        raise IndexCorrupt(f"index {root}: the manifest lacks required fields; rebuild the index")
    check_embeddings(manifest, root, embedding_model, dimension)
    for name, expected in manifest["checksums"].items():
        target = vdir / name
        if not target.is_file() or target.is_symlink() or _sha256(target) != expected:
            raise IndexCorrupt(
                f"index {root}: {name} is missing or does not match its checksum; the index "
                "was modified or damaged. Rebuild it with `footnote ingest --rebuild`"
            )
    # Checksums only prove the files match the manifest, which whoever wrote them may have
    # forged too: anything that does not parse as what we write is reported as damage.
    try:
        files = {
            source: FileRecord(**record)
            for source, record in json.loads((vdir / "files.json").read_text("utf-8")).items()
        }
    except (OSError, ValueError, TypeError, KeyError, AttributeError) as exc:
        raise IndexCorrupt(
            f"index {root}: files.json cannot be read ({exc}); the index was modified or "
            "damaged. Rebuild it with `footnote ingest --rebuild`"
        ) from exc
    return Catalogue(version=version, directory=vdir, manifest=manifest, files=files)


def load_index(
    root: str | Path, *, embedding_model: str | None = None, dimension: int | None = None
) -> Index:
    """Open the live version, checking format, checksums and (if given) the embedding model."""
    import bm25s
    import faiss

    root = Path(root)
    catalogue = read_catalogue(root, embedding_model=embedding_model, dimension=dimension)
    vdir = catalogue.directory
    part = "chunks.jsonl"
    try:
        chunks = [
            Chunk.from_dict(json.loads(line))
            for line in (vdir / "chunks.jsonl").read_text(encoding="utf-8").splitlines()
            if line
        ]
        part = "vectors.faiss"
        vectors = faiss.read_index(str(vdir / "vectors.faiss"))
        part = "bm25/"
        bm25 = bm25s.BM25.load(str(vdir / "bm25"), load_corpus=False, allow_pickle=False)
    except (OSError, ValueError, TypeError, KeyError, AttributeError, RuntimeError) as exc:
        raise IndexCorrupt(
            f"index {root}: {part} cannot be read ({exc}); the index was modified or "
            "damaged. Rebuild it with `footnote ingest --rebuild`"
        ) from exc
    if vectors.ntotal != len(chunks):
        raise IndexCorrupt(f"index {root}: {vectors.ntotal} vectors for {len(chunks)} chunks")
    return Index(
        path=root,
        version=catalogue.version,
        manifest=catalogue.manifest,
        chunks=chunks,
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
    import faiss

    root = Path(root)
    versions = root / "versions"
    versions.mkdir(parents=True, exist_ok=True)
    previous = current_version(root)
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
                str(p.relative_to(staging)): _sha256(p)
                for p in sorted(staging.rglob("*"))
                if p.is_file()
            },
        }
        (staging / "manifest.json").write_text(json.dumps(manifest, indent=1), "utf-8")
        for path in staging.rglob("*"):
            if path.is_file():
                _fsync(path)
        version = (
            time.strftime("v%Y%m%dT%H%M%S", time.gmtime()) + f"-{os.getpid()}-{staging.name[-6:]}"
        )
        os.rename(staging, versions / version)
        pointer = root / "CURRENT.tmp"
        pointer.write_text(version + "\n", encoding="utf-8")
        _fsync(pointer)
        os.replace(pointer, root / "CURRENT")
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
    """Drop every version but the live one and the one before it (a reader may have opened
    it a moment ago); versions orphaned by a killed publish go too."""
    for built in versions.iterdir():
        if built.is_dir() and not built.name.startswith(".staging-") and built.name not in keep:
            shutil.rmtree(built, ignore_errors=True)
    for leftover in versions.glob(".staging-*"):
        if time.time() - leftover.stat().st_mtime > 3600:
            shutil.rmtree(leftover, ignore_errors=True)


class FilesWriter:
    """The write side of an index directory (the zero-setup default)."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)
        self.location = str(self.root)

    def previous(self) -> PreviousState | None:
        if current_version(self.root) is None:
            return None
        try:
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
    ) -> str:
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
