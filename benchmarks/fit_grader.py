"""Fit the calibrated offline grader (graph/grader.py, graph/grader.json) on a dev corpus,
check it on another, and compare it with the linear blend (0.6 x similarity + 0.4 x keyword
coverage).

For every question of the leave-gold-out split (the split `footnote eval --answers` uses) the
first retrieval round runs as the graph runs it, and each candidate chunk becomes one row of
the package's features (`footnote.graph.grader.FEATURES`, computed by the package's own
`features`) labelled by whether it belongs to the question's gold passage (never, for an
unanswerable question). A logistic regression (NumPy, L2, standardised features, weights kept
non-negative so the grade can only rise with the evidence) learns P(chunk answers the
question). The operating point is chosen on the dev corpus at question level: the highest
threshold at which at most `--max-abstain` of the answerable questions have no candidate
above it; the same threshold is then measured on the check corpus. The linear blend gets the
same treatment, so the two are compared at equal wrong-abstention on dev.

    python benchmarks/fit_grader.py --dev benchmarks/data/pyfaq-core \\
        --check benchmarks/data/debfaq [--max-abstain 0.05] [--features dense,coverage] \\
        [--whole-graph] [--write FILE] [--rows CACHE.json]

--search --handbook --min-near-miss SHARE is the shipped fit: a question-level search over the
handbook set and the dev corpus's answerable questions together (`constrained_search`).
--features picks among FEATURES (for the per-chunk logistic fit; default: similarity and
coverage).
--rows caches the collected candidates in a file and reads them back on the next run.
--whole-graph also runs the whole answer graph (`footnote eval --answers`) on both corpora
with each offline grader (the Context's `offline_grader`). --write saves the fitted model as
plain JSON (never a pickle); `--write graph/grader.json` with the defaults writes the shipped
file.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np

from footnote.evaluation.answers import (
    DEFAULT_SEED,
    DEFAULT_SHARE,
    evaluate_answers,
    heldout_index,
    split_questions,
)
from footnote.evaluation.retrieval import prepare_index
from footnote.graph.grader import (
    FEATURES,
    LINEAR_THRESHOLD,
    CalibratedGrader,
    features,
    linear_score,
)
from footnote.store.types import Caller
from footnote.tools.documents import Candidate, Evidence, retrieve_candidates, with_token_recall
from footnote.tools.search import SearchRequest

RETRIEVE_K = 8
"""The graph's default `retrieve_k`: the candidates the grader sees."""
DEFAULT_FEATURES = ("dense", "coverage")
"""The shipped model's features. Adding the margin, rank and agreement features lifts the top
candidate of every search (it is always first by rank), so a near miss passes: on the sample
handbook "What is the parental leave policy?" was answered (docs/evaluation.md)."""
REPO = Path(__file__).resolve().parents[1]
HANDBOOK = REPO / "samples" / "handbook"
HANDBOOK_QUESTIONS = REPO / "benchmarks" / "questions" / "handbook.json"
COMMAND = (
    "python benchmarks/fit_grader.py --dev benchmarks/data/pyfaq-core "
    "--check benchmarks/data/debfaq --write graph/grader.json"
)


def collect(dataset_dir: Path, seed: int, share: float) -> dict[str, Any]:
    """Feature rows per question of the split, labelled by gold membership (`handbook`: the
    handbook question set instead)."""
    if str(dataset_dir) == "handbook":
        return collect_handbook()
    prepared = prepare_index(dataset_dir)
    split = split_questions(prepared.dataset.qrels, share, seed)
    index = heldout_index(dataset_dir, prepared, split)
    questions = []
    for qid, answerable in [(q, True) for q in split.answerable] + [
        (q, False) for q in split.unanswerable
    ]:
        gold = set(prepared.dataset.qrels[qid])
        question = prepared.dataset.queries[qid]
        candidates = with_token_recall(
            retrieve_candidates(
                SearchRequest(
                    query=question, index_dir=index, k=RETRIEVE_K, caller=Caller.operator()
                ),
                question=question,
            ),
            question,
            str(index),
        )
        labels = [
            answerable and prepared.source_to_id.get(c["document"].metadata["source"]) in gold
            for c in candidates
        ]
        evidence = [dict(c["evidence"]) for c in candidates]
        questions.append(
            {
                "qid": qid,
                "answerable": answerable,
                "evidence": evidence,
                "x": features(candidates, question),
                "y": labels,
            }
        )
    return {"dataset": prepared.dataset.name, "questions": questions}


