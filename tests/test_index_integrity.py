"""A tampered index and concurrent writers: cases 8-12 of the integrity issue.

8 CURRENT must name a version folder inside the index, not a path or a link; 9 the
manifest's checksums must be complete and name plain files of the version; 10 forged array
headers, vectors of another dimension and a manifest naming another embedding provider end
in a clear error, never an allocation, a traceback or a provider the file chose; 11 the
PostgreSQL index name is matched whole; 12 one writer at a time, and a reader never sees a
version pruned away. Every tamper case is also run through the CLI: exit status 2, no
traceback.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from unittest import mock

import numpy as np
import pytest

from footnote.store.files import load_index
from footnote.store.lock import writer_lock
from footnote.store.types import IndexCorrupt, IndexError_, IndexMismatch
from footnote.tools.search import SearchRequest, search
from tests.conftest import HANDBOOK, RunCli, footnote_command

QUESTION = "How often do I have to change my API key?"


def vdir_of(index: Path) -> Path:
    return index / "versions" / (index / "CURRENT").read_text().strip()


def rewrite_manifest(index: Path, change: Callable[[dict], None]) -> None:
    path = vdir_of(index) / "manifest.json"
    manifest = json.loads(path.read_text())
    change(manifest)
    path.write_text(json.dumps(manifest))


def rehash(index: Path, name: str) -> None:
    digest = hashlib.sha256((vdir_of(index) / name).read_bytes()).hexdigest()
    rewrite_manifest(index, lambda m: m["checksums"].__setitem__(name, digest))


def tamper_current_absolute(index: Path, tmp: Path) -> None:
    shutil.copytree(index, tmp / "elsewhere")
    (index / "CURRENT").write_text(str(vdir_of(tmp / "elsewhere")) + "\n")


def tamper_current_parent(index: Path, tmp: Path) -> None:
    (index / "CURRENT").write_text("../../etc\n")


def tamper_current_link(index: Path, tmp: Path) -> None:
    (tmp / "pointer").write_text((index / "CURRENT").read_text())
    (index / "CURRENT").unlink()
    (index / "CURRENT").symlink_to(tmp / "pointer")


def tamper_version_link(index: Path, tmp: Path) -> None:
    real = vdir_of(index)
    moved = tmp / "moved-version"
    shutil.move(real, moved)
    real.symlink_to(moved, target_is_directory=True)


def tamper_file_link(index: Path, tmp: Path) -> None:
    path = vdir_of(index) / "files.json"
    (tmp / "files.json").write_bytes(path.read_bytes())
    path.unlink()
    path.symlink_to(tmp / "files.json")


def tamper_emptied_checksums(index: Path, tmp: Path) -> None:
    vdir = vdir_of(index)
    with sqlite3.connect(vdir / "chunks.sqlite") as conn:
        for row, data in conn.execute("SELECT row, data FROM chunks").fetchall():
            chunk = json.loads(data)
            chunk["access"] = ["everyone"]
            conn.execute("UPDATE chunks SET data = ? WHERE row = ?", (json.dumps(chunk), row))
    conn.close()
    values = vdir / "columns" / "access.values.json"
    values.write_text(json.dumps([["everyone"]] * len(json.loads(values.read_text()))))
    rewrite_manifest(index, lambda m: m.__setitem__("checksums", {}))


def tamper_checksum_escape(index: Path, tmp: Path) -> None:
    rewrite_manifest(
        index, lambda m: m["checksums"].__setitem__("../../../../etc/passwd", "0" * 64)
    )


def _claim_huge_shape(index: Path, name: str, descr: str) -> None:
    """Rewrite `name`'s .npy header to claim 100 billion items, keep the real data after it."""
    path = vdir_of(index) / name
    array = np.load(path)
    with path.open("wb") as handle:
        np.lib.format.write_array_header_1_0(
            handle, {"descr": descr, "fortran_order": False, "shape": (100_000_000_000,)}
        )
        handle.write(array.tobytes())
    rehash(index, name)


def tamper_huge_npy_header(index: Path, tmp: Path) -> None:
    _claim_huge_shape(index, "bm25/data.csc.index.npy", "<f4")


def tamper_huge_column_header(index: Path, tmp: Path) -> None:
    _claim_huge_shape(index, "columns/access.rows.npy", "<i4")  # a mask column


def tamper_column_rows_outside(index: Path, tmp: Path) -> None:
    path = vdir_of(index) / "columns" / "access.rows.npy"
    array = np.load(path)
    array[0] = 1 << 30  # a row the index does not hold
    np.save(path, array, allow_pickle=False)
    rehash(index, "columns/access.rows.npy")


