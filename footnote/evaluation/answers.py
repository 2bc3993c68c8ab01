"""`footnote eval --answers`: answer quality with a leave-gold-out unanswerable set.

A fixed share of a BEIR dataset's questions (chosen with a fixed seed, so runs compare) lose
their gold passages from the indexed corpus. Those questions become unanswerable while the
near-miss passages around them stay, which is what users actually hit: a question about
something close to what the documents say. The rest stay answerable. The whole answer graph
runs for every question and the report says how often each kind gets the right outcome.

The held-out index is the dataset's full index copied and re-ingested without the removed
passages: ingest is incremental, so nothing is embedded again and keyword statistics are those
of the reduced corpus, exactly as if the passages had never existed.
"""

from __future__ import annotations

import glob
import json
import random
import shutil
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from footnote.evaluation.retrieval import (
    EVAL_MARKER,
    PreparedIndex,
    passage_filename,
    prepare_index,
)
from footnote.ingest.corpus import remove
from footnote.store.backends import current_version, is_postgres
from footnote.store.types import Caller
from footnote.tools.retrieval import get_retriever
from footnote.tools.search import run_stage

DEFAULT_SEED = 20261130
"""Fixed so that numbers from different runs and branches describe the same split."""
DEFAULT_SHARE = 0.5


@dataclass(frozen=True)
class Split:
    """Which questions keep their gold passages and which lose them."""

    answerable: list[str]
    unanswerable: list[str]
    removed_passages: frozenset[str]
    seed: int
    share: float


def split_questions(
    qrels: Mapping[str, Mapping[str, int]], share: float, seed: int = DEFAULT_SEED
) -> Split:
    """Pick `share` of the questions as unanswerable with a seeded RNG over sorted ids.

    A passage that is gold for a kept question is never removed, so every answerable question
    still has its evidence.
    """
    if not 0 <= share <= 1:
        raise ValueError("the unanswerable share must lie between 0 and 1")
    qids = sorted(qrels)
    chosen = set(random.Random(seed).sample(qids, round(share * len(qids))))
    kept_gold = {doc for qid in qids if qid not in chosen for doc in qrels[qid]}
    removed = {doc for qid in chosen for doc in qrels[qid]} - kept_gold
    unanswerable = [qid for qid in qids if qid in chosen and set(qrels[qid]) <= removed]
    answerable = [qid for qid in qids if qid not in chosen]
    return Split(answerable, unanswerable, frozenset(removed), seed, share)


def heldout_index(dataset_dir: str | Path, prepared: PreparedIndex, split: Split) -> Path:
    """The dataset's index without the removed passages: a copy of it, from which they are
    removed (`footnote remove`: the copy's other documents stay as they are). The copy is
    made again whenever the dataset's index has another version than the one it was copied
    from (a re-prepared or moved dataset), so it never holds a stale corpus."""
    if is_postgres(prepared.index_dir):
        raise ValueError("--answers needs a directory index (it copies it to hold passages out)")
    root = Path(dataset_dir)
    tag = f"heldout-s{split.seed}-p{round(split.share * 100)}"
    full = Path(prepared.index_dir)
    target = full.parent / f"{full.name}-{tag}"  # beside the dataset's own index
    stamp = {
        "dataset": str(root.resolve()),
        "copied_from": current_version(Path(prepared.index_dir)),
    }
    if current_version(target) is None or _marker(target) != stamp:
        if target.exists():
            shutil.rmtree(target)
        shutil.copytree(Path(prepared.index_dir), target, symlinks=False)
    (target / EVAL_MARKER).write_text(json.dumps(stamp) + "\n", "utf-8")
    held_out = sorted(passage_filename(doc_id) for doc_id in split.removed_passages)
    remove(target, [glob.escape(name) for name in held_out])
    return target


def _marker(index_dir: Path) -> Any:
    """What the harness recorded in an index it made; None if unreadable."""
    try:
        return json.loads((index_dir / EVAL_MARKER).read_text("utf-8"))
    except (OSError, ValueError):
        return None


AnswerFn = Callable[[str, str], dict[str, Any]]
"""(question, index_dir) -> the graph's final state (messages, citations, documents...)."""


def graph_answerer(context: Mapping[str, Any] | None = None) -> AnswerFn:
    """Run Footnote's answer graph (offline default unless the context names a model)."""
    from langchain_core.messages import HumanMessage

    from footnote.graph.context import Context
    from footnote.graph.graph import make_graph
    from footnote.graph.state import InputState

    graph = make_graph()

    def answer(question: str, index_dir: str) -> dict[str, Any]:
        run = Context.coerce({**(context or {}), "index_dir": index_dir})
        final = graph.invoke(InputState(messages=[HumanMessage(question)]), context=run)
        return dict(final)

    return answer


