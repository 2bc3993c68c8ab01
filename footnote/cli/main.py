"""The `footnote` command: ingest documents, search them, ask questions, evaluate, serve."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable
from typing import Any

from footnote.cli.console import add_reranker_options, skipped_lines
from footnote.cli.options import add_index_option
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
    from footnote.ingest.chunking import ChunkSettings
    from footnote.ingest.context import ContextSettings
    from footnote.ingest.pipeline import ingest
    from footnote.progress import ProgressPrinter
    from footnote.store.types import IndexError_

    settings = None
    if args.chunk_tokens:
        settings = ChunkSettings(target_tokens=args.chunk_tokens)
    try:
        context = ContextSettings.parse(args.context) if args.context else None
    except ValueError as exc:
        print(f"footnote: {exc}", file=sys.stderr)
        return 2
    try:
        summary = ingest(
            args.paths,
            args.index,
            embeddings=args.embeddings,
            settings=settings,
            context=context,
            default_access=args.default_access.split(",") if args.default_access else None,
            max_bytes=args.max_bytes,
            max_chunks=args.max_chunks,
            max_seconds=args.max_seconds,
            follow_symlinks=args.follow_symlinks,
            rebuild=args.rebuild,
            progress=ProgressPrinter(args.quiet),  # stderr, so --json output stays clean
        )
    except IndexError_ as exc:
        from footnote.cli.conventions import index_status

        print(f"footnote: {redact(str(exc))}", file=sys.stderr)
        return index_status(exc)
    result = summary.to_dict()
    found_nothing = not (
        summary.added or summary.updated or summary.unchanged or summary.deleted or summary.failed
    )
    if args.json:
        print(json.dumps(result, indent=2))
    elif found_nothing:
        print(f"footnote: no documents to index in {', '.join(args.paths)}", file=sys.stderr)
        for line in skipped_lines(summary.skipped):
            print(f"  skipped: {line}", file=sys.stderr)
    elif not args.quiet or summary.failed or summary.restricted:
        print(
            f"{redact(args.index)}: {result['added']} added, {result['updated']} updated, "
            f"{result['unchanged']} unchanged, {result['deleted']} deleted, "
            f"{result['failed']} failed, {result['skipped']} skipped; {summary.chunks} chunks "
            f"({summary.embedded_chunks} embedded)"
        )
        if "context" in result:
            used = result["context"]
            cost = f", ${used['cost_usd']}" if used["cost_usd"] is not None else ""
            print(
                f"  contexts: {used['requests']} written, {used['cached_contexts']} cached; "
                f"{used['input_tokens']} input tokens ({used['cache_read_tokens']} read from "
                f"and {used['cache_write_tokens']} written to the prompt cache), "
                f"{used['output_tokens']} output{cost}"
            )
        for error in result["errors"]:
            print(f"  failed: {error['source']}: {error['error']}")
        for item in result["restrictions"]:
            print(f"  admins only: {item['source']}: {item['reason']}")
        if not args.quiet:
            for line in skipped_lines(summary.skipped):
                print(f"  skipped: {line}")
    return 1 if summary.failed or summary.restricted or found_nothing else 0


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
            from footnote.cli.conventions import index_status

            print(f"footnote: {redact(str(exc))}", file=sys.stderr)
            return index_status(exc)
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
            "Index the documents under PATH... (Markdown, HTML, PDF, text, code, Word, "
            "PowerPoint, CSV, Excel, JSON, e-mail, EPUB, and images by OCR) into --index, and "
            "remember each PATH as a source (`footnote sources`, `footnote sync`): changed "
            "files are re-embedded, unchanged ones reused, files gone from a PATH removed; "
            "documents other sources gave are never touched. Symlinks, special files and "
            "dotfiles are skipped with a reason. Exit status 1 when some files failed or "
            "could be given to admins only (malformed front matter), or when the paths hold "
            "no document at all."
        ),
    )
    p.add_argument("paths", nargs="+", metavar="PATH", help="files or folders to index")
    add_index_option(p, default_index)
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
        "--context",
        "--context-model",
        default=None,
        metavar="none|offline|PROVIDER:MODEL",
        help="what each chunk is embedded and keyword-indexed with besides its headings: "
        "offline = an extractive summary of its document and its neighbours' key terms; "
        "PROVIDER:MODEL = a chat model writes a short context per new or changed chunk "
        "(cached, resumable) (default: what the index was built with, else none; a change "
        "re-embeds through the cache; see docs/evaluation.md)",
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
        help="per file: parse, chunk and embed within this (0: no limit)",
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
    add_index_option(p, default_index)
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

    from footnote.cli import serve as cli_serve

    cli_serve.register(sub, default_index)

    from footnote.cli import corpus as cli_corpus

    cli_corpus.add_commands(sub, default_index)

    from footnote.cli import cache as cli_cache

    cli_cache.add_commands(sub, default_index)

    from footnote.cli import entity_graph as cli_graph

    cli_graph.add_commands(sub, default_index)

    from footnote.cli.evaluate import add_eval_command

    add_eval_command(sub, default_index)

    from footnote.cli import feedback as cli_feedback

    cli_feedback.register(sub, default_index)

    from footnote.cli import mcp as cli_mcp

    cli_mcp.add_command(sub, default_index)

    from footnote.cli import keys as cli_keys

    cli_keys.add_commands(sub)

    from footnote.cli import backup as cli_backup

    cli_backup.add_commands(sub, default_index)

    from footnote.cli import audit as cli_audit

    cli_audit.add_command(sub)

    from footnote.cli.conventions import finish

    finish(parser)
    return parser


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
