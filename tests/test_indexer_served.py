"""The indexer graph through a real `langgraph dev` and `langgraph_sdk`: an admin adds,
uploads, lists, syncs (in full or permissions only) and removes sources; a non-admin gets
403 and sees, through the library graph, only the documents their groups may read; a served
URL source never reaches loopback unless the operator allows it; the audit log records who
did (or was refused) what, and only admins read it."""

from __future__ import annotations

import base64
import json
import shutil
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from langgraph_sdk import get_sync_client
from langgraph_sdk.client import SyncLangGraphClient

from footnote.ingest.pipeline import ingest
from footnote.server.langgraph_dev import ServerFailed, running_server
from tests.conftest import HANDBOOK
from tests.served import USERS, Team, api_key_team
from tests.test_served_auth import refusal

pytestmark = pytest.mark.integration


@dataclass
class Indexer:
    clients: dict[str, SyncLangGraphClient]
    root: Path
    uploads: Path
    index: Path
    url: str = ""
    team: Team | None = None


@pytest.fixture(scope="module")
def indexer(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Indexer]:
    root = tmp_path_factory.mktemp("indexer")
    corpus = root / "handbook"
    shutil.copytree(HANDBOOK, corpus)
    index = root / "index"
    assert not ingest([corpus], index).failed
    team = api_key_team(root)
    uploads = root / "uploads"
    # the operator lets admins add what lies in this test's folder (the index there is not)
    env = {
        **team.env,
        "FOOTNOTE_UPLOAD_DIR": str(uploads),
        "FOOTNOTE_SOURCE_ROOTS": str(root),
        # this deployment's own audit log: the session's state folder holds other tests'
        "FOOTNOTE_AUDIT_LOG": str(root / "audit.jsonl"),
    }
    try:
        with running_server(index_dir=str(index), log=root / "server.log", extra_env=env) as server:
            clients = {u: get_sync_client(url=server.url, headers=team.headers(u)) for u in USERS}
            yield Indexer(clients, root, uploads, index, server.url, team)
    except ServerFailed as exc:
        pytest.fail(str(exc), pytrace=False)


def run(client: SyncLangGraphClient, graph: str, **state: Any) -> dict[str, Any]:
    return client.runs.wait(None, graph, input=state)  # type: ignore[return-value]


def test_admin_manages_sources_and_others_get_403(indexer: Indexer) -> None:
    admin, alice = indexer.clients["root"], indexer.clients["alice"]
    status, body = refusal(lambda: run(alice, "indexer", action="sync"))
    assert status == 403 and "only admins" in body
    status, _ = refusal(lambda: run(alice, "indexer", action="sources"))
    assert status == 403
    status, _ = refusal(lambda: alice.assistants.create("indexer"))
    assert status == 403  # no other assistant can open a way around the check

    extra = indexer.root / "extra"
    extra.mkdir()
    (extra / "ops.md").write_text("---\naccess: [engineering]\n---\n# Ops\n\nThe wombat runbook.\n")
    added = run(admin, "indexer", action="add", sources=[str(extra)])["result"]
    assert added["added"] == 1 and added["deleted"] == 0
    note = base64.b64encode(b"# Upload\n\nThe uploaded quoll memo.\n").decode()
    uploaded = run(
        admin, "indexer", action="add", uploads=[{"name": "memo.md", "content": note}],
        access=["hr"],
    )["result"]  # fmt: skip
    assert uploaded["files"]["added"] == ["memo.md"] and (indexer.uploads / "memo.md").is_file()
    with pytest.raises(Exception, match="must be a plain file name"):
        run(admin, "indexer", action="add", uploads=[{"name": "../x.md", "content": note}])

    listing = run(admin, "indexer", action="sources")["result"]
    kinds = {s["id"]: s["kind"] for s in listing["sources"]}
    assert kinds[str(extra)] == "folder" and kinds[str(indexer.uploads / "memo.md")] == "file"
    sources = {d["source"] for d in listing["documents"]}
    assert {"ops.md", "memo.md", "keys.md"} <= sources

    seen = {d["source"] for d in run(alice, "library")["documents"]}
    assert "ops.md" in seen and "keys.md" in seen and "memo.md" not in seen
    bob = {d["source"] for d in run(indexer.clients["bob"], "library")["documents"]}
    assert "memo.md" in bob and "ops.md" not in bob

    (extra / "ops.md").unlink()
    synced = run(admin, "indexer", action="sync")["result"]
    assert synced["deletions"] == [{"source": "ops.md", "reason": f"no longer in {extra}"}]
    removed = run(admin, "indexer", action="remove", sources=["memo.md"])["result"]
    assert removed["files"]["deleted"] == ["memo.md"]


