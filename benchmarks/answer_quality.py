"""Answer quality on a BEIR dataset (pyfaq): citations, token F1, abstention, and the grader.

For every query the whole answer graph runs (offline default, or --model). Reported:
- cited gold: how often the first citation (and any citation) is the query's gold section;
- token F1 of the answer (citations stripped) against the gold passage (the FAQ answer);
- on answerable queries, how often it wrongly says the sources don't cover it;
- on questions the corpus cannot answer (handbook questions asked of the Python docs), how
  often it answers anyway (a confident wrong answer) versus "don't cover";
- citation validity: every citation names a source the answer was given (must be 100%);
- the grader against gold: precision and recall of "kept" over the retrieved candidates, per
  threshold, with the abstention it gives on unanswerable questions. This is how the offline
  grade threshold was chosen.

    python benchmarks/build_pyfaq.py
    python benchmarks/answer_quality.py benchmarks/data/pyfaq [--model provider:model] [--json]
        [--limit N] [--offline-grader linear|calibrated|judge|judge-veto|judge-rescue]
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from footnote.evaluation.retrieval import prepare_index  # noqa: E402
from footnote.graph.grader import linear_score as grade  # noqa: E402
from footnote.graph.graph import make_graph  # noqa: E402
from footnote.graph.prompts import NOT_COVERED  # noqa: E402
from footnote.store.text import keyword_tokens  # noqa: E402

UNANSWERABLE = [
    "How often do I have to change my API key?",
    "What is the parental leave policy?",
    "How do I file an expense claim?",
    "How many days of annual leave do employees get?",
    "Who do I contact when the VPN profile has expired?",
    "How long is an on-call shift?",
    "What is the meal allowance on business trips?",
    "How do I request a new service account?",
    "When must I write the postmortem after an incident?",
    "What laptop do I get on my first day?",
]
THRESHOLDS = [round(0.30 + 0.05 * i, 2) for i in range(11)]


def token_f1(answer: str, gold: str) -> float:
    """SQuAD-style token F1 on stemmed content words."""
    predicted = Counter(keyword_tokens(re.sub(r"\[\d+\]", " ", answer)))
    reference = Counter(keyword_tokens(gold))
    common = sum((predicted & reference).values())
    if not common:
        return 0.0
    precision = common / sum(predicted.values())
    recall = common / sum(reference.values())
    return 2 * precision * recall / (precision + recall)


def final_state(graph: Any, question: str, context: dict[str, Any]) -> dict[str, Any]:
    """The full state at the end (invoke returns only the output fields), with the graded
    `candidates` of the last research round, which lives in the research subgraph."""
    final: dict[str, Any] = {}
    candidates: list[Any] = []
    for namespace, values in graph.stream(
        {"messages": [{"role": "user", "content": question}]},
        context=context,
        stream_mode="values",
        subgraphs=True,
    ):
        if namespace:
            candidates = values.get("candidates", candidates)
        else:
            final = values
    return {**final, "candidates": candidates}


def evaluate(
    dataset_dir: Path, model: str, limit: int | None, offline_grader: str = ""
) -> dict[str, Any]:
    prepared = prepare_index(dataset_dir)
    dataset = prepared.dataset
    graph = make_graph()
    context = {"index_dir": str(prepared.index_dir), "model": model}
    if offline_grader:
        context["offline_grader"] = offline_grader
    queries = sorted(dataset.queries.items())[: limit or None]
    rows = []
    grader_points: list[list[tuple[float, bool]]] = []
    started = time.perf_counter()
    for n, (qid, question) in enumerate(queries, 1):
        gold_ids = set(dataset.qrels.get(qid, {}))
        state = final_state(graph, question, context)
        answer = str(state["messages"][-1].content)
        cited = [prepared.source_to_id.get(c["source"]) for c in state.get("citations", [])]
        given = {d.metadata["chunk_id"] for d in state.get("documents", [])}
        valid = all(c["chunk_id"] in given for c in state.get("citations", []))
        # The last retrieval round's candidates: what the threshold decided on.
        grader_points.append(
            [
                (grade(c), prepared.source_to_id.get(c["document"].metadata["source"]) in gold_ids)
                for c in state.get("candidates", [])
            ]
        )
        gold_text = " ".join(dataset.corpus[g]["text"] for g in gold_ids)
        rows.append(
            {
                "abstained": answer.strip() == NOT_COVERED,
                "first_cited_gold": bool(cited) and cited[0] in gold_ids,
                "any_cited_gold": any(c in gold_ids for c in cited),
                "f1": token_f1(answer, gold_text) if answer.strip() != NOT_COVERED else 0.0,
                "valid": valid and not state.get("footnote_invalid_citations"),
            }
        )
        if n % 20 == 0:
            print(f"answerable: {n}/{len(queries)}", file=sys.stderr, flush=True)
    seconds = time.perf_counter() - started
    unanswerable = []
    for question in UNANSWERABLE:
        state = final_state(graph, question, context)
        answer = str(state["messages"][-1].content)
        unanswerable.append(
            {
                "question": question,
                "abstained": answer.strip() == NOT_COVERED,
                "best_grade": max((grade(c) for c in state.get("candidates", [])), default=0.0),
            }
        )
    answered = [r for r in rows if not r["abstained"]]
    total = len(rows)
    return {
        "dataset": dataset.name,
        "model": model or "offline (extractive)",
        "offline_grader": offline_grader or "default",
        "queries": total,
        "answer": {
            "first_citation_is_gold": sum(r["first_cited_gold"] for r in rows) / total,
            "any_citation_is_gold": sum(r["any_cited_gold"] for r in rows) / total,
            "token_f1": sum(r["f1"] for r in rows) / total,
            "token_f1_when_answered": (
                sum(r["f1"] for r in answered) / len(answered) if answered else 0.0
            ),
            "wrongly_not_covered": sum(r["abstained"] for r in rows) / total,
            "citation_validity": sum(r["valid"] for r in rows) / total,
            "seconds_per_question": seconds / total,
        },
        "unanswerable": {
            "questions": len(unanswerable),
            "said_not_covered": sum(u["abstained"] for u in unanswerable) / len(unanswerable),
            "confident_wrong_answers": sum(not u["abstained"] for u in unanswerable)
            / len(unanswerable),
            "max_best_grade": max(u["best_grade"] for u in unanswerable),
        },
        "grader": grader_table(grader_points, unanswerable),
    }


def grader_table(
    questions: list[list[tuple[float, bool]]], unanswerable: list[dict[str, Any]]
) -> list[dict[str, float]]:
    """Per threshold: precision/recall of `grade >= t` over all candidates against gold, the
    share of answerable questions that keep something (and keep their gold passage), and the
    share of unanswerable questions that keep nothing (an honest "not covered")."""
    points = [p for question in questions for p in question]
    relevant = sum(is_gold for _, is_gold in points)
    table = []
    for t in THRESHOLDS:
        kept = [is_gold for g, is_gold in points if g >= t]
        hits = sum(kept)
        precision = hits / len(kept) if kept else 0.0
        recall = hits / relevant if relevant else 0.0
        table.append(
            {
                "threshold": t,
                "precision": precision,
                "recall": recall,
                "f1": 2 * precision * recall / (precision + recall) if hits else 0.0,
                "answerable_answered": sum(any(g >= t for g, _ in q) for q in questions)
                / len(questions),
                "answerable_gold_kept": sum(
                    any(g >= t and gold for g, gold in q) for q in questions
                )
                / len(questions),
                "unanswerable_abstained": sum(u["best_grade"] < t for u in unanswerable)
                / len(unanswerable),
            }
        )
    return table


def markdown(result: dict[str, Any]) -> str:
    a, u = result["answer"], result["unanswerable"]
    lines = [
        f"Answer quality on {result['dataset']} ({result['queries']} questions), "
        f"model: {result['model']}",
        "",
        "| measure | value |",
        "|---|---|",
        f"| first citation is the gold section | {a['first_citation_is_gold']:.3f} |",
        f"| any citation is the gold section | {a['any_citation_is_gold']:.3f} |",
        f"| token F1 vs gold answer (all / when answered) | {a['token_f1']:.3f} / "
        f"{a['token_f1_when_answered']:.3f} |",
        f"| answerable but said 'not covered' | {a['wrongly_not_covered']:.3f} |",
        f"| citation validity | {a['citation_validity']:.3f} |",
        f"| unanswerable: said 'not covered' | {u['said_not_covered']:.3f} |",
        f"| unanswerable: confident wrong answer | {u['confident_wrong_answers']:.3f} |",
        f"| seconds per question | {a['seconds_per_question']:.2f} |",
        "",
        "Offline grader (0.6 x similarity + 0.4 x keyword coverage) against gold candidates:",
        "",
        "| threshold | precision | recall | F1 | answerable: answered | answerable: gold kept "
        "| unanswerable: abstained |",
        "|---|---|---|---|---|---|---|",
    ]
    for row in result["grader"]:
        lines.append(
            f"| {row['threshold']:.2f} | {row['precision']:.3f} | {row['recall']:.3f} | "
            f"{row['f1']:.3f} | {row['answerable_answered']:.3f} | "
            f"{row['answerable_gold_kept']:.3f} | {row['unanswerable_abstained']:.2f} |"
        )
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("dataset", type=Path, help="BEIR dataset directory (e.g. pyfaq)")
    parser.add_argument("--model", default="", help="chat model; empty = offline default")
    parser.add_argument("--limit", type=int, default=0, help="only the first N queries")
    parser.add_argument(
        "--offline-grader", default="", help="calibrated, linear, judge, judge-veto or judge-rescue"
    )
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    result = evaluate(args.dataset, args.model, args.limit, args.offline_grader)
    print(json.dumps(result, indent=2) if args.json else markdown(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
