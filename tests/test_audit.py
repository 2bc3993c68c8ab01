"""The audit log (`footnote.ingest.audit`) and `footnote audit`: append-only, mode 600, never
through a symlink, and read as untrusted (a line that is not a record is counted, not used).
The served side (who, over both runtimes) is in tests/test_indexer_served.py and
tests/test_production_doors.py."""

from __future__ import annotations

import json
import os
import stat
import threading
from pathlib import Path

import pytest

from footnote.cli.main import main
from footnote.ingest import audit


def test_records_are_appended_private_and_read_back_newest_last(tmp_path: Path) -> None:
    log = tmp_path / "logs" / "audit.jsonl"
    audit.record(log, who="api_key:root", action="add", result="ok", sources=["a", "b"])
    audit.record(
        log,
        who="api_key:alice",
        action="sync",
        result="refused",
        reason="403: only admins may manage the index's sources",
        index="postgresql://footnote:hunter2@db/x",
    )
    assert stat.S_IMODE(log.stat().st_mode) == 0o600
    entries, damaged = audit.read(log)
    assert damaged == 0
    assert [(e["who"], e["result"]) for e in entries] == [
        ("api_key:root", "ok"),
        ("api_key:alice", "refused"),
    ]
    assert "hunter2" not in log.read_text()  # a password in what was named is hidden
    assert audit.read(log, limit=1)[0] == entries[-1:]


def test_concurrent_writers_never_interleave(tmp_path: Path) -> None:
    log = tmp_path / "audit.jsonl"

    def write(n: int) -> None:
        for i in range(50):
            audit.record(log, who=f"w{n}", action="add", result="ok", sources=["x" * 2000, i])

    threads = [threading.Thread(target=write, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    entries, damaged = audit.read(log, limit=1000)
    assert (len(entries), damaged) == (200, 0)


def test_a_symlinked_or_special_log_is_refused(tmp_path: Path) -> None:
    target = tmp_path / "elsewhere"
    target.write_text("")
    link = tmp_path / "audit.jsonl"
    link.symlink_to(target)
    with pytest.raises(audit.AuditError):
        audit.record(link, who="x", action="add", result="ok")
    with pytest.raises(audit.AuditError):
        audit.read(link)
    assert target.read_text() == ""
    fifo = tmp_path / "fifo.jsonl"
    os.mkfifo(fifo)
    with pytest.raises(audit.AuditError):
        audit.record(fifo, who="x", action="add", result="ok")


def test_a_widened_log_is_made_private_again(tmp_path: Path) -> None:
    log = tmp_path / "audit.jsonl"
    log.write_text("")
    log.chmod(0o644)
    audit.record(log, who="x", action="sync", result="ok")
    assert stat.S_IMODE(log.stat().st_mode) == 0o600


def test_the_cli_prints_records_and_counts_damaged_lines(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    log = tmp_path / "audit.jsonl"
    audit.record(log, who="api_key:root", action="add", result="ok", uploads=["memo.md"])
    with log.open("a") as sink:
        sink.write('{"who": "forged"}\n[1, 2]\nnot json\n')
    audit.record(log, who="jwt:bob", action="remove", result="error", reason="no such source")
    assert main(["audit", "--file", str(log)]) == 1  # damaged lines: said, and exit 1
    captured = capsys.readouterr()
    lines = captured.out.splitlines()
    assert len(lines) == 2 and "api_key:root  add  ok  memo.md" in lines[0]
    assert "jwt:bob  remove  error (no such source)" in lines[1]
    assert "3 line(s)" in captured.err and "forged" not in captured.out
    assert main(["audit", "--file", str(log), "--json", "--limit", "1"]) == 1
    shown = json.loads(capsys.readouterr().out)
    assert [e["who"] for e in shown["items"]] == ["jwt:bob"] and shown["damaged"] == 3


def test_the_log_has_one_home_unless_named(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    state_dir: Path,
) -> None:
    """One log per deployment, in its state folder, whatever index a record is about (more:
    tests/test_audit_log_home.py)."""
    monkeypatch.delenv(audit.AUDIT_ENV, raising=False)
    assert audit.audit_location() == state_dir / "audit.jsonl"
    monkeypatch.setenv(audit.AUDIT_ENV, str(tmp_path / "named.jsonl"))
    assert audit.audit_location() == tmp_path / "named.jsonl"
    assert main(["audit", "--index", str(tmp_path / "team" / "index")]) == 0
    assert "no audit records" in capsys.readouterr().out
