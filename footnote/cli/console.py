"""Pieces every command shares: where a cited chunk comes from, what was skipped, and the
options several commands take (progress is `footnote.progress`). Used by `footnote ingest`,
`ask`, `search`, `eval`."""

from __future__ import annotations

import argparse
import os
from typing import Any


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


def format_location(item: dict[str, Any]) -> str:
    """Where a chunk sits: source, section, page, lines and link, as far as they are known."""
    parts = [item["source"]]
    if item.get("section"):
        parts.append(f"§ {item['section']}")
    if item.get("page"):
        parts.append(f"p. {item['page']}")
    if item.get("lines"):
        parts.append(f"lines {item['lines'][0]}-{item['lines'][1]}")
    if item.get("url") and item["url"] != item["source"]:
        parts.append(item["url"])
    return ", ".join(parts)


def reranker_spec(value: str) -> str:
    """argparse type for --reranker: a clear usage error for a spec no reranker has."""
    from footnote.tools.rerank import check_reranker

    try:
        return check_reranker(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from exc


def add_reranker_options(
    parser: argparse.ArgumentParser, *, model: bool, default: str | None = "none"
) -> None:
    """--reranker, and (for commands without their own) the --model the llm reranker asks."""
    parser.add_argument(
        "--reranker",
        default=default,
        type=reranker_spec,
        metavar="NAME",
        help="reorder the pipeline's top 20: none (default), sentence, judge (Footnote's own "
        "cross-encoder, offline), llm (asks --model) or "
        "crossencoder:PATH (a local model folder; the `crossencoder` extra)",
    )
    if model:
        parser.add_argument(
            "--model",
            default=os.environ.get("FOOTNOTE_MODEL", ""),
            metavar="PROVIDER:MODEL",
            help="chat model for --reranker llm (default: $FOOTNOTE_MODEL)",
        )
        parser.add_argument(
            "--base-url",
            default=os.environ.get("FOOTNOTE_MODEL_BASE_URL", ""),
            help="OpenAI-compatible server URL for an openai:... model",
        )


def reranker_model(args: argparse.Namespace) -> Any:
    """The chat model `--reranker llm` asks, or None (the reranker then says what is missing)."""
    if args.reranker != "llm" or not args.model:
        return None
    from footnote.models.chat import chat_model

    return chat_model(args.model, base_url=args.base_url)
