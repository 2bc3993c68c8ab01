"""The Jira connector through the real atlassian-python-api client against a loopback stub of
Jira's REST API (tests/atlassian_stub.py): a full load over paged searches, each issue and
each comment cited by its own link; a sync that reads only the issue that changed and prunes
a deleted one; readers from the project's BROWSE_PROJECTS grants (groups, users, project
roles) narrowed by an issue's security level; a reader removed at the source losing the
issue at the next sync; grants that cannot be read making issues no one's; a 429 waited
out; a 401 in one line that loses nothing; a sync interrupted mid-way (an exception on the
second changed issue, or kill -9 of `footnote sync` while it waits for one) resuming with no
duplicate chunk; the credentials in no output or file."""

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
from footnote.ingest.connectors import jira
from footnote.ingest.connectors.base import ConnectorError
from footnote.ingest.connectors.jira import JiraConnector, parse_source, served
from footnote.ingest.source_policy import SourceRefused
from footnote.store.types import Caller
from footnote.tools.search import SearchRequest, search
from tests.atlassian_stub import JiraStub, StubIssue, iso
from tests.conftest import RunCli
from tests.killed_sync import chunks_per_document, sync_held

USER = "footnote-bot"
TOKEN = "ATATT3xFfGF0stubJIRAtokenThatMustNeverBeShown7"
TOPICS = ["wombat rotation", "pager duty", "key escrow", "badger audit", "vault unsealing"]
OPEN = ["engineering", "jira-group:contractors", "user:jira:carol"]


