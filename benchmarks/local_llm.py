"""Footnote against a real local model server: llama.cpp (llama-cpp-python) with SmolLM2-135M.

The worked example on the sample handbook, then ten pyfaq questions, each through the whole
graph with `--model openai:smollm2 --base-url` semantics (the model is built by
init_chat_model from the graph context). Per question: seconds, tokens generated (answer and
all calls), the grading method the structured-output adapter settled on, citations valid and
invalid, and unsupported claims where the graph reports them.

The pyfaq index is a bounded subset: the full corpus (4,395 Python-docs sections, ~18k chunks)
takes tens of minutes to embed on a shared 2-core machine, so only the FAQ pages' own passages
are indexed (every question's gold answer is among them, alongside the other FAQ answers as
distractors). Retrieval is easier than on the full corpus; this measures the local-model
path, not retrieval.

    python benchmarks/build_pyfaq.py                     # needs Debian's python3-doc
    python benchmarks/local_llm.py [--questions 10] [--json]

SmolLM2-135M is far too small to answer well: the figures show what the wiring costs and
whether it holds (budgets, grading, citation checks), not answer quality.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any
from uuid import UUID

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from langchain_core.callbacks import BaseCallbackHandler  # noqa: E402
from langchain_core.messages import AIMessageChunk  # noqa: E402
from langchain_core.outputs import LLMResult  # noqa: E402

from footnote.evaluation.retrieval import load_beir, prepare_index  # noqa: E402
from footnote.graph.graph import make_graph  # noqa: E402
from footnote.ingest.pipeline import ingest  # noqa: E402
from tests.llama_server import MODEL_ALIAS, LlamaServer, start_server, stop_server  # noqa: E402

PYFAQ = REPO / "benchmarks" / "data" / "pyfaq"
SUBSET = REPO / "benchmarks" / "data" / "pyfaq-faq-pages"
WORKED_EXAMPLE = "How often do I have to change my API key?"


class TokenCounter(BaseCallbackHandler):
    """Completion tokens of every model call in a run, from the server's usage report."""

    def __init__(self) -> None:
        self.completion_tokens = 0
        self.calls = 0

    def on_llm_end(self, response: LLMResult, *, run_id: UUID, **kwargs: Any) -> None:
        self.calls += 1
        for generations in response.generations:
            for generation in generations:
                usage = getattr(getattr(generation, "message", None), "usage_metadata", None)
                if usage:
                    self.completion_tokens += int(usage.get("output_tokens", 0))


def faq_subset(questions: int) -> tuple[Path, list[tuple[str, str]]]:
    """A BEIR folder with only the FAQ pages' passages, and the first `questions` queries."""
    if not (PYFAQ / "corpus.jsonl").exists():
        raise SystemExit("pyfaq is missing: python benchmarks/build_pyfaq.py (needs python3-doc)")
    dataset = load_beir(PYFAQ)
    keep = {doc_id for doc_id in dataset.corpus if doc_id.startswith("faq/")}
    SUBSET.mkdir(parents=True, exist_ok=True)
    (SUBSET / "qrels").mkdir(exist_ok=True)
    with (
        (PYFAQ / "corpus.jsonl").open(encoding="utf-8") as src,
        (SUBSET / "corpus.jsonl").open("w", encoding="utf-8") as dst,
    ):
        for line in src:
            if json.loads(line)["_id"] in keep:
                dst.write(line)
    shutil.copy(PYFAQ / "queries.jsonl", SUBSET / "queries.jsonl")
    shutil.copy(PYFAQ / "qrels" / "test.tsv", SUBSET / "qrels" / "test.tsv")
    picked = sorted(q for q in dataset.qrels if set(dataset.qrels[q]) <= keep)[:questions]
    return SUBSET, [(q, dataset.queries[q]) for q in picked]


def ask(
    graph: Any, server: LlamaServer, index: str | Path, question: str, timeout_s: float
) -> dict[str, Any]:
    """One question through the whole graph; a failed run is a row with its error."""
    try:
        return _ask(graph, server, index, question, timeout_s)
    except Exception as exc:  # a benchmark reports a failure and goes on
        return {
            "question": question,
            "seconds": float("nan"),
            "answer_tokens": 0,
            "tokens_all_calls": 0,
            "model_calls": 0,
            "grading": f"error: {type(exc).__name__}",
            "citations_valid": 0,
            "citations_invalid": 0,
            "unsupported_claims": None,
            "fallback_notices": [],
            "path": [],
            "answer": "",
            "error": f"{type(exc).__name__}: {exc}",
        }


