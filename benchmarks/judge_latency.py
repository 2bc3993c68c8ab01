"""How long the judge takes to rerank a search's candidates, on this machine's CPU.

    nice -n 10 .venv/bin/python benchmarks/judge_latency.py [--candidates 50] [--questions 20]
        [--dataset benchmarks/data/pyfaq-core] [--judge-dir DIR] [--json]

For each of the first N questions of the dataset, the pipeline's first `--candidates` chunks
(as `footnote eval` retrieves them, admin caller) are scored by the shipped judge in one
`Judge.score` call (the `judge` reranker's whole cost), after one untimed warm-up. Reports
p50 / p90 / max wall milliseconds and the mean words per (question, passage) pair; the
judge runs on onnxruntime with 2 intra-op threads. `--judge-dir` times another judge file (a
folder with its model.onnx and MANIFEST.json, e.g. the fp32 file before quantisation). The
budget: 50 candidates in 300 ms on 2 cores.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from footnote.evaluation.retrieval import prepare_index  # noqa: E402
from footnote.models.judge import Judge, load_judge  # noqa: E402
from footnote.store.text import heading_prefix  # noqa: E402
from footnote.store.types import Caller  # noqa: E402
from footnote.tools.search import SearchRequest, search  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dataset", type=Path, default=REPO / "benchmarks/data/pyfaq-core")
    parser.add_argument("--candidates", type=int, default=50)
    parser.add_argument("--questions", type=int, default=20)
    parser.add_argument("--judge-dir", type=Path, help="a judge folder other than the shipped one")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    prepared = prepare_index(args.dataset)
    judge = Judge(args.judge_dir) if args.judge_dir else load_judge()
    questions = list(prepared.dataset.queries.values())[: args.questions]
    timings: list[float] = []
    words: list[int] = []
    for n, question in enumerate(questions):
        hits = search(SearchRequest(query=question, index_dir=prepared.index_dir,
                                    k=args.candidates, caller=Caller.operator()))  # fmt: skip
        passages = [f"{heading_prefix(h.chunk.title, h.chunk.section)}\n{h.chunk.text}"
                    for h in hits]  # fmt: skip
        if n == 0:
            judge.score(question, passages)  # warm-up: onnxruntime's first run allocates
        started = time.perf_counter()
        judge.score(question, passages)
        timings.append((time.perf_counter() - started) * 1000)
        words += [len(f"{question} {p}".split()) for p in passages]
    ordered = sorted(timings)
    result = {
        "dataset": args.dataset.name,
        "candidates": args.candidates,
        "questions": len(timings),
        "weights": judge.manifest.get("weights"),
        "max_length": judge.manifest["max_length"],
        "mean_words_per_pair": round(statistics.mean(words), 1),
        "p50_ms": round(statistics.median(ordered), 1),
        "p90_ms": round(ordered[int(0.9 * (len(ordered) - 1))], 1),
        "max_ms": round(ordered[-1], 1),
    }
    print(json.dumps(result, indent=2) if args.json else
          " ".join(f"{k}={v}" for k, v in result.items()))  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
