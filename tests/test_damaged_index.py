"""A damaged live index is refused by every writer, never built on as if it were empty: add,
remove, sync, sync --watch and the served indexer refuse with one line naming `--rebuild`
and leave every byte of the index as it was; `sources` exits non-zero; the remembered
sources survive beside the versions, so `sync --rebuild` brings every document back."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from footnote.graph.indexer import IndexerContext
from footnote.graph.indexer import graph as indexer_graph
from footnote.ingest import corpus
from footnote.store.types import Caller, IndexCorrupt, IndexError_
from footnote.tools.search import SearchRequest, search
from tests.conftest import RunCli
from tests.pg_fixture import PgServer


def _flip_vectors(index: Path) -> None:
    path = _live(index) / "vectors.faiss"
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))


def _truncate_manifest(index: Path) -> None:
    path = _live(index) / "manifest.json"
    path.write_bytes(path.read_bytes()[:40])


DAMAGES: dict[str, Callable[[Path], None]] = {
    "flipped vectors.faiss byte": _flip_vectors,
    "truncated manifest": _truncate_manifest,
}


def _live(index: Path) -> Path:
    return index / "versions" / (index / "CURRENT").read_text().strip()


def _snapshot(index: Path) -> dict[str, bytes]:
    """Every file of the index but the writer's lock file (it holds the last writer's pid),
    by path, with its bytes."""
    return {
        str(p.relative_to(index)): p.read_bytes()
        for p in sorted(index.rglob("*"))
        if p.is_file() and p.relative_to(index) != Path("LOCK")
    }


def _built(tmp_path: Path) -> tuple[Path, Path]:
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "heron.md").write_text("# Heron\n\nThe heron stands in the reeds.\n")
    (docs / "otter.md").write_text("# Otter\n\nThe otter swims under the bridge.\n")
    index = tmp_path / "index"
    corpus.add(index, [docs], access=["staff"])
    return index, docs


def _sources_found(index: Path) -> set[str]:
    hits = search(
        SearchRequest(
            query="heron otter", index_dir=str(index), k=10, stage="bm25", caller=Caller.operator()
        )
    )
    return {h.chunk.source for h in hits}


@pytest.mark.parametrize("damage", list(DAMAGES))
def test_writers_refuse_a_damaged_index_and_leave_it_untouched(tmp_path: Path, damage: str) -> None:
    index, docs = _built(tmp_path)
    (docs / "newt.md").write_text("# Newt\n\nThe newt hides under a stone.\n")
    extra = tmp_path / "extra.md"
    extra.write_text("# Extra\n\nAn extra page.\n")
    DAMAGES[damage](index)
    before = _snapshot(index)
    attempts: dict[str, Callable[[], object]] = {
        "add": lambda: corpus.add(index, [extra]),
        "sync": lambda: corpus.sync(index),
        "remove": lambda: corpus.remove(index, ["heron.md"]),
        "sources": lambda: corpus.sources(index),
        "watch": lambda: next(corpus.watch(index)),
        "served indexer sync": lambda: indexer_graph.invoke(
            {"action": "sync"}, context=IndexerContext(index_dir=str(index))
        ),
        "served indexer add": lambda: indexer_graph.invoke(
            {"action": "add", "sources": [str(extra)]},
            context=IndexerContext(index_dir=str(index), upload_dir=str(tmp_path / "up")),
        ),
    }
    for name, attempt in attempts.items():
        with pytest.raises(IndexCorrupt, match="--rebuild") as refused:
            attempt()
        assert "\n" not in str(refused.value), name
        assert _snapshot(index) == before, f"{name} changed the damaged index"


def test_sync_rebuild_brings_every_remembered_source_back(tmp_path: Path) -> None:
    index, _ = _built(tmp_path)
    remembered = json.loads((index / "sources.json").read_text())
    assert [s["id"] for s in remembered["sources"]] == [str(tmp_path / "docs")]
    _truncate_manifest(index)
    summary = corpus.sync(index, rebuild=True)
    assert sorted(summary.added) == ["heron.md", "otter.md"] and not summary.failed
    assert _sources_found(index) == {"heron.md", "otter.md"}
    listing = corpus.sources(index)
    assert [s["id"] for s in listing["sources"]] == [str(tmp_path / "docs")]
    assert listing["sources"][0]["access"] == ["staff"]  # the root's settings came back too


def test_a_rebuild_with_no_remembered_sources_is_refused_not_published_empty(
    tmp_path: Path,
) -> None:
    index, _ = _built(tmp_path)
    (index / "sources.json").unlink()  # an index from before the sources were kept apart
    _truncate_manifest(index)
    before = _snapshot(index)
    with pytest.raises(IndexError_, match="remembers no sources"):
        corpus.sync(index, rebuild=True)
    assert _snapshot(index) == before


def test_cli_refuses_with_one_line_and_exit_2(tmp_path: Path, run_cli: RunCli) -> None:
    index, docs = _built(tmp_path)
    _flip_vectors(index)
    before = _snapshot(index)
    extra = tmp_path / "extra.md"
    extra.write_text("# Extra\n\nAn extra page.\n")
    for args in (
        ["add", str(extra), "--quiet"],
        ["sync", "--quiet"],
        ["sync", "--watch", "--quiet"],
        ["remove", "heron.md", "--quiet"],
        ["sources"],
    ):
        result = run_cli(*args, "--index", str(index))
        assert result.returncode == 2, (args, result.stdout, result.stderr)
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and "damaged" in lines[0], (args, result.stderr)
        if args[0] != "sources":
            assert "--rebuild" in lines[0], (args, result.stderr)
        assert "0 sources" not in result.stdout
        assert _snapshot(index) == before, f"{args} changed the damaged index"
    rebuilt = run_cli("sync", "--rebuild", "--index", str(index), "--quiet", "--json")
    assert rebuilt.returncode == 0, rebuilt.stderr
    assert json.loads(rebuilt.stdout)["added"] == 2
    assert run_cli("sources", "--index", str(index)).returncode == 0
    assert _sources_found(index) == {"heron.md", "otter.md"}


def test_postgres_index_with_its_chunks_table_gone_is_refused_then_rebuilt(
    pg_server: PgServer, tmp_path: Path
) -> None:
    import psycopg

    from footnote.store.postgres import drop_index, parse_location

    index = f"{pg_server.url}?index=damaged"
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "heron.md").write_text("# Heron\n\nThe heron stands in the reeds.\n")
    try:
        corpus.add(index, [docs])
        where = parse_location(index)
        with psycopg.connect(where.conninfo, autocommit=True) as conn:
            conn.execute(f"DROP TABLE {where.chunks}")
        for attempt in (lambda: corpus.sync(index), lambda: corpus.add(index, [docs])):
            with pytest.raises(IndexCorrupt, match="--rebuild"):
                attempt()
        with pytest.raises(IndexCorrupt):
            corpus.sources(index)
        summary = corpus.sync(index, rebuild=True)
        assert summary.added == ["heron.md"]
        assert [s["id"] for s in corpus.sources(index)["sources"]] == [str(docs)]
    finally:
        drop_index(index)


@pytest.mark.integration
def test_the_served_indexer_names_rebuild_and_writes_no_upload(tmp_path: Path) -> None:
    """On the dev runtime, which hides the message of an error kind it does not know, the
    admin reads the `--rebuild` hint; the upload the refused add carried is not written."""
    from langgraph_sdk import get_sync_client

    from footnote.server.langgraph_dev import running_server
    from tests.served import api_key_team

    index, _ = _built(tmp_path)
    _truncate_manifest(index)
    team = api_key_team(tmp_path)
    uploads = tmp_path / "uploads"
    env = {**team.env, "FOOTNOTE_UPLOAD_DIR": str(uploads)}
    upload = {"name": "memo.md", "content": "IyBNZW1vCg=="}  # "# Memo"
    with running_server(index_dir=str(index), log=tmp_path / "server.log", extra_env=env) as server:
        admin = get_sync_client(url=server.url, headers=team.headers("root"))
        for run_input in ({"action": "add", "uploads": [upload]}, {"action": "sync"}):
            with pytest.raises(Exception, match="--rebuild") as refused:
                admin.runs.wait(None, "indexer", input=run_input)
            assert "internal error" not in str(refused.value)
    assert not (uploads / "memo.md").exists()
