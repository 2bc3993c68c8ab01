"""Team-document multi-hop: the share of offline answers that cite BOTH gold documents.

    python benchmarks/team_multihop.py [--work DIR] [--corpora handbook,debfaq,pyfaq-core]
        [--set all|original|written_after|written_apart|written_apart_2|...]
        [--offline-grader calibrated|judge-rescue|...] [--json]

The questions (benchmarks/questions/multihop_team.json) each need two documents linked by a
team, channel, system or environment named inside the text, not by a title. Each is asked
as `footnote ask` asks it (the exported answer graph, offline, the question's groups), and
counts when the answer's citations include both gold documents; the report also gives the share
of answers citing a document outside their gold, what quoting more costs. The handbook is
samples/handbook; debfaq and pyfaq-core are the built corpora in benchmarks/data (their gold
are passage ids), indexed under --work so the data stays untouched. Each question belongs to
a set: "original" (written while building graph/hops.py, not held out), "written_after"
(written once the method was fixed, split into a fitting and a reporting half before any run)
or "written_apart", "written_apart_2", ... (each written by a separate writer who saw only
the handbook, all reporting; `--help` lists them, from the question file); the report gives
the share per set and half. `--offline-grader` asks with another offline grader than the default.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from question_sets import TEAM_QUESTIONS as QUESTIONS  # noqa: E402
from question_sets import team_sets  # noqa: E402

HANDBOOK = HERE.parent / "samples" / "handbook"


def index_for(corpus: str, work: Path) -> tuple[Path, dict[str, str]]:
    """The index of a corpus and the map from chunk sources to gold ids."""
    if corpus == "handbook":
        from footnote.ingest.pipeline import ingest

        index = work / "handbook-index"
        ingest([HANDBOOK], index)
        return index, {}
    from footnote.evaluation.retrieval import prepare_index

    prepared = prepare_index(
        HERE / "data" / corpus, work / f"{corpus}-index", workspace=work / corpus
    )
    return Path(prepared.index_dir), prepared.source_to_id


def set_of(question: dict[str, Any]) -> str:
    """The set a question belongs to: "original", or its set and half ("written_after/fit")."""
    if "set" not in question:
        return "original"
    return f"{question['set']}/{question['half']}" if "half" in question else question["set"]


def answer(index: Path, question: str, groups: list[str], grader: str = "") -> dict[str, Any]:
    from langchain_core.messages import HumanMessage

    from footnote.graph.context import Context
    from footnote.graph.graph import graph

    chosen = {"offline_grader": grader} if grader else {}
    context = Context(index_dir=str(index), user_groups=groups, **chosen)  # type: ignore[arg-type]
    return graph.invoke({"messages": [HumanMessage(question)]}, context=context)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", type=Path, default=Path("/tmp/footnote-team-multihop"))
    parser.add_argument("--corpora", default="handbook,debfaq,pyfaq-core")
    parser.add_argument("--set", default="all", choices=("all", *team_sets()))
    parser.add_argument("--offline-grader", default="", help="default: the graph's default")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    wanted = args.corpora.split(",")
    questions = [
        q
        for q in json.loads(QUESTIONS.read_text())["questions"]
        if q["corpus"] in wanted and args.set in ("all", set_of(q).split("/")[0])
    ]
    args.work.mkdir(parents=True, exist_ok=True)
    indexes = {c: index_for(c, args.work) for c in dict.fromkeys(q["corpus"] for q in questions)}
    rows = []
    for q in questions:
        index, to_id = indexes[q["corpus"]]
        started = time.perf_counter()
        out = answer(index, q["question"], q.get("groups", ["everyone"]), args.offline_grader)
        cited = [to_id.get(c["source"], c["source"]) for c in out.get("citations", [])]
        rows.append(
            {
                "corpus": q["corpus"],
                "set": set_of(q),
                "question": q["question"],
                "both": set(q["gold"]) <= set(cited),
                "outside_gold": sorted(set(cited) - set(q["gold"])),
                "cited": list(dict.fromkeys(cited)),
                "hops": out.get("footnote_hops", []),
                "searches": out.get("footnote_searches", 0),
                "seconds": round(time.perf_counter() - started, 2),
            }
        )
    by_corpus = {
        c: sum(r["both"] for r in rows if r["corpus"] == c)
        / max(1, sum(r["corpus"] == c for r in rows))
        for c in indexes
    }
    report = {
        "both_cited": sum(r["both"] for r in rows) / max(1, len(rows)),
        # an answer that cites a document the question does not need: the cost of quoting more
        "cites_outside_gold": sum(bool(r["outside_gold"]) for r in rows) / max(1, len(rows)),
        "questions": len(rows),
        "by_corpus": by_corpus,
        "by_set": {
            s: {"both_cited": sum(r["both"] for r in group) / len(group), "questions": len(group)}
            for s in dict.fromkeys(r["set"] for r in rows)
            if (group := [r for r in rows if r["set"] == s])
        },
        "rows": rows,
    }
    if args.json:
        print(json.dumps(report, indent=1, ensure_ascii=False))
        return 0
    for r in rows:
        print(f"{'both' if r['both'] else 'ONE ':5} {r['set']:20} {r['question'][:70]}")
    print(f"both documents cited: {report['both_cited']:.2f} of {len(rows)}; {by_corpus}")
    print(f"answers citing a document outside their gold: {report['cites_outside_gold']:.2f}")
    for name, figures in report["by_set"].items():
        print(f"  {name}: {figures['both_cited']:.2f} of {figures['questions']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