def _ask(
    graph: Any, server: LlamaServer, index: str | Path, question: str, timeout_s: float
) -> dict[str, Any]:
    counter = TokenCounter()
    final: dict[str, Any] = {}
    answer_text: list[str] = []
    method = "-"
    context = {
        "model": f"openai:{MODEL_ALIAS}",
        "model_base_url": server.base_url,
        "model_timeout_s": timeout_s,
        "index_dir": str(index),
    }
    started = time.monotonic()
    for mode, payload in graph.stream(
        {"messages": [{"role": "user", "content": question}]},
        {"callbacks": [counter]},
        context=context,
        stream_mode=["values", "messages", "custom"],
    ):
        if mode == "values":
            final = payload
        elif mode == "custom" and payload.get("event") == "graded":
            method = payload.get("method", "-")
        elif (
            mode == "messages"
            and payload[1].get("langgraph_node") == "generate"
            and isinstance(payload[0], AIMessageChunk)  # the node's final message follows
        ):
            answer_text.append(str(payload[0].content))
    seconds = time.monotonic() - started
    raw = "".join(answer_text)
    unsupported = final.get("footnote_unsupported_claims")
    return {
        "question": question,
        "seconds": round(seconds, 1),
        "answer_tokens": server.count_tokens(raw) if raw else 0,
        "tokens_all_calls": counter.completion_tokens,
        "model_calls": counter.calls,
        "grading": method,
        "citations_valid": len(final.get("citations", [])),
        "citations_invalid": len(final.get("footnote_invalid_citations", [])),
        "unsupported_claims": None if unsupported is None else len(unsupported),
        "fallback_notices": [n for n in final.get("footnote_notices", []) if "fell back" in n],
        "path": final.get("footnote_route", []),
        "answer": final["messages"][-1].content if final.get("messages") else "",
    }


def table(rows: list[dict[str, Any]]) -> str:
    has_unsupported = any(r["unsupported_claims"] is not None for r in rows)
    head = ["question", "s", "answer tokens", "tokens (all calls)", "grading", "valid", "invalid"]
    if has_unsupported:
        head.append("unsupported")
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        cells = [
            r["question"][:60].replace("|", "\\|"),
            f"{r['seconds']:.1f}",
            str(r["answer_tokens"]),
            str(r["tokens_all_calls"]),
            r["grading"],
            str(r["citations_valid"]),
            str(r["citations_invalid"]),
        ]
        if has_unsupported:
            cells.append(str(r["unsupported_claims"]))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--questions", type=int, default=10, help="pyfaq questions (default 10)")
    parser.add_argument("--json", action="store_true", help="print rows as JSON too")
    parser.add_argument(
        "--timeout",
        type=float,
        default=300.0,
        help="model_timeout_s: an internal call (grading 8 passages) must finish within it "
        "(default 300 s; a shared 2-core machine needs more than the graph's 120 s)",
    )
    args = parser.parse_args(argv)

    subset, questions = faq_subset(args.questions)
    started = time.monotonic()
    prepared = prepare_index(subset)
    print(
        f"pyfaq FAQ-pages index: {len(prepared.dataset.corpus)} passages listed, "
        f"{sum(1 for d in prepared.dataset.corpus if d.startswith('faq/'))} indexed, "
        f"{time.monotonic() - started:.0f} s",
        file=sys.stderr,
    )
    with tempfile.TemporaryDirectory() as scratch:
        handbook = Path(scratch) / "handbook"
        ingest([REPO / "samples" / "handbook"], handbook)
        server = start_server()
        try:
            graph = make_graph()
            rows = [ask(graph, server, handbook, WORKED_EXAMPLE, args.timeout)]
            for _, question in questions:
                rows.append(ask(graph, server, prepared.index_dir, question, args.timeout))
                print(f"… {rows[-1]['seconds']:.1f} s  {question[:60]}", file=sys.stderr)
        finally:
            stop_server(server)
    print(table(rows))
    seconds = [r["seconds"] for r in rows[1:] if "error" not in r]
    if seconds:
        print(
            f"\npyfaq: mean {sum(seconds) / len(seconds):.1f} s per question, "
            f"max {max(seconds):.1f} s; invalid citations removed: "
            f"{sum(r['citations_invalid'] for r in rows)}; grading fallbacks: "
            f"{sum(bool(r['fallback_notices']) for r in rows)}"
        )
    if args.json:
        print(json.dumps(rows, indent=1, ensure_ascii=False))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
