"""The GitLab connector through the real python-gitlab against a loopback stub of GitLab's REST
API v4 (tests/gitlab_stub.py): a full load over linked pages, cited by the item's and notes'
links, system and internal notes left out; a sync that reads only the issue that changed and
prunes a deleted one; a member removed at the source loses the private project at the next
permission-only sync and the next full sync, without one text embedded again, while a Guest
never reads it; a confidential issue read only by members with Reporter access, its author
and assignees, public project or not; members that cannot be read make documents no one's;
a 429 waited out within a budget; a 401 in one line that loses nothing; a redirect not
followed; a sync interrupted mid-way (an exception on the second changed item, or kill -9 of
`footnote sync` while it waits for one) resuming with no duplicate chunk; the token in no
output, file or audit line."""

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
from footnote.ingest.connectors import gitlab as gitlab_connector
from footnote.ingest.connectors.base import ConnectorError
from footnote.ingest.connectors.gitlab import GitlabConnector, parse_source, served
from footnote.ingest.source_policy import SourceRefused
from footnote.store.types import Caller
from footnote.tools.search import SearchRequest, search
from tests.conftest import RunCli
from tests.gitlab_stub import GitlabStub, StubItem, StubProject, stamp
from tests.killed_sync import chunks_per_document, sync_held

TOKEN = "glpat-stubTOKENthatMustNeverBeShown0123"
SOURCE = "gitlab://acme/vault"
ISSUES = [f"acme/vault/-/issues/{n}" for n in range(1, 6)]
EVERY_DOCUMENT = [*ISSUES, "acme/vault/-/merge_requests/1"]
READERS = ["engineering", "user:alice", "user:bob", "user:gitlab:dave"]


def cursor(minute: int) -> str:
    """The checkpoint GitLab's update time `stamp(minute)` becomes."""
    return stamp(minute).replace(".000Z", "Z")


