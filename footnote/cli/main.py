"""The `footnote` command: ingest documents, search them, ask questions, evaluate, serve."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable
from typing import Any

from footnote.cli.console import add_reranker_options
from footnote.store.backends import default_index
from footnote.store.postgres import redact

EPILOG = """\
examples:
  footnote ingest samples/handbook --index .footnote/handbook
  footnote search "How often do I have to change my API key?" --index .footnote/handbook
  footnote ask "How often do I have to change my API key?" --index .footnote/handbook
  footnote ask "..." --model openai:gpt-4.1-mini       # any init_chat_model string

The index directory defaults to $FOOTNOTE_INDEX, else .footnote/index. --index also takes
a PostgreSQL URL (pgvector), e.g. postgresql://user@host:5432/db?index=handbook.
"""


def cmd_ingest(args: argparse.Namespace) -> int:
    from footnote.cli.console import ProgressPrinter
    from footnote.ingest.chunking import ChunkSettings
    from footnote.ingest.pipeline import ingest
    from footnote.store.types import IndexError_

    settings = None
    if args.chunk_tokens:
        settings = ChunkSettings(target_tokens=args.chunk_tokens)
    try:
        summary = ingest(
            args.paths,
            args.index,
            embeddings=args.embeddings,
            settings=settings,
            default_access=args.default_access.split(",") if args.default_access else None,
            max_bytes=args.max_bytes,
            max_chunks=args.max_chunks,
            max_seconds=args.max_seconds,
            follow_symlinks=args.follow_symlinks,
            rebuild=args.rebuild,
            progress=ProgressPrinter(args.quiet),  # stderr, so --json output stays clean
        )
    except IndexError_ as exc:
        print(f"footnote: {redact(str(exc))}", file=sys.stderr)
        return 2
    result = summary.to_dict()
    if args.json:
        print(json.dumps(result, indent=2))
    elif not args.quiet or summary.failed or summary.restricted:
        print(
            f"{redact(args.index)}: {result['added']} added, {result['updated']} updated, "
            f"{result['unchanged']} unchanged, {result['deleted']} deleted, "
            f"{result['failed']} failed, {result['skipped']} skipped; {summary.chunks} chunks "
            f"({summary.embedded_chunks} embedded)"
        )
        for error in result["errors"]:
            print(f"  failed: {error['source']}: {error['error']}")
        for item in result["restrictions"]:
            print(f"  admins only: {item['source']}: {item['reason']}")
        if not args.quiet:
            for line in skipped_lines(summary.skipped):
                print(f"  skipped: {line}")
    return 1 if summary.failed or summary.restricted else 0


def skipped_lines(skipped: dict[str, str]) -> list[str]:
    """Each skipped path with its reason; files of an unsupported type are counted per type
    rather than listed (`--json` lists every one), since a docs folder may hold thousands."""
    lines: list[str] = []
    by_type: dict[str, int] = {}
    for path, reason in sorted(skipped.items()):
        if reason.startswith("unsupported file type"):
            by_type[reason] = by_type.get(reason, 0) + 1
        else:
            lines.append(f"{path}: {reason}")
    lines.extend(f"{count} file(s): {reason}" for reason, count in sorted(by_type.items()))
    return lines


def cmd_search(args: argparse.Namespace) -> int:
    from footnote.cli.console import format_location, reranker_model
    from footnote.store.types import caller_groups
    from footnote.tools.search import SearchRequest, search

    try:
        hits = search(
            SearchRequest(
                query=args.query,
                index_dir=args.index,
                k=args.k,
                stage=args.stage,
                source=args.source,
                user_groups=caller_groups(
                    [g.strip() for g in args.groups.split(",")], strict=args.strict_groups
                ),
                embeddings=args.embeddings,
                reranker=args.reranker,
                chat_model=reranker_model(args),
            )
        )
    except Exception as exc:  # a missing or mismatched index is a user error, said plainly
        from footnote.models.providers import ProviderUnreachable
        from footnote.store.types import IndexError_

        if isinstance(exc, IndexError_ | ValueError) and not isinstance(exc, ProviderUnreachable):
            print(f"footnote: {redact(str(exc))}", file=sys.stderr)
            return 2
        raise
    items = [{"id": h.chunk.id, "score": round(h.score, 6), **_chunk_fields(h.chunk)} for h in hits]
    if args.json:
        print(json.dumps(items, indent=2, ensure_ascii=False))
        return 0
    if not items:
        print("no results")
    for rank, item in enumerate(items, 1):
        print(f"{rank:>2}. [{item['score']:.4f}] {item['id']}")
        print(f"    {format_location(item)}")
        snippet = " ".join(item["text"].split())
        print(f"    {snippet[:200]}{'…' if len(snippet) > 200 else ''}")
    return 0


def _chunk_fields(chunk: Any) -> dict[str, Any]:
    data = chunk.to_dict()
    data.pop("id")
    return data


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="footnote",
        description="Answer questions from your own documents, citing every claim.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser(
        "ingest",
        help="parse, chunk, embed and index documents (incremental)",
        description=(
            "Index Markdown, HTML, PDF, text and code under PATH... into --index, and "
            "remember each PATH as a source (`footnote sources`, `footnote sync`): changed "
            "files are re-embedded, unchanged ones reused, files gone from a PATH removed; "
            "documents other sources gave are never touched. Symlinks, special files and "
            "dotfiles are skipped with a reason. Exit status 1 when some files failed or "
            "could be given to admins only (malformed front matter)."
        ),
    )
    p.add_argument("paths", nargs="+", metavar="PATH", help="files or folders to index")
    p.add_argument(
        "--index",
        default=default_index(),
        help="index directory or postgresql:// URL (default: %(default)s)",
    )
    p.add_argument(
        "--embeddings",
        default="",
        metavar="PROVIDER:MODEL",
        help="init_embeddings string; empty = offline MiniLM",
    )
    p.add_argument(
        "--default-access",
        default="",
        metavar="GROUPS",
        help="comma-separated groups for documents without `access:` (default: everyone)",
    )
    p.add_argument(
        "--chunk-tokens", type=int, default=0, help="target chunk body size in tokens (default 200)"
    )
    p.add_argument(
        "--max-bytes", type=int, default=20_000_000, help="per file: refuse larger files"
    )
    p.add_argument(
        "--max-chunks", type=int, default=20_000, help="per file: refuse files giving more chunks"
    )
    p.add_argument(
        "--max-seconds",
        type=float,
        default=300.0,
        help="per file: stop parsing and chunking after this long (0: no limit)",
    )
    p.add_argument(
        "--follow-symlinks",
        action="store_true",
        help="follow symlinks that stay inside the given paths (default: skip every symlink)",
    )
    p.add_argument(
        "--rebuild", action="store_true", help="ignore the existing index and re-embed everything"
    )
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    p.add_argument("--quiet", action="store_true", help="no progress output (progress: stderr)")
    p.set_defaults(func=cmd_ingest)

    p = sub.add_parser(
        "search",
        help="rank chunks for a query (retrieval only, no LLM)",
        description="Print the chunks the retrieval pipeline ranks highest for QUERY.",
    )
    p.add_argument("query")
    p.add_argument(
        "--index",
        default=default_index(),
        help="index directory or postgresql:// URL (default: %(default)s)",
    )
    p.add_argument("-k", type=int, default=5, help="how many chunks (default: %(default)s)")
    p.add_argument(
        "--stage",
        default="pipeline",
        choices=["bm25", "dense", "hybrid", "pipeline", "graph"],
        help="retrieval stage (default: %(default)s)",
    )
    p.add_argument(
        "--source", default=None, metavar="GLOB", help="only chunks whose source matches GLOB"
    )
    p.add_argument(
        "--groups",
        default="",
        help="comma-separated access groups of the caller; `everyone` is always added",
    )
    p.add_argument(
        "--strict-groups",
        action="store_true",
        help="search as exactly --groups, without `everyone`",
    )
    p.add_argument(
        "--embeddings", default="", metavar="PROVIDER:MODEL", help="must match the index"
    )
    add_reranker_options(p, model=True)
    p.add_argument("--json", action="store_true", help="print results as a JSON list")
    p.set_defaults(func=cmd_search)

    from footnote.cli import ask as cli_ask

    cli_ask.add_commands(sub, default_index)

    from footnote.cli import corpus as cli_corpus

    cli_corpus.add_commands(sub, default_index)

    from footnote.cli import cache as cli_cache

    cli_cache.add_commands(sub, default_index)

    from footnote.cli import entity_graph as cli_graph

    cli_graph.add_commands(sub, default_index)

    from footnote.evaluation.retrieval import add_eval_command

    add_eval_command(sub, default_index, answers=cmd_eval_answers)

    from footnote.feedback.records import add_feedback_command

    add_feedback_command(sub, default_index)

    from footnote.cli.conventions import finish

    finish(parser)
    return parser


def cmd_eval_answers(args: argparse.Namespace) -> int:
    """`footnote eval --answers`: imports the answer graph only when asked for."""
    from footnote.evaluation.answers import cmd_answers

    return cmd_answers(args)


def main(argv: list[str] | None = None) -> int:
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    args = build_parser().parse_args(argv)
    handler: Callable[[argparse.Namespace], int] = args.func
    if args.debug:
        return handler(args)
    try:
        return handler(args)
    except KeyboardInterrupt:
        return 130
    except Exception as exc:  # one line, not a traceback: see footnote/cli/conventions.py
        from footnote.cli.conventions import report

        return report(exc)


if __name__ == "__main__":
    raise SystemExit(main())
