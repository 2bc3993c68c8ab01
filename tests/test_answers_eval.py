"""`footnote eval --answers`: a fixed leave-gold-out split and a held-out index without its gold."""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from langchain_core.messages import AIMessage

from footnote.cli.evaluate import add_eval_command
from footnote.cli.main import build_parser
from footnote.evaluation.answers import evaluate_answers, split_questions, summarize
from footnote.evaluation.retrieval import load_beir
from footnote.graph.prompts import NOT_COVERED
from footnote.store.backends import open_writer
from footnote.store.types import Caller
from footnote.tools.retrieval import get_retriever
from footnote.tools.search import run_stage
from tests.conftest import RunCli
from tests.stub_openai import Reply, StubOpenAI, prompt_of, structured, text
from tests.stub_openai import tool_call as stub_tool_call

FIXTURE = Path(__file__).parent / "fixtures" / "beir_tiny"


@pytest.fixture
def dataset(tmp_path: Path) -> Path:
    target = tmp_path / "beir_tiny"
    shutil.copytree(FIXTURE, target)
    return target


def indexed_files(index: Path) -> set[str]:
    previous = open_writer(index).previous()
    assert previous is not None, f"no live version at {index}"
    return set(previous.files)


def test_split_is_fixed_by_its_seed_and_keeps_shared_gold() -> None:
    qrels = {f"q{i}": {f"d{i}": 1} for i in range(20)} | {"shared": {"d0": 1}}
    first = split_questions(qrels, 0.5, seed=7)
    assert first == split_questions(qrels, 0.5, seed=7)
    assert first != split_questions(qrels, 0.5, seed=8)
    kept_gold = {doc for qid in first.answerable for doc in qrels[qid]}
    assert not kept_gold & first.removed_passages
    assert all(set(qrels[q]) <= first.removed_passages for q in first.unanswerable)
    with pytest.raises(ValueError):
        split_questions(qrels, 1.5)


@settings(max_examples=100, deadline=None)
@given(
    st.dictionaries(
        st.text("q", min_size=1, max_size=4).map(lambda s: s + "?"),
        st.sets(st.sampled_from([f"d{i}" for i in range(8)]), min_size=1, max_size=3),
        min_size=1,
        max_size=12,
    ),
    st.floats(0, 1),
    st.integers(0, 2**32),
)
def test_split_properties(qrels_sets: dict[str, set[str]], share: float, seed: int) -> None:
    """Any qrels: answerable questions keep all their gold; unanswerable ones lose all of it;
    no question is both; the chosen share is the requested one."""
    qrels = {q: dict.fromkeys(docs, 1) for q, docs in qrels_sets.items()}
    split = split_questions(qrels, share, seed)
    assert not set(split.answerable) & set(split.unanswerable)
    assert len(split.answerable) == len(qrels) - round(share * len(qrels))
    for q in split.answerable:
        assert not set(qrels[q]) & split.removed_passages
    for q in split.unanswerable:
        assert set(qrels[q]) <= split.removed_passages


