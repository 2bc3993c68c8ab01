"""The GitHub connector through the real PyGithub against a loopback stub of GitHub's REST API
(tests/github_stub.py): a full load over linked pages, cited by the issue's and comments'
links; a sync that reads only the issue that changed and prunes a deleted one; a
collaborator removed at the source loses the private repository at the next sync (search and
the command line) while another keeps it, without one text embedded again; a 429 waited out;
a 401 in one line that loses nothing; kill -9 of `footnote sync` while it waits for the
second changed issue's comments, resumed with no duplicate chunk; the token in no output,
file or audit line."""

from __future__ import annotations

import json
import os
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from footnote.graph.indexer import IndexerContext
from footnote.graph.indexer import graph as indexer_graph
from footnote.ingest import corpus
from footnote.ingest.connectors.base import ConnectorError
from footnote.ingest.connectors.github import GithubConnector, parse_source, served
from footnote.ingest.source_policy import SourceRefused
from footnote.store.types import Caller
from footnote.tools.search import SearchRequest, search
from tests.conftest import RunCli
from tests.github_stub import GithubStub, StubIssue, StubRepo, stamp
from tests.killed_sync import chunks_per_document, sync_held

TOKEN = "ghp_stubTOKENthatMustNeverBeShown0123456789"
SOURCE = "github://acme/vault"


