"""`footnote feedback export DIR`: rated answers as a BEIR set for `footnote eval`."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from footnote.cli.options import add_index_option
from footnote.feedback.records import (
    FEEDBACK_DB_ENV,
    FeedbackStore,
    export_beir,
    feedback_location,
)
from footnote.store.backends import is_postgres


def cmd_export(args: argparse.Namespace) -> int:
    location = args.db or feedback_location(index=args.index)
    if not is_postgres(location) and not Path(location).is_file():
        print(f"footnote: no feedback store at {location} (give --db)", file=sys.stderr)
        return 2
    result = export_beir(FeedbackStore(location).all(), args.directory)
    if args.json:
        print(json.dumps({"directory": str(args.directory), **result.__dict__}))
    else:
        print(
            f"{args.directory}: {result.queries} queries, {result.judgements} judgements, "
            f"{result.passages} passages, {result.gaps} known gaps (gaps.jsonl)\n"
            f"Measure it: footnote eval {args.directory}  (answers: --answers)"
        )
    return 0


def register(sub: Any) -> None:
    """`footnote feedback export DIR`."""
    p = sub.add_parser(
        "feedback",
        help="turn rated answers into an evaluation set",
        description="Work with the answer feedback the server stored.",
    )
    actions = p.add_subparsers(dest="feedback_command", required=True, metavar="ACTION")
    e = actions.add_parser(
        "export",
        help="write rated answers as a BEIR dataset for `footnote eval`",
        description=(
            "Write corpus.jsonl, queries.jsonl, qrels/test.tsv (and gaps.jsonl) from rated "
            "answers: thumbs up makes the cited chunks relevant, a flagged citation a judged "
            "negative. Example: footnote feedback export golden/ && footnote eval golden/"
        ),
    )
    e.add_argument("directory", metavar="DIR")
    e.add_argument(
        "--db",
        default="",
        help=f"the feedback store (a file or postgresql:// URL; default: ${FEEDBACK_DB_ENV}, "
        "else the server's PostgreSQL, else feedback.sqlite3 beside --index)",
    )
    add_index_option(e)
    e.add_argument("--json", action="store_true", help="print counts as JSON")
    e.set_defaults(func=cmd_export)