def collect_handbook(questions_file: Path = HANDBOOK_QUESTIONS) -> dict[str, Any]:
    """Feature rows for the handbook question set (benchmarks/questions/handbook.json), over
    an index of samples/handbook made in a temporary directory, each question in its scope."""
    import tempfile

    from footnote.ingest.pipeline import ingest

    spec = json.loads(questions_file.read_text(encoding="utf-8"))
    questions = []
    with tempfile.TemporaryDirectory() as tmp:
        index = Path(tmp) / "index"
        ingest([HANDBOOK], index)
        asked = [(q, True) for q in spec["answerable"]] + [(q, False) for q in spec["unanswerable"]]
        for n, (q, answerable) in enumerate(asked):
            caller = Caller.of_groups(q.get("groups", []), strict=q.get("strict_groups", False))
            candidates = with_token_recall(
                retrieve_candidates(
                    SearchRequest(query=q["question"], index_dir=index, k=RETRIEVE_K,
                                  caller=caller),
                    question=q["question"],
                ),
                q["question"],
                str(index),
            )  # fmt: skip
            labels = [
                answerable and Path(c["document"].metadata["source"]).name == q["gold"]
                for c in candidates
            ]
            questions.append(
                {
                    "qid": f"handbook-{n}",
                    "question": q["question"],
                    "answerable": answerable,
                    "evidence": [dict(c["evidence"]) for c in candidates],
                    "x": features(candidates, q["question"]),
                    "y": labels,
                }
            )
    return {"dataset": "handbook", "questions": questions}


def as_candidates(evidence: list[dict[str, float]]) -> list[Candidate]:
    from langchain_core.documents import Document

    return [
        Candidate(document=Document(page_content=""), evidence=Evidence(**e))  # type: ignore[typeddict-item]
        for e in evidence
    ]


def fit(
    x: np.ndarray, y: np.ndarray, l2: float = 1.0, steps: int = 4000
) -> tuple[np.ndarray, np.ndarray, np.ndarray, float]:
    """Logistic regression by projected gradient descent on standardised features, weights
    kept >= 0 (every feature is oriented so that more means more relevant)."""
    mean = x.mean(axis=0)
    scale = x.std(axis=0)
    scale[scale < 1e-9] = 1.0
    z = (x - mean) / scale
    w = np.zeros(z.shape[1])
    b = 0.0
    for _ in range(steps):
        p = 1 / (1 + np.exp(-(z @ w + b)))
        w -= 0.5 * (z.T @ (p - y) / len(y) + l2 * w / len(y))
        w = np.maximum(w, 0.0)
        b -= 0.5 * float(np.mean(p - y))
    return mean, scale, w, b


def best_scores(score: Any, questions: list[dict[str, Any]]) -> list[float]:
    return [max(score(q), default=0.0) for q in questions]


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


SEARCH_FEATURES = (
    "dense", "coverage", "source_margin", "dense_z", "token_recall", "token_recall_min",
)  # fmt: skip
"""The features `--search` weighs: similarity, keyword coverage, the margin over other files,
the similarity relative to the query's own scores, and the word-by-word match of the
question's content words (mean and weakest)."""
SEARCH_GRID = {
    "coverage": (0.0, 0.25, 0.5, 0.75, 1.0),
    "source_margin": (0.0, 0.5, 1.0, 1.5, 2.0),
    "dense_z": (0.0, 0.05, 0.1),
    "token_recall": (0.0, 0.5, 1.0),
    "token_recall_min": (0.0, 0.5),
}
"""Weights tried for each feature after the first (whose weight is 1)."""
SEARCH_GAIN = 10.0
"""How steeply the searched score's sigmoid rises through the operating point."""
WORKED_EXAMPLE = "How often do I have to change my API key?"
PARENTAL_LEAVE = "What is the parental leave policy?"


