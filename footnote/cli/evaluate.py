"""`footnote eval`: its options and the two ways it measures, retrieval stages on a BEIR
dataset (`footnote.evaluation.retrieval`) and, with `--answers`, the answer graph's
leave-gold-out table (`footnote.evaluation.answers`, imported only when asked for: it runs
the answer graph). The measuring lives in footnote/evaluation; the command line, here."""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from footnote.cli.console import add_reranker_options, reranker_model
from footnote.cli.conventions import index_status
from footnote.evaluation.retrieval import (
    DEFAULT_DEPTH,
    INDEX_DIR,
    STAGES,
    eval_workspace,
    evaluate_stages,
    print_result,
)
from footnote.store.backends import is_postgres, resolve_index
from footnote.store.types import IndexError_


def _same_index(a: str, b: str) -> bool:
    if is_postgres(a) or is_postgres(b):
        return a == b
    return Path(a).resolve() == Path(b).resolve()


def missing_eval_modules(plot: bool) -> list[str]:
    """What `footnote eval` needs beyond the base install: ranx, and matplotlib for --plot."""
    needed = ["ranx", "matplotlib"] if plot else ["ranx"]
    return [name for name in needed if importlib.util.find_spec(name) is None]


def cmd_eval(args: argparse.Namespace) -> int:
    if args.answers:
        return cmd_answers(args)
    missing = missing_eval_modules(plot=bool(args.plot))
    if missing:
        from footnote.models.providers import install_hint

        print(
            f"footnote: eval needs {' and '.join(missing)}: {install_hint('eval')}",
            file=sys.stderr,
        )
        return 2
    workspace = eval_workspace(args.dataset)
    index = args.index or str(workspace / INDEX_DIR)
    if args.default_index and _same_index(index, args.default_index):
        print(
            f"footnote: refusing to evaluate into the default index {index}: ingest would "
            "replace its documents with the benchmark corpus. Pass another --index",
            file=sys.stderr,
        )
        return 2
    try:
        result = evaluate_stages(
            args.dataset,
            index,
            args.stages or None,
            limit_queries=args.limit_queries,
            curve_depth=DEFAULT_DEPTH if args.plot else 0,
            progress=not args.quiet,
            reranker=args.reranker,
            chat_model=reranker_model(args),
            workspace=workspace,
        )
    except (FileNotFoundError, IndexError_, ValueError) as exc:
        print(f"footnote: {exc}", file=sys.stderr)
        return index_status(exc)
    if result["index"]["failed"]:
        print(
            f"footnote: {result['index']['failed']} passages could not be indexed "
            "(they count as never retrieved)",
            file=sys.stderr,
        )
    print_result(result, as_json=args.json, plot=args.plot)
    return 0


def add_eval_command(subparsers: Any, default_index: Callable[[], str]) -> argparse.ArgumentParser:
    """Register `footnote eval` on the CLI's subparsers."""
    p = subparsers.add_parser(
        "eval",
        help="measure retrieval stages on a BEIR dataset (recall, MRR, nDCG, latency)",
        description=(
            "Ingest DATASET_DIR's corpus.jsonl with the normal pipeline (cached: a second run "
            "embeds nothing), run every query of qrels/test.tsv through each retrieval stage "
            "(top 100 chunks, mapped back to passages) and report recall@1/5/10/50, MRR@10, "
            "nDCG@10 (computed by ranx) and mean latency."
        ),
    )
    p.add_argument(
        "dataset",
        metavar="DATASET_DIR",
        help="BEIR folder: corpus.jsonl, queries.jsonl, qrels/test.tsv",
    )
    p.add_argument(
        "--index",
        default=None,
        help="index directory (default: eval/DATASET-HASH/ in ~/.local/state/footnote or "
        "$FOOTNOTE_STATE_DIR, beside the passages)",
    )
    p.add_argument(
        "--stages",
        nargs="+",
        choices=list(STAGES),
        default=None,
        metavar="STAGE",
        help=f"stages to measure (default: all of {', '.join(STAGES)})",
    )
    p.add_argument(
        "--limit-queries",
        type=int,
        default=None,
        metavar="N",
        help="only the first N queries (quick checks)",
    )
    add_reranker_options(p, model=True)
    p.add_argument(
        "--answers",
        action="store_true",
        help="answer quality instead: run the answer graph with a leave-gold-out unanswerable "
        "set (see --unanswerable-share, --seed; --model asks a chat model)",
    )
    p.add_argument(
        "--unanswerable-share",
        type=float,
        default=0.5,
        metavar="S",
        help="with --answers: share of questions whose gold passages are removed (default 0.5)",
    )
    p.add_argument(
        "--grade-threshold",
        type=float,
        default=None,
        metavar="T",
        help="with --answers: the graph's grade_threshold for this run (default: the graph's)",
    )
    p.add_argument(
        "--offline-grader",
        choices=("linear", "calibrated", "judge", "judge-veto", "judge-rescue"),
        default=None,
        help="with --answers: the graph's offline grader for this run (default: the graph's)",
    )
    p.add_argument(
        "--seed",
        type=int,
        default=20261130,
        help="with --answers: seed of the split, fixed so runs compare (default 20261130)",
    )
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.add_argument(
        "--plot", default=None, metavar="FILE.png", help="also draw recall@k (k = 1..100)"
    )
    p.add_argument("--quiet", action="store_true", help="no progress output")
    p.set_defaults(func=cmd_eval, default_index=default_index())
    return p


def cmd_answers(args: argparse.Namespace) -> int:
    """`footnote eval DATASET --answers`: the leave-gold-out answer table."""
    from footnote.evaluation.answers import evaluate_answers, markdown
    from footnote.progress import ProgressPrinter

    if args.index:
        print("footnote: --answers builds its own held-out index; drop --index", file=sys.stderr)
        return 2
    context: dict[str, Any] = {"reranker": args.reranker}
    if args.grade_threshold is not None:
        context["grade_threshold"] = args.grade_threshold
    if args.offline_grader is not None:
        context["offline_grader"] = args.offline_grader
    if args.model:
        context |= {"model": args.model, "model_base_url": args.base_url}
    try:
        result = evaluate_answers(
            args.dataset,
            share=args.unanswerable_share,
            seed=args.seed,
            context=context,
            limit=args.limit_queries,
            progress=ProgressPrinter(quiet=args.quiet),
            workspace=eval_workspace(args.dataset),
        )
    except (FileNotFoundError, IndexError_, ValueError) as exc:
        print(f"footnote: {exc}", file=sys.stderr)
        return index_status(exc)
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print(markdown(result))
    return 0


def register(sub: Any) -> None:
    add_eval_command(sub, resolve_index)
