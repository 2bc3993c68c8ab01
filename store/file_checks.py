"""What the files backend's loader checks before it trusts anything on disk.

An index directory is untrusted input: whoever can write it can point `CURRENT` elsewhere,
plant links, forge the manifest and its checksums, or write array headers that ask for
terabytes. Each check here turns one such edit into an `IndexCorrupt` that says what is
wrong, before the file concerned is parsed or allocated; the loader in files.py calls them
in order. Without an operator key (see `verify_signature`) a consistent forgery of every
file and checksum still loads: the checks guarantee a clear error or a well-formed index,
never a traceback, a path outside the index, or an unbounded allocation.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import re
import stat
import struct
import threading
from collections.abc import Iterable
from math import prod
from pathlib import Path
from typing import Any

import numpy as np

from footnote.store import jsonfile
from footnote.store.columns import FILES as COLUMN_FILES
from footnote.store.types import REBUILD_HINT, Chunk, FileRecord, IndexCorrupt

VERSION_NAME = re.compile(r"v\d{8}T\d{6}-\d{1,10}-[A-Za-z0-9_]{6,16}")
"""How write_index names a version; CURRENT must hold exactly such a name."""
PART_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}(?:/[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?")
REQUIRED_PARTS = frozenset(
    {
        "chunks.sqlite",
        "files.json",
        "vectors.faiss",
        "bm25/params.index.json",
        "bm25/vocab.index.json",
        "bm25/data.csc.index.npy",
        "bm25/indices.csc.index.npy",
        "bm25/indptr.csc.index.npy",
        *(f"columns/{name}" for name in COLUMN_FILES),
    }
)
EAGER_HASH_BYTES = 32 << 20
"""Parts up to this size are hashed before the index loads. Larger ones (at scale: the
vectors, the chunk database, the BM25 postings, the file records) are checked by header and
exact size at load and hashed by a background thread (`DeferredChecksums`): hashing ~3 GB
at a million chunks would cost seconds per load. Searches fail with IndexCorrupt from the
moment a mismatch is found; file records are not used before their hash is checked."""
ALWAYS_HASHED_AT_LOAD = ("columns/", "bm25/params.index.json", "bm25/vocab.index.json")
"""Hashed at load whatever their size: the access and filter columns decide what a caller
may see, so they are never trusted before their checksum is."""
MAX_CURRENT_BYTES = 256
MAX_MANIFEST_BYTES = 16 << 20
_FAISS_FLAT = (b"IxFI", b"IxF2")
_FAISS_IVF_FLAT = b"IwFl"
_SQLITE_MAGIC = b"SQLite format 3\x00"
_FAISS_HEADER = 37  # fourcc, d (i32), ntotal (i64), two i64, is_trained (u8), metric (i32)
KEY_ENV = "FOOTNOTE_INDEX_KEY"
NPY_HEADERS = threading.Lock()
"""Held around every .npy header read (ours, np.load's, bm25s's): numpy parses headers with
ast.literal_eval, which on CPython 3.11 can fail with "AST constructor recursion depth
mismatch" when two threads run it at once (readers loading while a writer publishes)."""


def damaged(root: Path, what: str) -> IndexCorrupt:
    return IndexCorrupt(f"index {root}: {what}; the index was modified or damaged. {REBUILD_HINT}")


def read_current(root: Path) -> str | None:
    """The live version's name from CURRENT: a plain file naming a version by its pattern."""
    pointer = root / "CURRENT"
    try:
        info = os.lstat(pointer)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise damaged(root, f"CURRENT cannot be read ({exc.strerror})") from exc
    if not stat.S_ISREG(info.st_mode) or info.st_size > MAX_CURRENT_BYTES:
        raise damaged(root, "CURRENT is not a small regular file")
    try:
        name = pointer.read_bytes().decode("ascii").strip()
    except (OSError, UnicodeDecodeError) as exc:
        raise damaged(root, "CURRENT cannot be read") from exc
    if not name:
        return None
    if not VERSION_NAME.fullmatch(name):
        raise damaged(root, f"CURRENT names {name[:80]!r}, which is not a version")
    return name