@pytest.fixture
def stub(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[JiraStub]:
    """Project OPS, browsed by the jira-devs group and the Developers role (carol and the
    contractors group). OPS-3, reported by bob, has a security level open to the
    security-team group and the reporter. alice and bob are in jira-devs, alice and frank
    in security-team (frank may not browse the project)."""
    server = JiraStub(USER, TOKEN, "OPS").start()
    server.browse = [
        {"type": "group", "parameter": "jira-devs"},
        {"type": "projectRole", "parameter": "10002"},
    ]
    server.roles["10002"] = [
        {"type": "atlassian-user-role-actor", "name": "carol", "displayName": "Carol"},
        {"type": "atlassian-group-role-actor", "name": "contractors", "displayName": "contractors"},
    ]
    server.levels["10200"] = [
        {"type": "group", "parameter": "security-team"},
        {"type": "reporter"},
    ]
    server.groups = {
        "jira-devs": ["alice", "bob"],
        "contractors": ["erin"],
        "security-team": ["alice", "frank"],
    }
    server.emails = {"bob": "bob@example.com"}
    for number, topic in enumerate(TOPICS, start=1):
        server.issues[f"OPS-{number}"] = StubIssue(
            f"OPS-{number}", f"About {topic}", f"We discuss {topic} in the runbook.",
            "bob" if number == 3 else "alice", number,
        )  # fmt: skip
    server.issues["OPS-3"].security = "10200"
    server.comment("OPS-2", "bob", "The pager rotates among the quokkas weekly.", 5)
    server.comment("OPS-2", "bob", "Admins only: the pager PIN is platypus.", 6)
    server.issues["OPS-2"].comments[-1]["visibility"] = {"type": "role", "value": "Administrators"}
    mapping = tmp_path / "identities.json"
    mapping.write_text(
        json.dumps(
            {
                "jira:alice": "alice",
                "jira:bob@example.com": "bob",
                "jira-group:jira-devs": "engineering",
            }
        )
    )
    monkeypatch.setenv("FOOTNOTE_JIRA_USER", USER)
    monkeypatch.setenv("FOOTNOTE_JIRA_TOKEN", TOKEN)
    monkeypatch.setenv("FOOTNOTE_IDENTITY_MAP", str(mapping))
    monkeypatch.setenv("FOOTNOTE_AUDIT_LOG", str(tmp_path / "audit.jsonl"))
    yield server
    server.stop()


def source(stub: JiraStub) -> str:
    return f"jira+{stub.base}?project=OPS"


def hits(index: Path, query: str, *groups: str) -> list[Any]:
    caller = Caller.of_groups(list(groups)) if groups else Caller.operator()
    request = SearchRequest(query=query, index_dir=str(index), k=50, stage="bm25", caller=caller)
    return [h.chunk for h in search(request)]


def issue_reads(stub: JiraStub) -> list[str]:
    return [r.split("?")[0] for r in stub.requests if r.startswith("/rest/api/2/issue/")]


def test_a_full_load_cites_each_issue_and_comment_by_its_link(
    stub: JiraStub, tmp_path: Path
) -> None:
    index = tmp_path / "index"
    summary = corpus.add(index, [source(stub)], allow_private=True)

    assert sorted(summary.added) == [f"OPS/OPS-{n}" for n in range(1, 6)]
    assert not summary.failed and not summary.restricted, (summary.failed, summary.restricted)
    searches = [r for r in stub.requests if r.startswith("/rest/api/2/search?")]
    assert any("startAt=4" in r for r in searches), "the search was paged"
    assert summary.checkpoints[source(stub)]["cursor"] == iso(6)

    (comment,) = [c for c in hits(index, "quokkas") if "quokkas" in c.text]
    assert comment.url == f"{stub.base}/browse/OPS-2?focusedCommentId=10000#comment-10000"
    assert comment.metadata["author"] == "Bob"
    assert comment.access == OPEN
    assert hits(index, "platypus") == [], "a comment shown only to a role is left out"
    (opening,) = [c for c in hits(index, "wombat") if c.source == "OPS/OPS-1"]
    assert opening.url == f"{stub.base}/browse/OPS-1"
    assert opening.title == "OPS-1: About wombat rotation"


def test_a_security_level_narrows_the_projects_readers(stub: JiraStub, tmp_path: Path) -> None:
    index = tmp_path / "index"
    corpus.add(index, [source(stub)], allow_private=True)

    found = hits(index, "escrow", "user:alice")
    assert found and found[0].access == ["user:alice", "user:bob"]
    assert hits(index, "escrow", "user:bob"), "the reporter is a member of the level"
    assert hits(index, "escrow", "engineering") == [], "browsing the project is not enough"
    assert hits(index, "escrow", "user:jira:carol") == []
    assert hits(index, "escrow", "user:jira:frank") == [], "frank may not browse the project"
    assert hits(index, "wombat", "user:jira:carol") and hits(
        index, "wombat", "jira-group:contractors"
    )


def test_a_sync_reads_only_the_changed_issue_and_prunes_the_deleted_one(
    stub: JiraStub, tmp_path: Path
) -> None:
    index = tmp_path / "index"
    corpus.add(index, [source(stub)], allow_private=True)
    stub.comment("OPS-4", "alice", "The audit moves to the numbat burrow.", 20)
    del stub.issues["OPS-5"]
    stub.requests.clear()

    summary = corpus.sync(index, allow_private=True)

    assert summary.updated == ["OPS/OPS-4"]
    assert summary.deleted == ["OPS/OPS-5"]
    assert issue_reads(stub) == ["/rest/api/2/issue/OPS-4", "/rest/api/2/issue/OPS-4/comment"]
    polls = [r for r in stub.requests if "updated+%3E%3D" in r]
    assert polls and all("%222026%2F10%2F06+09%3A00%22" in r for r in polls), polls
    (found,) = [c for c in hits(index, "numbat") if "numbat" in c.text]
    assert found.url.startswith(f"{stub.base}/browse/OPS-4?focusedCommentId=")
    assert hits(index, "unsealing") == []


def test_a_reader_removed_at_the_source_loses_the_issue_at_the_next_sync(
    stub: JiraStub, tmp_path: Path, run_cli: RunCli
) -> None:
    index = tmp_path / "index"
    corpus.add(index, [source(stub)], allow_private=True)
    assert hits(index, "wombat", "user:jira:carol") and hits(index, "escrow", "user:alice")

    stub.roles["10002"] = stub.roles["10002"][1:]  # carol leaves the Developers role
    stub.groups["security-team"].remove("alice")
    summary = corpus.sync(index, allow_private=True)

    assert summary.embedded_texts == 0, "re-published, not re-embedded"
    assert hits(index, "wombat", "user:jira:carol") == []
    assert hits(index, "escrow", "user:alice") == []
    assert hits(index, "escrow", "user:bob"), "the reporter still reads it"
    assert hits(index, "wombat", "engineering")
    as_carol = run_cli(
        "search", "wombat", "--stage", "bm25", "--groups", "user:jira:carol", "--json",
        "--index", index,
    )  # fmt: skip
    assert as_carol.returncode == 0 and json.loads(as_carol.stdout) == [], as_carol.stderr


def test_a_permission_scheme_that_cannot_be_read_makes_the_issues_no_ones(
    stub: JiraStub, tmp_path: Path
) -> None:
    stub.scheme_status = 403
    index = tmp_path / "index"
    summary = corpus.add(index, [source(stub)], allow_private=True)

    assert len(summary.restricted) == 5
    assert "(403)" in summary.restricted["OPS/OPS-1"]
    assert hits(index, "wombat", *OPEN, "user:alice", "everyone") == []
    assert hits(index, "wombat"), "an admin still sees them"


def test_an_issue_listed_without_its_security_field_is_no_ones(
    stub: JiraStub, tmp_path: Path
) -> None:
    stub.lists_security = False
    index = tmp_path / "index"
    summary = corpus.add(index, [source(stub)], allow_private=True)
    assert len(summary.restricted) == 5
    assert "security level was not listed" in summary.restricted["OPS/OPS-1"]
    assert hits(index, "escrow", *OPEN, "user:alice", "user:bob") == []


def test_a_project_anyone_may_browse_is_everyones_but_a_level_still_narrows(
    stub: JiraStub, tmp_path: Path
) -> None:
    stub.browse = [{"type": "anyone"}]
    index = tmp_path / "index"
    corpus.add(index, [source(stub)], allow_private=True)
    assert [c.access for c in hits(index, "wombat", "everyone")] == [["everyone"]]
    assert hits(index, "escrow", "everyone") == []
    assert hits(index, "escrow", "jira-group:security-team") and hits(index, "escrow", "user:bob")


def test_a_429_is_waited_out_and_the_sync_goes_on(stub: JiraStub, tmp_path: Path) -> None:
    stub.rate_limit_once = "/rest/api/2/search"
    started = time.monotonic()
    summary = corpus.add(tmp_path / "index", [source(stub)], allow_private=True)

    assert len(summary.added) == 5 and not summary.failed
    assert time.monotonic() - started >= 1, "Retry-After: 1 was honoured"
    assert stub.rate_limit_once is None


def test_a_wait_longer_than_the_budget_stops_with_one_line(stub: JiraStub) -> None:
    stub.rate_limit_once = "/rest/api/2/search"
    connector = JiraConnector(parse_source(source(stub)), budget_s=0.5)
    with pytest.raises(ConnectorError, match="rate limit asks for a wait of 1 s"):
        connector.full_load()


def test_expired_credentials_give_one_line_and_lose_nothing(
    stub: JiraStub, tmp_path: Path, run_cli: RunCli, monkeypatch: pytest.MonkeyPatch
) -> None:
    index = tmp_path / "index"
    added = run_cli("add", source(stub), "--allow-private", "--index", index)
    assert added.returncode == 0, added.stderr
    monkeypatch.setenv("FOOTNOTE_JIRA_TOKEN", "expired-token")

    synced = run_cli("sync", "--index", index)

    assert synced.returncode == 1
    output = synced.stdout + synced.stderr
    assert "Traceback" not in output and "expired-token" not in output
    (line,) = [x for x in output.splitlines() if "401" in x]
    assert "$FOOTNOTE_JIRA_TOKEN" in line and source(stub) in line
    assert len({c.source for c in hits(index, "runbook")}) == 5, "what was indexed stays"


def test_a_sync_killed_mid_way_resumes_with_no_duplicate_chunk(
    stub: JiraStub, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    index = tmp_path / "index"
    first = corpus.add(index, [source(stub)], allow_private=True).checkpoints[source(stub)]
    for number, day in ((1, 20), (2, 21), (5, 22)):
        stub.comment(f"OPS-{number}", "alice", f"Revision {day} of the runbook.", day)
    record = JiraConnector._issue_record
    reads: list[str] = []

    def crash_after_one(self: JiraConnector, key: str) -> dict[str, Any]:
        if reads:
            raise KeyboardInterrupt  # the process dies on the second issue
        reads.append(key)
        return record(self, key)

    with monkeypatch.context() as patch:
        patch.setattr(JiraConnector, "_issue_record", crash_after_one)
        with pytest.raises(KeyboardInterrupt):
            corpus.sync(index, allow_private=True)
    (root,) = corpus.sources(index)["sources"]
    assert root["checkpoint"]["cursor"] == first["cursor"], "nothing published"

    resumed = corpus.sync(index, allow_private=True)

    assert sorted(resumed.updated) == ["OPS/OPS-1", "OPS/OPS-2", "OPS/OPS-5"]
    chunks = hits(index, "runbook")
    counts = Counter((c.source, c.text) for c in chunks)
    assert max(counts.values()) == 1, counts
    assert len([c for c in chunks if "Revision" in c.text]) == 3


def test_a_sync_killed_by_sigkill_mid_way_resumes_with_no_duplicate_chunk(
    stub: JiraStub, tmp_path: Path
) -> None:
    """kill -9 of `footnote sync` while it waits for the second changed issue, the first one
    read with its comments."""
    index = tmp_path / "index"
    first = corpus.add(index, [source(stub)], allow_private=True).checkpoints[source(stub)]
    for number, day in ((1, 20), (2, 21), (5, 22)):
        stub.comment(f"OPS-{number}", "alice", f"Revision {day} of the runbook.", day)
    stub.requests.clear()
    stub.hold = "/rest/api/2/issue/OPS-2"
    env = {
        "FOOTNOTE_JIRA_USER": USER,
        "FOOTNOTE_JIRA_TOKEN": TOKEN,
        "FOOTNOTE_IDENTITY_MAP": os.environ["FOOTNOTE_IDENTITY_MAP"],
    }
    with sync_held(
        index,
        env,
        tmp_path / "sync.err",
        held=stub.arrived,
        waiting_for="OPS-2",
        release=stub.let_go,
    ):
        assert issue_reads(stub) == [
            "/rest/api/2/issue/OPS-1",
            "/rest/api/2/issue/OPS-1/comment",
            "/rest/api/2/issue/OPS-2",
        ], "killed while waiting for the second changed issue, the first one read"
    (root,) = corpus.sources(index)["sources"]
    assert root["checkpoint"]["cursor"] == first["cursor"], "nothing published"
    stub.requests.clear()

    resumed = corpus.sync(index, allow_private=True)

    assert not resumed.failed, resumed.failed
    assert sorted(resumed.updated) == ["OPS/OPS-1", "OPS/OPS-2", "OPS/OPS-5"]
    assert not resumed.added and not resumed.deleted
    assert sorted(set(issue_reads(stub))) == [
        f"/rest/api/2/issue/OPS-{n}{tail}" for n in (1, 2, 5) for tail in ("", "/comment")
    ], "only the changed issues are read again (OPS-2's three comments on two pages)"
    assert resumed.checkpoints[source(stub)]["cursor"] == iso(22)
    chunks = hits(index, "runbook")
    assert len({c.source for c in chunks}) == 5
    counts = Counter((c.source, c.text) for c in chunks)
    assert max(counts.values()) == 1, counts
    assert sorted(c.text for c in chunks if "Revision" in c.text) == [
        f"Revision {day} of the runbook." for day in (20, 21, 22)
    ]
    corpus.add(tmp_path / "fresh", [source(stub)], allow_private=True)
    assert chunks_per_document(index) == chunks_per_document(tmp_path / "fresh"), (
        "as many chunks as one clean load"
    )


def test_the_credentials_are_in_no_output_or_file(
    stub: JiraStub, tmp_path: Path, run_cli: RunCli
) -> None:
    index = tmp_path / "index"
    outputs = [
        run_cli("add", source(stub), "--allow-private", "--index", index),
        run_cli("sources", "--index", index),
        run_cli("sources", "--json", "--index", index),
    ]
    assert all(o.returncode == 0 for o in outputs), [o.stderr for o in outputs]
    assert f"jira {source(stub)}" in outputs[1].stdout
    assert all(TOKEN not in o.stdout + o.stderr for o in outputs)
    for path in index.rglob("*"):
        if path.is_file():
            assert TOKEN.encode() not in path.read_bytes(), path


def test_a_served_admin_may_add_only_the_operators_site(
    stub: JiraStub, monkeypatch: pytest.MonkeyPatch
) -> None:
    with pytest.raises(ConnectorError, match=r"only the site in \$FOOTNOTE_JIRA_URL"):
        served(source(stub), str)
    monkeypatch.setenv("FOOTNOTE_JIRA_URL", stub.base)
    assert served(source(stub), str) == source(stub)


@pytest.mark.parametrize(
    "value",
    [
        "jira+https://host",
        "jira+https://host?project=",
        "jira+https://host?project=OPS%22%20OR%20x",
        "jira+https://host?space=OPS",
        "jira+https://user:pw@host?project=OPS",
        "jira+http://jira.example.com?project=OPS",
        "jira+https://host?project=OPS&project=ENG",
    ],
)
def test_a_malformed_source_is_refused_in_one_line(value: str) -> None:
    with pytest.raises(ConnectorError):
        jira.parse_source(value)


def test_a_personal_access_token_alone_is_sent_as_a_bearer_token(
    stub: JiraStub, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("FOOTNOTE_JIRA_USER")
    summary = corpus.add(tmp_path / "index", [source(stub)], allow_private=True)
    assert len(summary.added) == 5 and not summary.failed


def test_a_redirect_is_not_followed(stub: JiraStub, tmp_path: Path) -> None:
    stub.redirects["/rest/api/2/search"] = "http://169.254.169.254/latest/meta-data/"
    summary = corpus.add(tmp_path / "index", [source(stub)], allow_private=True)
    assert not summary.added
    assert "cannot reach" in summary.failed[source(stub)]


def test_without_the_client_library_the_error_names_the_extra(
    stub: JiraStub, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "atlassian", None)
    with pytest.raises(ConnectorError, match="needs atlassian-python-api"):
        JiraConnector(parse_source(source(stub))).full_load()


def test_a_served_admin_adds_a_project_of_the_operators_site_only(
    stub: JiraStub, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    context = IndexerContext(
        index_dir=str(tmp_path / "index"), upload_dir=str(tmp_path / "uploads"), allow_private=True
    )
    admin: Any = {"configurable": {"langgraph_auth_user": {"identity": "root", "admin": True}}}
    with pytest.raises(SourceRefused, match=r"only the site in \$FOOTNOTE_JIRA_URL"):
        indexer_graph.invoke({"action": "add", "sources": [source(stub)]}, admin, context=context)
    monkeypatch.setenv("FOOTNOTE_JIRA_URL", stub.base)
    added = indexer_graph.invoke(
        {"action": "add", "sources": [source(stub)]}, admin, context=context
    )
    assert added["result"]["added"] == 5 and not added["result"]["errors"]


def test_jira_clouds_search_is_paged_by_its_tokens(stub: JiraStub, tmp_path: Path) -> None:
    stub.cloud = True
    index = tmp_path / "index"
    summary = corpus.add(index, [source(stub)], allow_private=True)
    assert len(summary.added) == 5 and not summary.failed, summary.failed
    pages = [r for r in stub.requests if r.startswith("/rest/api/2/search/jql")]
    assert any("nextPageToken=tok-4" in r for r in pages)
    assert not any(r.startswith("/rest/api/2/search?") for r in stub.requests)
    stub.comment("OPS-1", "alice", "The wombats moved burrows.", 20)
    assert corpus.sync(index, allow_private=True).updated == ["OPS/OPS-1"]
