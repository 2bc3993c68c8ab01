"""`footnote search QUERY`: the chunks retrieval ranks highest, without an LLM."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from footnote.cli.console import add_reranker_options
from footnote.cli.options import add_index_option
from footnote.store.redaction import redact


def cmd_search(args: argparse.Namespace) -> int:
    from footnote.cli.console import format_location, reranker_model
    from footnote.store.types import Caller
    from footnote.tools.search import SearchRequest, search

    try:
        hits = search(
            SearchRequest(
                query=args.query,
                index_dir=args.index,
                k=args.k,
                stage=args.stage,
                source=args.source,
                caller=Caller.of_groups(
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


def register(sub: Any) -> None:
    p = sub.add_parser(
        "search",
        help="rank chunks for a query (retrieval only, no LLM)",
        description="Print the chunks the retrieval pipeline ranks highest for QUERY.",
    )
    p.add_argument("query")
    add_index_option(p)
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
