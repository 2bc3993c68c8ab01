"""`footnote ingest PATH...`: parse, chunk, embed and index documents (incremental)."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from footnote.cli.console import skipped_lines
from footnote.cli.options import add_index_option
from footnote.store.redaction import redact


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


def register(sub: Any) -> None:
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
    add_index_option(p)
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
