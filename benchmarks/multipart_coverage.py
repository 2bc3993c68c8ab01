"""Could a per-part coverage check report a held-out part as not covered (offline default)?

The offline grader keeps near-miss passages for a question whose gold is held out, so in a
partial pair ("What is X, and how do I Y?", Y's gold held out) Y's part is answered from a
near miss. This script asks `benchmarks/multipart.py`'s two-part and partial pairs (same
seed, same pairs) and reads each part's last grading round: its best kept grade and the best
keyword coverage among its kept passages. It then applies candidate per-part rules after the
fact, all relative to the other part ("this part's best grade is well below the other's and
its passages lack its keywords"), and counts both sides:

- two-part (every part answerable): covered parts the rule would make abstain, those of them
  that cited their gold, and pairs that would still cite both golds;
- partial: held-out parts reported not covered (by the grader, or by the rule), and
  answerable parts the rule would make abstain.

    python benchmarks/multipart_coverage.py benchmarks/data/pyfaq-core benchmarks/data/debfaq
"""

from __future__ import annotations

import argparse
import random
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

from multipart import cited_ids, join, partial_pairs, two_part_pairs  # noqa: E402

from footnote.evaluation.answers import (  # noqa: E402
    DEFAULT_SEED,
    DEFAULT_SHARE,
    heldout_index,
    split_questions,
)
from footnote.evaluation.retrieval import prepare_index  # noqa: E402

Evidence = tuple[float, float]
"""A part's (best kept grade, best keyword coverage of a kept passage); (0, 0): none kept."""
Rule = Callable[[Evidence, Evidence], bool]
"""(this part, the other part) -> report this part as not covered."""


def part_evidence(state: dict[str, Any]) -> list[Evidence]:
    findings = {f["index"]: f for f in state["findings"]}
    evidence = []
    for part in state["plan"]:
        rounds = findings[part["index"]]["rounds"] if part["index"] in findings else []
        kept = [c for c in (rounds[-1]["candidates"] if rounds else []) if c["kept"]]
        evidence.append(
            (max((c["grade"] for c in kept), default=0.0),
             max((c["coverage"] for c in kept), default=0.0))
        )  # fmt: skip
    return evidence


def collect(dataset: Path, pairs: int, seed: int) -> dict[str, list[dict[str, Any]]]:
    from langgraph.checkpoint.memory import InMemorySaver

    from footnote.graph.graph import make_graph

    prepared = prepare_index(dataset)
    qrels, queries = prepared.dataset.qrels, prepared.dataset.queries
    graph = make_graph(checkpointer=InMemorySaver())  # the full state, findings included
    asked = 0

    def ask(question: str, index: str) -> dict[str, Any]:
        nonlocal asked
        asked += 1
        config = {"configurable": {"thread_id": str(asked)}}
        graph.invoke({"messages": [{"role": "user", "content": question}]}, config,
                     context={"index_dir": index})  # fmt: skip
        return dict(graph.get_state(config).values)

    rng = random.Random(seed)
    _, chosen = two_part_pairs(qrels, pairs, rng)
    two = []
    for a, b in chosen:
        state = ask(join(queries[a], queries[b]), str(prepared.index_dir))
        if len(state["parts"]) != 2:
            continue  # not split: no part to check
        cited = cited_ids(state, prepared.source_to_id)
        two.append({"evidence": part_evidence(state),
                    "covered": [p["covered"] for p in state["parts"]],
                    "gold": [any(c in qrels[q] for c in cited) for q in (a, b)]})  # fmt: skip
    split = split_questions(qrels, DEFAULT_SHARE, DEFAULT_SEED)
    heldout = str(heldout_index(dataset, prepared, split))
    partial = []
    for known, gone, gone_first in partial_pairs(split, pairs, rng):
        order = (gone, known) if gone_first else (known, gone)
        state = ask(join(queries[order[0]], queries[order[1]]), heldout)
        if len(state["parts"]) != 2:
            continue
        partial.append({"evidence": part_evidence(state), "gone": 0 if gone_first else 1,
                        "covered": [p["covered"] for p in state["parts"]]})  # fmt: skip
    return {"two": two, "partial": partial}


def effect(rows: dict[str, list[dict[str, Any]]], rule: Rule) -> dict[str, int]:
    def fires(row: dict[str, Any], k: int) -> bool:
        return row["covered"][k] and rule(row["evidence"][k], row["evidence"][1 - k])

    two, partial = rows["two"], rows["partial"]
    return {
        "two_abstained": sum(fires(r, k) for r in two for k in (0, 1)),
        "two_gold_lost": sum(fires(r, k) and r["gold"][k] for r in two for k in (0, 1)),
        "two_both": sum(all(r["gold"][k] and not fires(r, k) for k in (0, 1)) for r in two),
        "partial_reported": sum(
            not r["covered"][r["gone"]] or fires(r, r["gone"]) for r in partial
        ),
        "partial_known_abstained": sum(fires(r, 1 - r["gone"]) for r in partial),
    }


def rules() -> list[tuple[str, Rule]]:
    found: list[tuple[str, Rule]] = [("none (as shipped)", lambda part, other: False)]
    for margin in (0.1, 0.15, 0.2, 0.25, 0.3):
        found.append((f"grade < other's - {margin}",
                      lambda p, o, m=margin: p[0] > 0 and p[0] < o[0] - m))  # fmt: skip
        for floor in (0.5, 0.7):
            found.append((f"grade < other's - {margin} and coverage < {floor}",
                          lambda p, o, m=margin, f=floor: p[0] > 0 and p[0] < o[0] - m
                          and p[1] < f))  # fmt: skip
    for floor in (0.4, 0.5):
        found.append((f"coverage < {floor} and other's coverage 1",
                      lambda p, o, f=floor: p[0] > 0 and p[1] < f and o[1] >= 0.999))  # fmt: skip
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("datasets", nargs="+", type=Path)
    parser.add_argument("--pairs", type=int, default=40)
    parser.add_argument("--seed", type=int, default=DEFAULT_SEED)
    args = parser.parse_args(argv)
    for dataset in args.datasets:
        rows = collect(dataset, args.pairs, args.seed)
        print(f"\n{dataset.name}: {len(rows['two'])} two-part and {len(rows['partial'])} "
              "partial pairs split into two parts")  # fmt: skip
        print(
            "| rule | two-part: covered parts abstained | of them gold-cited | both golds "
            "cited | partial: held-out part not covered | answerable part abstained |"
        )
        print("|---|---|---|---|---|---|")
        for name, rule in rules():
            e = effect(rows, rule)
            print(f"| {name} | {e['two_abstained']} | {e['two_gold_lost']} | {e['two_both']} | "
                  f"{e['partial_reported']} | {e['partial_known_abstained']} |")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
