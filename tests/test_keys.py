"""`footnote keys add|list|revoke`: the key file the server reads, changed atomically."""

from __future__ import annotations

import json
import stat
import threading
from pathlib import Path

import pytest

from footnote.cli.keys import KeyFileError, add_key, list_keys
from footnote.cli.main import main
from footnote.ingest import audit
from footnote.server.credentials import ApiKeys, Unauthenticated


@pytest.fixture(autouse=True)
def audit_log(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Each test's own audit log (keys changes are audited; not into the checkout's)."""
    log = tmp_path / "audit.jsonl"
    monkeypatch.setenv(audit.AUDIT_ENV, str(log))
    return log


def test_add_prints_a_key_once_and_stores_only_its_digest(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "keys.json"
    assert main(["keys", "--file", str(path), "add", "alice", "--group", "hr"]) == 0
    key = capsys.readouterr().out.strip()
    assert key.startswith("fn_")
    assert key not in path.read_text()
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    identity = ApiKeys(path).lookup(key)
    assert (identity.user, identity.admin, "hr" in identity.groups) == ("alice", False, True)

    assert main(["keys", "--file", str(path), "add", "root", "--admin"]) == 0
    capsys.readouterr()
    assert main(["keys", "--file", str(path), "list", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [(r["user"], r["admin"]) for r in rows] == [("alice", False), ("root", True)]
    assert all(len(r["id"]) == 12 and r["id"] not in key for r in rows)


def test_revoke_by_user_or_id_and_never_the_last_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "keys.json"
    monkeypatch.setenv("FOOTNOTE_API_KEYS", str(path))
    alice, root = add_key(path, "alice", [], False), add_key(path, "root", [], True)
    served = ApiKeys(path)
    assert served.lookup(alice).user == "alice"

    assert main(["keys", "revoke", "alice"]) == 0
    with pytest.raises(Unauthenticated):
        served.lookup(alice)  # the running server sees the change at once
    assert served.lookup(root).user == "root"
    assert main(["keys", "revoke", "nobody"]) == 1
    key_id = list_keys(path)[0]["id"]
    assert main(["keys", "revoke", "--id", key_id]) == 2  # the last key
    assert "lock everyone out" in capsys.readouterr().err
    assert served.lookup(root).user == "root"


def test_a_malformed_file_is_refused_not_overwritten(tmp_path: Path) -> None:
    path = tmp_path / "keys.json"
    path.write_text('{"not-a-digest": {"user": "x"}}')
    with pytest.raises(KeyFileError, match="fix it"):
        add_key(path, "alice", [], False)
    assert path.read_text() == '{"not-a-digest": {"user": "x"}}'
    assert main(["keys", "--file", str(tmp_path / "none.json"), "list"]) == 2


def test_concurrent_adds_keep_every_key(tmp_path: Path) -> None:
    path = tmp_path / "keys.json"
    keys: list[str] = []
    workers = [
        threading.Thread(target=lambda n=n: keys.append(add_key(path, f"u{n}", [], False)))
        for n in range(8)
    ]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    served = ApiKeys(path)
    assert sorted(served.lookup(k).user for k in keys) == sorted(f"u{n}" for n in range(8))
    assert not [
        p for p in tmp_path.iterdir() if p.name.startswith(".keys.json.") and "lock" not in p.name
    ]


def test_keys_added_and_revoked_are_audited_as_the_local_operator(
    tmp_path: Path, audit_log: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Who (this machine's login), what (the user named), and the outcome; never the key."""
    path = tmp_path / "keys.json"
    assert main(["keys", "--file", str(path), "add", "alice"]) == 0
    assert main(["keys", "--file", str(path), "add", "root", "--admin"]) == 0
    key = capsys.readouterr().out.split()[0]
    assert main(["keys", "--file", str(path), "revoke", "alice"]) == 0
    assert main(["keys", "--file", str(path), "revoke", "root"]) == 2  # the last key
    assert main(["keys", "--file", str(path), "list"]) == 0  # reading is not audited
    entries, damaged = audit.read(audit_log)
    assert damaged == 0
    assert [(e["action"], e["target"], e["result"]) for e in entries] == [
        ("keys add", "user alice", "ok"),
        ("keys add", "user root", "ok"),
        ("keys revoke", "user alice", "ok"),
        ("keys revoke", "user root", "refused"),
    ]
    assert all(e["who"] == audit.local_operator() for e in entries)
    assert "last key" in entries[-1]["reason"]
    assert key not in audit_log.read_text()