@pytest.fixture
def stub(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[GithubStub]:
    """A private repository: alice (octo on GitHub), bob and dave (whom the identity map
    does not name) collaborate, the platform team reads it; four issues and a pull request,
    issue 2 with a comment."""
    server = GithubStub(TOKEN).start()
    repo = StubRepo(
        "acme", "vault", private=True, collaborators=["octo", "bob", "dave"], teams=["platform"]
    )
    topics = ["wombat rotation", "pager duty", "key escrow", "badger audit", "vault unsealing"]
    for number, topic in enumerate(topics, start=1):
        repo.issues[number] = StubIssue(
            number, f"About {topic}", f"We discuss {topic} here.", "octo", stamp(number),
            pull=number == 5,
        )  # fmt: skip
    server.repos["acme/vault"] = repo
    server.add_comment(repo, 2, "bob", "The pager rotates among the quokkas weekly.", 10)
    mapping = tmp_path / "identities.json"
    mapping.write_text(
        json.dumps(
            {
                "github:octo": "alice",
                "github:bob": "bob",
                "github-team:acme/platform": "engineering",
            }
        )
    )
    monkeypatch.setenv("GITHUB_TOKEN", TOKEN)
    monkeypatch.setenv("FOOTNOTE_GITHUB_API", server.base)
    monkeypatch.setenv("FOOTNOTE_IDENTITY_MAP", str(mapping))
    monkeypatch.setenv("FOOTNOTE_AUDIT_LOG", str(tmp_path / "audit.jsonl"))
    yield server
    server.stop()


def hits(index: Path, query: str, *groups: str) -> list[Any]:
    caller = Caller.of_groups(list(groups)) if groups else Caller.operator()
    request = SearchRequest(query=query, index_dir=str(index), k=20, stage="bm25", caller=caller)
    return [h.chunk for h in search(request)]


def comment_requests(stub: GithubStub) -> list[str]:
    return [r.split("?")[0] for r in stub.requests if r.split("?")[0].endswith("/comments")]


def test_a_full_load_reads_every_page_and_cites_issues_and_comments(
    stub: GithubStub, tmp_path: Path
) -> None:
    index = tmp_path / "index"
    summary = corpus.add(index, [SOURCE], allow_private=True)

    assert sorted(summary.added) == [
        "acme/vault/issues/1", "acme/vault/issues/2", "acme/vault/issues/3",
        "acme/vault/issues/4", "acme/vault/pull/5",
    ]  # fmt: skip
    assert not summary.failed, summary.failed
    listings = [r for r in stub.requests if r.startswith("/repos/acme/vault/issues?")]
    assert any("page=3" in r for r in listings), "the listing followed its Link headers"
    assert comment_requests(stub) == ["/repos/acme/vault/issues/2/comments"]
    assert summary.checkpoints[SOURCE]["cursor"] == stamp(10)

    (comment,) = [c for c in hits(index, "quokkas") if "quokkas" in c.text]
    assert comment.url == "https://github.com/acme/vault/issues/2#issuecomment-9000"
    assert comment.metadata["author"] == "bob"
    assert comment.access == ["engineering", "user:alice", "user:bob", "user:github:dave"]
    opening = next(c for c in hits(index, "unsealing") if c.source == "acme/vault/pull/5")
    assert opening.url == "https://github.com/acme/vault/pull/5"
    assert opening.title == "Pull request #5: About vault unsealing"


def test_a_sync_reads_only_the_changed_issue_and_prunes_the_deleted_one(
    stub: GithubStub, tmp_path: Path
) -> None:
    index = tmp_path / "index"
    corpus.add(index, [SOURCE], allow_private=True)
    repo = stub.repos["acme/vault"]
    stub.add_comment(repo, 3, "octo", "Escrow moves to the numbat vault.", 30)
    del repo.issues[4]
    stub.requests.clear()

    summary = corpus.sync(index, allow_private=True)

    assert summary.updated == ["acme/vault/issues/3"]
    assert summary.deleted == ["acme/vault/issues/4"]
    assert comment_requests(stub) == ["/repos/acme/vault/issues/3/comments"]
    assert any("since=" + stamp(10).replace(":", "%3A") in r for r in stub.requests)
    assert [c.source for c in hits(index, "numbat")] == ["acme/vault/issues/3"]
    assert hits(index, "badger") == []


def test_a_sync_killed_by_sigkill_mid_way_resumes_with_no_duplicate_chunk(
    stub: GithubStub, tmp_path: Path
) -> None:
    """kill -9 of `footnote sync` while it waits for the comments of the second changed
    issue, the first one read with its comments."""
    index = tmp_path / "index"
    first = corpus.add(index, [SOURCE], allow_private=True).checkpoints[SOURCE]
    repo = stub.repos["acme/vault"]
    for number, minute in ((1, 20), (3, 21), (4, 22)):
        stub.add_comment(repo, number, "octo", f"Revision {minute} of the runbook.", minute)
    stub.requests.clear()
    stub.hold = "/repos/acme/vault/issues/3/comments"
    env = {
        "GITHUB_TOKEN": TOKEN,
        "FOOTNOTE_GITHUB_API": stub.base,
        "FOOTNOTE_IDENTITY_MAP": os.environ["FOOTNOTE_IDENTITY_MAP"],
    }
    with sync_held(
        index,
        env,
        tmp_path / "sync.err",
        held=stub.arrived,
        waiting_for="issue 3's comments",
        release=stub.let_go,
    ):
        assert comment_requests(stub) == [
            "/repos/acme/vault/issues/1/comments",
            "/repos/acme/vault/issues/3/comments",
        ], "killed while waiting for the second changed issue, the first one read"
    (root,) = corpus.sources(index)["sources"]
    assert root["checkpoint"]["cursor"] == first["cursor"], "nothing published"
    stub.requests.clear()

    resumed = corpus.sync(index, allow_private=True)

    assert not resumed.failed, resumed.failed
    assert sorted(resumed.updated) == [f"acme/vault/issues/{n}" for n in (1, 3, 4)]
    assert not resumed.added and not resumed.deleted
    assert comment_requests(stub) == [
        f"/repos/acme/vault/issues/{n}/comments" for n in (1, 3, 4)
    ], "only the changed issues are read again"
    assert resumed.checkpoints[SOURCE]["cursor"] == stamp(22)
    chunks = hits(index, "runbook")
    counts = Counter((c.source, c.text) for c in chunks)
    assert max(counts.values()) == 1, counts
    assert sorted(c.text for c in chunks if "Revision" in c.text) == [
        f"Revision {minute} of the runbook." for minute in (20, 21, 22)
    ]
    corpus.add(tmp_path / "fresh", [SOURCE], allow_private=True)
    assert chunks_per_document(index) == chunks_per_document(tmp_path / "fresh"), (
        "as many chunks as one clean load"
    )


def test_a_collaborator_removed_at_the_source_loses_the_repository_at_the_next_sync(
    stub: GithubStub, tmp_path: Path, run_cli: RunCli
) -> None:
    index = tmp_path / "index"
    corpus.add(index, [SOURCE], allow_private=True)
    assert hits(index, "wombat", "user:bob"), "bob reads the repository"
    assert hits(index, "wombat") and not hits(index, "wombat", "user:mallory")

    stub.repos["acme/vault"].collaborators.remove("bob")
    summary = corpus.sync(index, allow_private=True)

    assert len(summary.updated) == 5 and summary.embedded_texts == 0, (
        "re-published, not re-embedded"
    )
    assert hits(index, "wombat", "user:bob") == []
    assert [c.source for c in hits(index, "wombat", "user:alice")] == ["acme/vault/issues/1"]
    assert hits(index, "wombat", "engineering"), "the team still reads it"
    as_bob = run_cli(
        "search", "wombat", "--stage", "bm25", "--groups", "user:bob", "--json", "--index", index
    )
    as_alice = run_cli(
        "search", "wombat", "--stage", "bm25", "--groups", "user:alice", "--json", "--index", index
    )
    assert as_bob.returncode == 0 and json.loads(as_bob.stdout) == [], as_bob.stderr
    assert [h["source"] for h in json.loads(as_alice.stdout)] == ["acme/vault/issues/1"]


def test_collaborators_that_cannot_be_read_make_the_documents_no_ones(
    stub: GithubStub, tmp_path: Path
) -> None:
    stub.repos["acme/vault"].collaborators_status = 403
    index = tmp_path / "index"
    summary = corpus.add(index, [SOURCE], allow_private=True)

    assert len(summary.restricted) == 5
    assert "(403)" in summary.restricted["acme/vault/issues/1"]
    assert hits(index, "wombat", "user:alice", "engineering") == []
    assert hits(index, "wombat"), "an admin still sees them"
    assert len(corpus.sync(index, allow_private=True).restricted) == 5, "listed at every sync"


def test_a_public_repository_is_read_by_everyone(stub: GithubStub, tmp_path: Path) -> None:
    stub.repos["acme/vault"].private = False
    index = tmp_path / "index"
    corpus.add(index, [SOURCE], allow_private=True)
    assert [c.access for c in hits(index, "wombat", "everyone")] == [["everyone"]]
    assert not any(r.startswith("/repos/acme/vault/collaborators") for r in stub.requests)


def test_a_429_is_waited_out_and_the_sync_goes_on(stub: GithubStub, tmp_path: Path) -> None:
    stub.rate_limit_once = "/repos/acme/vault/issues"
    started = time.monotonic()
    summary = corpus.add(tmp_path / "index", [SOURCE], allow_private=True)

    assert len(summary.added) == 5 and not summary.failed
    assert time.monotonic() - started >= 1, "Retry-After: 1 was honoured"
    assert stub.rate_limit_once is None


def test_a_wait_longer_than_the_budget_stops_with_one_line(stub: GithubStub) -> None:
    stub.rate_limit_once = "/repos/acme/vault"
    connector = GithubConnector(parse_source(SOURCE), api=stub.base, budget_s=0.5)
    with pytest.raises(ConnectorError, match="rate limit asks for a wait of 1 s"):
        connector.full_load()


def test_bad_credentials_give_one_line_and_lose_nothing(
    stub: GithubStub, tmp_path: Path, run_cli: RunCli, monkeypatch: pytest.MonkeyPatch
) -> None:
    index = tmp_path / "index"
    added = run_cli("add", SOURCE, "--allow-private", "--index", index)
    assert added.returncode == 0, added.stderr
    monkeypatch.setenv("GITHUB_TOKEN", "expired-token")

    synced = run_cli("sync", "--index", index)

    assert synced.returncode == 1
    output = synced.stdout + synced.stderr
    assert "Traceback" not in output
    (line,) = [x for x in output.splitlines() if "Bad credentials" in x]
    assert "$GITHUB_TOKEN" in line and SOURCE in line
    assert len(hits(index, "wombat")) == 1, "what was indexed stays"


def test_the_token_is_in_no_output_file_or_audit_line(
    stub: GithubStub, tmp_path: Path, run_cli: RunCli
) -> None:
    index = tmp_path / "index"
    outputs = [
        run_cli("add", SOURCE, "--allow-private", "--index", index),
        run_cli("sources", "--index", index),
        run_cli("sources", "--json", "--index", index),
    ]
    assert all(o.returncode == 0 for o in outputs), [o.stderr for o in outputs]
    assert (
        f"github github://acme/vault (5 documents, updated {stamp(10)}, synced" in outputs[1].stdout
    ), "listed as a GitHub source, not a repository"
    assert all(TOKEN not in o.stdout + o.stderr for o in outputs)
    context = IndexerContext(
        index_dir=str(index), upload_dir=str(tmp_path / "uploads"), allow_private=True
    )
    admin: Any = {"configurable": {"langgraph_auth_user": {"identity": "root", "admin": True}}}
    synced = indexer_graph.invoke({"action": "sync"}, admin, context=context)["result"]
    assert not synced["errors"], synced
    audit = tmp_path / "audit.jsonl"
    assert '"action": "sync"' in audit.read_text(), "the served sync was audited"
    for path in [audit, *index.rglob("*")]:
        if path.is_file():
            assert TOKEN.encode() not in path.read_bytes(), path


def test_a_token_variable_is_named_not_stored(
    stub: GithubStub, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("GITHUB_TOKEN")
    monkeypatch.setenv("ACME_GH", TOKEN)
    index = tmp_path / "index"
    summary = corpus.add(index, [f"{SOURCE}?token=ACME_GH&pulls=0"], allow_private=True)
    assert len(summary.added) == 4
    (root,) = corpus.sources(index)["sources"]
    assert root["id"] == f"{SOURCE}?pulls=0&token=ACME_GH"

    monkeypatch.delenv("ACME_GH")
    again = corpus.sync(index, allow_private=True)
    assert again.failed == {root["id"]: "$ACME_GH is not set (the GitHub token)"}


def test_the_api_is_the_operators_and_a_loopback_api_needs_allow_private(
    stub: GithubStub, tmp_path: Path
) -> None:
    summary = corpus.add(tmp_path / "index", [SOURCE])
    assert "127.0.0.1" in summary.failed[SOURCE] and not summary.added
    assert served(SOURCE, str) == SOURCE
    for value in (f"{SOURCE}?api=http://10.0.0.1", f"{SOURCE}?token=AWS_SECRET_ACCESS_KEY"):
        with pytest.raises(ConnectorError, match="a served add cannot set api= or token="):
            served(value, str)


@pytest.mark.parametrize(
    "value",
    [
        "github://acme",
        "github://acme/vault/extra",
        "github://acme/..",
        "github://acme/vault?issues=0&pulls=0",
        "github://acme/vault?since=1",
        "github://acme/vault?token=lower",
        "github://acme/vault?api=ftp://host",
        "github://acme/vault?api=https://user:pw@host",
    ],
)
def test_a_malformed_source_is_refused_in_one_line(value: str) -> None:
    with pytest.raises(ConnectorError):
        parse_source(value)


def test_without_pygithub_the_error_names_the_extra(
    stub: GithubStub, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "github", None)
    connector = GithubConnector(parse_source(SOURCE), api=stub.base)
    with pytest.raises(ConnectorError, match="needs PyGithub"):
        connector.full_load()


@pytest.mark.parametrize(
    ("content", "reason"),
    [
        ('{"github:octo": ["alice"]}', "expected an object like"),
        ('{"github:octo": ""}', "expected an object like"),
        ("[]", "expected an object like"),
        ("{not json", "not valid JSON"),
        (None, "cannot be read"),
    ],
)
def test_a_malformed_identity_map_fails_the_sync_in_one_line(
    stub: GithubStub,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    content: str | None,
    reason: str,
) -> None:
    bad = tmp_path / "bad.json"
    if content is not None:
        bad.write_text(content)
    monkeypatch.setenv("FOOTNOTE_IDENTITY_MAP", str(bad))
    summary = corpus.add(tmp_path / "index", [SOURCE], allow_private=True)
    assert not summary.added
    assert summary.failed[SOURCE].startswith("$FOOTNOTE_IDENTITY_MAP (")
    assert reason in summary.failed[SOURCE]


def test_a_served_admin_adds_a_repository_but_not_its_api_or_token(
    stub: GithubStub, tmp_path: Path
) -> None:
    context = IndexerContext(
        index_dir=str(tmp_path / "index"), upload_dir=str(tmp_path / "uploads"), allow_private=True
    )
    admin: Any = {"configurable": {"langgraph_auth_user": {"identity": "root", "admin": True}}}
    with pytest.raises(SourceRefused, match="a served add cannot set api= or token="):
        indexer_graph.invoke(
            {"action": "add", "sources": [f"{SOURCE}?api={stub.base}"]}, admin, context=context
        )
    added = indexer_graph.invoke({"action": "add", "sources": [SOURCE]}, admin, context=context)
    assert added["result"]["added"] == 5 and not added["result"]["errors"]
