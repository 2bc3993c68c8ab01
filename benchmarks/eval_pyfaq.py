"""Retrieval on pyfaq: Footnote's stages next to the LangChain ensemble peer.

    python benchmarks/eval_pyfaq.py [--json] [--plot recall.png] [--limit-queries N]

Builds benchmarks/data/pyfaq from the installed Python docs if it is missing, ingests it with
Footnote's pipeline (cached in the dataset folder; the first run embeds ~4,400 passages), then
measures every stage of `tools.retrieval.STAGES` plus `langchain_peer` over the same chunks
and vectors, and prints the table that docs/evaluation.md records.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from build_pyfaq import DEFAULT_HTML, build  # noqa: E402
from peer_retrieval import langchain_peer  # noqa: E402

from footnote.evaluation.retrieval import (  # noqa: E402
    DEFAULT_DEPTH,
    StageRunner,
    evaluate_stages,
    prepare_index,
    print_result,
)
from footnote.progress import ProgressPrinter  # noqa: E402
from footnote.tools.retrieval import get_retriever  # noqa: E402

DATASET = HERE / "data" / "pyfaq"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", type=Path, default=DATASET, help="pyfaq folder")
    parser.add_argument("--index", type=Path, default=None, help="index (default: in dataset)")
    parser.add_argument("--limit-queries", type=int, default=None, metavar="N")
    parser.add_argument("--no-peer", action="store_true", help="skip the LangChain peer")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    parser.add_argument("--plot", default=None, metavar="FILE.png", help="recall@k curves")
    args = parser.parse_args(argv)

    if not (args.dataset / "corpus.jsonl").is_file():
        counts = build(DEFAULT_HTML, args.dataset)
        print(f"built pyfaq: {counts}", file=sys.stderr)
    prepared = prepare_index(args.dataset, args.index, progress=ProgressPrinter())
    runners: dict[str, StageRunner] = {}
    if not args.no_peer:
        print("building the LangChain peer over the same chunks", file=sys.stderr)
        runners["langchain_peer"] = langchain_peer(get_retriever(prepared.index_dir))
    result = evaluate_stages(
        args.dataset,
        prepared.index_dir,
        runners=runners,
        prepared=prepared,
        limit_queries=args.limit_queries,
        curve_depth=DEFAULT_DEPTH if args.plot else 0,
    )
    print(
        f"index: {result['index']['chunks']} chunks, "
        f"{result['index']['embedded_chunks']} embedded this run",
        file=sys.stderr,
    )
    print_result(result, as_json=args.json, plot=args.plot)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
