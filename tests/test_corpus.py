"""The corpus, managed: sources remembered by the index; add, remove, sources and sync;
ingest never deleting what another root gave; two roots with the same relative names; the
per-file budget covering embedding; LangChain documents and a langchain-community loader.
Every test that touches the store runs on both backends (files and a real PostgreSQL)."""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import footnote
from footnote.ingest import corpus
from footnote.ingest.pipeline import ingest
from footnote.store.types import Caller
from footnote.tools.search import SearchRequest, search
from tests.conftest import REPO, Locate, RunCli, footnote_command


def found(
    index: str, query: str, *, groups: tuple[str, ...] = ("everyone",), admin: bool = False
) -> set[str]:
    hits = search(
        SearchRequest(
            query=query,
            index_dir=index,
            k=50,
            stage="bm25",
            caller=Caller(groups=frozenset(groups), admin=admin),
        )
    )
    return {hit.chunk.source for hit in hits}


def write(folder: Path, name: str, text: str) -> Path:
    path = folder / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_ingest_of_one_file_deletes_nothing_else(locate: Locate, tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    for n in range(4):
        write(docs, f"d{n}.md", f"# D{n}\n\nPage {n} about quokka number {n}.\n")
    index = locate()
    assert len(ingest([docs], index).added) == 4
    new = write(tmp_path, "newdoc.md", "# New\n\nA quokka joined.\n")
    summary = ingest([new], index)
    assert (summary.added, summary.deleted) == (["newdoc.md"], [])
    assert found(index, "quokka") == {"d0.md", "d1.md", "d2.md", "d3.md", "newdoc.md"}
    again = ingest([docs], index)  # the folder again: newdoc.md came from another root
    assert again.deleted == [] and sorted(again.unchanged) == ["d0.md", "d1.md", "d2.md", "d3.md"]
    assert "newdoc.md" in found(index, "quokka")


def test_two_roots_with_the_same_relative_name_are_both_kept(
    locate: Locate, tmp_path: Path
) -> None:
    for root, word in (("a", "alpha"), ("b", "bravo")):
        write(tmp_path / root, "README.md", f"# Readme\n\nThe {word} walrus page.\n")
    index = locate()
    summary = ingest([tmp_path / "a", tmp_path / "b"], index)
    assert sorted(summary.added) == ["README.md", "b/README.md"] and not summary.skipped
    assert found(index, "alpha walrus") >= {"README.md"}
    hits = search(SearchRequest(query="bravo walrus", index_dir=index, k=1, stage="bm25"))
    assert hits[0].chunk.source == "b/README.md" and "bravo" in hits[0].chunk.text
    again = ingest([tmp_path / "b", tmp_path / "a"], index)  # names are stable across runs
    assert (
        sorted(again.unchanged) == ["README.md", "b/README.md"] and again.version == summary.version
    )


def test_add_sources_sync_and_remove(locate: Locate, tmp_path: Path) -> None:
    docs, notes = tmp_path / "docs", tmp_path / "notes"
    write(docs, "keep.md", "# Keep\n\nThe heron stays.\n")
    write(docs, "change.md", "# Change\n\nThe heron version one.\n")
    write(docs, "gone.md", "# Gone\n\nThe heron leaves.\n")
    write(docs, "old-name.md", "# Renamed\n\nThe heron moves house.\n")
    write(docs, "skip/draft.md", "# Draft\n\nThe heron draft.\n")
    write(notes, "n.md", "# Note\n\nThe heron note for hr.\n")
    index = locate()
    first = corpus.add(index, [docs], exclude=["skip/*"])
    assert sorted(first.added) == ["change.md", "gone.md", "keep.md", "old-name.md"]
    assert "skip/draft.md" in first.skipped
    corpus.add(index, [notes], access=["hr"])
    assert found(index, "heron") == {"change.md", "gone.md", "keep.md", "old-name.md"}
    assert "n.md" in found(index, "heron", groups=("hr",))
    listing = corpus.sources(index)
    assert [(s["kind"], s["id"], s["documents"]) for s in listing["sources"]] == [
        ("folder", str(docs), 4),
        ("folder", str(notes), 1),
    ]
    assert listing["sources"][0]["exclude"] == ["skip/*"]
    by_name = {d["source"]: d for d in listing["documents"]}
    assert by_name["n.md"]["access"] == ["hr"] and by_name["keep.md"]["access"] == ["everyone"]
    assert by_name["keep.md"]["chunks"] >= 1 and by_name["keep.md"]["ingested_at"]

    unchanged = corpus.sync(index)
    assert unchanged.version == listing["version"] and unchanged.embedded_chunks == 0

    write(docs, "change.md", "# Change\n\nThe heron version two.\n")
    write(docs, "new.md", "# New\n\nA new heron arrives.\n")
    (docs / "gone.md").unlink()
    (docs / "old-name.md").rename(docs / "new-name.md")
    synced = corpus.sync(index)
    assert synced.updated == ["change.md"]
    assert sorted(synced.added) == ["new-name.md", "new.md"]
    assert synced.deleted_why == {
        "gone.md": f"no longer in {docs}",
        "old-name.md": "renamed to new-name.md",
    }
    assert "n.md" in synced.unchanged  # the other root was read too, and kept
    assert found(index, "heron", groups=("everyone", "hr")) == {
        "change.md",
        "keep.md",
        "new.md",
        "new-name.md",
        "n.md",
    }

    removed = corpus.remove(index, ["keep.md"])
    assert removed.deleted == ["keep.md"] and removed.deleted_why["keep.md"].startswith("removed")
    assert corpus.sync(index).added == []  # a removed document stays removed
    gone_root = corpus.remove(index, [str(notes)])
    assert gone_root.deleted == ["n.md"]
    assert [s["id"] for s in corpus.sources(index)["sources"]] == [str(docs)]


def test_a_root_that_cannot_be_read_keeps_its_documents(locate: Locate, tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    write(docs, "a.md", "# A\n\nThe ibis page.\n")
    index = locate()
    corpus.add(index, [docs])
    os.rename(docs, tmp_path / "moved")
    summary = corpus.sync(index)
    assert summary.deleted == [] and str(docs) in summary.failed
    assert found(index, "ibis") == {"a.md"}


def test_front_matter_access_change_of_a_root_rereads_it(locate: Locate, tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    write(docs, "a.md", "# A\n\nThe okapi page.\n")
    index = locate()
    corpus.add(index, [docs])
    assert found(index, "okapi") == {"a.md"}
    again = corpus.add(index, [docs], access=["finance"])
    assert again.updated == ["a.md"]
    assert found(index, "okapi") == set() and found(index, "okapi", groups=("finance",)) == {"a.md"}


class BudgetClock:
    """`time` as the file budget reads it (ingest/limits.py) and as the embedding steps are
    timed (models/cached.py): the real monotonic clock, plus what the slow model has spent."""

    def __init__(self) -> None:
        self.spent = 0.0

    def monotonic(self) -> float:
        return time.monotonic() + self.spent


class SlowEmbeddings:
    """The real model, made slow to embed on the budget's clock (no sleeping): the budget
    must count embedding time."""

    def __init__(self, model: Any, delay: float, clock: BudgetClock) -> None:
        self.model, self.delay, self.clock = model, delay, clock

    def __getattr__(self, name: str) -> Any:
        return getattr(self.model, name)

    def embed_array(self, texts: list[str]) -> Any:
        self.clock.spent += self.delay * len(texts) / 64
        return self.model.embed_array(texts)


def test_per_file_budget_covers_embedding(
    locate: Locate, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from footnote.ingest import limits
    from footnote.models import cached, embedding_choice
    from footnote.models.embeddings import load_embeddings

    model = load_embeddings("")
    clock = BudgetClock()
    monkeypatch.setattr(limits, "time", clock)
    monkeypatch.setattr(cached, "time", clock)
    monkeypatch.setattr(
        embedding_choice, "load_embeddings", lambda name: SlowEmbeddings(model, 4.0, clock)
    )
    docs = tmp_path / "docs"
    big = "\n\n".join(f"## Part {i}\n\nThe narwhal paragraph number {i}." for i in range(300))
    write(docs, "big.md", f"# Big\n\n{big}\n")
    write(docs, "small.md", "# Small\n\nThe narwhal in brief.\n")
    index = locate()
    summary = ingest([docs], index, max_seconds=3)
    assert summary.added == ["small.md"]
    assert "time budget exceeded" in summary.failed["big.md"]
    assert "embedding" in summary.failed["big.md"]
    assert found(index, "narwhal", admin=True) == {"small.md"}  # nothing of big.md published
    assert summary.embedded_chunks == summary.chunks


def test_add_documents_from_a_langchain_loader(locate: Locate, tmp_path: Path) -> None:
    from langchain_community.document_loaders import TextLoader
    from langchain_core.documents import Document

    path = write(tmp_path, "pelican.txt", "The pelican handbook says pouches hold fish.\n")
    loaded = TextLoader(str(path)).load()
    assert loaded[0].metadata["source"] == str(path)
    pages = [
        Document(
            "Payroll runs on the 25th; pelicans are paid in fish.",
            metadata={"source": "payroll.pdf", "page": 0, "access": ["hr"]},
        ),
        Document(
            "Overtime for pelicans needs approval.",
            metadata={"source": "payroll.pdf", "page": 1, "access": ["hr"]},
        ),
        Document(
            "The public pelican page.",
            metadata={"source": "https://example.org/pelicans", "title": "Pelicans"},
        ),
        Document("Hidden pelican access.", metadata={"source": "bad.md", "Access": ["x"]}),
    ]
    index = locate()
    summary = footnote.replace_documents(index, [*loaded, *pages])  # the public API
    assert sorted(summary.added) == ["bad.md", "example.org/pelicans", "payroll.pdf", "pelican.txt"]
    assert "bad.md" in summary.restricted
    assert found(index, "pelican") == {"pelican.txt", "example.org/pelicans"}
    hits = search(
        SearchRequest(
            query="pelican overtime approval",
            index_dir=index,
            k=1,
            stage="bm25",
            caller=Caller(groups=frozenset({"hr"})),
        )
    )
    assert hits[0].chunk.source == "payroll.pdf" and hits[0].chunk.page == 2
    web = search(SearchRequest(query="public pelican page", index_dir=index, k=1, stage="bm25"))
    assert web[0].chunk.url == "https://example.org/pelicans" and web[0].chunk.title == "Pelicans"
    listing = corpus.sources(index)
    assert listing["sources"][0]["id"] == "documents:documents"
    again = corpus.replace_documents(index, [*loaded, *pages])
    assert again.added == [] and again.version == summary.version
    assert corpus.sync(index).deleted == []  # documents handed in cannot be re-read: kept
    fewer = footnote.replace_documents(index, loaded)
    assert sorted(fewer.deleted) == ["bad.md", "example.org/pelicans", "payroll.pdf"]
    assert fewer.deleted_why["payroll.pdf"] == "no longer in documents:documents"


def test_add_documents_appends_and_returns_ids_as_langchain_does(
    locate: Locate, tmp_path: Path
) -> None:
    """LangChain's `VectorStore.add_documents` conventions: a second call adds to the first,
    one id comes back per document in order (given ids, then `Document.id`, then the source,
    else a fresh uuid), an id already there is replaced, and `delete(ids)` removes them."""
    import uuid

    from langchain_core.documents import Document

    index = locate()
    first = footnote.add_documents(
        index,
        [
            Document("Walruses sleep on ice floes.", metadata={"source": "walrus.md"}),
            Document("Narwhal tusks are teeth.", id="narwhal-1"),
            Document("Belugas sing under the ice."),  # no id, no source
        ],
    )
    assert first[:2] == ["walrus.md", "narwhal-1"]
    assert str(uuid.UUID(first[2])) == first[2]
    second = footnote.add_documents(
        index,
        [
            Document("Orcas hunt in pods.", metadata={"source": "orca.md"}),
            Document("Orca calves stay with their mothers.", metadata={"source": "orca.md"}),
        ],
        ids=["orca", "orca"],  # one indexed document with two sections
    )
    assert second == ["orca", "orca"]
    assert found(index, "walruses ice") >= {"walrus.md"}, "the first batch is still there"
    assert {"walrus.md", "narwhal-1", "orca.md"} <= found(index, "walruses narwhal orcas")
    listing = corpus.sources(index)
    assert {d["origin"] for d in listing["documents"]} == {*first, "orca"}
    assert [s["id"] for s in listing["sources"]] == ["documents:documents"]

    # An id already there is replaced (upsert), not added twice.
    footnote.add_documents(index, [Document("Narwhals live in the Arctic.", id="narwhal-1")])
    assert found(index, "narwhals arctic") == {"narwhal-1"}
    assert not found(index, "tusks teeth")
    assert len(corpus.sources(index)["documents"]) == 4

    # delete(ids) removes exactly those; an unknown id makes it return False.
    assert footnote.delete(index, ["narwhal-1", first[2]]) is True
    assert footnote.delete(index, ["never-added"]) is False
    left = {d["origin"] for d in corpus.sources(index)["documents"]}
    assert left == {"walrus.md", "orca"}
    assert found(index, "orcas pods calves") == {"orca.md"}

    with pytest.raises(ValueError, match="2 ids for 1 documents"):
        footnote.add_documents(index, [Document("x")], ids=["a", "b"])


def test_cli_add_sources_remove_sync_json(locate: Locate, tmp_path: Path, run_cli: RunCli) -> None:
    docs = tmp_path / "docs"
    write(docs, "a.md", "# A\n\nThe gecko page.\n")
    write(docs, "b.md", "# B\n\nThe second gecko page.\n")
    index = locate()
    added = run_cli("add", str(docs), "--index", index, "--access", "eng", "--json")
    assert added.returncode == 0, added.stderr
    assert json.loads(added.stdout)["added"] == 2
    listed = run_cli("sources", "--index", index, "--json")
    listing = json.loads(listed.stdout)
    assert listing["sources"][0]["access"] == ["eng"] and len(listing["documents"]) == 2
    text = run_cli("sources", "--index", index)
    assert "a.md: 1 chunks" in text.stdout and "access eng" in text.stdout
    removed = run_cli("remove", "a.md", "--index", index)
    assert (
        removed.returncode == 0 and "deleted: a.md: removed by `footnote remove`" in removed.stdout
    )
    (docs / "b.md").unlink()
    synced = run_cli("sync", "--index", index, "--json")
    result = json.loads(synced.stdout)
    assert result["deletions"] == [{"source": "b.md", "reason": f"no longer in {docs}"}]


def test_sync_watch_picks_up_a_change(locate: Locate, tmp_path: Path, run_cli: RunCli) -> None:
    docs = tmp_path / "docs"
    write(docs, "a.md", "# A\n\nThe tapir page.\n")
    index = locate()
    assert run_cli("add", str(docs), "--index", index, "--quiet").returncode == 0
    env = {**os.environ, "TOKENIZERS_PARALLELISM": "false"}
    proc = subprocess.Popen(
        [
            *footnote_command(),
            "sync",
            "--index",
            index,
            "--watch",
            "--json",
            "--quiet",
            "--debounce",
            "0.2",
        ],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        first = _read_json(proc)
        assert first["unchanged"] == 1
        assert proc.stderr is not None  # --quiet: the watch's own line is all stderr holds
        assert proc.stderr.readline() == (
            f"footnote: watching 1 source(s) for changes ({docs}); Ctrl-C stops\n"
        )
        _write_until_seen(proc, lambda: write(docs, "b.md", "# B\n\nA second tapir.\n"))
        second = _read_json(proc)
        assert second["files"]["added"] == ["b.md"], second
    finally:
        os.kill(proc.pid, signal.SIGINT)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()
    assert found(index, "tapir") == {"a.md", "b.md"}


def _write_until_seen(
    proc: subprocess.Popen[str], change: Callable[[], None], timeout: float = 60
) -> None:
    """Make the change, again each half second, until the watcher starts printing a summary:
    it announces the watch just before the operating system's watch is in place, so the
    first change may come too early to be seen."""
    assert proc.stdout is not None
    deadline = time.monotonic() + timeout
    while True:
        change()
        if select.select([proc.stdout], [], [], 0.5)[0]:
            return
        assert time.monotonic() < deadline, "the watcher never saw the change"


def _read_json(proc: subprocess.Popen[str], timeout: float = 120) -> dict[str, Any]:
    """One pretty-printed JSON summary from the watcher's stdout."""
    assert proc.stdout is not None
    lines: list[str] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            raise AssertionError(f"watcher ended: {proc.stderr.read() if proc.stderr else ''}")
        lines.append(line)
        if line.rstrip() == "}":
            return json.loads("".join(lines))
    raise AssertionError("no summary in time")


def test_nothing_readable_leaves_no_index_behind(tmp_path: Path) -> None:
    index = tmp_path / "index"
    missing = ingest([tmp_path / "nope.md"], index)
    assert missing.failed == {str(tmp_path / "nope.md"): "no such file or directory"}
    url = ingest(["http://127.0.0.1:9/page.html"], index)
    assert "loopback, private or link-local" in url.failed["http://127.0.0.1:9/page.html"]
    assert not index.exists() and missing.version is None and url.version is None
