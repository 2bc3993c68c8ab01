"""`footnote keys add|list|revoke`: the served API-key file ($FOOTNOTE_API_KEYS) without
editing JSON by hand.

The file holds SHA-256 digests, never keys: `add` prints the new key once and stores its
digest. Every change is checked by the parser the server uses, then written atomically (a
mode-600 temporary file beside it, flushed to disk, renamed over it) under an exclusive lock,
so a server re-reading the file (it does whenever the content changes) never sees half of
one, and two operators' edits do not lose each other's.
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from footnote.ingest import audit
from footnote.server.credentials import CredentialsError, hash_key, new_key, parse_key_file

KEYS_ENV = "FOOTNOTE_API_KEYS"
KEY_ID_LENGTH = 12
"""How much of a key's digest `list` shows and `revoke --id` takes: names it, reveals nothing."""


class KeyFileError(ValueError):
    """The key file cannot be changed as asked; the message says why."""


def _entries(path: Path) -> dict[str, dict[str, Any]]:
    """The file's entries (digest -> user, groups, admin); {} if it does not exist yet."""
    if not path.exists():
        return {}
    text = path.read_text(encoding="utf-8")
    try:
        parse_key_file(text, str(path))
    except CredentialsError as exc:
        raise KeyFileError(f"{exc}; fix it before changing it") from None
    entries: dict[str, dict[str, Any]] = json.loads(text)
    return entries


def _write(path: Path, entries: dict[str, dict[str, Any]]) -> None:
    text = json.dumps(entries, indent=2) + "\n"
    parse_key_file(text, str(path))
    descriptor, temporary = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        os.fchmod(descriptor, 0o600)
        with os.fdopen(descriptor, "w", encoding="utf-8") as sink:
            sink.write(text)
            sink.flush()
            os.fsync(sink.fileno())
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


@contextmanager
def _locked(path: Path) -> Iterator[None]:
    """An exclusive lock on `path`'s edits (a `.lock` file beside it)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    descriptor = os.open(path.with_name(f".{path.name}.lock"), os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX)
        yield
    finally:
        os.close(descriptor)


def add_key(path: Path, user: str, groups: list[str], admin: bool) -> str:
    """A new key for `user`, its digest stored; returns the key (shown only once)."""
    if not user.strip():
        raise KeyFileError("the user name must not be empty")
    with _locked(path):
        entries = _entries(path)
        key = new_key()
        entries[hash_key(key)] = {"user": user, "groups": groups, "admin": admin}
        _write(path, entries)
    return key


def list_keys(path: Path) -> list[dict[str, Any]]:
    """One row per key: its id (the start of its digest), user, groups, admin."""
    if not path.exists():
        raise KeyFileError(f"{path}: no such key file")
    return [{"id": digest[:KEY_ID_LENGTH], **entry} for digest, entry in _entries(path).items()]


def revoke_keys(path: Path, *, user: str = "", key_id: str = "") -> int:
    """Remove every key of `user`, or the key whose id is `key_id`; how many went."""
    with _locked(path):
        entries = _entries(path)
        if not entries:
            raise KeyFileError(f"{path}: no such key file")
        if key_id:
            if len(key_id) < 8:
                raise KeyFileError("give at least 8 characters of the key's id (see `list`)")
            gone = [d for d in entries if d.startswith(key_id.lower())]
            if len(gone) > 1:
                raise KeyFileError(f"id {key_id!r} names {len(gone)} keys; give more of it")
        else:
            gone = [d for d, entry in entries.items() if entry.get("user") == user]
        if not gone:
            return 0
        left = {d: e for d, e in entries.items() if d not in gone}
        if not left:
            raise KeyFileError(
                "that would revoke the last key and lock everyone out; add another key first"
            )
        _write(path, left)
    return len(gone)


def _path(args: argparse.Namespace) -> Path:
    chosen = args.file or os.environ.get(KEYS_ENV, "")
    if not chosen:
        raise KeyFileError(f"name the key file: --file PATH or ${KEYS_ENV}")
    return Path(chosen)


def _audit(args: argparse.Namespace, result: audit.Result, reason: str = "") -> None:
    """A key added or revoked (or refused), by the local operator, in the audit log."""
    if args.keys_command == "list":
        return
    key_id = getattr(args, "id", "")
    audit.record_quietly(
        audit.audit_location(),
        who=audit.local_operator(),
        action=f"keys {args.keys_command}",
        result=result,
        reason=reason,
        target=f"key id {key_id}" if key_id else f"user {args.user}",
    )


def cmd_keys(args: argparse.Namespace) -> int:
    try:
        status = _keys(args)
    except KeyFileError as exc:
        _audit(args, "refused", str(exc))
        print(f"footnote: {exc}", file=sys.stderr)
        return 2
    _audit(args, "ok" if status == 0 else "refused", "" if status == 0 else "no key matched")
    return status


def _keys(args: argparse.Namespace) -> int:
    """The action itself; KeyFileError when the file cannot be changed as asked."""
    path = _path(args)
    if args.keys_command == "add":
        key = add_key(path, args.user, args.group, args.admin)
        print(key)
        print(
            f"footnote: added a key for {args.user!r} to {path}; this is the only time it is shown",
            file=sys.stderr,
        )
    elif args.keys_command == "list":
        rows = list_keys(path)
        if args.json:
            print(json.dumps(rows, indent=2))
        for row in [] if args.json else rows:
            groups = ",".join(row.get("groups", [])) or "-"
            print(f"{row['id']}  {row['user']}  groups={groups}  admin={row['admin']}")
    else:
        count = revoke_keys(path, user=args.user or "", key_id=args.id or "")
        if not count:
            print("footnote: no key matched; nothing revoked", file=sys.stderr)
            return 1
        print(f"footnote: revoked {count} key(s) in {path}", file=sys.stderr)
    return 0


def register(sub: Any) -> None:
    """`footnote keys add|list|revoke`."""
    p = sub.add_parser(
        "keys",
        help="add, list and revoke the served API keys",
        description=(
            f"Manage the server's API-key file (--file, default ${KEYS_ENV}): it stores "
            "digests only; `add` prints the new key once. Example: footnote keys add alice "
            "--group engineering"
        ),
    )
    p.add_argument("--file", default="", help=f"the key file (default: ${KEYS_ENV})")
    actions = p.add_subparsers(dest="keys_command", required=True, metavar="ACTION")
    a = actions.add_parser("add", help="make a key for a user and print it once")
    a.add_argument("user")
    a.add_argument("--group", action="append", default=[], help="a group (repeat for more)")
    a.add_argument("--admin", action="store_true", help="an administrator")
    listing = actions.add_parser("list", help="the keys' ids, users, groups (never the keys)")
    listing.add_argument("--json", action="store_true")
    r = actions.add_parser("revoke", help="remove a user's keys, or one key by its id")
    which = r.add_mutually_exclusive_group(required=True)
    which.add_argument("user", nargs="?", default="")
    which.add_argument("--id", default="", help="the key's id as `list` shows it")
    for action in (a, listing, r):
        action.add_argument("--file", default=argparse.SUPPRESS, help=argparse.SUPPRESS)
    p.set_defaults(func=cmd_keys)
