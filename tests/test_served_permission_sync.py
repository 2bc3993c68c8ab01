"""A permission-only sync from the served deployment's admin surfaces, against the loopback
GitHub stub (tests/github_stub.py): the indexer graph's sync with `permissions_only` (as
the server runs it, for the caller it names) and the MCP admin tool `sync_sources` with
`permissions_only`. A collaborator removed at the source loses the repository with no issue
read and nothing embedded; the run is audited as the command line's is; a non-admin is
refused; a value that is not true or false is refused and changes nothing."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from footnote.graph.context import Context
from footnote.graph.indexer import IndexerContext, NotAllowed
from footnote.graph.indexer import graph as indexer_graph
from footnote.ingest import corpus
from footnote.mcp.stdio import local_tools
from footnote.mcp.tools import BY_NAME, McpSession, ToolRefused
from footnote.store.types import Caller
from footnote.tools.search import SearchRequest, search
from tests.github_stub import GithubStub, StubIssue, StubRepo, stamp

pytestmark = pytest.mark.integration

TOKEN = "ghp_stubTOKENthatMustNeverBeShown0123456789"
SOURCE = "github://acme/vault"
ADMIN: Any = {
    "configurable": {
        "langgraph_auth_user": {"identity": "root", "admin": True, "auth_method": "api_key"}
    }
}
ALICE: Any = {
    "configurable": {
        "langgraph_auth_user": {"identity": "alice", "groups": ["eng"], "auth_method": "api_key"}
    }
}


@pytest.fixture
def stub(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[GithubStub]:
    """A private repository read by alice (octo on GitHub), bob and the platform team (eng),
    with three issues, indexed at `tmp_path / "index"`."""
    server = GithubStub(TOKEN).start()
    repo = StubRepo(
        "acme", "vault", private=True, collaborators=["octo", "bob"], teams=["platform"]
    )
    for number, topic in enumerate(["wombat rotation", "pager duty", "key escrow"], start=1):
        repo.issues[number] = StubIssue(
            number, f"About {topic}", f"We discuss {topic} here.", "octo", stamp(number)
        )
    server.repos["acme/vault"] = repo
    mapping = tmp_path / "identities.json"
    mapping.write_text(
        json.dumps(
            {"github:octo": "alice", "github:bob": "bob", "github-team:acme/platform": "eng"}
        )
    )
    monkeypatch.setenv("GITHUB_TOKEN", TOKEN)
    monkeypatch.setenv("FOOTNOTE_GITHUB_API", server.base)
    monkeypatch.setenv("FOOTNOTE_IDENTITY_MAP", str(mapping))
    monkeypatch.setenv("FOOTNOTE_AUDIT_LOG", str(tmp_path / "audit.jsonl"))
    monkeypatch.setenv("FOOTNOTE_ALLOW_PRIVATE_URLS", "1")  # the stub is on loopback
    corpus.add(tmp_path / "index", [SOURCE], allow_private=True)
    yield server
    server.stop()


def context_for(tmp_path: Path) -> IndexerContext:
    return IndexerContext(
        index_dir=str(tmp_path / "index"), upload_dir=str(tmp_path / "uploads"), allow_private=True
    )


def readable(index: Path, query: str, *groups: str) -> list[str]:
    request = SearchRequest(
        query=query, index_dir=str(index), k=20, stage="bm25", caller=Caller.of_groups(list(groups))
    )
    return [h.chunk.source for h in search(request)]


def listed(index: Path) -> dict[str, Any]:
    """Each document's last ingest: a document read again would show a new one."""
    return {d["source"]: d["ingested_at"] for d in corpus.sources(index)["documents"]}


def audit_records(tmp_path: Path) -> list[dict[str, Any]]:
    log = tmp_path / "audit.jsonl"
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


def mcp_tools(tmp_path: Path) -> Any:
    return local_tools(Context(index_dir=str(tmp_path / "index")))


def mcp_sync(tmp_path: Path, caller: Caller, **arguments: Any) -> Any:
    session = McpSession(caller)
    return asyncio.run(mcp_tools(tmp_path).call(session, "sync_sources", arguments))


def assert_revoked_with_nothing_read(
    stub: GithubStub, tmp_path: Path, result: dict[str, Any], before: dict[str, Any]
) -> None:
    index = tmp_path / "index"
    assert result["permissions_only"] is True, result
    checked = (result["checked"], result["access_changed"], result["embedded_texts"])
    assert checked == (3, 3, 0), result
    assert {"source": "acme/vault/issues/1", "access": ["eng", "user:alice"]} in result["changes"]
    assert not any("/issues" in r for r in stub.requests), "no issue or comment was read"
    assert readable(index, "wombat", "user:bob") == []
    assert readable(index, "wombat", "user:alice") == ["acme/vault/issues/1"]
    assert listed(index) == before, "no document was read or embedded again"


