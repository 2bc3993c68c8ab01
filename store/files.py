"""The on-disk index: one directory of inspectable files, written atomically, loaded without pickle.

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
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import bm25s
import faiss
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
    signature,
    verify_signature,
    version_dir,
)
from footnote.store.lock import writer_lock
from footnote.store.text import embedding_text, keyword_tokens
from footnote.store.types import (
    FORMAT_VERSION,
    Chunk,
    FileRecord,
    IndexCorrupt,
    IndexError_,
    IndexMismatch,
    IndexNotFound,
)

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
    """The live version's name, checked (see file_checks.read_current); None if no index."""
    return read_current(root)


def check_embeddings(
    manifest: dict[str, Any], root: Path, embedding_model: str | None, dimension: int | None
) -> None:
    """Refuse to search an index with embeddings other than those it was built with."""
    built_with = manifest["embedding"]
    if embedding_model is not None and built_with["model"] != embedding_model:
        raise IndexMismatch(
            f"index {root} was built with embeddings {built_with['model']!r} "
            f"(dimension {built_with['dimension']}), but {embedding_model!r} was requested: "
            "use the same embeddings or rebuild the index with `footnote ingest --rebuild`"
        )
    if dimension is not None and built_with["dimension"] != dimension:
        raise IndexMismatch(
            f"index {root} holds {built_with['dimension']}-dimensional vectors, but the "
            f"embeddings give {dimension}: rebuild the index with these embeddings"
        )


def load_index(
    root: str | Path, *, embedding_model: str | None = None, dimension: int | None = None
) -> Index:
    """Open the live version, checking everything it reads first (store/file_checks.py),
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
            return _load_version(root, version, embedding_model, dimension)
        except IndexCorrupt:
            if attempt == 2 or read_current(root) == version:
                raise
    raise AssertionError("unreachable")


def _load_version(
    root: Path, version: str, embedding_model: str | None, dimension: int | None
) -> Index:
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
        version=version,
        manifest=manifest,
        chunks=chunks,
        files=files,
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
                str(p.relative_to(staging)): _sha256(p)
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


class FaissBackend:
    """The embedded default: one directory of versioned files (this module)."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)
        self.location = str(self.root)

    def writer(self) -> AbstractContextManager[None]:
        return writer_lock(self.root)

    def previous(self) -> PreviousState | None:
        try:
            if current_version(self.root) is None:
                return None
            index = load_index(self.root)
        except IndexError_:
            return None
        return PreviousState(
            version=index.version,
            manifest=index.manifest,
            files=index.files,
            lookup=_faiss_lookup(index),
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


def _faiss_lookup(index: Index) -> Lookup:
    cache: dict[str, np.ndarray] = {}

    def lookup(ids: list[str], partial: bool) -> list[tuple[Chunk, Any]] | None:
        rows = [index.row(cid) for cid in ids]
        if not partial and any(r is None for r in rows):
            return None
        if "all" not in cache:
            cache["all"] = index.all_vectors()
        return [(index.chunks[r], cache["all"][r]) for r in rows if r is not None]

    return lookup
