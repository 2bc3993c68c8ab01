"""`footnote graph`: the entity graph an index holds, as the caller may see it: its figures and
most-mentioned entities, one entity's documents and neighbours (tools/graph_view.py), or its
communities with their extractive summaries (tools/communities.py)."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from footnote.cli.options import add_index_option


def register(sub: Any) -> None:
    p = sub.add_parser(
        "graph",
        help="show the entity graph: entities, their documents and neighbours",
        description=__doc__,
    )
    p.add_argument("entity", nargs="?", default=None, help="an entity's name (any case)")
    add_index_option(p)
    p.add_argument(
        "--groups",
        default="",
        help="comma-separated access groups of the caller; `everyone` is always added",
    )
    p.add_argument(
        "--strict-groups", action="store_true", help="as exactly --groups, without `everyone`"
    )
    p.add_argument("--limit", type=int, default=20, help="entities or neighbours to list")
    p.add_argument(
        "--communities", action="store_true", help="list the communities with their summaries"
    )
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.set_defaults(func=cmd_graph)


def cmd_graph(args: argparse.Namespace) -> int:
    from footnote.store.backends import open_reader
    from footnote.store.types import Caller, IndexError_
    from footnote.tools.graph_view import GraphView

    try:
        caller = Caller.of_groups([g.strip() for g in args.groups.split(",")],
                                  strict=args.strict_groups)  # fmt: skip
        view = GraphView(open_reader(args.index), caller)
        result: dict[str, Any] = view.figures()
        if args.communities:
            result["communities"] = _communities(args.index, view.caller, args.limit)
        elif args.entity is None:
            result["entities"] = view.top(args.limit)
        else:
            found = view.entity(args.entity, args.limit)
            if found is None:
                print(f"footnote: no entity {args.entity!r} in what you may read", file=sys.stderr)
                return 1
            result["entity"] = found
    except (IndexError_, ValueError) as exc:
        print(f"footnote: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(result, indent=2, ensure_ascii=False))
        return 0
    if not result["graph"]:
        print("this index holds no entity graph (built with FOOTNOTE_GRAPH=0)")
        return 0
    print(f"{result['visible_entities']} entities over {result['visible_chunks']} chunks")
    if "communities" in result:
        for c in result["communities"]:
            print(f"community {c['id']}: {c['chunks']} chunks; {', '.join(c['entities'])}")
            for s in c["summary"]:
                print(f"  {s['text']} [{s['chunk_id']}]")
        return 0
    if "entity" in result:
        entity = result["entity"]
        print(f"{entity['name']} ({entity['kind']}), in {entity['chunks']} chunks of "
              f"{', '.join(entity['documents'])}")  # fmt: skip
        for n in entity["neighbours"]:
            print(f"  {n['name']} ({n['kind']}): together {n['together']}, PMI {n['pmi']:.2f}")
        return 0
    for e in result["entities"]:
        print(f"  {e['name']} ({e['kind']}): {e['chunks']} chunks")
    return 0


def _communities(index: str, caller: Any, limit: int) -> list[dict[str, Any]]:
    from footnote.store.backends import open_reader
    from footnote.tools.communities import CommunityView

    reader = open_reader(index)
    view = CommunityView(reader, reader.select(caller))
    return [view.summarise(c).to_dict() for c in view.communities()[:limit]]
