"""Questions about the whole corpus or a large part of it: does the answer reach every part?

For each question of benchmarks/questions/global_handbook.json (samples/handbook) and
global_pyfaq.json (pyfaq-core), the offline default answers it twice: by today's route (the
planner's search route, as before the global route existed) and by the global route
(map-reduce over the entity graph's communities, graph/global_route.py). Coverage is the
share of the question's relevant documents (or top-level sections) that the answer cites at
least once; `supported` is the share of its cited sentences that the support check
(graph/support.py) confirms against the sources they cite.

    nice -n 10 python benchmarks/global_questions.py
    nice -n 10 python benchmarks/global_questions.py --corpus pyfaq-core --pyfaq PATH

Not a timed test: figures go to docs/evaluation.md. The indexes are built under
benchmarks/data/global/ (ignored); the pyfaq-core folder is only read.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from footnote.evaluation.retrieval import prepare_index  # noqa: E402
from footnote.graph import planner, support  # noqa: E402
from footnote.graph.state import planned_route  # noqa: E402
from footnote.tools.retrieval import get_retriever  # noqa: E402

QUESTIONS = REPO / "benchmarks" / "questions"
WORK = REPO / "benchmarks" / "data" / "global"
DEFAULT_PYFAQ = REPO / "benchmarks" / "data" / "pyfaq-core"
SHARED_PYFAQ = REPO.parent / "contextual" / "benchmarks" / "data" / "pyfaq-core"


def handbook_index() -> tuple[str, Callable[[str], str]]:
    from footnote.ingest.pipeline import ingest

    index = WORK / "handbook-index"
    ingest([REPO / "samples" / "handbook"], index)
    return str(index), lambda source: Path(source).name


def pyfaq_index(dataset: Path) -> tuple[str, Callable[[str], str]]:
    prepared = prepare_index(dataset, workspace=WORK / "pyfaq-core")
    to_id = prepared.source_to_id
    return str(prepared.index_dir), lambda source: to_id.get(Path(source).name, source)


def unit_of(document: str, unit: str) -> str:
    document = document.split("#")[0]
    return document.split("/")[0] if unit == "section" else document


def ask(graph: Any, question: str, index: str, groups: list[str], thread: str) -> dict[str, Any]:
    config = {"configurable": {"thread_id": thread}}
    graph.invoke({"messages": [{"role": "user", "content": question}]}, config,
                 context={"index_dir": index, "user_groups": groups})  # fmt: skip
    return dict(graph.get_state(config).values)


def measure(
    name: str, index: str, document_of: Callable[[str], str], spec: dict[str, Any]
) -> list[dict[str, Any]]:
    from langgraph.checkpoint.memory import InMemorySaver

    from footnote.graph.graph import make_graph

    graph = make_graph(checkpointer=InMemorySaver())
    retriever = get_retriever(index, "")
    rows = []
    recognise = planner.is_global_question
    for number, item in enumerate(spec["questions"]):
        row: dict[str, Any] = {"corpus": name, "question": item["question"]}
        for route in ("today", "global"):
            planner.is_global_question = recognise if route == "global" else (lambda q: False)
            try:
                state = ask(graph, item["question"], index, spec["groups"], f"{route}-{number}")
            finally:
                planner.is_global_question = recognise
            answer = state["messages"][-1].content
            cited = {unit_of(document_of(c["source"]), item["unit"]) for c in state["citations"]}
            relevant = set(item["relevant"])
            checks = support.check_claims(answer, state["documents"],
                                          embed=retriever.embeddings.embed_array,
                                          idf=retriever.idf_weights)  # fmt: skip
            row[route] = {
                "coverage": len(cited & relevant) / len(relevant),
                "precision": len(cited & relevant) / len(cited) if cited else 0.0,
                "cited": sorted(cited),
                "missed": sorted(relevant - cited),
                "claims": len(checks),
                "supported": sum(c.supported for c in checks),
                "route": planned_route(state["footnote_route"]),
                "communities": len(state.get("footnote_communities") or []),
            }
        rows.append(row)
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pyfaq", type=Path, default=None, help="the pyfaq-core dataset folder")
    parser.add_argument("--json", action="store_true", help="print every row as JSON")
    parser.add_argument("--corpus", choices=("handbook", "pyfaq-core"), action="append",
                        help="only this corpus (repeatable; default both)")  # fmt: skip
    args = parser.parse_args(argv)
    dataset = args.pyfaq or (DEFAULT_PYFAQ if DEFAULT_PYFAQ.is_dir() else SHARED_PYFAQ)
    WORK.mkdir(parents=True, exist_ok=True)
    rows: list[dict[str, Any]] = []
    corpora = {"handbook": handbook_index, "pyfaq-core": lambda: pyfaq_index(dataset)}
    chosen = args.corpus or list(corpora)
    for name in chosen:
        build = corpora[name]
        spec = json.loads((QUESTIONS / f"global_{name.split('-')[0]}.json").read_text())
        index, document_of = build()
        rows += measure(name, index, document_of, spec)
    if args.json:
        print(json.dumps(rows, indent=1))
    print("| corpus | question | today: coverage | global: coverage | global: precision | "
          "global: supported |")  # fmt: skip
    print("|---|---|---|---|---|---|")
    for row in rows:
        t, g = row["today"], row["global"]
        print(f"| {row['corpus']} | {row['question']} | {t['coverage']:.2f} | "
              f"{g['coverage']:.2f} | {g['precision']:.2f} | "
              f"{g['supported']}/{g['claims']} |")  # fmt: skip
    for name in chosen:
        mine = [r for r in rows if r["corpus"] == name]
        today = sum(r["today"]["coverage"] for r in mine) / len(mine)
        global_ = sum(r["global"]["coverage"] for r in mine) / len(mine)
        precision = sum(r["global"]["precision"] for r in mine) / len(mine)
        claims = sum(r["global"]["claims"] for r in mine)
        supported = sum(r["global"]["supported"] for r in mine)
        today_claims = sum(r["today"]["claims"] for r in mine)
        today_supported = sum(r["today"]["supported"] for r in mine)
        print(f"\n{name}: mean coverage today {today:.2f}, global {global_:.2f} (precision "
              f"{precision:.2f}); cited "
              f"sentences supported: today {today_supported}/{today_claims}, global "
              f"{supported}/{claims}")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
