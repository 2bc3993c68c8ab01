"""The audit log cannot be forged, flooded or filled by a caller (`footnote.ingest.audit`):
a refused non-admin's indexer run records its text bounded and inert (no escape code reaches
a terminal, no text passes for another field or line), a listing refused is not recorded
at all (a view, not an action), and the log rotates by size with its history still read."""

from __future__ import annotations

import asyncio
import json
import threading
from pathlib import Path
from typing import Any

import pytest
from langgraph_sdk import Auth

from footnote.cli.main import main
from footnote.graph.indexer import IndexerContext, NotAllowed
from footnote.graph.indexer import graph as indexer_graph
from footnote.ingest import audit
from footnote.server import aegra_auth
from footnote.server import auth as served
from footnote.server.credentials import Credentials, write_api_keys
from footnote.server.settings import ServerSettings

FORGED_LINE = (
    "\x1b[1A\x1b[2K\r2026-01-01T00:00:00.000+00:00  api_key:root  add  ok  payroll-export.md"
)
"""What a non-admin sends to make its refused run show as an admin's accepted one."""
TERMINAL_CONTROLS = ("\x1b", "\x9b", "\r", "\x08", "\u202e", "\x07")


class AegraUser:
    """What Aegra hands to handlers: a model with attributes and no `.get`."""

    def __init__(self, **fields: Any) -> None:
        self.__dict__.update(fields)