def version_dir(root: Path, version: str) -> Path:
    """`root/versions/<version>`, refused if it or `versions` is a link or not a folder."""
    versions = root / "versions"
    vdir = versions / version
    for folder in (versions, vdir):
        try:
            info = os.lstat(folder)
        except OSError as exc:
            raise damaged(root, f"{folder.name} is missing ({exc.strerror})") from exc
        if not stat.S_ISDIR(info.st_mode):
            raise damaged(root, f"{folder.relative_to(root)} is a link or not a folder")
    return vdir


def list_parts(root: Path, vdir: Path) -> set[str]:
    """Every file in the version, as `name` or `folder/name`: all regular, none a link."""
    parts: set[str] = set()
    for folder, dirs, names in os.walk(vdir, followlinks=False):
        for name in [*dirs, *names]:
            path = Path(folder) / name
            relative = path.relative_to(vdir).as_posix()
            mode = os.lstat(path).st_mode
            if stat.S_ISDIR(mode):
                continue
            if not stat.S_ISREG(mode):
                raise damaged(root, f"{relative} is a link or a special file")
            parts.add(relative)
    return parts


def read_manifest(root: Path, vdir: Path) -> dict[str, Any]:
    path = vdir / "manifest.json"
    try:
        if os.lstat(path).st_size > MAX_MANIFEST_BYTES:
            raise damaged(root, "the manifest is too large")
        manifest = jsonfile.loads(path.read_bytes().decode("utf-8"))
    except (OSError, ValueError) as exc:
        raise damaged(root, f"unreadable manifest ({exc})") from exc
    if not isinstance(manifest, dict):
        raise damaged(root, "the manifest is not a JSON object")
    return manifest


def check_manifest_fields(root: Path, manifest: dict[str, Any]) -> tuple[int, int]:
    """The manifest's embedding dimension and chunk count, both required and sane."""
    embedding = manifest.get("embedding")
    counts = manifest.get("counts")
    if not (
        isinstance(embedding, dict)
        and isinstance(embedding.get("model"), str)
        and _count(embedding.get("dimension"))
        and 0 < embedding["dimension"] <= 65_536
        and isinstance(counts, dict)
        and _count(counts.get("chunks"))
        and _count(counts.get("files"))
        and isinstance(manifest.get("checksums"), dict)
    ):
        raise damaged(root, "the manifest lacks required fields")
    return int(embedding["dimension"]), int(counts["chunks"])


def _count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def check_checksums(root: Path, vdir: Path, manifest: dict[str, Any], parts: set[str]) -> list[str]:
    """Checksums must cover every part the loader reads, name only files of the version as
    plain relative names, and match: a manifest with missing or path-like entries is
    refused (an emptied `checksums` included). Hashes the parts that must be or are cheap to
    be hashed now (see EAGER_HASH_BYTES) and returns the others, largest first, for
    `DeferredChecksums`; their headers and sizes are the loader's to check meanwhile."""
    checksums: dict[Any, Any] = manifest["checksums"]
    for name, digest in checksums.items():
        if not isinstance(name, str) or not PART_NAME.fullmatch(name) or ".." in name:
            raise damaged(root, f"the manifest's checksums name {str(name)[:80]!r}")
        if not isinstance(digest, str) or not re.fullmatch(r"[0-9a-f]{64}", digest):
            raise damaged(root, f"the checksum of {name} is not a sha256")
    listed = set(checksums)
    missing = REQUIRED_PARTS - listed
    if missing:
        raise damaged(root, f"the manifest has no checksum for {sorted(missing)[0]}")
    absent = listed - parts
    if absent:  # files the version does not hold; files it holds but does not list are
        raise damaged(root, f"{sorted(absent)[0]} is missing")  # never opened
    deferred: list[tuple[int, str]] = []
    for name in sorted(listed):
        size = os.lstat(vdir / name).st_size
        if size > EAGER_HASH_BYTES and not name.startswith(ALWAYS_HASHED_AT_LOAD):
            deferred.append((size, name))
        elif sha256_file(vdir / name) != checksums[name]:
            raise damaged(root, f"{name} does not match its checksum")
    return [name for _, name in sorted(deferred, reverse=True)]


