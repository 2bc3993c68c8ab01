"""Chunk mentions kept between publishes (store/mention_cache.py): a publish finds again only
the mentions of chunks that changed, and whatever the cache file holds (a forged entry, a
damaged file, a link), the graph is the graph a rebuild gives and the publish goes on."""

from __future__ import annotations

import hashlib
import json
import sqlite3
import stat
from pathlib import Path

import pytest

from footnote.ingest.pipeline import ingest
from footnote.store import graph_files
from footnote.store.files import load_index
from footnote.store.mention_cache import CACHE_FILE
from tests.test_communities import DOCS, write_docs

FORGED = "Zephyrine Vault"


@pytest.fixture
def counted(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The ids of the chunks whose mentions are found from their text."""
    found: list[str] = []
    real = graph_files.chunk_mentions

    def counting(title: str, section: str, text: str, matcher: object) -> object:
        found.append(title)
        return real(title, section, text, matcher)  # type: ignore[arg-type]

    monkeypatch.setattr(graph_files, "chunk_mentions", counting)
    return found


def graph_bytes(index: Path) -> dict[str, bytes]:
    version = (index / "CURRENT").read_text().strip()
    folder = index / "versions" / version / "graph"
    return {path.name: path.read_bytes() for path in sorted(folder.iterdir())}


def rebuilt(folder: Path, tmp_path: Path) -> dict[str, bytes]:
    """The graph of the folder as it is now, built into a new index with no cache."""
    index = tmp_path / f"rebuilt-{len(list(tmp_path.glob('rebuilt-*')))}"
    ingest([folder], index)
    return graph_bytes(index)


def chunk_count(index: Path) -> int:
    return len(load_index(index).chunk_ids())


def test_a_change_finds_only_its_chunks_mentions_and_the_graph_a_rebuild_gives(
    tmp_path: Path, counted: list[str]
) -> None:
    folder, index = write_docs(tmp_path / "docs", DOCS), tmp_path / "index"
    ingest([folder], index)
    assert len(counted) == chunk_count(index)  # the first publish finds every chunk's
    counted.clear()
    changed = {**DOCS, "travel.md": DOCS["travel.md"] + "\nThe People Team also pays taxis.\n"}
    ingest([write_docs(folder, changed)], index)
    assert counted == ["Travel expenses"]  # one document changed, one chunk found again
    counted.clear()
    assert graph_bytes(index) == rebuilt(folder, tmp_path)


def test_a_new_title_finds_every_chunks_mentions_again(tmp_path: Path, counted: list[str]) -> None:
    """Any chunk may name a new document's title (a link), so no entry survives one."""
    folder, index = write_docs(tmp_path / "docs", DOCS), tmp_path / "index"
    ingest([folder], index)
    counted.clear()
    vault = {**DOCS, "vault.md": "# Key vault\n\nThe vault holds keys.\n"}
    ingest([write_docs(folder, vault)], index)
    assert len(counted) == chunk_count(index)
    assert graph_bytes(index) == rebuilt(folder, tmp_path)


def _forge(cache: Path, payload: str, *, fix_check: bool) -> int:
    """Every entry's mentions replaced by `payload`; its check recomputed the way anyone
    without FOOTNOTE_INDEX_KEY can, or left stale."""
    db = sqlite3.connect(cache)
    with db:
        keys = [key for (key,) in db.execute("SELECT key FROM mentions")]
        for key in keys:
            check = hashlib.sha256(key + payload.encode()).digest() if fix_check else b"stale"
            db.execute("UPDATE mentions SET mentions = ?, check_ = ? WHERE key = ?",
                       (payload, check, key))  # fmt: skip
    db.close()
    return len(keys)


@pytest.mark.parametrize("fix_check", [True, False], ids=["check-recomputed", "check-stale"])
def test_a_forged_entry_is_found_again_from_the_text(
    tmp_path: Path, counted: list[str], fix_check: bool
) -> None:
    folder, index = write_docs(tmp_path / "docs", DOCS), tmp_path / "index"
    ingest([folder], index)
    key = " ".join(FORGED.lower().split())
    payload = json.dumps([[3, key, FORGED], [0, "api keys", "API keys"]])  # a name; a title
    forged = _forge(index / CACHE_FILE, payload, fix_check=fix_check)
    assert forged == chunk_count(index)
    counted.clear()
    changed = {**DOCS, "leave.md": DOCS["leave.md"] + "\nLeave carries over to March.\n"}
    ingest([write_docs(folder, changed)], index)
    assert len(counted) == chunk_count(index)  # nothing forged was taken
    graph = graph_bytes(index)
    assert FORGED.encode() not in graph["entities.names.json"]
    assert graph == rebuilt(folder, tmp_path)


def test_a_damaged_cache_is_replaced_and_a_linked_one_left_alone(
    tmp_path: Path, counted: list[str]
) -> None:
    folder, index = write_docs(tmp_path / "docs", DOCS), tmp_path / "index"
    ingest([folder], index)
    cache = index / CACHE_FILE
    cache.write_bytes(b"not a database, " * 100)
    ingest([write_docs(folder, {**DOCS, "keys.md": DOCS["keys.md"] + "\nKeys expire.\n"})], index)
    assert cache.read_bytes().startswith(b"SQLite format 3\x00")
    assert graph_bytes(index) == rebuilt(folder, tmp_path)

    elsewhere = tmp_path / "elsewhere.sqlite"
    elsewhere.write_bytes(b"someone else's file")
    cache.unlink()
    cache.symlink_to(elsewhere)
    counted.clear()
    ingest([write_docs(folder, DOCS)], index)
    assert len(counted) == chunk_count(index)  # published without the cache
    assert cache.is_symlink() and elsewhere.read_bytes() == b"someone else's file"
    assert graph_bytes(index) == rebuilt(folder, tmp_path)


def test_the_cache_is_private_and_keeps_only_the_last_publishs_chunks(tmp_path: Path) -> None:
    folder, index = write_docs(tmp_path / "docs", DOCS), tmp_path / "index"
    ingest([folder], index)
    ingest([write_docs(folder, {k: v for k, v in DOCS.items() if k != "leave.md"})], index)
    cache = index / CACHE_FILE
    assert stat.S_IMODE(cache.stat().st_mode) == 0o600
    with sqlite3.connect(cache) as db:
        (entries,) = db.execute("SELECT count(*) FROM mentions").fetchone()
    assert entries == chunk_count(index)
