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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import bm25s
import faiss
import numpy as np

from footnote.store.base import Lookup, PreviousState
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
    try:
        name = (root / "CURRENT").read_text(encoding="utf-8").strip()
    except FileNotFoundError:
        return None
    return name or None


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


def _manifest_complete(manifest: Any) -> bool:
    embedding = manifest.get("embedding") if isinstance(manifest, dict) else None
    return (
        isinstance(embedding, dict)
        and isinstance(embedding.get("model"), str)
        and isinstance(embedding.get("dimension"), int)
        and isinstance(manifest.get("checksums"), dict)
    )


def load_index(
    root: str | Path, *, embedding_model: str | None = None, dimension: int | None = None
) -> Index:
    """Open the live version, checking format, checksums and (if given) the embedding model."""
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
    part = "chunks.jsonl"
    try:
        chunks = [
            Chunk.from_dict(json.loads(line))
            # split on "\n" only: JSON leaves U+2028 and NEL raw, and splitlines() cuts at them
            for line in (vdir / "chunks.jsonl").read_text(encoding="utf-8").split("\n")
            if line
        ]
        part = "files.json"
        files = {
            source: FileRecord(**record)
            for source, record in json.loads((vdir / "files.json").read_text("utf-8")).items()
        }
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


class FaissBackend:
    """The embedded default: one directory of versioned files (this module)."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)
        self.location = str(self.root)

    def previous(self) -> PreviousState | None:

        if current_version(self.root) is None:
            return None
        try:
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