class DeferredChecksums:
    """Hashes the large parts of a loaded version in a background thread.

    Until it finishes, searches read parts whose headers and sizes were checked but whose
    bytes were not (they may rank or word results wrongly; they cannot widen what a caller
    may see, which the columns decide, and those were hashed before loading). Once a
    mismatch is found, `check` raises IndexCorrupt for every later search."""

    def __init__(self, root: Path, vdir: Path, checksums: dict[str, str], names: Iterable[str]):
        self.root = root
        self.names = list(names)
        self.failure: IndexCorrupt | None = None
        self.seconds = 0.0
        self._done = threading.Event()
        if not self.names:
            self._done.set()
            return
        expected = {name: checksums[name] for name in self.names}
        thread = threading.Thread(
            target=self._run, args=(vdir, expected), name="footnote-checksums", daemon=True
        )
        thread.start()

    def _run(self, vdir: Path, expected: dict[str, str]) -> None:
        import time

        start = time.perf_counter()
        try:
            for name, digest in expected.items():
                try:
                    matches = sha256_file(vdir / name) == digest
                except OSError:
                    matches = False
                if not matches:
                    self.failure = damaged(self.root, f"{name} does not match its checksum")
                    return
        finally:
            self.seconds = time.perf_counter() - start
            self._done.set()

    def check(self) -> None:
        """Raise IndexCorrupt if a part was found not to match (never waits)."""
        if self.failure is not None:
            raise self.failure

    def wait(self, timeout: float | None = None) -> bool:
        """Wait for every deferred part to be hashed; raise IndexCorrupt on a mismatch.
        False if the timeout passed first."""
        finished = self._done.wait(timeout)
        self.check()
        return finished

    @property
    def done(self) -> bool:
        return self._done.is_set()


def sha256_file(path: Path) -> str:
    """The checksum the manifest records for one part (the writer and the loader share it)."""
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def check_faiss_header(
    root: Path, path: Path, dimension: int, count: int, dense: Any = None
) -> None:
    """The dense index the manifest names (`dense`: flat by default, or IVF with `nlist`
    lists) holding `count` vectors of `dimension`, by its header, the layout of its parts
    and its exact size, before faiss reads it (a forged count would otherwise be allocated
    as claimed)."""
    kind = dense.get("kind") if isinstance(dense, dict) else "flat"
    if kind == "ivf":
        _check_ivf_layout(root, path, dimension, count, dense.get("nlist"))
        return
    if kind != "flat":
        raise damaged(root, f"the manifest names no known dense index ({str(kind)[:40]!r})")
    with path.open("rb") as handle:
        head = handle.read(_FAISS_HEADER + 8)
    size = path.stat().st_size
    if len(head) < _FAISS_HEADER + 8 or head[:4] not in _FAISS_FLAT:
        raise damaged(root, "vectors.faiss is not a flat FAISS index")
    d = int.from_bytes(head[4:8], "little", signed=True)
    ntotal = int.from_bytes(head[8:16], "little", signed=True)
    stored = int.from_bytes(head[_FAISS_HEADER : _FAISS_HEADER + 8], "little")
    if d != dimension or ntotal != count or stored != count * dimension:
        raise damaged(
            root, f"vectors.faiss holds {ntotal} vectors of {d} dimensions, the manifest says "
            f"{count} of {dimension}"
        )  # fmt: skip
    if size != _FAISS_HEADER + 8 + 4 * count * dimension:
        raise damaged(root, "vectors.faiss has the wrong size for its header")


