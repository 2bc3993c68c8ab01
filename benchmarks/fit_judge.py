"""Fit the judge grader's threshold, and the judge as a veto on the calibrated grader, on the
fitting halves, and report them on the reporting halves beside the linear blend and the
calibrated grader
(question level: is the question answered at all).

    nice -n 10 .venv/bin/python benchmarks/fit_judge.py [--json] [--rows CACHE.json]

Corpora: the handbook question set (paraphrases answerable, near misses not: each question in
its asker's scope), and pyfaq-core and debfaq with the leave-gold-out split of `footnote eval
--answers` (seed and share as there: a question whose gold passages are removed is
unanswerable). Every question's half is `footnote.evaluation.halves.half_of(corpus, id)`.
For each question the first retrieval round runs as the graph runs it (8 candidates); a
grader answers when its best candidate's grade reaches the operating point (0.5).

The judge's threshold (graph/grader.py JUDGE_THRESHOLD) is the logit that maximises balanced
accuracy (the mean of "answerable answered" and "unanswerable refused") over all fitting-half
questions pooled. The veto's cut (a candidate passes only when its calibrated
grade passes and the judge's logit reaches the cut) is the one with the best mean balanced
accuracy over the fitting halves' corpora, kept only if it beats the calibrated grader without it.
Figures are then given for each corpus's reporting half only, and for the handbook's
written-after set (all of it reporting). A third cut, the "apart veto", is fitted on the first
three sets written apart pooled (so its figures there are fitted ones) and reported on the fourth
(`written_apart_4`, sealed until the fourth judge run's rule was fixed) and on the other
reporting halves. (Until that run it was fitted on the first two and reported on the third.)
The rescue ("judge-rescue": a candidate also passes when the judge's logit reaches a cut) is
fitted on the first four sets written apart pooled and reported on the fifth
(`written_apart_5`, sealed until its rule was fixed); it is the default since the seventh
(docs/evaluation.md).
The judge never saw these corpora's questions (training/judge/README.md); debfaq's passages
include the Debian reference, whose sections it was trained on with their headings as queries.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

from question_sets import HANDBOOK_QUESTIONS as QUESTIONS  # noqa: E402
from question_sets import apart_number, handbook_later_sets  # noqa: E402

from footnote.evaluation.answers import (  # noqa: E402
    DEFAULT_SEED,
    DEFAULT_SHARE,
    heldout_index,
    split_questions,
)
from footnote.evaluation.halves import half_of  # noqa: E402
from footnote.evaluation.retrieval import prepare_index  # noqa: E402
from footnote.graph.grader import measured_offline_grades  # noqa: E402
from footnote.graph.kinds import vetoed  # noqa: E402
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
DATASETS = (REPO / "benchmarks" / "data" / "pyfaq-core", REPO / "benchmarks" / "data" / "debfaq")
RETRIEVE_K = 8
WRITTEN_AFTER = "handbook-written-after"
WRITTEN_APART = "handbook-written-apart"
"""The sets written apart that the apart veto is fitted on (written_apart, _2 and _3, pooled)."""
WRITTEN_APART_4 = "handbook-written-apart-4"
"""The fourth set written apart, sealed until the veto's rule was fixed: the veto's report; the
rescue is fitted on it with the first three."""


def corpus_of(name: str) -> str:
    """The corpus a later set's rows are reported under: the first three sets written apart
    pool as WRITTEN_APART (the apart veto's fit), each later one is its own."""
    number = apart_number(name)
    if number is None:
        return WRITTEN_AFTER
    return WRITTEN_APART if number <= 3 else f"{WRITTEN_APART}-{number}"


LATER = {name: corpus_of(name) for name in handbook_later_sets()}
"""Each set written after the method (handbook.json's keys) and the corpus it reports under;
every set from the fifth on only reports."""


def row(
    corpus: str, qid: str, question: str, answerable: bool, found: list[Candidate], index: Path
) -> dict[str, Any]:
    logits = load_judge().score(question, [embedding_text_of(c["document"]) for c in found])
    calibrated = measured_offline_grades(found, "calibrated", question, str(index))
    return {
        "corpus": corpus,
        "qid": qid,
        "half": half_of(corpus, qid),
        "answerable": answerable,
        "judge": float(np.max(logits)) if len(found) else float("-inf"),
        "linear": max((relevance(c) for c in found), default=0.0),
        # per candidate: the calibrated grade (veto included), the judge's logit, and whether
        # its headings name another kind of what the question asks about (graph/kinds.py)
        "calibrated_grades": [float(g) for g in calibrated],
        "judge_logits": [float(x) for x in logits],
        "other_kind": vetoed(question, found),
    }


def handbook_rows() -> list[dict[str, Any]]:
    """The handbook set's rows, and those of the sets written later (`LATER`: all marked
    "report", so the fits on the fitting halves never read them; only the apart veto reads
    WRITTEN_APART)."""
    spec = json.loads(QUESTIONS.read_text(encoding="utf-8"))
    near = spec["unanswerable"] + spec.get("held_out", {}).get("unanswerable", [])
    asked = [(q, True, "handbook") for q in spec["answerable"]]
    asked += [(q, False, "handbook") for q in near]
    for name, corpus in LATER.items():
        asked += [(q, True, corpus) for q in spec[name]["answerable"]]
        asked += [(q, False, corpus) for q in spec[name]["unanswerable"]]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        index = Path(tmp) / "index"
        ingest([HANDBOOK], index)
        for q, answerable, corpus in asked:
            caller = Caller.of_groups(q.get("groups", []), strict=q.get("strict_groups", False))
            request = SearchRequest(query=q["question"], index_dir=index, k=RETRIEVE_K,
                                    caller=caller)  # fmt: skip
            found = retrieve_candidates(request, question=q["question"])
            rows.append(row(corpus, q["question"], q["question"], answerable, found, index))
            if corpus != "handbook":
                rows[-1]["half"] = "report"
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
        rows.append(row(dataset.name, qid, question, answerable, found, Path(index)))
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


def calibrated_passes(row: dict[str, Any]) -> bool:
    """The calibrated grader's decision: some candidate's grade (veto included) passes."""
    return max(row["calibrated_grades"], default=0.0) >= OPERATING_GRADE


def vetoed_by_judge(cut: float) -> Callable[[dict[str, Any]], bool]:
    """The calibrated grader's decision with the judge as a veto: a candidate passes only when its
    calibrated grade passes and its judge logit reaches `cut`."""
    return lambda row: any(
        grade >= OPERATING_GRADE and logit >= cut
        for grade, logit in zip(row["calibrated_grades"], row["judge_logits"], strict=True)
    )


def fit_veto(rows: list[dict[str, Any]]) -> float:
    """The veto's cut with the best mean balanced accuracy over the fitting halves' corpora
    (ties: the lowest cut, the lightest veto); -inf when no cut beats no veto."""
    corpora = sorted({r["corpus"] for r in rows})

    def balanced(passes: Callable[[dict[str, Any]], bool]) -> float:
        per = [rates([r for r in rows if r["corpus"] == c], passes) for c in corpora]
        return float(np.mean([(p["answered"] + p["refused"]) / 2 for p in per]))

    cuts = [round(x, 2) for x in np.arange(-6.0, 2.01, 0.25)]
    best = max(cuts, key=lambda cut: (balanced(vetoed_by_judge(cut)), -cut))
    return best if balanced(vetoed_by_judge(best)) > balanced(calibrated_passes) else -math.inf


def fit_apart_veto(rows: list[dict[str, Any]]) -> float:
    """The veto's cut with the best balanced accuracy over the first three sets written apart,
    pooled (the rule docs/evaluation.md fixed before the fourth judge run was evaluated);
    -inf when no cut beats no veto there."""
    pooled = [r for r in rows if r["corpus"] == WRITTEN_APART]

    def balanced(passes: Callable[[dict[str, Any]], bool]) -> float:
        found = rates(pooled, passes)
        return (found["answered"] + found["refused"]) / 2

    cuts = [round(x, 2) for x in np.arange(-6.0, 2.01, 0.25)]
    best = max(cuts, key=lambda cut: (balanced(vetoed_by_judge(cut)), -cut))
    return best if balanced(vetoed_by_judge(best)) > balanced(calibrated_passes) else -math.inf


def rescued_by_judge(cut: float) -> Callable[[dict[str, Any]], bool]:
    """The default's decision ("judge-rescue": the calibrated grader with the judge as a
    rescue): a candidate passes when its calibrated grade passes, or when its judge logit
    reaches `cut` and its headings do not name another kind of what the question asks about."""
    return lambda row: any(
        grade >= OPERATING_GRADE or (logit >= cut and not other)
        for grade, logit, other in zip(
            row["calibrated_grades"], row["judge_logits"], row["other_kind"], strict=True
        )
    )


def fit_rescue(rows: list[dict[str, Any]]) -> float:
    """The rescue's cut with the best balanced accuracy over the first four sets written apart,
    pooled (the rule docs/evaluation.md, "The judge as a rescue", fixed before the fifth set was
    read; ties: the highest cut, the lightest rescue); inf when no cut beats no rescue."""
    pooled = [r for r in rows if r["corpus"] in (WRITTEN_APART, WRITTEN_APART_4)]

    def balanced(passes: Callable[[dict[str, Any]], bool]) -> float:
        found = rates(pooled, passes)
        return (found["answered"] + found["refused"]) / 2

    cuts = [round(x, 2) for x in np.arange(-4.0, 6.01, 0.25)]
    best = max(cuts, key=lambda cut: (balanced(rescued_by_judge(cut)), cut))
    return best if balanced(rescued_by_judge(best)) > balanced(calibrated_passes) else math.inf


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
    veto = fit_veto([r for r in rows if r["half"] == "fit"])
    apart_veto = fit_apart_veto(rows)
    rescue = fit_rescue(rows)
    report: dict[str, Any] = {
        "judge_threshold (fitted on the fitting halves)": threshold,
        "judge_veto_cut (fitted on the fitting halves; -inf: no cut helps)": veto,
        "apart_veto_cut (fitted on written_apart, _2 and _3; -inf: no cut helps)": apart_veto,
        "rescue_cut (fitted on written_apart, _2, _3 and _4; inf: no cut helps)": rescue,
    }
    corpora = ("handbook", *dict.fromkeys(LATER.values()), *(d.name for d in DATASETS))
    for corpus in corpora:
        mine = [r for r in rows if r["corpus"] == corpus and r["half"] == "report"]
        report[corpus] = {
            "linear": rates(mine, lambda r: r["linear"] >= OPERATING_GRADE),
            "calibrated + veto": rates(mine, calibrated_passes),
            "judge": rates(mine, lambda r, t=threshold: r["judge"] >= t),
        }
        if math.isfinite(veto):
            report[corpus]["calibrated + judge veto"] = rates(mine, vetoed_by_judge(veto))
        if math.isfinite(apart_veto):
            report[corpus]["calibrated + apart veto"] = rates(mine, vetoed_by_judge(apart_veto))
        if math.isfinite(rescue):
            rescued = rates(mine, rescued_by_judge(rescue))
            report[corpus]["calibrated + judge rescue (default)"] = rescued
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    print(f"judge threshold, fitted on the fitting halves: {threshold}; judge veto cut: {veto}; "
          f"apart veto cut: {apart_veto}; rescue cut: {rescue}")  # fmt: skip
    print("| reporting half | grader | answerable answered | unanswerable refused |")
    print("|---|---|---:|---:|")
    for corpus in corpora:
        for grader, r in report[corpus].items():
            print(f"| {corpus} ({r['answerable']} / {r['unanswerable']}) | {grader} "
                  f"| {r['answered']} | {r['refused']} |")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
