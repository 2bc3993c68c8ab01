"""`footnote eval` end to end on a tiny BEIR fixture, with real embeddings and ranx metrics."""

from __future__ import annotations

import argparse
import importlib.util
import json
import shutil
from pathlib import Path

import pytest

from footnote.cli.evaluate import add_eval_command
from footnote.evaluation.retrieval import (
    INDEX_DIR,
    METRICS,
    eval_workspace,
    evaluate_stages,
    load_beir,
    markdown_table,
    prepare_index,
    rank_documents,
    render_passage,
)
from footnote.ingest.parsers import parse_file
from footnote.store.files import load_index
from footnote.store.types import Chunk, Hit
from footnote.tools.retrieval import STAGES, get_retriever
from tests.benchmark_modules import load_benchmark

FIXTURE = Path(__file__).parent / "fixtures" / "beir_tiny"


@pytest.fixture
def dataset(tmp_path: Path) -> Path:
    """A private copy, so the cached docs and index land in tmp_path, not in the repo."""
    target = tmp_path / "beir_tiny"
    shutil.copytree(FIXTURE, target)
    return target


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="footnote")
    sub = parser.add_subparsers(dest="command", required=True)
    add_eval_command(sub, lambda: "/nonexistent/default-index")
    return parser


def _run_cli(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    args = _parser().parse_args(argv)
    code = args.func(args)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _chunk(source: str) -> Chunk:
    return Chunk(id=f"{source}#top:0", text="x", source=source, title="t", section="")


def _hit(source: str, rank: int) -> Hit:
    return Hit(_chunk(source), 1.0 / rank, rank)


def test_load_beir_keeps_only_judged_queries() -> None:
    data = load_beir(FIXTURE)
    assert len(data.corpus) == 8
    assert set(data.queries) == {"q1", "q2", "q3", "q4"}
    assert data.qrels["q1"] == {"keys#rotation": 1}


def test_rendered_passage_stays_one_section(tmp_path: Path) -> None:
    text = "Keep keys in the vault.\n\n# a shell comment\n```\n---"
    path = tmp_path / "p.md"
    path.write_text(render_passage("keys#storing", "API keys", text), encoding="utf-8")
    doc = parse_file(path, "p.md")
    assert doc.title == "API keys"
    assert len(doc.sections) == 1
    assert doc.sections[0].headings == ["API keys"]
    assert "# a shell comment" in doc.sections[0].text


def test_rank_documents_uses_best_chunk_and_dedupes() -> None:
    source_to_id = {"a.md": "A", "b.md": "B", "c.md": "C"}
    hits = [_hit("b.md", 1), _hit("b.md", 2), _hit("zzz.md", 3), _hit("a.md", 4)]
    ranked = rank_documents(hits, source_to_id, k=100)
    assert list(ranked) == ["B", "A"]
    assert ranked["B"] > ranked["A"]


def test_cli_json_end_to_end_and_cached_second_run(
    dataset: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    files_before = sorted(p.relative_to(dataset) for p in dataset.rglob("*"))
    code, out, err = _run_cli(["eval", str(dataset), "--json"], capsys)
    assert code == 0, err
    first = json.loads(out)
    # The passages and the index live in the user's state folder, not beside the dataset
    # (which may be a checkout's tests/fixtures/beir_tiny).
    assert sorted(p.relative_to(dataset) for p in dataset.rglob("*")) == files_before
    workspace = eval_workspace(dataset)
    assert first["index"]["path"] == str(workspace / INDEX_DIR)
    assert first["dataset"] == "beir_tiny"
    assert first["queries"] == 4
    assert first["corpus"] == 8
    assert list(first["stages"]) == list(STAGES)
    for stage, scores in first["stages"].items():
        assert set(scores) == {*METRICS, "latency_ms"}, stage
        for metric in METRICS:
            assert 0.0 <= scores[metric] <= 1.0, (stage, metric)
        assert scores["latency_ms"] >= 0.0
        assert scores["recall@50"] >= scores["recall@10"] >= scores["recall@5"]
    assert first["index"]["embedded_chunks"] == first["index"]["chunks"] > 0
    assert (workspace / INDEX_DIR / "CURRENT").is_file()
    mapping = json.loads((workspace / ".footnote-cache" / "sources.json").read_text("utf-8"))
    assert sorted(mapping.values()) == sorted(load_beir(dataset).corpus)

    code, out, err = _run_cli(["eval", str(dataset), "--json", "--quiet"], capsys)
    assert code == 0, err
    second = json.loads(out)
    assert second["index"]["embedded_chunks"] == 0
    assert second["index"]["chunks"] == first["index"]["chunks"]
    for stage in STAGES:
        for metric in METRICS:
            assert second["stages"][stage][metric] == first["stages"][stage][metric]


def test_table_plot_and_stage_selection(
    dataset: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    plot = tmp_path / "recall.png"
    argv = ["eval", str(dataset), "--stages", "bm25", "dense", "--limit-queries", "2"]
    code, out, err = _run_cli([*argv, "--plot", str(plot), "--quiet"], capsys)
    assert code == 0, err
    assert "| bm25 |" in out and "| dense |" in out and "| hybrid |" not in out
    assert "2 queries, 8 passages" in out
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_perfect_and_second_place_runs_give_hand_checked_ranx_scores(dataset: Path) -> None:
    prepared = prepare_index(dataset, dataset / INDEX_DIR)
    chunks = load_index(prepared.index_dir).chunks
    doc_of = {c.source: prepared.source_to_id[c.source] for c in chunks}
    first_chunk = {doc_of[c.source]: c for c in reversed(chunks)}
    relevant = {qid: next(iter(judged)) for qid, judged in prepared.dataset.qrels.items()}
    query_ids = {text: qid for qid, text in prepared.dataset.queries.items()}

    def ranked(query: str, relevant_rank: int) -> list[Hit]:
        target = relevant[query_ids[query]]
        others = [c for doc, c in first_chunk.items() if doc != target]
        order = others[: relevant_rank - 1] + [first_chunk[target]] + others[relevant_rank - 1 :]
        return [Hit(c, 1.0 / r, r) for r, c in enumerate(order, 1)]

    result = evaluate_stages(
        dataset,
        stages=["oracle", "second", "nothing"],
        runners={
            "oracle": lambda q: ranked(q, 1),
            "second": lambda q: ranked(q, 2),
            "nothing": lambda q: [],
        },
        prepared=prepared,
        progress=False,
    )
    oracle, second, nothing = (result["stages"][s] for s in ("oracle", "second", "nothing"))
    assert oracle["mrr@10"] == pytest.approx(1.0)
    assert oracle["recall@1"] == pytest.approx(1.0)
    assert oracle["ndcg@10"] == pytest.approx(1.0)
    assert second["mrr@10"] == pytest.approx(0.5)
    assert second["recall@1"] == pytest.approx(0.0)
    assert second["recall@5"] == pytest.approx(1.0)
    assert second["ndcg@10"] == pytest.approx(1 / 1.584962500721156)  # 1 / log2(3)
    assert all(nothing[m] == 0.0 for m in METRICS)
    assert "| oracle | 1.000 |" in markdown_table(result)


def test_refuses_an_index_it_did_not_build(
    dataset: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "CURRENT").write_text("v1\n", encoding="utf-8")
    code, _, err = _run_cli(["eval", str(dataset), "--index", str(foreign)], capsys)
    assert code == 2
    assert "did not build" in err
    assert (foreign / "CURRENT").read_text(encoding="utf-8") == "v1\n"


def test_missing_dataset_is_a_user_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = _run_cli(["eval", str(tmp_path / "nope")], capsys)
    assert code == 2
    assert "not a BEIR dataset" in err


@pytest.mark.parametrize(("absent", "plot"), [("ranx", False), ("matplotlib", True)])
def test_without_the_eval_extra_says_what_to_install(
    dataset: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    absent: str,
    plot: bool,
) -> None:
    find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a: None if name == absent else find_spec(name, *a),
    )
    argv = ["eval", str(dataset)] + (["--plot", str(tmp_path / "r.png")] if plot else [])
    code, out, err = _run_cli(argv, capsys)
    assert code == 2 and not out
    assert absent in err and "pip install 'ranx>=0.3.20'" in err
    assert "footnote-rag's eval extra" in err
    assert not (eval_workspace(dataset) / INDEX_DIR).exists(), "nothing was ingested"
    assert not (dataset / INDEX_DIR).exists()


def test_langchain_peer_runs_as_an_injected_stage(dataset: Path) -> None:
    peer = load_benchmark("peer_retrieval")
    prepared = prepare_index(dataset, dataset / INDEX_DIR)
    runner = peer.langchain_peer(get_retriever(prepared.index_dir))
    result = evaluate_stages(
        dataset,
        stages=["bm25", "langchain_peer"],
        runners={"langchain_peer": runner},
        prepared=prepared,
        progress=False,
    )
    scores = result["stages"]["langchain_peer"]
    assert 0.0 < scores["recall@5"] <= 1.0
    assert result["stages"]["bm25"]["latency_ms"] >= 0.0


_PAGE = """<html><head><title>Programming FAQ &#8212; Python 3.11.2 documentation</title></head>
<body><nav>site navigation</nav><div class="body" role="main">
<section id="programming-faq"><h1>Programming FAQ<a class="headerlink" href="#p">¶</a></h1>
<nav class="contents" id="contents"><p class="topic-title">Contents</p><ul><li>toc</li></ul></nav>
<p>Intro text of the page.</p>
<section id="how-do-i-copy-a-file"><span id="copy"></span>
<h2>How do I copy a file?<a class="headerlink" href="#h">¶</a></h2>
<p>The <code>shutil</code> module contains a
<a href="x">copyfile()</a> function.</p>
<pre># keep code verbatim
shutil.copyfile(src, dst)</pre>
</section>
<section id="how-do-i-move-a-file"><h2>How do I move a file?</h2><p>See shutil.</p></section>
<section id="why-so-short"><h2>Why so short?</h2><p>Two words</p></section>
<section id="empty"><h2>Empty</h2></section>
</section></div></body></html>"""


def test_build_pyfaq_on_a_small_docs_tree(tmp_path: Path) -> None:
    builder = load_benchmark("build_pyfaq")
    html = tmp_path / "html"
    for folder in ("faq", "_static", "library"):
        (html / folder).mkdir(parents=True)
    (html / "faq" / "programming.html").write_text(_PAGE, encoding="utf-8")
    (html / "_static" / "skipped.html").write_text(_PAGE, encoding="utf-8")
    (html / "genindex-A.html").write_text(_PAGE, encoding="utf-8")
    counts = builder.build(html, tmp_path / "out")
    assert counts == {"pages": 1, "passages": 4, "queries": 1}

    corpus = {
        row["_id"]: row
        for row in map(json.loads, (tmp_path / "out" / "corpus.jsonl").read_text().splitlines())
    }
    answer = corpus["faq/programming.html#how-do-i-copy-a-file"]
    assert answer["title"] == "Programming FAQ"
    assert "copy a file?" not in answer["text"] and "¶" not in answer["text"]
    assert "The shutil module contains a copyfile() function." in answer["text"]
    assert "# keep code verbatim\nshutil.copyfile(src, dst)" in answer["text"]
    intro = corpus["faq/programming.html#programming-faq"]["text"]
    assert intro == "Intro text of the page."
    assert "faq/programming.html#empty" not in corpus

    queries = (tmp_path / "out" / "queries.jsonl").read_text().splitlines()
    assert [json.loads(q)["text"] for q in queries] == ["How do I copy a file?"]
    qrels = (tmp_path / "out" / "qrels" / "test.tsv").read_text().splitlines()
    assert qrels == [
        "query-id\tcorpus-id\tscore",
        "q001\tfaq/programming.html#how-do-i-copy-a-file\t1",
    ]
    loaded = load_beir(tmp_path / "out")
    assert loaded.qrels == {"q001": {"faq/programming.html#how-do-i-copy-a-file": 1}}