def _check_ivf_layout(root: Path, path: Path, dimension: int, count: int, nlist: Any) -> None:
    """An IndexIVFFlat as write_index lays it out: header, nlist and nprobe, a flat quantizer
    of nlist centroids, an array direct map of `count` rows, array inverted lists whose sizes
    add up to `count`, then exactly the codes and ids of those rows."""
    if not _count(nlist) or not 0 < nlist <= max(count, 1):
        raise damaged(root, "the manifest's IVF list count is not valid")
    size = path.stat().st_size
    wrong = damaged(root, "vectors.faiss is not the IVF index the manifest describes")

    def fields(handle: Any, layout: str) -> tuple[Any, ...]:
        raw = handle.read(struct.calcsize(layout))
        if len(raw) != struct.calcsize(layout):
            raise wrong
        return struct.unpack(layout, raw)

    with path.open("rb") as handle:
        fourcc, d, ntotal, _, _, _, metric = fields(handle, "<4siqqqBi")
        if fourcc != _FAISS_IVF_FLAT or d != dimension or ntotal != count or metric != 0:
            raise wrong
        lists, _nprobe = fields(handle, "<QQ")
        quantizer, qd, qtotal, _, _, _, _, floats = fields(handle, "<4siqqqBiQ")
        if lists != nlist or quantizer not in _FAISS_FLAT or qd != d or qtotal != nlist:
            raise wrong
        if floats != nlist * d:
            raise wrong
        handle.seek(4 * floats, os.SEEK_CUR)
        map_kind, mapped = fields(handle, "<BQ")
        if map_kind != 1 or mapped != count:
            raise wrong
        handle.seek(8 * mapped, os.SEEK_CUR)
        invlists, inv_nlist, code_size, encoding, entries = fields(handle, "<4sQQ4sQ")
        if invlists != b"ilar" or inv_nlist != nlist or code_size != 4 * d:
            raise wrong
        if encoding == b"full" and entries == nlist:
            sizes = fields(handle, f"<{entries}Q")
        elif encoding == b"sprs" and entries % 2 == 0 and entries <= 2 * nlist:
            pairs = fields(handle, f"<{entries}Q")
            sizes = pairs[1::2]
            if any(i >= nlist for i in pairs[0::2]):
                raise wrong
        else:
            raise wrong
        if sum(sizes) != count or handle.tell() + count * (code_size + 8) != size:
            raise wrong


def check_sqlite_header(root: Path, path: Path) -> None:
    """A SQLite database file whose header's page size times page count is its size."""
    with path.open("rb") as handle:
        head = handle.read(100)
    if len(head) < 100 or not head.startswith(_SQLITE_MAGIC):
        raise damaged(root, f"{path.name} is not a SQLite database")
    page = int.from_bytes(head[16:18], "big")
    page = 65_536 if page == 1 else page
    pages = int.from_bytes(head[28:32], "big")
    if head[24:28] != head[92:96] or page * pages != path.stat().st_size:
        raise damaged(root, f"{path.name} has the wrong size for its header")


def check_bm25_arrays(root: Path, vdir: Path, count: int) -> None:
    """bm25s arrays: plain numeric .npy files whose headers agree with their sizes, with the
    vocabulary and with the manifest's chunk count, before numpy allocates them."""
    bm25 = vdir / "bm25"
    try:
        params = jsonfile.loads((bm25 / "params.index.json").read_text("utf-8"))
        vocab = jsonfile.loads((bm25 / "vocab.index.json").read_text("utf-8"))
    except (OSError, ValueError) as exc:
        raise damaged(root, f"bm25/ parameters cannot be read ({exc})") from exc
    if not isinstance(params, dict) or not isinstance(vocab, dict):
        raise damaged(root, "bm25/ parameters are not JSON objects")
    if params.get("num_docs") != max(count, 1):  # an empty index holds one placeholder
        raise damaged(root, f"bm25/ indexes {params.get('num_docs')} documents, not {count}")
    shapes = {name: _npy_shape(root, bm25 / f"{name}.csc.index.npy") for name in
              ("data", "indices", "indptr")}  # fmt: skip
    columns = shapes["indptr"][0] - 1  # bm25s's vocabulary may hold one placeholder more
    if shapes["data"] != shapes["indices"] or columns not in (len(vocab), len(vocab) - 1):
        raise damaged(root, "bm25/ arrays disagree with each other or with the vocabulary")


def check_npy_header(root: Path, path: Path) -> tuple[int, ...]:
    """A plain numeric .npy vector whose header agrees with its size (numpy would otherwise
    allocate what a forged header claims)."""
    return _npy_shape(root, path)