def tamper_truncated_sqlite(index: Path, tmp: Path) -> None:
    path = vdir_of(index) / "chunks.sqlite"
    path.write_bytes(path.read_bytes()[:-512])
    rehash(index, "chunks.sqlite")


def tamper_vector_dimension(index: Path, tmp: Path) -> None:
    import faiss

    flat = faiss.IndexFlatIP(8)
    count = json.loads((vdir_of(index) / "manifest.json").read_text())["counts"]["chunks"]
    flat.add(np.ones((count, 8), dtype=np.float32))
    faiss.write_index(flat, str(vdir_of(index) / "vectors.faiss"))
    rehash(index, "vectors.faiss")


def tamper_graph_edge(index: Path, tmp: Path) -> None:
    path = vdir_of(index) / "graph" / "mentions.weight.npy"
    weights = np.load(path)
    weights[0] = 1000.0  # one edge made to outweigh every other
    np.save(path, weights)


TAMPERS = {
    "current-absolute-path": tamper_current_absolute,
    "current-parent-path": tamper_current_parent,
    "current-is-a-link": tamper_current_link,
    "version-folder-is-a-link": tamper_version_link,
    "file-in-version-is-a-link": tamper_file_link,
    "emptied-checksums-and-opened-access": tamper_emptied_checksums,
    "checksum-name-escapes": tamper_checksum_escape,
    "npy-header-claims-huge-shape": tamper_huge_npy_header,
    "vectors-of-another-dimension": tamper_vector_dimension,
    "column-header-claims-huge-shape": tamper_huge_column_header,
    "column-names-rows-outside-the-index": tamper_column_rows_outside,
    "sqlite-shorter-than-its-header": tamper_truncated_sqlite,
    "graph-edge-reweighted": tamper_graph_edge,
}


@pytest.mark.parametrize("tamper", sorted(TAMPERS))
def test_tampered_index_is_refused_clearly(
    tmp_path: Path, handbook_index: Path, run_cli: RunCli, tamper: str
) -> None:
    index = tmp_path / "index"
    shutil.copytree(handbook_index, index, symlinks=True)
    TAMPERS[tamper](index, tmp_path)
    with pytest.raises(IndexCorrupt, match="index") as caught:
        load_index(index)
    if tamper == "checksum-name-escapes":  # refused by its name, before anything is hashed
        assert "checksums name '../../../../etc/passwd'" in str(caught.value)
    result = run_cli("search", QUESTION, "--index", str(index), "--json")
    assert result.returncode == 2, result.stdout + result.stderr
    assert "Traceback" not in result.stderr and "rebuild" in result.stderr.lower()


def test_manifest_cannot_choose_the_embedding_provider(
    tmp_path: Path, handbook_index: Path, run_cli: RunCli
) -> None:
    index = tmp_path / "index"
    shutil.copytree(handbook_index, index)
    rewrite_manifest(
        index, lambda m: m["embedding"].__setitem__("model", "openai:text-embedding-3-small")
    )
    with (
        mock.patch("langchain.embeddings.init_embeddings") as init,
        pytest.raises(IndexMismatch, match="pass them explicitly"),
    ):
        search(SearchRequest(query=QUESTION, index_dir=index))
    init.assert_not_called()
    result = run_cli("search", QUESTION, "--index", str(index))
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr


def test_postgres_index_name_is_matched_whole() -> None:
    from footnote.store.postgres import parse_location

    assert parse_location("postgresql://u@h/db?index=acl").name == "acl"
    for bad in ("acl%0A", "acl%0a", "Acl", "1acl", "acl;drop", "a" * 41):
        with pytest.raises(IndexError_, match="index name"):
            parse_location(f"postgresql://u@h/db?index={bad}")


# --- 12. one writer at a time ---------------------------------------------------------------


