"""Answer quality on the handbook question set: paraphrases answered, near misses not covered.

The questions (benchmarks/questions/handbook.json) are written in the asker's words, not the
documents', as the worked example is; the unanswerable ones are near misses: a topic next to
one the handbook covers, or a covered topic outside the asker's scope (`strict_groups`).
Each question runs through the whole answer graph over samples/handbook. Reported:

- answered right: the answer cites the gold file and contains the fact;
- gold cited, fact present, wrongly "not covered" (answerable questions);
- not covered (near-miss unanswerable questions), and every miss by name;
- the same for the keyword queries (the questions' keyword forms: "vacation days"), apart;
- "not covered" on held-out near misses: phrasings written after the calibrated grader was
  fitted ("Do we have parental leave?"), which no fit has seen;
- the set written after the default grader and its "another kind" veto were fixed
  (`written_after`: new paraphrases and near misses), apart;
- the sets written apart (`written_apart`, `_2`, ...: handbook.json's keys): each by a
  separate writer who saw only the handbook, sealed until measured; nothing is chosen on them.

    python benchmarks/handbook_quality.py [--model provider:model] [--offline-grader NAME]
        [--json] [--index DIR] [--set written_apart_N]   (--set: that set alone, as JSON)
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

from question_sets import HANDBOOK_QUESTIONS as QUESTIONS  # noqa: E402
from question_sets import handbook_apart_sets  # noqa: E402

from footnote.evaluation.answers import is_not_covered  # noqa: E402
from footnote.graph.graph import make_graph  # noqa: E402
from footnote.ingest.pipeline import ingest  # noqa: E402

HANDBOOK = REPO / "samples" / "handbook"
APART_SETS = handbook_apart_sets()
"""The sets written apart from the project, each reported on its own (handbook.json's keys)."""


def ask(graph: Any, question: dict[str, Any], context: dict[str, Any]) -> dict[str, Any]:
    scope = {k: question[k] for k in ("groups", "strict_groups") if k in question}
    if "groups" in scope:
        scope["user_groups"] = scope.pop("groups")
    out: dict[str, Any] = graph.invoke(
        {"messages": [{"role": "user", "content": question["question"]}]},
        context={**context, **scope},
    )
    return out


def answered(graph: Any, q: dict[str, Any], context: dict[str, Any]) -> dict[str, Any]:
    """One answerable question: whether the answer cites the gold file and holds the fact."""
    out = ask(graph, q, context)
    answer = str(out["messages"][-1].content)
    sources = [c["source"] for c in out.get("citations", [])]
    gold = any(Path(s).name == q["gold"] for s in sources)
    fact = any(f.lower() in answer.lower() for f in q["fact"])
    return {
        "question": q["question"],
        "right": gold and fact,
        "gold_cited": gold,
        "fact": fact,
        "not_covered": is_not_covered(answer),
        "answer": answer,
        "cited": [Path(s).name for s in sources],
    }


def abstained(graph: Any, q: dict[str, Any], context: dict[str, Any]) -> dict[str, Any]:
    """One near miss: whether the answer says it is not covered."""
    out = ask(graph, q, context)
    answer = str(out["messages"][-1].content)
    return {
        "question": q["question"],
        "not_covered": is_not_covered(answer),
        "answer": answer,
        "cited": [Path(c["source"]).name for c in out.get("citations", [])],
    }


def rate(rows: list[dict[str, Any]], key: str) -> float:
    return round(sum(bool(r[key]) for r in rows) / len(rows), 3) if rows else 0.0


def evaluate(index: Path, model: str, offline_grader: str = "") -> dict[str, Any]:
    questions = json.loads(QUESTIONS.read_text(encoding="utf-8"))
    graph = make_graph()
    context: dict[str, Any] = {"index_dir": str(index), "model": model}
    if offline_grader:
        context["offline_grader"] = offline_grader
    started = time.perf_counter()
    answerable = [answered(graph, q, context) for q in questions["answerable"]]
    unanswerable = [abstained(graph, q, context) for q in questions["unanswerable"]]
    seconds = time.perf_counter() - started
    keyword_answerable, keyword_near = run_set(graph, questions.get("keywords", {}), context)
    after_answerable, after_near = run_set(graph, questions.get("written_after", {}), context)
    apart = {name: run_set(graph, questions.get(name, {}), context) for name in APART_SETS}
    held_out = [abstained(graph, q, context) for q in questions.get("held_out", {}).get(
        "unanswerable", [])]  # fmt: skip
    return {
        "model": model or "offline (extractive)",
        "offline_grader": offline_grader or "default",
        "answerable": len(answerable),
        "unanswerable": len(unanswerable),
        "answered_right": rate(answerable, "right"),
        "gold_cited": rate(answerable, "gold_cited"),
        "fact_present": rate(answerable, "fact"),
        "wrongly_not_covered": rate(answerable, "not_covered"),
        "near_miss_not_covered": rate(unanswerable, "not_covered"),
        "seconds_per_question": round(seconds / (len(answerable) + len(unanswerable)), 2),
        "keyword_queries": summary(keyword_answerable, keyword_near),
        "written_after": summary(after_answerable, after_near),
        **{name: summary(*rows) for name, rows in apart.items()},
        "held_out_near_misses": len(held_out),
        "held_out_near_miss_not_covered": rate(held_out, "not_covered"),
        "misses": [r for r in answerable if not r["right"]]
        + [r for r in unanswerable if not r["not_covered"]],
        "keyword_misses": [r for r in keyword_answerable if not r["right"]]
        + [r for r in keyword_near if not r["not_covered"]],
        "held_out_misses": [r for r in held_out if not r["not_covered"]],
        "written_after_misses": [r for r in after_answerable if not r["right"]]
        + [r for r in after_near if not r["not_covered"]],
        **{
            f"{name}_misses": [r for r in answerable if not r["right"]]
            + [r for r in near if not r["not_covered"]]
            for name, (answerable, near) in apart.items()
        },
    }


def evaluate_one(index: Path, model: str, offline_grader: str, name: str) -> dict[str, Any]:
    """One set written after the method alone (`--set`): reading a newly merged set once
    costs its own questions, not every set's."""
    questions = json.loads(QUESTIONS.read_text(encoding="utf-8"))
    context: dict[str, Any] = {"index_dir": str(index), "model": model}
    if offline_grader:
        context["offline_grader"] = offline_grader
    answerable, near = run_set(make_graph(), questions[name], context)
    misses = [r for r in answerable if not r["right"]] + [r for r in near if not r["not_covered"]]
    return {"set": name, "offline_grader": offline_grader or "default",
            **summary(answerable, near), "misses": misses}  # fmt: skip


def run_set(
    graph: Any, questions: dict[str, Any], context: dict[str, Any]
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """One question set's answerable and near-miss rows."""
    answerable = [answered(graph, q, context) for q in questions.get("answerable", [])]
    return answerable, [abstained(graph, q, context) for q in questions.get("unanswerable", [])]


def summary(answerable: list[dict[str, Any]], near: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "answerable": len(answerable),
        "unanswerable": len(near),
        "answered_right": rate(answerable, "right"),
        "gold_cited": rate(answerable, "gold_cited"),
        "wrongly_not_covered": rate(answerable, "not_covered"),
        "near_miss_not_covered": rate(near, "not_covered"),
    }


def markdown(result: dict[str, Any]) -> str:
    keywords, after = result["keyword_queries"], result["written_after"]
    lines = [
        f"Handbook question set ({result['answerable']} paraphrased answerable, "
        f"{result['unanswerable']} near-miss unanswerable), model: {result['model']}, "
        f"offline grader: {result['offline_grader']}",
        "",
        "| measure | value |",
        "|---|---|",
        f"| answerable: answered from the gold file with the fact | {result['answered_right']} |",
        f"| answerable: gold cited | {result['gold_cited']} |",
        f"| answerable: fact present | {result['fact_present']} |",
        f"| answerable: wrongly 'not covered' | {result['wrongly_not_covered']} |",
        f"| near-miss unanswerable: 'not covered' | {result['near_miss_not_covered']} |",
        f"| seconds per question | {result['seconds_per_question']} |",
        f"| keyword queries: answered right | {keywords['answered_right']} |",
        f"| keyword near misses: 'not covered' | {keywords['near_miss_not_covered']} |",
        f"| held-out near misses: 'not covered' | {result['held_out_near_miss_not_covered']} |",
        f"| written after the method: answered right | {after['answered_right']} |",
        f"| written after the method: near misses 'not covered' | "
        f"{after['near_miss_not_covered']} |",
        *(
            f"| {name}: answered right / near misses 'not covered' | "
            f"{result[name]['answered_right']} / {result[name]['near_miss_not_covered']} |"
            for name in APART_SETS
        ),
        "",
        "Misses:",
    ]
    misses = result["misses"] + result["keyword_misses"] + result["held_out_misses"]
    misses += result["written_after_misses"]
    for miss in misses + [m for name in APART_SETS for m in result[f"{name}_misses"]]:
        lines.append(f"- {miss['question']} -> {miss['answer'][:160]!r} {miss['cited']}")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="", help="chat model; empty = offline default")
    parser.add_argument("--index", type=Path, help="an index of samples/handbook to reuse")
    parser.add_argument(
        "--offline-grader", default="", help="calibrated, linear, judge, judge-veto or judge-rescue"
    )
    parser.add_argument(
        "--set", choices=("written_after", *APART_SETS), help="only this set written after"
    )
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        index = args.index or Path(tmp) / "index"
        if not (index / "manifest.json").exists() and args.index is None:
            ingest([HANDBOOK], index)
        if args.set:
            one = evaluate_one(index, args.model, args.offline_grader, args.set)
            print(json.dumps(one, indent=2))
            return 0
        result = evaluate(index, args.model, args.offline_grader)
    print(json.dumps(result, indent=2) if args.json else markdown(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
