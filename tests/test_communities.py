"""The entity graph's communities (store/communities.py, tools/communities.py): the same
communities on every build and after incremental ingest as after a rebuild, a tampered
community file refused, and nothing of a document a caller may not read in what they see of
them (entities, summary sentences, chunks) — through the view and `footnote graph
--communities`."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from footnote.ingest.pipeline import ingest
from footnote.store.backends import open_reader
from footnote.store.communities import canonical_communities
from footnote.store.files import load_index
from footnote.store.types import Caller, IndexCorrupt
from footnote.tools.communities import CommunityView
from tests.conftest import RunCli

EVERYONE = Caller(groups=frozenset({"everyone"}))
INSIDER = Caller(groups=frozenset({"everyone", "secret"}))
MARKERS = ("Nightjar", "Zephyrine", "Quillfeather")
"""Words only the restricted document holds: in its title, an entity name and a sentence."""

DOCS = {
    "keys.md": "# API keys\n\nAPI keys are rotated every 90 days by the Platform Team. The "
    "Platform Team keeps the key vault.\n\n## Storing keys\n\nKeep API keys in the key vault "
    "that the Platform Team runs.\n",
    "tokens.md": "# Service tokens\n\nService tokens replace API keys for machines. The Platform "
    "Team issues service tokens from the key vault.\n",
    "leave.md": "# Annual leave\n\nAnnual leave is booked in the HR portal. The People Team "
    "approves annual leave within three days.\n\n## Sick days\n\nSick days are recorded in "
    "the HR portal for the People Team.\n",
    "travel.md": "# Travel expenses\n\nTravel expenses are filed in the HR portal within 30 "
    "days. The People Team pays travel expenses monthly.\n",
}
RESTRICTED = (
    "---\naccess: [secret]\n---\n# Nightjar Zephyrine\n\nNightjar Zephyrine moves the key vault "
    "of the Platform Team to Quillfeather Station. The Platform Team rotates API keys for "
    "Nightjar Zephyrine daily.\n"
)


def write_docs(folder: Path, docs: dict[str, str]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for stale in folder.glob("*.md"):
        if stale.name not in docs:
            stale.unlink()
    for name, text in docs.items():
        (folder / name).write_text(text, encoding="utf-8")
    return folder


def communities_of(index: Path) -> list[dict]:
    loaded = load_index(index)
    graph = loaded.graph()
    assert graph is not None
    return canonical_communities(graph.communities, graph.names(), loaded.chunk_ids())


@pytest.fixture(scope="module")
def secret_index(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("communities")
    index = tmp / "index"
    ingest([write_docs(tmp / "docs", {**DOCS, "nightjar.md": RESTRICTED})], index)
    return index


def test_communities_are_deterministic_and_group_related_documents(tmp_path: Path) -> None:
    folder = write_docs(tmp_path / "docs", DOCS)
    ingest([folder], tmp_path / "one")
    ingest([folder], tmp_path / "two")
    first = communities_of(tmp_path / "one")
    assert first == communities_of(tmp_path / "two")
    by_document = {}
    for community in first:
        for chunk_id, _ in community["chunks"]:
            by_document.setdefault(chunk_id.split("#")[0], set()).add(community["id"])
    assert all(len(ids) == 1 for ids in by_document.values())  # a document stays together
    assert by_document["keys.md"] == by_document["tokens.md"]  # keys, vault, Platform Team
    assert by_document["leave.md"] == by_document["travel.md"]  # HR portal, People Team
    assert by_document["keys.md"] != by_document["leave.md"]


def test_incremental_add_change_remove_equals_a_rebuild(tmp_path: Path) -> None:
    folder = tmp_path / "docs"
    index = tmp_path / "index"
    start = {k: DOCS[k] for k in ("keys.md", "leave.md")}
    ingest([write_docs(folder, start)], index)
    steps = [
        {**start, "tokens.md": DOCS["tokens.md"]},  # add: joins the keys community
        {**start, "tokens.md": DOCS["tokens.md"], "travel.md": DOCS["travel.md"]},
        {k: v for k, v in DOCS.items() if k != "keys.md"},  # remove one
    ]
    for number, state in enumerate(steps):
        ingest([write_docs(folder, state)], index)
        incremental = communities_of(index)
        fresh_dir, held = tmp_path / f"fresh-{number}", tmp_path / "held"
        shutil.copytree(folder, fresh_dir)
        shutil.move(str(folder), str(held))
        shutil.move(str(fresh_dir), str(folder))  # same root path, so the same chunk ids
        ingest([folder], tmp_path / f"rebuilt-{number}")
        assert communities_of(tmp_path / f"rebuilt-{number}") == incremental
        shutil.rmtree(folder)
        shutil.move(str(held), str(folder))
    assert not any(c.startswith("keys.md") for cm in incremental for c, _ in cm["chunks"])


def _copy(index: Path, tmp_path: Path) -> tuple[Path, Path]:
    target = tmp_path / f"copy-{len(list(tmp_path.iterdir()))}"
    shutil.copytree(index, target)
    return target, target / "versions" / (target / "CURRENT").read_text().strip()


def _rehash(vdir: Path, name: str) -> None:
    path = vdir / "manifest.json"
    manifest = json.loads(path.read_text())
    manifest["checksums"][name] = hashlib.sha256((vdir / name).read_bytes()).hexdigest()
    path.write_text(json.dumps(manifest))


def test_tampered_community_files_are_refused(secret_index: Path, tmp_path: Path) -> None:
    index, vdir = _copy(secret_index, tmp_path)  # a chunk moved to another community
    path = vdir / "graph" / "communities.chunk.npy"
    array = np.load(path)
    array[0] = (array[0] + 1) % max(int(array.max()) + 1, 2)
    np.save(path, array)
    with pytest.raises(IndexCorrupt, match="graph/communities.chunk.npy does not match"):
        load_index(index)

    index, vdir = _copy(secret_index, tmp_path)  # a consistent forgery: an id out of range
    array = np.load(vdir / "graph" / "communities.entity.npy")
    array[0] = 10**6
    np.save(vdir / "graph" / "communities.entity.npy", array)
    _rehash(vdir, "graph/communities.entity.npy")
    with pytest.raises(IndexCorrupt, match="communities.entity.npy names a community out"):
        load_index(index).graph()

    index, vdir = _copy(secret_index, tmp_path)  # the manifest stops listing a part
    manifest = json.loads((vdir / "manifest.json").read_text())
    del manifest["checksums"]["graph/communities.json"]
    (vdir / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(IndexCorrupt, match="no checksum for graph/communities.json"):
        load_index(index)


def test_a_version_built_before_communities_is_read_without_them(
    secret_index: Path, tmp_path: Path
) -> None:
    """An index published before communities existed lists no community files and its graph
    entry counts none: it is read (the global route groups hits by document), not refused as
    damaged, and the next publish adds them."""
    index, vdir = _copy(secret_index, tmp_path)
    manifest = json.loads((vdir / "manifest.json").read_text())
    del manifest["graph"]["communities"]
    for name in [n for n in manifest["checksums"] if n.startswith("graph/communities")]:
        del manifest["checksums"][name]
        (vdir / name).unlink()
    (vdir / "manifest.json").write_text(json.dumps(manifest))
    graph = load_index(index).graph()
    assert graph is not None and graph.communities is None
    reader = open_reader(index)
    view = CommunityView(reader, reader.select(EVERYONE))
    assert not view.available and view.communities() == []
    docs = write_docs(tmp_path / "docs", {**DOCS, "nightjar.md": RESTRICTED})
    ingest([docs], index)
    republished = load_index(index).graph()
    assert republished is not None and republished.communities is not None


def _shown(index: Path, caller: Caller) -> str:
    reader = open_reader(index)
    view = CommunityView(reader, reader.select(caller))
    return json.dumps([view.summarise(c, 10).to_dict(1000) for c in view.communities()])


def test_a_caller_sees_no_restricted_entity_sentence_or_chunk(secret_index: Path) -> None:
    """The restricted document shares the Platform Team's community; an `everyone` caller's
    view of it has none of its words, while an insider's has them (so they are really
    there)."""
    graph = load_index(secret_index).graph()
    assert graph is not None
    secret_entity = graph.names().index("Nightjar Zephyrine")
    assert graph.communities.entity[secret_entity] >= 0  # it is in a community
    everyone = _shown(secret_index, EVERYONE)
    assert not any(marker in everyone for marker in MARKERS)
    assert "nightjar.md" not in everyone and "daily" not in everyone
    insider = _shown(secret_index, INSIDER)
    assert all(marker in insider for marker in MARKERS[:2]) and "nightjar.md" in insider


def test_footnote_graph_communities(secret_index: Path, run_cli: RunCli) -> None:
    shown = run_cli("graph", "--index", str(secret_index), "--communities", "--json")
    assert shown.returncode == 0, shown.stderr
    result = json.loads(shown.stdout)
    communities = result["communities"]
    assert len(communities) >= 2 and all(c["summary"] for c in communities)
    for community in communities:
        for sentence in community["summary"]:  # cited: the chunk it is quoted from
            assert sentence["chunk_id"].startswith(sentence["source"])
    assert not any(m in shown.stdout for m in MARKERS)
    text = run_cli("graph", "--index", str(secret_index), "--communities")
    assert text.returncode == 0 and "community 0:" in text.stdout
    assert not any(m in text.stdout for m in MARKERS)
    inside = run_cli("graph", "--index", str(secret_index), "--communities", "--groups", "secret")
    assert "Nightjar" in inside.stdout