@pytest.fixture
def log(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    where = tmp_path / "state" / "audit.jsonl"
    monkeypatch.setenv(audit.AUDIT_ENV, str(where))
    return where


@pytest.fixture
def keys(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    path = tmp_path / "keys.json"
    issued = write_api_keys(
        path, {"alice": {"groups": ["engineering"]}, "root": {"groups": [], "admin": True}}
    )
    monkeypatch.setattr(
        served, "CREDENTIALS", Credentials.from_env({"FOOTNOTE_API_KEYS": str(path)})
    )
    monkeypatch.setattr(
        served, "SETTINGS", ServerSettings.from_env({"FOOTNOTE_INDEX": str(tmp_path / "index")})
    )
    return issued


def refused_run(keys: dict[str, str], run_input: Any, name: str = "alice") -> int:
    """A run of the indexer by `name` through the production runtime's handler: its status."""
    user = asyncio.run(aegra_auth.authenticate({"Authorization": f"Bearer {keys[name]}"}))
    ctx = Auth.types.AuthContext(
        user=AegraUser(**user),  # type: ignore[arg-type]
        resource="threads",
        action="create_run",
        permissions=[],
    )
    value = {"assistant_id": "indexer", "input": run_input, "context": None, "config": {}}
    with pytest.raises(Auth.exceptions.HTTPException) as refused:
        asyncio.run(aegra_auth.create_run(ctx, value))
    return refused.value.status_code


def test_escape_codes_in_a_refused_run_cannot_forge_what_footnote_audit_shows(
    keys: dict[str, str], log: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run_input = {
        "action": f"add{FORGED_LINE}",
        "sources": [FORGED_LINE, "memo\u202eexe.md", "bell\x07\x08\x9b2J"],
        "uploads": [{"name": f"x{FORGED_LINE}"}],
    }
    assert refused_run(keys, run_input) == 403
    written = log.read_text(encoding="utf-8")
    assert not any(c in written for c in TERMINAL_CONTROLS), written  # `cat` is safe too
    assert main(["audit"]) == 0
    shown = capsys.readouterr().out
    assert not any(c in shown for c in TERMINAL_CONTROLS), shown
    (line,) = shown.splitlines()  # one record, one line
    fields = line.split("  ")
    assert fields[1] == "api_key:alice" and fields[3].startswith("refused (only admins")
    assert fields[2].startswith("add\\x1b[1A")  # the action shown for what it is
    assert "  api_key:root  " not in line  # a caller's text never passes for a field


def test_a_forged_file_is_shown_inert(log: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The file itself is untrusted: a line someone wrote with escape codes, newlines or an
    unknown result is shown escaped, or counted as damaged."""
    log.parent.mkdir(parents=True)
    forged = {"time": "t\x1b[2K", "who": "api_key:root\nx  y", "action": "add", "result": "ok"}
    bad_result = {**forged, "result": "ok\x1b[32m"}
    log.write_text(json.dumps(forged) + "\n" + json.dumps(bad_result) + "\n", encoding="utf-8")
    assert main(["audit"]) == 1
    captured = capsys.readouterr()
    assert not any(c in captured.out for c in TERMINAL_CONTROLS), captured.out
    assert captured.out.splitlines() == ["t\\x1b[2K  api_key:root x y  add  ok"]
    assert "1 line(s)" in captured.err


def test_a_31_kilobyte_refused_run_is_recorded_in_a_few(keys: dict[str, str], log: Path) -> None:
    run_input = {
        "action": "add",
        "sources": [f"s{n}-" + "x" * 1000 for n in range(50)],
        "uploads": [{"name": f"u{n}-" + "y" * 1000} for n in range(50)],
    }
    assert refused_run(keys, run_input) == 403
    assert len(log.read_bytes()) < 6 * 1024
    (entry,), damaged = audit.read(log)
    assert damaged == 0
    assert len(entry["sources"]) == 20 and entry["sources_omitted"] == 30
    assert len(entry["uploads"]) == 20 and entry["uploads_omitted"] == 30
    assert entry["sources"][0].startswith("s0-x") and entry["sources"][0].endswith("[+883 chars]")


def test_every_recorded_field_is_bounded(log: Path) -> None:
    huge = "z" * 31_000
    entry = audit.record(
        log,
        who=huge,
        action=huge,
        result="error",
        reason=huge,
        index=huge,
        target=huge,
        sources=[huge] * 100,
        uploads=[huge] * 100,
        summary={huge: 1},
    )
    assert len(json.dumps(entry)) < 8 * 1024
    assert entry["reason"].endswith("…[+30700 chars]")


def test_a_refused_listing_is_a_view_not_recorded_a_refused_change_is(
    keys: dict[str, str], log: Path
) -> None:
    """The Sources panel asks the indexer for its listing, and a user who is not an admin is
    refused: nothing is recorded. Refused changes are."""
    assert refused_run(keys, {"action": "sources"}) == 403
    assert refused_run(keys, {}) == 403  # the indexer's default action is the listing
    assert audit.read(log) == ([], 0)
    for action in ("add", "remove", "sync"):
        assert refused_run(keys, {"action": action, "sources": ["a.md"]}) == 403
    assert refused_run(keys, {"action": "sync", "permissions_only": True}) == 403
    entries, _ = audit.read(log)
    assert [(e["who"], e["action"], e["result"]) for e in entries] == [
        ("api_key:alice", action, "refused")
        for action in ("add", "remove", "sync", "sync-permissions")
    ]


def test_the_indexer_node_records_a_refused_change_not_a_refused_listing(
    tmp_path: Path, log: Path
) -> None:
    """The node's own check (behind the server's) keeps to the same rule."""
    alice = {"identity": "alice", "auth_method": "api_key", "display_name": "alice"}
    config: Any = {"configurable": {"langgraph_auth_user": {**alice, "admin": False}}}
    context = IndexerContext(index_dir=str(tmp_path / "index"))
    for run_input in ({"action": "sources"}, {}, {"action": "sync"}):
        with pytest.raises(NotAllowed):
            indexer_graph.invoke(run_input, config, context=context)
    entries, _ = audit.read(log)
    assert [(e["who"], e["action"], e["result"]) for e in entries] == [
        ("api_key:alice", "sync", "refused")
    ]


def test_the_log_rotates_by_size_keeping_its_history_readable(
    log: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(audit, "ROTATE_BYTES", 2000)
    monkeypatch.setattr(audit, "KEEP_FILES", 3)
    for n in range(100):
        audit.record(log, who="api_key:root", action="sync", result="ok", target=f"n{n}")
    files = sorted(log.parent.glob("audit.jsonl*"))
    assert [f.name for f in files] == [
        "audit.jsonl",
        "audit.jsonl.1",
        "audit.jsonl.2",
        "audit.jsonl.3",
        "audit.jsonl.lock",
    ]
    assert all(f.stat().st_size <= 2000 for f in files)
    on_disk = sum(len(f.read_text().splitlines()) for f in files if f.suffix != ".lock")
    entries, damaged = audit.read(log, limit=1000)
    assert damaged == 0 and len(entries) == on_disk > len(log.read_text().splitlines())
    numbers = [int(e["target"][1:]) for e in entries]
    assert numbers == list(range(100 - on_disk, 100))  # the newest, in order, oldest dropped
    assert audit.read(log, limit=5)[0] == entries[-5:]
    assert main(["audit", "--limit", "1000"]) == 0
    assert len(capsys.readouterr().out.splitlines()) == on_disk


def test_concurrent_writers_lose_nothing_while_the_log_rotates(
    log: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(audit, "ROTATE_BYTES", 4000)
    monkeypatch.setattr(audit, "KEEP_FILES", 100)

    def write(n: int) -> None:
        for i in range(50):
            audit.record(log, who=f"w{n}", action="add", result="ok", target=f"{n}-{i}")

    threads = [threading.Thread(target=write, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert (log.parent / "audit.jsonl.3").exists()
    entries, damaged = audit.read(log, limit=1000)
    assert damaged == 0
    assert sorted(e["target"] for e in entries) == sorted(
        f"{n}-{i}" for n in range(4) for i in range(50)
    )
