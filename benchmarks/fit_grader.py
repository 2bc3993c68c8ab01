"""Fit a calibrated offline grader on a dev corpus, check it on another, and compare it with
the shipped grade (0.6 x similarity + 0.4 x keyword coverage). An experiment: the package's
grader is unchanged (docs/evaluation.md says why).

For every question of the leave-gold-out split (the split `footnote eval --answers` uses) the
first retrieval round runs as the graph runs it, and each candidate chunk becomes one row of
eight features (`FEATURES`) labelled by whether it belongs to the question's gold passage
(never, for an unanswerable question). A logistic regression (NumPy, L2, standardised
features) learns P(chunk answers the question). The operating point is chosen on the dev
corpus at question level: the highest threshold at which at most `--max-abstain` of the
answerable questions have no candidate above it; the same threshold is then measured on the
check corpus. The shipped grade gets the same treatment (its threshold chosen on dev the same
way), so the two are compared at equal wrong-abstention on dev.

    python benchmarks/fit_grader.py --dev benchmarks/data/pyfaq-core \\
        --check benchmarks/data/debfaq [--max-abstain 0.05] [--whole-graph] [--write FILE]

--whole-graph also runs the whole answer graph (`footnote eval --answers`) on both corpora
with the fitted model as the offline grade, re-centred so its operating point reads 0.5.
--write saves the fitted model as plain JSON (never a pickle).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from footnote.answers_eval import (
    DEFAULT_SEED,
    DEFAULT_SHARE,
    evaluate_answers,
    heldout_index,
    split_questions,
)
from footnote.evaluate import prepare_index
from footnote.store.text import heading_prefix, keyword_tokens
from footnote.tools.documents import Candidate, retrieve_candidates
from footnote.tools.retrieval import get_retriever
from footnote.tools.search import SearchRequest

RETRIEVE_K = 8
"""The graph's default `retrieve_k`: the candidates the grader sees."""
FEATURES = (
    "dense",
    "coverage",
    "rare_coverage",
    "heading",
    "dense_margin",
    "dense_rank",
    "coverage_rank",
    "retrieval_rank",
)
"""dense and coverage as the graph measures them (against the question); the share of the
question's two rarest keywords in the chunk; the idf-weighted share of its keywords in the
title and heading path; similarity minus the best other candidate's; and 1 / (1 + rank) by
similarity, by coverage and in retrieval order."""


def features(
    question: str, candidates: Sequence[Candidate], idf: Mapping[str, float]
) -> list[dict[str, float]]:
    """The eight features of each candidate, from the candidates alone."""
    terms = {t: idf[t] for t in set(keyword_tokens(question)) if t in idf}
    total = sum(terms.values())
    rare = sorted(terms, key=lambda t: (-terms[t], t))[:2]
    dense = [float(c["evidence"]["dense"]) for c in candidates]
    coverage = [float(c["evidence"]["coverage"]) for c in candidates]
    out = []
    for i, c in enumerate(candidates):
        meta = c["document"].metadata
        heading = f"{meta.get('title') or ''} {meta.get('section') or ''}"
        present = set(
            keyword_tokens(f"{heading_prefix(meta.get('title') or '', meta.get('section') or '')}"
                           f"\n{c['document'].page_content}")
        )  # fmt: skip
        titled = set(keyword_tokens(heading))
        others = [s for j, s in enumerate(dense) if j != i]
        out.append(
            {
                "dense": dense[i],
                "coverage": coverage[i],
                "rare_coverage": sum(t in present for t in rare) / len(rare) if rare else 0.0,
                "heading": sum(w for t, w in terms.items() if t in titled) / total if total else 0,
                "dense_margin": dense[i] - max(others) if others else 0.0,
                "dense_rank": 1 / (1 + _rank(dense, i)),
                "coverage_rank": 1 / (1 + _rank(coverage, i)),
                "retrieval_rank": 1 / (1 + i),
            }
        )
    return out


def _rank(values: list[float], i: int) -> int:
    """0-based rank of values[i], highest first; ties keep their order."""
    order = sorted(range(len(values)), key=lambda j: -values[j])
    return order.index(i)