def test_a_served_admin_runs_a_permission_only_sync_and_it_is_audited(
    stub: GithubStub, tmp_path: Path
) -> None:
    index = tmp_path / "index"
    assert readable(index, "wombat", "user:bob"), "bob reads the repository"
    before = listed(index)
    stub.repos["acme/vault"].collaborators.remove("bob")
    stub.requests.clear()

    output = indexer_graph.invoke(
        {"action": "sync", "permissions_only": True}, ADMIN, context=context_for(tmp_path)
    )

    assert_revoked_with_nothing_read(stub, tmp_path, output["result"], before)
    (record,) = [r for r in audit_records(tmp_path) if r["action"] == "sync-permissions"]
    assert (record["who"], record["result"]) == ("api_key:root", "ok"), record
    assert record["summary"]["access_changed"] == 3 and record["summary"]["embedded_texts"] == 0
    assert not [r for r in audit_records(tmp_path) if r["action"] == "sync"], "no full sync"


def test_the_mcp_admin_tool_runs_a_permission_only_sync(stub: GithubStub, tmp_path: Path) -> None:
    before = listed(tmp_path / "index")
    stub.repos["acme/vault"].collaborators.remove("bob")
    stub.requests.clear()

    synced = mcp_sync(tmp_path, Caller.operator(), permissions_only=True)

    assert_revoked_with_nothing_read(stub, tmp_path, synced.result, before)
    actions = [r["action"] for r in audit_records(tmp_path)]
    assert actions == ["sync-permissions"], actions
    offered = BY_NAME["sync_sources"].definition().inputSchema["properties"]
    assert offered["permissions_only"]["type"] == "boolean", "a model is offered the choice"


def test_a_non_admin_is_refused_and_the_refusal_is_audited(
    stub: GithubStub, tmp_path: Path
) -> None:
    index = tmp_path / "index"
    stub.repos["acme/vault"].collaborators.remove("bob")
    version = corpus.sources(index)["version"]

    with pytest.raises(NotAllowed, match="only admins"):
        indexer_graph.invoke(
            {"action": "sync", "permissions_only": True}, ALICE, context=context_for(tmp_path)
        )
    with pytest.raises(ToolRefused, match="no tool named"):
        mcp_sync(tmp_path, Caller.of_groups(["eng"]), permissions_only=True)

    assert corpus.sources(index)["version"] == version and readable(index, "wombat", "user:bob")
    (record,) = audit_records(tmp_path)
    assert (record["who"], record["action"], record["result"]) == (
        "api_key:alice",
        "sync-permissions",
        "refused",
    ), record


@pytest.mark.parametrize(
    ("run_input", "reason"),
    [
        ({"action": "sync", "permissions_only": "yes"}, "takes true or false, not 'yes'"),
        ({"action": "sync", "permissions_only": 1}, "takes true or false, not '1'"),
        ({"action": "sync", "permissions_only": None}, "takes true or false, not 'None'"),
        ({"action": "remove", "sources": ["*"], "permissions_only": True}, "action 'sync'"),
    ],
)
def test_an_invalid_choice_is_refused_and_changes_nothing(
    stub: GithubStub, tmp_path: Path, run_input: dict[str, Any], reason: str
) -> None:
    index = tmp_path / "index"
    stub.repos["acme/vault"].collaborators.remove("bob")
    version = corpus.sources(index)["version"]
    stub.requests.clear()

    with pytest.raises(ValueError, match=reason):
        indexer_graph.invoke(run_input, ADMIN, context=context_for(tmp_path))

    assert corpus.sources(index)["version"] == version and stub.requests == []
    (record,) = audit_records(tmp_path)
    assert record["result"] == "error" and "permissions_only" in record["reason"], record


@pytest.mark.parametrize("value", ["yes", "true", 1, None])
def test_the_mcp_tool_refuses_a_choice_that_is_not_true_or_false(
    stub: GithubStub, tmp_path: Path, value: Any
) -> None:
    version = corpus.sources(tmp_path / "index")["version"]
    with pytest.raises(ToolRefused, match="argument 'permissions_only': Input should be"):
        mcp_sync(tmp_path, Caller.operator(), permissions_only=value)
    assert corpus.sources(tmp_path / "index")["version"] == version
    assert audit_records(tmp_path) == [], "refused before anything ran"
