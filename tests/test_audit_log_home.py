"""The audit log has one home per deployment (`footnote.ingest.audit`): $FOOTNOTE_AUDIT_LOG,
else the state folder. `footnote keys` writes there wherever it runs, `footnote audit` and the
served `GET /audit` read there (key changes included), and `footnote serve` hands its server
processes the same location, so the command line and the server agree."""

from __future__ import annotations

from pathlib import Path

import pytest
from starlette.applications import Starlette
from starlette.testclient import TestClient

from footnote.cli.main import main
from footnote.ingest import audit
from footnote.server import audit_routes
from footnote.server.credentials import Credentials, write_api_keys
from footnote.server.langgraph_dev import server_environment
from footnote.server.production import replica_environment
from footnote.server.settings import ServerSettings


@pytest.fixture
def state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """This test's own state folder, no log named, and a working folder apart from both."""
    folder = tmp_path / "state"
    monkeypatch.setenv("FOOTNOTE_STATE_DIR", str(folder))
    monkeypatch.delenv(audit.AUDIT_ENV, raising=False)
    monkeypatch.delenv("FOOTNOTE_INDEX", raising=False)
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    return folder


def test_key_changes_go_to_the_deployments_log_wherever_the_command_runs(
    tmp_path: Path,
    state: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    keys = tmp_path / "keys.json"
    assert main(["keys", "--file", str(keys), "add", "alice"]) == 0
    assert not list(tmp_path.rglob("work/**/audit.jsonl"))  # not beside the default index
    (entry,), damaged = audit.read(state / "audit.jsonl")
    assert (entry["action"], entry["result"], damaged) == ("keys add", "ok", 0)
    capsys.readouterr()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    assert main(["audit"]) == 0
    assert "keys add  ok  user alice" in capsys.readouterr().out


def test_get_audit_shows_key_changes_and_every_index(
    tmp_path: Path, state: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    issued = write_api_keys(
        tmp_path / "served-keys.json",
        {"root": {"groups": [], "admin": True}, "alice": {"groups": []}},
    )
    credentials = Credentials.from_env({"FOOTNOTE_API_KEYS": str(tmp_path / "served-keys.json")})
    index, other = tmp_path / "team" / "index", tmp_path / "other" / "index"
    settings = ServerSettings.from_env({"FOOTNOTE_INDEX": str(index)})
    monkeypatch.setattr(audit_routes, "served_credentials", lambda: credentials)
    monkeypatch.setattr(audit_routes, "served_settings", lambda: settings)
    assert main(["keys", "--file", str(tmp_path / "keys.json"), "add", "bob"]) == 0
    where = audit.audit_location()
    audit.record(where, who="api_key:root", action="sync", result="ok", index=str(index))
    audit.record(where, who="api_key:root", action="add", result="ok", index=str(other))
    page = TestClient(Starlette(routes=audit_routes.ROUTES))
    admin = {"Authorization": f"Bearer {issued['root']}"}
    everything = page.get("/audit", headers=admin)
    assert everything.status_code == 200, everything.text
    assert [r["action"] for r in everything.json()["items"]] == ["keys add", "sync", "add"]
    one = page.get("/audit", params={"index": "default"}, headers=admin).json()["items"]
    assert [(r["action"], r["index"]) for r in one] == [("sync", str(index))]
    assert page.get("/audit", params={"index": "nope"}, headers=admin).status_code == 404
    alice = {"Authorization": f"Bearer {issued['alice']}"}
    assert page.get("/audit", headers=alice).status_code == 403
    assert main(["audit", "--index", str(other)]) == 0


def test_footnote_serve_passes_one_location_to_its_servers(
    tmp_path: Path, state: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Dev runtime and production replicas alike, as an absolute path: the servers run in
    folders of their own, where a relative $FOOTNOTE_AUDIT_LOG would name another file."""
    index = str(tmp_path / "index")
    replica = {
        "index_dir": index,
        "database_url": "postgresql://localhost/x",
        "redis_url": "redis://localhost",
        "config": tmp_path / "aegra.json",
        "host": "127.0.0.1",
        "port": 0,
        "migrate": False,
    }
    for env in (server_environment(index_dir=index), replica_environment(**replica)):
        assert env[audit.AUDIT_ENV] == str(state / "audit.jsonl")
    monkeypatch.setenv(audit.AUDIT_ENV, "logs/audit.jsonl")
    named = str(Path.cwd() / "logs" / "audit.jsonl")
    for env in (server_environment(index_dir=index), replica_environment(**replica)):
        assert env[audit.AUDIT_ENV] == named
