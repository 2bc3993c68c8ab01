"""`footnote cache` and `footnote cache prune`: how big the embedding cache beside an index is,
and bounding it now. Ingest already prunes it to $FOOTNOTE_EMBED_CACHE_MAX entries after each
run (store/embedding_cache.py); `prune --keep N` bounds it to any size and gives the space
back, and `--keep 0` empties it (the next ingest embeds everything again)."""

from __future__ import annotations

import argparse
import contextlib
import json
from pathlib import Path
from typing import Any

from footnote.cli.options import add_index_option


def _entries(value: str) -> int:
    number = int(value)
    if number < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, not {number}")
    return number


def register(sub: Any) -> None:
    p = sub.add_parser(
        "cache",
        help="show or prune the embedding cache kept beside an index",
        description=__doc__,
    )
    p.add_argument("action", nargs="?", choices=["show", "prune"], default="show")
    add_index_option(p)
    p.add_argument(
        "--keep",
        type=_entries,
        metavar="N",
        help="with prune: the N most recently used entries stay (default: the bound, "
        "$FOOTNOTE_EMBED_CACHE_MAX or 2,000,000; 0 empties the cache)",
    )
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.set_defaults(func=cmd_cache)


def cmd_cache(args: argparse.Namespace) -> int:
    from footnote.store.backends import is_postgres
    from footnote.store.embedding_cache import EmbeddingCache, max_entries
    from footnote.store.types import IndexNotFound

    postgres = is_postgres(args.index)
    if not postgres and not Path(args.index).is_dir():
        raise IndexNotFound(
            f"no index at {args.index}: build one with `footnote ingest PATH --index {args.index}`"
        )
    cache = EmbeddingCache(args.index)
    removed = 0
    with contextlib.closing(cache):
        exists = postgres or cache.path.exists()  # showing an absent cache does not create it
        if args.action == "prune" and exists:
            removed = cache.prune(args.keep)
            if removed:
                cache.compact()
        entries = len(cache) if exists else 0
    result = {
        "index": args.index,
        "entries": entries,
        "bound": max_entries(),
        "removed": removed,
        "bytes": cache.path.stat().st_size if not postgres and cache.path.exists() else None,
    }
    if args.json:
        print(json.dumps(result))
        return 0
    size = f", {result['bytes'] / 2**20:.1f} MiB" if result["bytes"] is not None else ""
    if args.action == "prune":
        print(f"removed {removed:,} entries; {entries:,} left{size}")
    else:
        print(f"{entries:,} entries{size}; ingest prunes to {result['bound']:,}")
    return 0