def test_held_out_gold_is_gone_from_the_index_and_outcomes_are_scored(dataset: Path) -> None:
    """The held-out index lacks exactly the removed passages, and the scoring counts what the
    answerer did: here it abstains on unanswerable questions and cites gold otherwise."""
    qrels = load_beir(dataset).qrels
    split = split_questions(qrels, 0.5, seed=3)
    assert (len(split.answerable), len(split.unanswerable)) == (2, 2)
    sources: dict[str, str] = {}
    seen: list[tuple[str, str]] = []

    def answerer(question: str, index_dir: str) -> dict[str, Any]:
        seen.append((question, index_dir))
        if not sources:
            sources.update(json.loads((dataset / ".footnote-cache" / "sources.json").read_text()))
        qid = next(q for q, text in load_beir(dataset).queries.items() if text == question)
        if qid in split.unanswerable:
            return {"messages": [AIMessage(NOT_COVERED)], "citations": []}
        gold = next(iter(qrels[qid]))
        cited = next(s for s, doc_id in sources.items() if doc_id == gold)
        return {"messages": [AIMessage("An answer [1].")], "citations": [{"source": cited}]}

    result = evaluate_answers(dataset, share=0.5, seed=3, answerer=answerer)
    assert (result["answerable"], result["unanswerable"]) == (2, 2)
    assert result["removed_passages"] == len(split.removed_passages) == 2
    assert result["unanswerable_not_covered"] == 1.0
    assert result["answerable_wrongly_not_covered"] == 0.0
    assert result["answerable_cited_gold"] == result["answerable_first_cited_gold"] == 1.0
    index = Path(result["index"])
    assert index != dataset / ".footnote-index"
    assert {i for _, i in seen} == {str(index)} and len(seen) == 4
    indexed = {sources[name] for name in indexed_files(index)}
    assert indexed == set(load_beir(dataset).corpus) - split.removed_passages
    # The held-out index searches, and never returns a removed passage.
    retriever = get_retriever(index)
    everything = retriever.mask(Caller(groups=frozenset(), admin=True))
    for qid in split.unanswerable:
        hits = run_stage(retriever, load_beir(dataset).queries[qid], 10, everything, "pipeline")
        assert hits and not {sources[h.chunk.source] for h in hits} & split.removed_passages
    # The full index still has everything: the held-out copy did not touch it.
    full = indexed_files(dataset / ".footnote-index")
    assert {sources[name] for name in full} == set(load_beir(dataset).corpus)


def test_the_graph_runs_on_the_held_out_index(dataset: Path) -> None:
    """The default (offline) answer graph through the harness: the run completes, and the
    outcome shares are the ones summarize computes from its rows."""
    result = evaluate_answers(dataset, share=0.5, seed=3)
    split = split_questions(load_beir(dataset).qrels, 0.5, seed=3)
    rows = result["rows"]
    assert [r["qid"] for r in rows] == split.answerable + split.unanswerable
    assert [r["answerable"] for r in rows] == [True, True, False, False]
    assert summarize(rows) == {k: result[k] for k in summarize(rows)}
    assert all(r["seconds"] > 0 for r in rows)


def test_summary_counts_each_outcome() -> None:
    rows = [
        {"answerable": True, "not_covered": False, "any_cited_gold": True,
         "first_cited_gold": False, "gold_in_keep_k": True, "seconds": 1.0},
        {"answerable": True, "not_covered": True, "any_cited_gold": False,
         "first_cited_gold": False, "gold_in_keep_k": True, "seconds": 3.0},
        {"answerable": False, "not_covered": True, "any_cited_gold": False,
         "first_cited_gold": False, "gold_in_keep_k": False, "seconds": 2.0},
    ]  # fmt: skip
    summary = summarize(rows)
    assert summary["answerable"] == 2 and summary["unanswerable"] == 1
    assert summary["unanswerable_not_covered"] == 1.0
    assert summary["answerable_wrongly_not_covered"] == 0.5
    assert summary["answerable_cited_gold"] == 0.5
    assert summary["answerable_first_cited_gold"] == 0.0
    assert summary["answerable_recall_at_keep_k"] == 1.0
    assert summary["seconds_per_question"] == 2.0


def test_cli_answers_flag_is_registered() -> None:
    parser = argparse.ArgumentParser(prog="footnote")
    sub = parser.add_subparsers(dest="command", required=True)
    add_eval_command(sub, lambda: "/nonexistent/default-index")
    args = parser.parse_args(["eval", "DATA", "--answers", "--seed", "5"])
    assert args.answers and args.seed == 5 and args.unanswerable_share == 0.5
    assert not parser.parse_args(["eval", "DATA"]).answers
    assert args.func(args) == 2, "a parser without the answers handler refuses --answers"
    assert args.grade_threshold is None
    assert (
        parser.parse_args(["eval", "D", "--answers", "--grade-threshold", "0.4"]).grade_threshold
        == 0.4
    )
    assert args.offline_grader is None
    chosen = parser.parse_args(["eval", "D", "--answers", "--offline-grader", "calibrated"])
    assert chosen.offline_grader == "calibrated"