def test_second_writer_waits_for_the_lock(tmp_path: Path) -> None:
    index = tmp_path / "index"
    env = {**os.environ, "TOKENIZERS_PARALLELISM": "false"}
    with writer_lock(index):
        proc = subprocess.Popen(
            [*footnote_command(), "ingest", str(HANDBOOK), "--index", str(index), "--json"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        assert proc.stderr is not None
        line = proc.stderr.readline()
        while line and "waiting for another ingest" not in line:
            line = proc.stderr.readline()
        assert f"pid {os.getpid()}" in line, line
        assert not (index / "CURRENT").exists(), "the second writer published while locked"
    out, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, err
    assert json.loads(out)["added"] > 0
    assert len(load_index(index).chunks) > 0


CONCURRENT_WRITER = r"""
import json, sys
from footnote.ingest.pipeline import ingest
summary = ingest([sys.argv[1]], sys.argv[2])
print(json.dumps({"corpus": sys.argv[1], "added": summary.added,
                  "updated": summary.updated, "deleted": summary.deleted}))
"""


def truthful(order: list[dict], before: set[str], final: set[str]) -> bool:
    """Whether the writers' summaries are exactly what changed, applied in this order (they
    run one after the other under the lock; which went first is not recorded). Each writer
    adds its own corpus and deletes nothing: neither root's documents are the other's."""
    state = before
    for report in order:
        if report["deleted"] or report["updated"] or set(report["added"]) & state:
            return False
        state = state | set(report["added"])
    return state == final


def test_concurrent_writers_and_readers_never_see_a_broken_index(tmp_path: Path) -> None:
    """Two writers with different corpora race on one index while readers search; every
    search succeeds, the index ends at one writer's corpus, and each writer's summary is
    true of the version it replaced (the small, fast variant of benchmarks/kill_ingest.py)."""
    corpora = []
    for name in ("a", "b"):
        corpus = tmp_path / name
        shutil.copytree(HANDBOOK, corpus)
        (corpus / f"only-{name}.md").write_text(f"# Only {name}\n\nKey rotation for {name}.\n")
        corpora.append(corpus)
    index = tmp_path / "index"
    from footnote.ingest.pipeline import ingest

    ingest([corpora[0]], index)
    failures: list[str] = []
    stop = threading.Event()

    def read() -> None:
        while not stop.is_set():
            try:
                loaded = load_index(index)
                assert len(loaded.chunks) > 0
            except Exception as exc:  # any failure at all is what this test counts
                failures.append(f"{type(exc).__name__}: {exc}")

    readers = [threading.Thread(target=read) for _ in range(2)]
    for reader in readers:
        reader.start()
    try:
        for _ in range(2):
            before = {c.source for c in load_index(index).chunks}
            procs = [
                subprocess.Popen(
                    [sys.executable, "-c", CONCURRENT_WRITER, str(corpus), str(index)],
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    text=True,
                )
                for corpus in corpora
            ]
            results = []
            for proc in procs:
                out, err = proc.communicate(timeout=600)
                assert proc.returncode == 0, err
                results.append(json.loads(out.strip().splitlines()[-1]))
            final = {c.source for c in load_index(index).chunks}
            assert any(truthful(order, before, final) for order in (results, results[::-1]))
    finally:
        stop.set()
        for reader in readers:
            reader.join()
    assert failures == []
    final = {c.source for c in load_index(index).chunks}
    assert {"only-a.md", "only-b.md", "keys.md", "b/keys.md"} <= final


def test_large_parts_are_hashed_after_load_and_searches_then_refused(
    tmp_path: Path, handbook_index: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With every part above the eager-hash size (as at scale), a tampered chunk database
    loads on its header and size, and its checksum mismatch, found in the background, makes
    every later search end in IndexCorrupt."""
    from footnote.store import file_checks
    from footnote.store.files import FilesReader
    from footnote.store.types import Caller

    monkeypatch.setattr(file_checks, "EAGER_HASH_BYTES", 0)
    index = tmp_path / "index"
    shutil.copytree(handbook_index, index)
    path = vdir_of(index) / "chunks.sqlite"
    data = bytearray(path.read_bytes())
    at = data.index(b"90 days")
    data[at : at + 2] = b"10"
    path.write_bytes(bytes(data))

    loaded = load_index(index)
    assert "chunks.sqlite" in loaded.checksums.names
    with pytest.raises(IndexCorrupt, match="chunks.sqlite does not match its checksum"):
        loaded.checksums.wait(timeout=30)
    reader = FilesReader(loaded)
    with pytest.raises(IndexCorrupt, match="chunks.sqlite"):
        reader.select(Caller(groups=frozenset({"everyone"})))
    with pytest.raises(IndexCorrupt, match="chunks.sqlite"):
        _ = loaded.files


def test_access_columns_are_hashed_at_load_whatever_their_size(
    tmp_path: Path, handbook_index: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from footnote.store import file_checks

    monkeypatch.setattr(file_checks, "EAGER_HASH_BYTES", 0)
    index = tmp_path / "index"
    shutil.copytree(handbook_index, index)
    path = vdir_of(index) / "columns" / "access.values.json"
    path.write_text(json.dumps([["everyone"]] * len(json.loads(path.read_text()))) + " ")
    with pytest.raises(IndexCorrupt, match="columns/access.values.json does not match"):
        load_index(index)
    monkeypatch.undo()
    assert load_index(handbook_index).checksums.names == []  # small: all hashed at load