def _npy_shape(root: Path, path: Path) -> tuple[int, ...]:
    with NPY_HEADERS, path.open("rb") as handle:
        try:
            version = np.lib.format.read_magic(handle)
            if version == (1, 0):
                shape, _, dtype = np.lib.format.read_array_header_1_0(handle)
            elif version == (2, 0):
                shape, _, dtype = np.lib.format.read_array_header_2_0(handle)
            else:
                raise ValueError(f"npy format {version}")
        except ValueError as exc:
            raise damaged(root, f"{_part(path)} has no valid .npy header ({exc})") from exc
        header = handle.tell()
    if dtype.hasobject or dtype.kind not in "biuf" or len(shape) != 1:
        raise damaged(root, f"{_part(path)} is not a plain numeric vector")
    if header + prod(shape) * dtype.itemsize != path.stat().st_size:
        raise damaged(root, f"{_part(path)} claims shape {shape}, not what the file holds")
    return tuple(int(n) for n in shape)


def _part(path: Path) -> str:
    return f"{path.parent.name}/{path.name}"


def chunk_problem(chunk: Chunk) -> str | None:
    """What is malformed in a chunk read back from the index, or None."""
    strings = (chunk.id, chunk.text, chunk.source, chunk.title, chunk.section)
    if not all(isinstance(s, str) for s in strings):
        raise TypeError("a text field is not a string")
    optional = {
        "anchor": chunk.anchor, "url": chunk.url, "date": chunk.date, "context": chunk.context
    }  # fmt: skip
    if any(v is not None and not isinstance(v, str) for v in optional.values()):
        return "a malformed anchor, url, date or context"
    if chunk.page is not None and (not isinstance(chunk.page, int) or isinstance(chunk.page, bool)):
        return "a malformed page"
    lines = chunk.lines
    if lines is not None and not (
        isinstance(lines, list) and len(lines) == 2 and all(_count(n) for n in lines)
    ):
        return "malformed lines"
    # Malformed access is not damage: Caller.may_see reads it as admins only (fail closed).
    if not isinstance(chunk.metadata, dict):
        return "malformed metadata"
    return None


def read_files(root: Path, path: Path, chunk_ids: set[str]) -> dict[str, FileRecord]:
    """files.json: one record per source, naming only chunks the version holds."""
    try:
        raw = jsonfile.loads(path.read_bytes().decode("utf-8"))
        if not isinstance(raw, dict):
            raise TypeError("not a JSON object")
        files = {str(source): FileRecord(**record) for source, record in raw.items()}
    except (ValueError, TypeError) as exc:
        raise damaged(root, f"files.json cannot be read ({exc})") from exc
    for source, record in files.items():
        if not (
            isinstance(record.sha256, str)
            and isinstance(record.chunk_ids, list)
            and all(isinstance(c, str) and c in chunk_ids for c in record.chunk_ids)
            and isinstance(record.size, int)
            and isinstance(record.mtime, int | float)
            and (record.restricted is None or isinstance(record.restricted, str))
            and all(
                value is None or isinstance(value, str)
                for value in (record.root, record.origin, record.ingested_at)
            )
            and (record.access is None or isinstance(record.access, list))
            and (
                record.fetch is None
                or (
                    isinstance(record.fetch, dict)
                    and all(isinstance(v, str) for v in record.fetch.values())
                )
            )
        ):
            raise damaged(root, f"files.json has a malformed record for {source[:80]!r}")
    return files


def signature(manifest: dict[str, Any], key: str) -> str:
    """HMAC-SHA256 of the manifest without its signature, in a canonical JSON form."""
    unsigned = {k: v for k, v in manifest.items() if k != "signature"}
    body = json.dumps(unsigned, sort_keys=True, separators=(",", ":")).encode("utf-8")
    return hmac.new(key.encode("utf-8"), body, hashlib.sha256).hexdigest()


def verify_signature(root: Path, manifest: dict[str, Any]) -> None:
    """With FOOTNOTE_INDEX_KEY set, only a manifest signed with that key loads. The checksums
    in a signed manifest then vouch for every file: an edited index is refused."""
    key = os.environ.get(KEY_ENV)
    if not key:
        return
    found = manifest.get("signature")
    if not isinstance(found, str) or not hmac.compare_digest(found, signature(manifest, key)):
        raise IndexCorrupt(
            f"index {root}: the manifest is not signed with {KEY_ENV}; it was edited, or "
            "built without the key. Rebuild it with the key set."
        )
