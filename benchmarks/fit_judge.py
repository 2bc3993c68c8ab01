"""Fit the judge grader's threshold on the fitting halves, and report it on the reporting
halves beside the linear blend (question level: is the question answered at all).

    nice -n 10 .venv/bin/python benchmarks/fit_judge.py [--json] [--rows CACHE.json]

Corpora: the handbook question set (paraphrases answerable, near misses not: each question in
its asker's scope), and pyfaq-core and debfaq with the leave-gold-out split of `footnote eval
--answers` (seed and share as there: a question whose gold passages are removed is
unanswerable). Every question's half is `footnote.evaluation.halves.half_of(corpus, id)`.
For each question the first retrieval round runs as the graph runs it (8 candidates); a
grader answers when its best candidate's grade reaches the operating point (0.5).

The judge's threshold (graph/grader.py JUDGE_THRESHOLD) is the logit that maximises balanced
accuracy (the mean of "answerable answered" and "unanswerable refused") over all fitting-half
questions pooled; figures are then given for each corpus's reporting half only. The judge
never saw these corpora's questions (training/judge/README.md); debfaq's passages include the
Debian reference, whose sections it was trained on with their headings as queries.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from footnote.evaluation.answers import (  # noqa: E402
    DEFAULT_SEED,
    DEFAULT_SHARE,
    heldout_index,
    split_questions,
)
from footnote.evaluation.halves import half_of  # noqa: E402
from footnote.evaluation.retrieval import prepare_index  # noqa: E402
from footnote.ingest.pipeline import ingest  # noqa: E402
from footnote.models.judge import load_judge  # noqa: E402
from footnote.store.types import Caller  # noqa: E402
from footnote.tools.documents import (  # noqa: E402
    OPERATING_GRADE,
    Candidate,
    embedding_text_of,
    relevance,
    retrieve_candidates,
)
from footnote.tools.search import SearchRequest  # noqa: E402

HANDBOOK = REPO / "samples" / "handbook"
QUESTIONS = REPO / "benchmarks" / "questions" / "handbook.json"
DATASETS = (REPO / "benchmarks" / "data" / "pyfaq-core", REPO / "benchmarks" / "data" / "debfaq")
RETRIEVE_K = 8


def row(corpus: str, qid: str, question: str, answerable: bool, found: list[Candidate]) -> dict:
    logits = load_judge().score(question, [embedding_text_of(c["document"]) for c in found])
    return {
        "corpus": corpus,
        "qid": qid,
        "half": half_of(corpus, qid),
        "answerable": answerable,
        "judge": float(np.max(logits)) if len(found) else float("-inf"),
        "linear": max((relevance(c) for c in found), default=0.0),
    }


def handbook_rows() -> list[dict[str, Any]]:
    spec = json.loads(QUESTIONS.read_text(encoding="utf-8"))
    near = spec["unanswerable"] + spec.get("held_out", {}).get("unanswerable", [])
    asked = [(q, True) for q in spec["answerable"]] + [(q, False) for q in near]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        index = Path(tmp) / "index"
        ingest([HANDBOOK], index)
        for q, answerable in asked:
            caller = Caller.of_groups(q.get("groups", []), strict=q.get("strict_groups", False))
            request = SearchRequest(query=q["question"], index_dir=index, k=RETRIEVE_K,
                                    caller=caller)  # fmt: skip
            found = retrieve_candidates(request, question=q["question"])
            rows.append(row("handbook", q["question"], q["question"], answerable, found))
    return rows


def dataset_rows(dataset: Path) -> list[dict[str, Any]]:
    prepared = prepare_index(dataset)
    split = split_questions(prepared.dataset.qrels, DEFAULT_SHARE, DEFAULT_SEED)
    index = heldout_index(dataset, prepared, split)
    rows = []
    asked = [(q, True) for q in split.answerable] + [(q, False) for q in split.unanswerable]
    for qid, answerable in asked:
        question = prepared.dataset.queries[qid]
        request = SearchRequest(query=question, index_dir=index, k=RETRIEVE_K,
                                caller=Caller.operator())  # fmt: skip
        found = retrieve_candidates(request, question=question)
        rows.append(row(dataset.name, qid, question, answerable, found))
    return rows


def rates(rows: list[dict[str, Any]], passes: Any) -> dict[str, Any]:
    yes = [r for r in rows if r["answerable"]]
    no = [r for r in rows if not r["answerable"]]
    answered = sum(passes(r) for r in yes) / len(yes) if yes else float("nan")
    refused = sum(not passes(r) for r in no) / len(no) if no else float("nan")
    return {"answerable": len(yes), "unanswerable": len(no),
            "answered": round(answered, 3), "refused": round(refused, 3)}  # fmt: skip


def fit_threshold(rows: list[dict[str, Any]]) -> float:
    """The logit between two observed ones that maximises balanced accuracy."""
    values = sorted({r["judge"] for r in rows if np.isfinite(r["judge"])})
    cuts = [(a + b) / 2 for a, b in zip(values, values[1:], strict=False)]

    def balanced(cut: float) -> float:
        found = rates(rows, lambda r: r["judge"] >= cut)
        return (found["answered"] + found["refused"]) / 2

    return round(max(cuts, key=lambda cut: (balanced(cut), -abs(cut))), 3)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--rows", type=Path, help="cache of the collected rows (read if there)")
    args = parser.parse_args()
    if args.rows and args.rows.is_file():
        rows = json.loads(args.rows.read_text(encoding="utf-8"))
    else:
        rows = handbook_rows() + [r for d in DATASETS for r in dataset_rows(d)]
        if args.rows:
            args.rows.write_text(json.dumps(rows), encoding="utf-8")
    threshold = fit_threshold([r for r in rows if r["half"] == "fit"])
    report: dict[str, Any] = {"judge_threshold (fitted on the fitting halves)": threshold}
    for corpus in ("handbook", *(d.name for d in DATASETS)):
        mine = [r for r in rows if r["corpus"] == corpus and r["half"] == "report"]
        report[corpus] = {
            "linear": rates(mine, lambda r: r["linear"] >= OPERATING_GRADE),
            "judge": rates(mine, lambda r, t=threshold: r["judge"] >= t),
        }
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    print(f"judge threshold, fitted on the fitting halves: {threshold}")
    print("| reporting half | grader | answerable answered | unanswerable refused |")
    print("|---|---|---:|---:|")
    for corpus in ("handbook", *(d.name for d in DATASETS)):
        for grader, r in report[corpus].items():
            print(f"| {corpus} ({r['answerable']} / {r['unanswerable']}) | {grader} "
                  f"| {r['answered']} | {r['refused']} |")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