@pytest.fixture
def stub(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[GitlabStub]:
    """A private project: alice (octo on GitLab, Maintainer), bob (Reporter) and dave
    (Developer, whom the identity map does not name) read it, gus is a Guest; it is shared
    with acme/platform as Reporter and acme/visitors as Guest. Four issues, a confidential
    one by erin assigned to gus, and a merge request; issue 2 has a note, a system note and
    an internal note."""
    server = GitlabStub(TOKEN).start()
    project = StubProject(
        42,
        "acme/vault",
        members={"octo": 40, "bob": 20, "dave": 30, "gus": 10},
        shared_with_groups={"acme/platform": 20, "acme/visitors": 10},
    )
    topics = ["wombat rotation", "pager duty", "key escrow", "badger audit"]
    for iid, topic in enumerate(topics, start=1):
        project.issues[iid] = StubItem(
            iid, f"About {topic}", f"We discuss {topic} here.", "octo", stamp(iid)
        )
    project.issues[5] = StubItem(
        5, "Salary bands", "The salary bands for 2027.", "erin", stamp(5),
        confidential=True, assignees=["gus"],
    )  # fmt: skip
    project.merge_requests[1] = StubItem(
        1, "Vault unsealing", "This changes vault unsealing.", "bob", stamp(6), merge=True
    )
    server.projects["acme/vault"] = project
    server.add_note(project.issues[2], "bob", "The pager rotates among the quokkas weekly.", 8)
    server.add_note(project.issues[2], "octo", "changed milestone to %kangaroo", 9, system=True)
    server.add_note(project.issues[2], "octo", "Internal: the quokka roster is secret.", 10,
                    internal=True)  # fmt: skip
    mapping = tmp_path / "identities.json"
    mapping.write_text(
        json.dumps(
            {
                "gitlab:octo": "alice",
                "gitlab:bob": "bob",
                "gitlab:gus": "gus",
                "gitlab:erin": "erin",
                "gitlab-group:acme/platform": "engineering",
                "gitlab-group:acme/visitors": "visitors",
            }
        )
    )
    monkeypatch.setenv("GITLAB_TOKEN", TOKEN)
    monkeypatch.setenv("FOOTNOTE_GITLAB_API", server.base)
    monkeypatch.setenv("FOOTNOTE_IDENTITY_MAP", str(mapping))
    monkeypatch.setenv("FOOTNOTE_AUDIT_LOG", str(tmp_path / "audit.jsonl"))
    yield server
    server.stop()


def hits(index: Path, query: str, *groups: str) -> list[Any]:
    caller = Caller.of_groups(list(groups)) if groups else Caller.operator()
    request = SearchRequest(query=query, index_dir=str(index), k=20, stage="bm25", caller=caller)
    return [h.chunk for h in search(request)]


def note_requests(stub: GitlabStub) -> list[str]:
    """The notes listings read, each once however many pages it took."""
    return sorted({r.split("?")[0] for r in stub.requests if r.split("?")[0].endswith("/notes")})


def test_a_full_load_reads_every_page_and_cites_items_and_notes(
    stub: GitlabStub, tmp_path: Path
) -> None:
    index = tmp_path / "index"
    summary = corpus.add(index, [SOURCE], allow_private=True)

    assert sorted(summary.added) == EVERY_DOCUMENT
    assert not summary.failed and not summary.restricted, (summary.failed, summary.restricted)
    listings = [r for r in stub.requests if r.startswith("/projects/42/issues?")]
    assert any("page=3" in r for r in listings), "the listing followed its Link headers"
    assert note_requests(stub) == ["/projects/42/issues/2/notes"]
    assert summary.checkpoints[SOURCE]["cursor"] == cursor(10)

    (note,) = [c for c in hits(index, "quokkas") if "quokkas" in c.text]
    assert note.url == "https://gitlab.example/acme/vault/-/issues/2#note_7001"
    assert note.metadata["author"] == "bob"
    assert note.access == READERS, "members with Reporter access or more, not the Guest"
    assert hits(index, "roster") == [] and hits(index, "kangaroo") == [], (
        "internal and system notes are left out"
    )
    opening = next(c for c in hits(index, "unsealing") if "merge_requests" in c.source)
    assert opening.url == "https://gitlab.example/acme/vault/-/merge_requests/1"
    assert opening.title == "Merge request !1: Vault unsealing"
    assert hits(index, "wombat", "user:gus") == [] and hits(index, "wombat", "visitors") == []


def test_a_sync_reads_only_the_changed_issue_and_prunes_the_deleted_one(
    stub: GitlabStub, tmp_path: Path
) -> None:
    index = tmp_path / "index"
    corpus.add(index, [SOURCE], allow_private=True)
    project = stub.projects["acme/vault"]
    stub.add_note(project.issues[3], "octo", "Escrow moves to the numbat vault.", 30)
    del project.issues[4]
    stub.requests.clear()

    summary = corpus.sync(index, allow_private=True)

    assert summary.updated == ["acme/vault/-/issues/3"]
    assert summary.deleted == ["acme/vault/-/issues/4"]
    assert note_requests(stub) == ["/projects/42/issues/3/notes"]
    assert any("updated_after=" + cursor(10).replace(":", "%3A") in r for r in stub.requests)
    assert [c.source for c in hits(index, "numbat")] == ["acme/vault/-/issues/3"]
    assert hits(index, "badger") == []
    assert summary.checkpoints[SOURCE]["cursor"] == cursor(30)


def test_a_member_removed_loses_the_project_at_the_next_permission_only_sync(
    stub: GitlabStub, tmp_path: Path, run_cli: RunCli
) -> None:
    index = tmp_path / "index"
    corpus.add(index, [SOURCE], allow_private=True)
    assert hits(index, "wombat", "user:bob"), "bob reads the project"

    del stub.projects["acme/vault"].members["bob"]
    stub.requests.clear()
    summary = corpus.sync_permissions(index)

    assert (summary.checked, len(summary.changed), summary.embedded_texts) == (6, 6, 0)
    assert summary.changed["acme/vault/-/issues/1"] == ["engineering", "user:alice",
                                                       "user:gitlab:dave"]  # fmt: skip
    assert note_requests(stub) == [], "no note was read"
    assert hits(index, "wombat", "user:bob") == [] and hits(index, "quokkas", "user:bob") == []
    assert [c.source for c in hits(index, "wombat", "user:alice")] == ["acme/vault/-/issues/1"]
    as_bob = run_cli(
        "search", "wombat", "--stage", "bm25", "--groups", "user:bob", "--json", "--index", index
    )
    assert as_bob.returncode == 0 and json.loads(as_bob.stdout) == [], as_bob.stderr


def test_a_member_removed_loses_the_project_at_the_next_sync_with_nothing_embedded(
    stub: GitlabStub, tmp_path: Path
) -> None:
    index = tmp_path / "index"
    corpus.add(index, [SOURCE], allow_private=True)

    del stub.projects["acme/vault"].members["bob"]
    summary = corpus.sync(index, allow_private=True)

    assert sorted(summary.updated) == EVERY_DOCUMENT and summary.embedded_texts == 0, (
        "re-published, not re-embedded"
    )
    assert hits(index, "wombat", "user:bob") == []
    assert hits(index, "wombat", "engineering"), "the shared group still reads it"


def test_a_confidential_issue_is_read_by_reporters_its_author_and_assignees(
    stub: GitlabStub, tmp_path: Path
) -> None:
    stub.projects["acme/vault"].visibility = "public"
    index = tmp_path / "index"
    corpus.add(index, [SOURCE], allow_private=True)

    (salary,) = [c for c in hits(index, "salary") if c.source == "acme/vault/-/issues/5"]
    assert salary.access == sorted([*READERS, "user:erin", "user:gus"])
    assert hits(index, "salary", "everyone") == [], "a public project's confidential issue"
    assert hits(index, "salary", "user:gus"), "the Guest reads the issue assigned to them"
    assert hits(index, "wombat", "user:gus"), "and, the project being public, the rest"
    assert [c.access for c in hits(index, "wombat", "everyone")] == [["everyone"]]


def test_members_that_cannot_be_read_make_the_documents_no_ones(
    stub: GitlabStub, tmp_path: Path
) -> None:
    project = stub.projects["acme/vault"]
    project.members_status = 403
    index = tmp_path / "index"
    summary = corpus.add(index, [SOURCE], allow_private=True)

    assert sorted(summary.restricted) == EVERY_DOCUMENT
    assert "(403)" in summary.restricted["acme/vault/-/issues/1"]
    assert hits(index, "wombat", *READERS) == []
    assert hits(index, "wombat"), "an admin still sees them"
    assert len(corpus.sync(index, allow_private=True).restricted) == 6, "listed at every sync"

    project.visibility = "public"
    public = corpus.add(tmp_path / "public", [SOURCE], allow_private=True)
    assert list(public.restricted) == ["acme/vault/-/issues/5"], "only the confidential issue"


def test_a_public_project_is_read_by_everyone_even_anonymously(
    stub: GitlabStub, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    stub.projects["acme/vault"].visibility = "public"
    monkeypatch.delenv("GITLAB_TOKEN")
    index = tmp_path / "index"
    summary = corpus.add(index, [SOURCE], allow_private=True)

    assert sorted(summary.added) == [*ISSUES[:4], EVERY_DOCUMENT[-1]], "no confidential issue"
    assert [c.access for c in hits(index, "wombat", "everyone")] == [["everyone"]]
    assert not any("/members" in r for r in stub.requests)


def test_a_429_is_waited_out_and_the_sync_goes_on(stub: GitlabStub, tmp_path: Path) -> None:
    stub.rate_limit_once = "/projects/42/issues"
    started = time.monotonic()
    summary = corpus.add(tmp_path / "index", [SOURCE], allow_private=True)

    assert len(summary.added) == 6 and not summary.failed
    assert time.monotonic() - started >= 1, "Retry-After: 1 was honoured"
    assert stub.rate_limit_once is None


def test_a_wait_longer_than_the_budget_stops_with_one_line(stub: GitlabStub) -> None:
    stub.rate_limit_once = "/projects/"
    connector = GitlabConnector(parse_source(SOURCE), api=stub.base, budget_s=0.5)
    with pytest.raises(ConnectorError, match="rate limit asks for a wait of 1 s"):
        connector.full_load()


def test_an_expired_token_gives_one_line_and_loses_nothing(
    stub: GitlabStub, tmp_path: Path, run_cli: RunCli, monkeypatch: pytest.MonkeyPatch
) -> None:
    index = tmp_path / "index"
    added = run_cli("add", SOURCE, "--allow-private", "--index", index)
    assert added.returncode == 0, added.stderr
    monkeypatch.setenv("GITLAB_TOKEN", "expired-token")

    synced = run_cli("sync", "--index", index)

    assert synced.returncode == 1
    output = synced.stdout + synced.stderr
    assert "Traceback" not in output
    (line,) = [x for x in output.splitlines() if "401 Unauthorized" in x]
    assert "$GITLAB_TOKEN" in line and SOURCE in line
    assert len(hits(index, "wombat")) == 1, "what was indexed stays"


def test_a_redirect_is_not_followed(stub: GitlabStub, tmp_path: Path) -> None:
    stub.redirect_once = "/projects/42/issues"
    summary = corpus.add(tmp_path / "index", [SOURCE], allow_private=True)
    assert "a redirect, which is not followed" in summary.failed[SOURCE]
    assert not summary.added


def test_a_sync_interrupted_mid_way_resumes_with_no_duplicate_chunk(
    stub: GitlabStub, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    index = tmp_path / "index"
    first = corpus.add(index, [SOURCE], allow_private=True).checkpoints[SOURCE]
    project = stub.projects["acme/vault"]
    for item, minute in ((project.issues[1], 20), (project.issues[2], 21),
                         (project.merge_requests[1], 22)):  # fmt: skip
        stub.add_note(item, "octo", f"Revision {minute} of the runbook.", minute)
    record = gitlab_connector._item_record
    reads: list[Any] = []

    def crash_after_one(item: Any) -> dict[str, Any]:
        if reads:
            raise KeyboardInterrupt  # the process dies on the second item
        reads.append(item)
        return record(item)

    with monkeypatch.context() as patch:
        patch.setattr(gitlab_connector, "_item_record", crash_after_one)
        with pytest.raises(KeyboardInterrupt):
            corpus.sync(index, allow_private=True)
    (root,) = corpus.sources(index)["sources"]
    assert root["checkpoint"]["cursor"] == first["cursor"], "nothing published"

    resumed = corpus.sync(index, allow_private=True)

    assert sorted(resumed.updated) == [ISSUES[0], ISSUES[1], EVERY_DOCUMENT[-1]]
    chunks = hits(index, "runbook")
    counts = Counter((c.source, c.text) for c in chunks)
    assert max(counts.values()) == 1, counts
    assert len([c for c in chunks if "Revision" in c.text]) == 3


def test_a_sync_killed_by_sigkill_mid_way_resumes_with_no_duplicate_chunk(
    stub: GitlabStub, tmp_path: Path
) -> None:
    """kill -9 of `footnote sync` while it waits for the notes of the second changed item,
    the first one read with its notes."""
    index = tmp_path / "index"
    first = corpus.add(index, [SOURCE], allow_private=True).checkpoints[SOURCE]
    project = stub.projects["acme/vault"]
    for item, minute in ((project.issues[1], 20), (project.issues[2], 21),
                         (project.merge_requests[1], 22)):  # fmt: skip
        stub.add_note(item, "octo", f"Revision {minute} of the runbook.", minute)
    stub.requests.clear()
    stub.hold = "/projects/42/issues/2/notes"
    env = {
        "GITLAB_TOKEN": TOKEN,
        "FOOTNOTE_GITLAB_API": stub.base,
        "FOOTNOTE_IDENTITY_MAP": os.environ["FOOTNOTE_IDENTITY_MAP"],
    }
    with sync_held(
        index,
        env,
        tmp_path / "sync.err",
        held=stub.arrived,
        waiting_for="issue 2's notes",
        release=stub.let_go,
    ):
        assert note_requests(stub) == [
            "/projects/42/issues/1/notes",
            "/projects/42/issues/2/notes",
        ], "killed while waiting for the second changed item, the first one read"
    (root,) = corpus.sources(index)["sources"]
    assert root["checkpoint"]["cursor"] == first["cursor"], "nothing published"
    stub.requests.clear()

    resumed = corpus.sync(index, allow_private=True)

    assert not resumed.failed, resumed.failed
    assert sorted(resumed.updated) == [ISSUES[0], ISSUES[1], EVERY_DOCUMENT[-1]]
    assert not resumed.added and not resumed.deleted
    assert note_requests(stub) == [
        "/projects/42/issues/1/notes",
        "/projects/42/issues/2/notes",
        "/projects/42/merge_requests/1/notes",
    ], "only the changed items are read again"
    assert resumed.checkpoints[SOURCE]["cursor"] == cursor(22)
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


def test_the_token_is_in_no_output_file_or_audit_line(
    stub: GitlabStub, tmp_path: Path, run_cli: RunCli
) -> None:
    index = tmp_path / "index"
    outputs = [
        run_cli("add", SOURCE, "--allow-private", "--index", index),
        run_cli("sources", "--index", index),
        run_cli("sources", "--json", "--index", index),
    ]
    assert all(o.returncode == 0 for o in outputs), [o.stderr for o in outputs]
    assert f"gitlab {SOURCE} (6 documents, updated {cursor(10)}, synced" in outputs[1].stdout
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
    stub: GitlabStub, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("GITLAB_TOKEN")
    monkeypatch.setenv("ACME_GL", TOKEN)
    index = tmp_path / "index"
    summary = corpus.add(index, [f"{SOURCE}?token=ACME_GL&mrs=0"], allow_private=True)
    assert sorted(summary.added) == ISSUES
    (root,) = corpus.sources(index)["sources"]
    assert root["id"] == f"{SOURCE}?mrs=0&token=ACME_GL"

    monkeypatch.delenv("ACME_GL")
    again = corpus.sync(index, allow_private=True)
    assert again.failed == {root["id"]: "$ACME_GL is not set (the GitLab token)"}


def test_a_self_managed_instance_is_named_by_its_host(stub: GitlabStub, tmp_path: Path) -> None:
    value = f"gitlab+{stub.base}/acme/vault"
    assert corpus.add(tmp_path / "refused", [value]).failed[value].startswith("127.0.0.1")
    summary = corpus.add(tmp_path / "index", [value], allow_private=True)
    assert sorted(summary.added) == EVERY_DOCUMENT and not summary.failed


def test_a_served_admin_may_name_only_the_operators_gitlab_and_token(stub: GitlabStub) -> None:
    assert served(SOURCE, str) == SOURCE
    ours = f"gitlab+{stub.base}/acme/vault?issues=0"
    assert served(ours, str) == ours, "the host in $FOOTNOTE_GITLAB_API"
    for value in (f"{SOURCE}?token=AWS_SECRET_ACCESS_KEY", "gitlab+https://evil.example/a/b"):
        with pytest.raises(ConnectorError, match="a served add cannot set token= or another"):
            served(value, str)


@pytest.mark.parametrize(
    "value",
    [
        "gitlab://acme",
        "gitlab://acme/../vault",
        "gitlab://acme/vault/-/issues",
        "gitlab://acme/vault?issues=0&mrs=0",
        "gitlab://acme/vault?since=1",
        "gitlab://acme/vault?token=lower",
        "gitlab://acme/vault#x",
        "gitlab+https://gitlab.example/acme",
        "gitlab+https://user:pw@gitlab.example/acme/vault",
        "gitlab+http://gitlab.example/acme/vault",
    ],
)
def test_a_malformed_source_is_refused_in_one_line(value: str) -> None:
    with pytest.raises(ConnectorError):
        parse_source(value)


def test_without_python_gitlab_the_error_names_the_extra(
    stub: GitlabStub, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "gitlab", None)
    connector = GitlabConnector(parse_source(SOURCE), api=stub.base)
    with pytest.raises(ConnectorError, match="needs python-gitlab"):
        connector.full_load()


@pytest.mark.parametrize(
    ("content", "reason"),
    [('{"gitlab:octo": ["alice"]}', "expected an object like"), ("{no", "not valid JSON")],
)
def test_a_malformed_identity_map_fails_the_sync_in_one_line(
    stub: GitlabStub, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, content: str, reason: str
) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text(content)
    monkeypatch.setenv("FOOTNOTE_IDENTITY_MAP", str(bad))
    summary = corpus.add(tmp_path / "index", [SOURCE], allow_private=True)
    assert not summary.added
    assert summary.failed[SOURCE].startswith("$FOOTNOTE_IDENTITY_MAP (")
    assert reason in summary.failed[SOURCE]


def test_a_served_admin_adds_a_project_but_not_its_token(stub: GitlabStub, tmp_path: Path) -> None:
    context = IndexerContext(
        index_dir=str(tmp_path / "index"), upload_dir=str(tmp_path / "uploads"), allow_private=True
    )
    admin: Any = {"configurable": {"langgraph_auth_user": {"identity": "root", "admin": True}}}
    with pytest.raises(SourceRefused, match="a served add cannot set token="):
        indexer_graph.invoke(
            {"action": "add", "sources": [f"{SOURCE}?token=HOME"]}, admin, context=context
        )
    added = indexer_graph.invoke({"action": "add", "sources": [SOURCE]}, admin, context=context)
    assert added["result"]["added"] == 6 and not added["result"]["errors"]
