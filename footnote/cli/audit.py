"""`footnote audit`: the audit log of admin actions (`footnote.ingest.audit`), newest last.

What is printed comes from a file anyone able to write it could have forged: `audit.read`
hands back every field as one inert line (escape codes and other terminal controls written
out as `\\x1b`), so a record is printed as exactly one line of its own fields."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from footnote.cli.options import add_index_filter
from footnote.ingest import audit


def cmd_audit(args: argparse.Namespace) -> int:
    where = Path(args.file) if args.file else audit.audit_location()
    try:
        entries, damaged = audit.read(where, args.limit, index=args.index or None)
    except audit.AuditError as exc:
        print(f"footnote: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps({"log": str(where), "items": entries, "damaged": damaged}, indent=2))
    elif not entries:
        print(f"no audit records in {audit.visible(str(where))}")
    for entry in [] if args.json else entries:
        print(_line(entry))
    if damaged:
        print(
            f"footnote: {damaged} line(s) of {audit.visible(str(where))} are not audit records",
            file=sys.stderr,
        )
        return 1
    return 0


def _line(entry: dict[str, Any]) -> str:
    """time  who  action  result (reason)  what it named (+ how many names were cut)."""
    what = entry.get("target") or ", ".join([*entry.get("sources", []), *entry.get("uploads", [])])
    omitted = entry.get("sources_omitted", 0) + entry.get("uploads_omitted", 0)
    if omitted:
        what += f" (+{omitted} more)"
    reason = f" ({entry['reason']})" if entry.get("reason") else ""
    return f"{entry['time']}  {entry['who']}  {entry['action']}  {entry['result']}{reason}" + (
        f"  {what}" if what else ""
    )


def register(sub: Any) -> None:
    p = sub.add_parser(
        "audit",
        help="who added, removed, synced, uploaded, or changed keys, and what came of it",
        description=(
            "Print the audit log of admin actions (served indexer runs, `footnote keys`): "
            "time, who (the authenticated identity, or local:LOGIN), action, result (ok, "
            "refused, error, with the reason) and what it named. The log is one per "
            "deployment: $FOOTNOTE_AUDIT_LOG, else audit.jsonl in the state folder "
            "($FOOTNOTE_STATE_DIR); older records are read from its rotated files "
            "(audit.jsonl.1, ...). Exit status 1 when some lines are not records."
        ),
    )
    add_index_filter(p)
    p.add_argument("--file", default="", help="read this audit log instead")
    p.add_argument("--limit", type=int, default=100, help="the last N records (default 100)")
    p.add_argument("--json", action="store_true", help="print the records as JSON")
    p.set_defaults(func=cmd_audit)