def search_weights(
    questions: list[dict[str, Any]],
    require_names: bool,
    min_near_miss: float | None = None,
    max_abstain: float = 0.05,
) -> tuple[CalibratedGrader, dict[str, Any]]:
    """A question-level fit: the weights of a linear score over SEARCH_FEATURES (on a small
    grid) and its threshold that maximise answered-with-gold plus abstained-unanswerable on
    the dev questions, among those that keep the worked example (answered from its gold) and
    "parental leave" (not covered). A per-chunk logistic fit mostly learns to tell the gold
    chunk from its neighbours in answerable lists, not an answerable question from a near
    miss, which is the decision a grade makes."""
    import itertools

    if min_near_miss is not None:
        return constrained_search(questions, require_names, min_near_miss, max_abstain)
    must_answer = [q for q in questions if q.get("question") == WORKED_EXAMPLE]
    must_abstain = [q for q in questions if q.get("question") == PARENTAL_LEAVE]
    best: tuple[float, float, tuple[float, ...]] | None = None
    for rest in itertools.product(*(SEARCH_GRID[f] for f in SEARCH_FEATURES[1:])):
        weights = (1.0, *rest)

        def score(q: dict[str, Any], w: tuple[float, ...] = weights) -> list[float]:
            return [
                -1.0
                if require_names and row["entity_overlap"] == 0.0
                else sum(wi * row[f] for wi, f in zip(w, SEARCH_FEATURES, strict=True))
                for row in q["x"]
            ]

        t = balanced_threshold(score, questions, admissible=lambda t, sc=score: all(
            max(sc(q), default=-1.0) >= t and q["y"][int(np.argmax(sc(q)))]
            for q in must_answer
        ) and all(max(sc(q), default=-1.0) < t for q in must_abstain))  # fmt: skip
        if t is None:
            continue
        value = balanced_value(score, questions, t)
        if best is None or value > best[0] + 1e-9:
            best = (value, t, weights)
    if best is None:
        raise SystemExit("--search: no weights keep the worked example and parental leave")
    value, t, weights = best
    model = CalibratedGrader(
        SEARCH_FEATURES, (0.0,) * len(SEARCH_FEATURES), (1.0,) * len(SEARCH_FEATURES),
        tuple(SEARCH_GAIN * w for w in weights), -SEARCH_GAIN * t, 0.5, {}, require_names,
    )  # fmt: skip
    return model, {"searched_weights": dict(zip(SEARCH_FEATURES, weights, strict=True)),
                   "score_threshold": t, "dev_balanced": value}  # fmt: skip


CONSTRAINED_GRID = {
    "coverage": (0.0, 0.5, 1.0, 1.5),
    "source_margin": (0.0, 0.5, 1.0),
    "dense_z": (0.0, 0.1, 0.2),
    "token_recall": (0.0, 0.25, 0.5, 0.75, 1.0, 1.5),
    "token_recall_min": (0.0, 0.25, 0.5, 1.0),
}
"""Weights `constrained_search` tries for each feature after the first (whose weight is 1)."""


def constrained_search(
    questions: list[dict[str, Any]], require_names: bool, min_near_miss: float, max_abstain: float
) -> tuple[CalibratedGrader, dict[str, Any]]:
    """A question-level fit over two kinds of dev question at once: the handbook set's
    (qid "handbook-...") and a corpus's answerable ones. Among the weights of SEARCH_FEATURES
    on CONSTRAINED_GRID and every threshold, keep those that abstain on at least
    `min_near_miss` of the handbook's near misses and wrongly abstain on at most
    `max_abstain` of the corpus's answerable questions, and that keep the worked example
    (answered from its gold) and "parental leave" (not covered); of those, the one whose best
    candidate passes and is gold for the most handbook questions (then: fewest wrong
    abstentions on the corpus). The corpus's unanswerable (leave-gold-out) questions are not
    used: they are reported, not fitted."""
    import itertools

    handbook = [q for q in questions if str(q["qid"]).startswith("handbook-")]
    corpus = [q for q in questions if not str(q["qid"]).startswith("handbook-") and q["answerable"]]
    if not handbook or not corpus:
        raise SystemExit("--min-near-miss needs --handbook and an answerable dev corpus")
    must_answer = [q for q in handbook if q.get("question") == WORKED_EXAMPLE]
    must_abstain = [q for q in handbook if q.get("question") == PARENTAL_LEAVE]
    best: tuple[tuple[float, float], float, tuple[float, ...]] | None = None
    for rest in itertools.product(*(CONSTRAINED_GRID[f] for f in SEARCH_FEATURES[1:])):
        weights = (1.0, *rest)

        def score(q: dict[str, Any], w: tuple[float, ...] = weights) -> list[float]:
            return [
                -1.0
                if require_names and row["entity_overlap"] == 0.0
                else sum(wi * row[f] for wi, f in zip(w, SEARCH_FEATURES, strict=True))
                for row in q["x"]
            ]

        scores = {id(q): score(q) for q in handbook + corpus}
        tops = {key: max(values, default=-1.0) for key, values in scores.items()}
        gold_at_top = {
            id(q): bool(scores[id(q)]) and bool(q["y"][int(np.argmax(scores[id(q)]))])
            for q in handbook
        }
        points = sorted(set(tops.values()))
        for t in ((a + b) / 2 for a, b in zip(points, points[1:], strict=False)):
            near_miss = [tops[id(q)] < t for q in handbook if not q["answerable"]]
            if np.mean(near_miss) < min_near_miss:
                continue
            wrong = float(np.mean([tops[id(q)] < t for q in corpus]))
            if wrong > max_abstain:
                continue
            if not all(tops[id(q)] >= t and gold_at_top[id(q)] for q in must_answer):
                continue
            if not all(tops[id(q)] < t for q in must_abstain):
                continue
            right = float(
                sum(gold_at_top[id(q)] for q in handbook if q["answerable"] and tops[id(q)] >= t)
            )
            value = (right / sum(q["answerable"] for q in handbook), -wrong)
            if best is None or value > best[0]:
                best = (value, t, weights)
    if best is None:
        raise SystemExit("--min-near-miss: no weights and threshold meet the constraints")
    (right, wrong), t, weights = best
    model = CalibratedGrader(
        SEARCH_FEATURES, (0.0,) * len(SEARCH_FEATURES), (1.0,) * len(SEARCH_FEATURES),
        tuple(SEARCH_GAIN * w for w in weights), -SEARCH_GAIN * t, 0.5, {}, require_names,
    )  # fmt: skip
    return model, {"searched_weights": dict(zip(SEARCH_FEATURES, weights, strict=True)),
                   "score_threshold": t, "min_near_miss": min_near_miss,
                   "dev_handbook_gold_at_top": right,
                   "dev_corpus_wrongly_abstained": -wrong}  # fmt: skip