def test_an_admin_syncs_permissions_only_and_others_get_403(indexer: Indexer) -> None:
    """The indexer's sync with `permissions_only` (docs/sync.md) over HTTP: an admin's asks
    connector sources only for readers (this index has none: nothing checked, nothing
    published), recorded as `sync-permissions` under the admin; a non-admin gets 403,
    recorded as a refused `sync-permissions`; a value that is not true or false is refused
    with its reason."""
    assert indexer.team is not None
    admin, alice = indexer.clients["root"], indexer.clients["alice"]
    version = run(admin, "indexer", action="sources")["result"]["version"]
    synced = run(admin, "indexer", action="sync", permissions_only=True)["result"]
    assert synced["permissions_only"] is True, synced
    assert (synced["checked"], synced["embedded_texts"], synced["version"]) == (0, 0, version)
    status, body = refusal(lambda: run(alice, "indexer", action="sync", permissions_only=True))
    assert status == 403 and "only admins" in body
    with pytest.raises(Exception, match="permissions_only takes true or false"):
        run(admin, "indexer", action="sync", permissions_only="yes")
    answer = httpx.get(
        f"{indexer.url}/audit", params={"limit": 1000}, headers=indexer.team.headers("root")
    )
    records = [r for r in answer.json()["items"] if r["action"] == "sync-permissions"]
    assert [(r["who"], r["result"]) for r in records] == [
        ("api_key:root", "ok"),
        ("api_key:alice", "refused"),
    ], records


def test_served_url_sources_never_reach_loopback(indexer: Indexer) -> None:
    admin = indexer.clients["root"]
    result = run(admin, "indexer", action="add", sources=["http://127.0.0.1:9/secret.html"])
    errors = {e["source"]: e["error"] for e in result["result"]["errors"]}
    assert "loopback, private or link-local" in errors["http://127.0.0.1:9/secret.html"]
    metadata = run(admin, "indexer", action="add", sources=["http://169.254.169.254/latest/"])
    assert "loopback, private or link-local" in str(metadata["result"]["errors"])


def test_the_audit_log_names_who_changed_what_and_only_admins_read_it(indexer: Indexer) -> None:
    """An admin's upload and sync are recorded with the admin's authenticated identity, a
    non-admin's refused sync as refused (with the reason); over HTTP only an admin reads the
    log (a user: 403, nobody: 401); the file is mode 600, the deployment's one log."""
    assert indexer.team is not None
    admin, alice = indexer.clients["root"], indexer.clients["alice"]
    note = base64.b64encode(b"# Audited\n\nThe audited numbat memo.\n").decode()
    added = run(admin, "indexer", action="add", uploads=[{"name": "audited.md", "content": note}])
    assert added["result"]["added"] == 1
    assert "deleted" in run(admin, "indexer", action="sync")["result"]
    status, _ = refusal(lambda: run(alice, "indexer", action="sync"))
    assert status == 403
    assert_audited(indexer.url, indexer.team, upload="audited.md")
    log = indexer.root / "audit.jsonl"  # the deployment's one log, as its operator named it
    assert log.is_file()
    assert stat.S_IMODE(log.stat().st_mode) == 0o600


def assert_audited(url: str, team: Team, *, upload: str) -> None:
    """What both runtimes' audit logs must show of the calls above, and to whom."""
    answer = httpx.get(f"{url}/audit", params={"limit": 1000}, headers=team.headers("root"))
    assert answer.status_code == 200, answer.text
    records = answer.json()["items"]
    assert answer.json()["damaged"] == 0
    added = [r for r in records if r["action"] == "add" and upload in r.get("uploads", [])]
    assert added and added[-1]["who"] == "api_key:root" and added[-1]["result"] == "ok", records
    assert added[-1]["summary"]["added"] == 1 and added[-1]["time"].endswith("+00:00")
    synced = [r for r in records if r["action"] == "sync" and r["result"] == "ok"]
    assert synced and synced[-1]["who"] == "api_key:root", records
    refused = [r for r in records if r["who"] == "api_key:alice"]
    assert refused and refused[-1]["action"] == "sync", records
    assert refused[-1]["result"] == "refused" and "only admins" in refused[-1]["reason"]
    assert "numbat" not in json.dumps(records)  # an upload's name, never its content
    alice = httpx.get(f"{url}/audit", headers=team.headers("alice"))
    assert alice.status_code == 403, alice.text
    assert "numbat" not in alice.text and "audited.md" not in alice.text
    assert httpx.get(f"{url}/audit").status_code == 401