@dataclass(frozen=True)
class Grader:
    """Standardised features, a linear score, a sigmoid; `threshold` is the operating point."""

    mean: tuple[float, ...]
    scale: tuple[float, ...]
    weights: tuple[float, ...]
    bias: float
    threshold: float = 0.5

    def probability(self, row: Mapping[str, float]) -> float:
        z = self.bias + sum(
            w * (float(row[f]) - m) / s
            for f, m, s, w in zip(FEATURES, self.mean, self.scale, self.weights, strict=True)
        )
        return 1 / (1 + math.exp(-z))

    def grade(self, row: Mapping[str, float]) -> float:
        """The probability re-centred so that the operating point reads 0.5."""
        p = min(max(self.probability(row), 1e-12), 1 - 1e-12)
        logit = math.log(p / (1 - p)) - math.log(self.threshold / (1 - self.threshold))
        return 1 / (1 + math.exp(-logit))


def linear(row: Mapping[str, float]) -> float:
    """The shipped offline grade (graph/offline.py)."""
    return max(0.0, min(1.0, 0.6 * row["dense"] + 0.4 * row["coverage"]))


def collect(dataset_dir: Path, seed: int, share: float) -> dict[str, Any]:
    """Feature rows per question of the split, labelled by gold membership."""
    prepared = prepare_index(dataset_dir)
    split = split_questions(prepared.dataset.qrels, share, seed)
    index = heldout_index(dataset_dir, prepared, split)
    retriever = get_retriever(index)
    questions = []
    for qid, answerable in [(q, True) for q in split.answerable] + [
        (q, False) for q in split.unanswerable
    ]:
        gold = set(prepared.dataset.qrels[qid])
        question = prepared.dataset.queries[qid]
        candidates = retrieve_candidates(
            SearchRequest(query=question, index_dir=index, k=RETRIEVE_K, admin=True),
            question=question,
        )
        idf = retriever.idf_weights(keyword_tokens(question))
        labels = [
            answerable and prepared.source_to_id.get(c["document"].metadata["source"]) in gold
            for c in candidates
        ]
        rows = features(question, candidates, idf)
        questions.append({"qid": qid, "answerable": answerable, "x": rows, "y": labels})
    return {"dataset": prepared.dataset.name, "questions": questions}


def fit(x: np.ndarray, y: np.ndarray, l2: float = 1.0, steps: int = 4000) -> Grader:
    """Logistic regression by gradient descent on standardised features."""
    mean = x.mean(axis=0)
    scale = x.std(axis=0)
    scale[scale < 1e-9] = 1.0
    z = (x - mean) / scale
    w = np.zeros(z.shape[1])
    b = 0.0
    for _ in range(steps):
        p = 1 / (1 + np.exp(-(z @ w + b)))
        w -= 0.5 * (z.T @ (p - y) / len(y) + l2 * w / len(y))
        b -= 0.5 * float(np.mean(p - y))
    return Grader(
        tuple(float(v) for v in mean),
        tuple(float(v) for v in scale),
        tuple(float(v) for v in w),
        b,
    )


def best_scores(score: Any, questions: list[dict[str, Any]]) -> list[float]:
    return [max((score(row) for row in q["x"]), default=0.0) for q in questions]


def outcome(score: Any, questions: list[dict[str, Any]], threshold: float) -> dict[str, float]:
    """Question-level decision of the first round: answered when some candidate passes."""
    best = best_scores(score, questions)
    answerable = [b for b, q in zip(best, questions, strict=True) if q["answerable"]]
    unanswerable = [b for b, q in zip(best, questions, strict=True) if not q["answerable"]]
    return {
        "threshold": threshold,
        "unanswerable_abstained": float(np.mean([b < threshold for b in unanswerable])),
        "answerable_abstained": float(np.mean([b < threshold for b in answerable])),
    }