def balanced_value(score: Any, questions: list[dict[str, Any]], t: float) -> float:
    """Share of answerable questions whose best candidate passes and is gold, plus share of
    unanswerable questions where none passes."""
    answerable = [q for q in questions if q["answerable"]]
    unanswerable = [q for q in questions if not q["answerable"]]
    right = 0
    for q in answerable:
        scores = score(q)
        if scores:
            best = int(np.argmax(scores))
            right += scores[best] >= t and bool(q["y"][best])
    abstained = sum(max(score(q), default=-1.0) < t for q in unanswerable)
    return right / max(len(answerable), 1) + abstained / max(len(unanswerable), 1)


def balanced_threshold(score: Any, questions: list[dict[str, Any]], admissible: Any = None) -> Any:
    """The threshold that maximises `balanced_value` on dev (the middle of the best run of
    candidate thresholds, for room either side); None when no admissible one exists."""
    points = sorted({s for q in questions for s in score(q)})
    cuts = [(a + b) / 2 for a, b in zip(points, points[1:], strict=False)]
    allowed = [t for t in cuts if admissible is None or admissible(t)]
    if not allowed:
        return None if admissible is not None else 0.5
    values = [balanced_value(score, questions, t) for t in allowed]
    top = max(values)
    best = [t for t, v in zip(allowed, values, strict=True) if v >= top - 1e-9]
    return best[len(best) // 2]


def linear(q: dict[str, Any]) -> list[float]:
    """The linear blend's raw scores (graph/grader.py), per candidate of a question."""
    return [linear_score(c) for c in as_candidates(q["evidence"])]


def whole_graph(datasets: list[Path], seed: int, share: float) -> list[dict[str, Any]]:
    """`footnote eval --answers` with each offline grader."""
    results = []
    for grader in ("calibrated", "linear"):
        for dataset in datasets:
            result = evaluate_answers(
                dataset, share=share, seed=seed, context={"offline_grader": grader}
            )
            results.append({k: v for k, v in result.items() if k != "rows"})
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--dev", type=Path, required=True)
    parser.add_argument("--check", type=Path, required=True)
    parser.add_argument("--seed", type=int, default=DEFAULT_SEED)
    parser.add_argument("--share", type=float, default=DEFAULT_SHARE)
    parser.add_argument("--max-abstain", type=float, default=0.05)
    parser.add_argument("--l2", type=float, default=1.0)
    parser.add_argument(
        "--features",
        default=",".join(DEFAULT_FEATURES),
        help=f"comma-separated, among {','.join(FEATURES)} (default: %(default)s)",
    )
    parser.add_argument(
        "--handbook",
        action="store_true",
        help="fit on the handbook question set too (benchmarks/questions/handbook.json)",
    )
    parser.add_argument(
        "--require-names",
        action="store_true",
        help="a chunk with none of the question's names cannot pass (grader.require_names)",
    )
    parser.add_argument(
        "--threshold-rule",
        choices=("max-abstain", "balanced"),
        default="max-abstain",
        help="max-abstain: the highest threshold within --max-abstain wrong abstentions on "
        "dev; balanced: the one that maximises answered-with-gold plus abstained-unanswerable",
    )
    parser.add_argument(
        "--search",
        action="store_true",
        help="question-level fit: search the weights of SEARCH_FEATURES (see search_weights)",
    )
    parser.add_argument(
        "--min-near-miss",
        type=float,
        default=None,
        help="with --search --handbook: the constrained fit (constrained_search): at least "
        "this share of the handbook's near misses abstained, at most --max-abstain of the "
        "dev corpus's answerable questions wrongly abstained",
    )
    parser.add_argument("--whole-graph", action="store_true")
    parser.add_argument("--write", type=Path, default=None, help="save the model as JSON")
    parser.add_argument(
        "--rows", type=Path, default=None, help="cache of the collected rows (read if present)"
    )
    args = parser.parse_args(argv)
    chosen = tuple(args.features.split(","))
    if not chosen or any(f not in FEATURES for f in chosen):
        parser.error(f"--features: choose among {','.join(FEATURES)}")

    if args.rows and args.rows.is_file():
        dev, check = json.loads(args.rows.read_text(encoding="utf-8"))
    else:
        dev = collect(args.dev, args.seed, args.share)
        check = collect(args.check, args.seed, args.share)
        if args.rows:
            args.rows.write_text(json.dumps([dev, check]), encoding="utf-8")
    if args.handbook:
        handbook = collect_handbook()
        dev = {
            "dataset": f"{dev['dataset']}+handbook",
            "questions": dev["questions"] + handbook["questions"],
        }
    x = np.array([[row[f] for f in chosen] for q in dev["questions"] for row in q["x"]])
    y = np.array([label for q in dev["questions"] for label in q["y"]], dtype=float)
    mean, scale, weights, bias = fit(x, y, l2=args.l2)
    unfitted = CalibratedGrader(
        chosen, tuple(map(float, mean)), tuple(map(float, scale)),
        tuple(map(float, weights)), float(bias), 0.5, {}, args.require_names,
    )  # fmt: skip

    def calibrated(q: dict[str, Any]) -> list[float]:
        return [unfitted.probability(row) for row in q["x"]]

    searched: dict[str, Any] = {}
    if args.search:
        unfitted, searched = search_weights(
            dev["questions"], args.require_names, args.min_near_miss, args.max_abstain
        )
        chosen = unfitted.features
        threshold = 0.5
    elif args.threshold_rule == "balanced":
        threshold = balanced_threshold(calibrated, dev["questions"])
    else:
        threshold = choose_threshold(calibrated, dev["questions"], args.max_abstain)
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
    fitted = {
        "about": "Offline grader: logistic regression over the named footnote.graph.grader "
        "features; "
        "threshold: the operating point on the probability.",
        "command": " ".join(["python benchmarks/fit_grader.py", *(argv or sys.argv[1:])]),
        "fitted_on": dev["dataset"],
        "checked_on": check["dataset"],
        "seed": args.seed,
        "share": args.share,
        "max_abstain": args.max_abstain,
        "threshold_rule": "search" if args.search else args.threshold_rule,
        **searched,
        "handbook": args.handbook,
        "l2": args.l2,
        "rows": len(y),
        "positives": int(y.sum()),
        "dev": outcome(calibrated, dev["questions"], threshold),
        "check": outcome(calibrated, check["questions"], threshold),
    }
    model = CalibratedGrader(
        unfitted.features, unfitted.mean, unfitted.scale, unfitted.weights, unfitted.bias,
        threshold, fitted, args.require_names,
    )  # fmt: skip
    report: dict[str, Any] = {
        **fitted,
        "linear_at_its_threshold": {
            "dev": outcome(linear, dev["questions"], LINEAR_THRESHOLD),
            "check": outcome(linear, check["questions"], LINEAR_THRESHOLD),
        },
        "weights": dict(zip(chosen, model.weights, strict=True)),
        "curve": curve,
    }
    if args.write:
        args.write.write_text(json.dumps(model.to_json(), indent=2) + "\n", encoding="utf-8")
        print(f"wrote {args.write}", file=sys.stderr)
    if args.whole_graph:
        report["whole_graph"] = whole_graph([args.dev, args.check], args.seed, args.share)
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