def is_not_covered(answer: str) -> bool:
    from footnote.graph.prompts import NOT_COVERED

    return answer.strip() == NOT_COVERED


def evaluate_answers(
    dataset_dir: str | Path,
    *,
    share: float = DEFAULT_SHARE,
    seed: int = DEFAULT_SEED,
    answerer: AnswerFn | None = None,
    context: Mapping[str, Any] | None = None,
    limit: int | None = None,
    keep_k: int = 4,
    progress: Callable[[str, int, int], None] | None = None,
    workspace: str | Path | None = None,
) -> dict[str, Any]:
    """Run every question of the split through the graph and score the outcomes (the
    passages and indexes under `workspace`, see `prepare_index`).

    `limit` keeps the first N answerable and the first N unanswerable questions (quick runs).
    """
    prepared = prepare_index(dataset_dir, workspace=workspace)
    split = split_questions(prepared.dataset.qrels, share, seed)
    index_dir = heldout_index(dataset_dir, prepared, split)
    answer = answerer or graph_answerer(context)
    retriever = get_retriever(index_dir)
    everything = retriever.mask(Caller.operator())
    rows = []
    questions = [(q, True) for q in split.answerable[:limit]] + [
        (q, False) for q in split.unanswerable[:limit]
    ]
    for done, (qid, answerable) in enumerate(questions, 1):
        gold = set(prepared.dataset.qrels[qid])
        started = time.perf_counter()
        state = answer(prepared.dataset.queries[qid], str(index_dir))
        seconds = time.perf_counter() - started
        text = str(state["messages"][-1].content)
        cited = [
            prepared.source_to_id.get(str(c.get("source"))) for c in state.get("citations", [])
        ]
        retrieved = run_stage(
            retriever, prepared.dataset.queries[qid], keep_k, everything, "pipeline"
        )
        rows.append(
            {
                "qid": qid,
                "answerable": answerable,
                "not_covered": is_not_covered(text),
                "first_cited_gold": bool(cited) and cited[0] in gold,
                "any_cited_gold": any(c in gold for c in cited),
                "gold_in_keep_k": any(
                    prepared.source_to_id.get(h.chunk.source) in gold for h in retrieved
                ),
                "seconds": seconds,
            }
        )
        if progress:
            progress("answers", done, len(questions))
    return {
        "dataset": prepared.dataset.name,
        "seed": seed,
        "share": share,
        "index": str(index_dir),
        "removed_passages": len(split.removed_passages),
        "context": {k: v for k, v in (context or {}).items() if k != "index_dir"},
        **summarize(rows),
        "rows": rows,
    }


def summarize(rows: list[dict[str, Any]]) -> dict[str, Any]:
    answerable = [r for r in rows if r["answerable"]]
    unanswerable = [r for r in rows if not r["answerable"]]

    def share(items: list[dict[str, Any]], key: str) -> float:
        return sum(bool(r[key]) for r in items) / len(items) if items else 0.0

    return {
        "answerable": len(answerable),
        "unanswerable": len(unanswerable),
        "unanswerable_not_covered": share(unanswerable, "not_covered"),
        "answerable_cited_gold": share(answerable, "any_cited_gold"),
        "answerable_first_cited_gold": share(answerable, "first_cited_gold"),
        "answerable_wrongly_not_covered": share(answerable, "not_covered"),
        "answerable_recall_at_keep_k": share(answerable, "gold_in_keep_k"),
        "seconds_per_question": sum(r["seconds"] for r in rows) / len(rows) if rows else 0.0,
    }


def markdown(result: Mapping[str, Any]) -> str:
    return "\n".join(
        [
            f"{result['dataset']}: {result['answerable']} answerable, {result['unanswerable']} "
            f"unanswerable (seed {result['seed']}, {result['removed_passages']} gold passages "
            "removed)",
            "",
            "| measure | value |",
            "|---|---:|",
            f"| unanswerable answered 'not covered' | {result['unanswerable_not_covered']:.3f} |",
            f"| answerable wrongly 'not covered' | "
            f"{result['answerable_wrongly_not_covered']:.3f} |",
            f"| answerable: a gold passage among the citations | "
            f"{result['answerable_cited_gold']:.3f} |",
            f"| answerable: first citation is gold | {result['answerable_first_cited_gold']:.3f} |",
            f"| answerable: gold in the pipeline's top keep_k chunks (recall@keep_k) | "
            f"{result['answerable_recall_at_keep_k']:.3f} |",
            f"| seconds per question | {result['seconds_per_question']:.2f} |",
        ]
    )