def test_cli_runs_the_graph_with_the_given_grade_threshold(run_cli: RunCli, dataset: Path) -> None:
    """Nothing passes a threshold of 1.0 (a grade is a probability short of certainty; the
    refitted grader gives this tiny set's near-verbatim questions grades above 0.99): every
    question, answerable or not, is 'not covered', and the report says which threshold and
    offline grader it ran with."""
    done = run_cli(
        "eval", str(dataset), "--answers", "--seed", "3", "--grade-threshold", "1.0",
        "--offline-grader", "calibrated", "--json",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["context"]["grade_threshold"] == 1.0
    assert result["context"]["offline_grader"] == "calibrated"
    assert result["unanswerable_not_covered"] == 1.0
    assert result["answerable_wrongly_not_covered"] == 1.0
    assert result["answerable_cited_gold"] == 0.0


def test_answers_with_a_chat_model(
    dataset: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """--model reaches the graph: a model (the loopback stub) that always says 'not covered'
    makes every question 'not covered', which the offline default does not do."""
    monkeypatch.setenv("OPENAI_API_KEY", "sk-stub-not-a-real-key")
    monkeypatch.setenv("LANGSMITH_TRACING", "false")

    def respond(body: dict[str, Any]) -> Reply:
        prompt = prompt_of(body)
        if "search_documents tool" in prompt:
            return stub_tool_call("search_documents", {"query": "the question"})
        if "Score how well each numbered source" in prompt:
            return structured({"scores": [9] * prompt.count("</source>")})
        return text(NOT_COVERED)

    parser = build_parser()
    with StubOpenAI() as stub:
        stub.default = respond
        args = parser.parse_args(
            ["eval", str(dataset), "--answers", "--seed", "3", "--json", "--quiet",
             "--model", "openai:stub-model", "--base-url", stub.base_url]
        )  # fmt: skip
        assert args.func(args) == 0
        asked = len(stub.chat_requests)
    result = json.loads(capsys.readouterr().out)
    assert result["context"]["model"] == "openai:stub-model"
    assert asked >= 3 * 4, "every question went through the model's agent, grading and answer"
    assert result["unanswerable_not_covered"] == result["answerable_wrongly_not_covered"] == 1.0


def test_held_out_copy_follows_the_datasets_index(dataset: Path) -> None:
    """A held-out copy made from an older version of the dataset's index (the dataset was
    re-prepared, or copied elsewhere with its indexes) is made again, not reused stale."""
    from footnote.evaluation.answers import heldout_index
    from footnote.evaluation.retrieval import prepare_index

    split = split_questions(load_beir(dataset).qrels, 0.5, seed=3)
    first = heldout_index(dataset, prepare_index(dataset), split)
    before = indexed_files(first)
    with (dataset / "corpus.jsonl").open("a", encoding="utf-8") as corpus:
        corpus.write(json.dumps({"_id": "late", "title": "Late", "text": "A late passage."}))
        corpus.write("\n")
    again = heldout_index(dataset, prepare_index(dataset), split)
    assert again == first
    assert len(indexed_files(again)) == len(before) + 1, "the new passage is in the copy"


def test_a_dataset_moved_with_its_index_holds_each_passage_once(
    dataset: Path, tmp_path: Path
) -> None:
    """Copied elsewhere with its index, the dataset's docs are a new root: the old one is
    removed, so the index holds each passage once, under its own name."""
    from footnote.evaluation.retrieval import prepare_index

    prepare_index(dataset)
    moved = tmp_path / "moved"
    shutil.copytree(dataset, moved)
    prepared = prepare_index(moved)
    names = indexed_files(moved / ".footnote-index")
    assert len(names) == len(load_beir(moved).corpus) == len(prepared.source_to_id)
    assert names == set(prepared.source_to_id)