def choose_threshold(score: Any, questions: list[dict[str, Any]], max_abstain: float) -> float:
    """The highest threshold at which at most `max_abstain` of the answerable questions have
    no candidate above it."""
    best = sorted(
        b for b, q in zip(best_scores(score, questions), questions, strict=True) if q["answerable"]
    )
    allowed = int(np.floor(max_abstain * len(best)))
    threshold = best[allowed] if allowed < len(best) else best[-1]
    return float(min(max(threshold - 1e-6, 1e-4), 1 - 1e-4))


def whole_graph(model: Grader, datasets: list[Path], seed: int, share: float) -> list[dict]:
    """`footnote eval --answers` with the fitted model as the offline grade."""
    from footnote.graph import offline
    from footnote.graph import tools as graph_tools

    real = graph_tools.retrieve_candidates

    def with_features(request: SearchRequest, question: str = "") -> list[Candidate]:
        candidates = real(request, question)
        asked = question or request.query
        idf = get_retriever(request.index_dir).idf_weights(keyword_tokens(asked))
        for c, row in zip(candidates, features(asked, candidates, idf), strict=True):
            c["evidence"] = {**c["evidence"], **row}  # type: ignore[typeddict-item]
        return candidates

    graph_tools.retrieve_candidates = with_features  # type: ignore[assignment]
    offline.grade = lambda c: model.grade(c["evidence"])  # type: ignore[assignment,arg-type]
    results = []
    for dataset in datasets:
        result = evaluate_answers(dataset, share=share, seed=seed)
        results.append({k: v for k, v in result.items() if k != "rows"})
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dev", type=Path, required=True)
    parser.add_argument("--check", type=Path, required=True)
    parser.add_argument("--seed", type=int, default=DEFAULT_SEED)
    parser.add_argument("--share", type=float, default=DEFAULT_SHARE)
    parser.add_argument("--max-abstain", type=float, default=0.05)
    parser.add_argument("--l2", type=float, default=1.0)
    parser.add_argument("--whole-graph", action="store_true")
    parser.add_argument("--write", type=Path, default=None, help="save the model as JSON")
    args = parser.parse_args(argv)

    dev = collect(args.dev, args.seed, args.share)
    check = collect(args.check, args.seed, args.share)
    x = np.array([[row[f] for f in FEATURES] for q in dev["questions"] for row in q["x"]])
    y = np.array([label for q in dev["questions"] for label in q["y"]], dtype=float)
    model = fit(x, y, l2=args.l2)
    calibrated = model.probability
    threshold = choose_threshold(calibrated, dev["questions"], args.max_abstain)
    model = Grader(model.mean, model.scale, model.weights, model.bias, threshold)
    curve = []
    for allowed in (0.02, 0.05, 0.1, 0.15, 0.2, 0.3):
        row: dict[str, Any] = {"max_abstain_on_dev": allowed}
        for name, score in (("linear", linear), ("calibrated", calibrated)):
            t = choose_threshold(score, dev["questions"], allowed)
            row[name] = {
                "dev": outcome(score, dev["questions"], t),
                "check": outcome(score, check["questions"], t),
            }
        curve.append(row)
    report: dict[str, Any] = {
        "fitted_on": dev["dataset"],
        "checked_on": check["dataset"],
        "seed": args.seed,
        "share": args.share,
        "rows": len(y),
        "positives": int(y.sum()),
        "shipped_grade_at_0.5": {
            "dev": outcome(linear, dev["questions"], 0.5),
            "check": outcome(linear, check["questions"], 0.5),
        },
        "calibrated_at_operating_point": {
            "dev": outcome(calibrated, dev["questions"], threshold),
            "check": outcome(calibrated, check["questions"], threshold),
        },
        "weights": dict(zip(FEATURES, model.weights, strict=True)),
        "curve": curve,
    }
    if args.whole_graph:
        report["whole_graph_calibrated"] = whole_graph(
            model, [args.dev, args.check], args.seed, args.share
        )
    print(json.dumps(report, indent=2))
    if args.write:
        data = {"features": list(FEATURES), **asdict(model), "fit": report["rows"]}
        args.write.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
        print(f"wrote {args.write}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
