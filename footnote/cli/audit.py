"""`footnote audit`: the audit log of admin actions (`footnote.ingest.audit`), newest last."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from footnote.ingest import audit


def cmd_audit(args: argparse.Namespace) -> int:
    where = Path(args.file) if args.file else audit.audit_location(args.index)
    try:
        entries, damaged = audit.read(where, args.limit)
    except audit.AuditError as exc:
        print(f"footnote: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps({"log": str(where), "items": entries, "damaged": damaged}, indent=2))
    elif not entries:
        print(f"no audit records in {where}")
    for entry in [] if args.json else entries:
        what = entry.get("target") or ", ".join(
            [*entry.get("sources", []), *entry.get("uploads", [])]
        )
        reason = f" ({entry['reason']})" if entry.get("reason") else ""
        print(
            f"{entry['time']}  {entry['who']}  {entry['action']}  {entry['result']}{reason}"
            + (f"  {what}" if what else "")
        )
    if damaged:
        print(f"footnote: {damaged} line(s) of {where} are not audit records", file=sys.stderr)
        return 1
    return 0


def add_command(sub: Any, default_index: Callable[[], str]) -> None:
    p = sub.add_parser(
        "audit",
        help="who added, removed, synced, uploaded, or changed keys, and what came of it",
        description=(
            "Print the audit log of admin actions (served indexer runs, `footnote keys`): "
            "time, who (the authenticated identity, or local:LOGIN), action, result (ok, "
            "refused, error, with the reason) and what it named. The log is $FOOTNOTE_AUDIT_LOG, "
            "else audit.jsonl beside --index. Exit status 1 when some lines are not records."
        ),
    )
    p.add_argument("--index", default=default_index(), help="the index whose log to read")
    p.add_argument("--file", default="", help="read this audit log instead")
    p.add_argument("--limit", type=int, default=100, help="the last N records (default 100)")
    p.add_argument("--json", action="store_true", help="print the records as JSON")
    p.set_defaults(func=cmd_audit)
