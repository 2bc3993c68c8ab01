"""The Confluence connector through the real atlassian-python-api client against a loopback
stub of Confluence's REST API (tests/atlassian_stub.py): a full load over linked pages, cut
at headings and cited by each page's link; a sync that reads only the page that changed and
prunes a deleted one; readers from the space's permissions narrowed by page restrictions
(inherited by child pages), a reader removed at the source losing the page at the next sync
without one text embedded again; permissions that cannot be read making pages no one's; a
429 waited out; a 401 in one line that loses nothing; a sync interrupted mid-way (an
exception on the second changed page, or kill -9 of `footnote sync` while it waits for one)
resuming with no duplicate chunk; the credentials in no output or file."""

from __future__ import annotations

import json
import os
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from footnote.ingest import corpus
from footnote.ingest.connectors import confluence
from footnote.ingest.connectors.base import ConnectorError
from footnote.ingest.connectors.confluence import ConfluenceConnector, parse_source, served
from footnote.store.types import Caller
from footnote.tools.search import SearchRequest, search
from tests.atlassian_stub import ConfluenceStub, StubPage, iso
from tests.conftest import RunCli
from tests.killed_sync import chunks_per_document, sync_held

USER = "footnote-bot"
TOKEN = "ATATT3xFfGF0stubCONFLUENCEtokenNeverShown42"
NAMES = ["Wombat rotation", "Pager duty", "Key escrow", "Badger audit", "Vault unsealing"]


@pytest.fixture
def stub(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[ConfluenceStub]:
    """Space ENG, readable by the confluence-users group and by carol. Page 3 is restricted
    to bob and the finance group; page 4, its child, inherits that. alice and bob are in
    confluence-users, alice and erin in finance (erin may not view the space)."""
    server = ConfluenceStub(USER, TOKEN, "ENG").start()
    server.space_users = ["carol"]
    server.space_groups = ["confluence-users"]
    server.groups = {"confluence-users": ["alice", "bob", "dave"], "finance": ["alice", "erin"]}
    server.emails = {"bob": "bob@example.com"}
    for number, title in enumerate(NAMES, start=1):
        word = title.split()[0].lower()
        html = (
            f"<h1>About {title}</h1><p>We discuss {word} things in the handbook.</p>"
            f"<h2>Details</h2><p>The {word} procedure has steps.</p>"
            f'<ac:structured-macro ac:name="info"><ac:parameter ac:name="title">x</ac:parameter>'
            f"<ac:rich-text-body><p>A note on {word}.</p></ac:rich-text-body></ac:structured-macro>"
        )
        server.pages[number] = StubPage(
            number, title, html, "alice", number, parent=1 if number == 2 else None
        )
    server.pages[3].read_users, server.pages[3].read_groups = ["bob"], ["finance"]
    server.pages[4].parent = 3
    mapping = tmp_path / "identities.json"
    mapping.write_text(
        json.dumps(
            {
                "confluence:alice": "alice",
                "confluence:bob@example.com": "bob",
                "confluence-group:confluence-users": "engineering",
            }
        )
    )
    monkeypatch.setenv("FOOTNOTE_CONFLUENCE_USER", USER)
    monkeypatch.setenv("FOOTNOTE_CONFLUENCE_TOKEN", TOKEN)
    monkeypatch.setenv("FOOTNOTE_IDENTITY_MAP", str(mapping))
    monkeypatch.setenv("FOOTNOTE_AUDIT_LOG", str(tmp_path / "audit.jsonl"))
    yield server
    server.stop()


def source(stub: ConfluenceStub) -> str:
    return f"confluence+{stub.base}?space=ENG"


def hits(index: Path, query: str, *groups: str) -> list[Any]:
    caller = Caller.of_groups(list(groups)) if groups else Caller.operator()
    request = SearchRequest(query=query, index_dir=str(index), k=50, stage="bm25", caller=caller)
    return [h.chunk for h in search(request)]


def body_requests(stub: ConfluenceStub) -> list[str]:
    paths = [r.split("?")[0] for r in stub.requests]
    return [p for p in paths if p.rsplit("/", 1)[-1].isdigit()]


def test_a_full_load_reads_every_page_and_cites_each_by_its_link(
    stub: ConfluenceStub, tmp_path: Path
) -> None:
    index = tmp_path / "index"
    summary = corpus.add(index, [source(stub)], allow_private=True)

    assert sorted(summary.added) == sorted(f"ENG/{n}" for n in NAMES)
    assert not summary.failed and not summary.restricted, (summary.failed, summary.restricted)
    listings = [r for r in stub.requests if r.startswith("/wiki/rest/api/content?")]
    assert any("start=4" in r for r in listings), "the listing followed its next links"
    assert summary.checkpoints[source(stub)]["cursor"] == iso(5)

    (details,) = [c for c in hits(index, "wombat procedure") if "wombat procedure" in c.text]
    assert details.url == f"{stub.base}/spaces/ENG/pages/1/Wombat+rotation"
    assert details.section == "Wombat rotation > About Wombat rotation > Details", details.section
    assert details.metadata["author"] == "Alice"
    assert details.access == ["engineering", "user:confluence:carol"]
    assert any("note on wombat" in c.text for c in hits(index, "note wombat"))
    assert not any("ac:name" in c.text or "title x" in c.text for c in hits(index, "wombat"))


def test_page_restrictions_narrow_the_space_and_are_inherited(
    stub: ConfluenceStub, tmp_path: Path
) -> None:
    index = tmp_path / "index"
    corpus.add(index, [source(stub)], allow_private=True)

    for word in ("escrow", "badger"):
        found = hits(index, word, "user:alice")
        assert found and {c.access[0] for c in found} == {"user:alice"}
        assert found[0].access == ["user:alice", "user:bob"]
        assert hits(index, word, "user:bob"), "bob is named on the restriction"
        assert hits(index, word, "engineering") == [], "the space's group alone is not enough"
        assert hits(index, word, "user:confluence:carol") == [], "carol is not on the restriction"
        assert hits(index, word, "user:confluence:erin") == [], "erin may not view the space"
    assert hits(index, "pager", "engineering"), "an unrestricted child of an open page"


def test_a_sync_reads_only_the_changed_page_and_prunes_the_deleted_one(
    stub: ConfluenceStub, tmp_path: Path
) -> None:
    index = tmp_path / "index"
    corpus.add(index, [source(stub)], allow_private=True)
    stub.edit(2, "<h1>Pager duty</h1><p>The pager now rotates among the numbats.</p>", 20)
    del stub.pages[5]
    stub.requests.clear()

    summary = corpus.sync(index, allow_private=True)

    assert summary.updated == ["ENG/Pager duty"]
    assert summary.deleted == ["ENG/Vault unsealing"]
    assert body_requests(stub) == ["/wiki/rest/api/content/2"]
    searches = [r for r in stub.requests if r.startswith("/wiki/rest/api/content/search")]
    assert searches and all(
        "lastmodified+%3E%3D+%222026%2F10%2F05+09%3A00%22" in r for r in searches
    )
    assert [c.source for c in hits(index, "numbats")] == ["ENG/Pager duty"]
    assert hits(index, "unsealing") == []
    assert summary.checkpoints[source(stub)]["cursor"] == iso(20)


def test_a_reader_removed_at_the_source_loses_the_page_at_the_next_sync(
    stub: ConfluenceStub, tmp_path: Path, run_cli: RunCli
) -> None:
    index = tmp_path / "index"
    corpus.add(index, [source(stub)], allow_private=True)
    assert hits(index, "escrow", "user:bob") and hits(index, "wombat", "user:confluence:carol")

    stub.pages[3].read_users = []
    stub.space_users = []
    summary = corpus.sync(index, allow_private=True)

    assert summary.embedded_texts == 0, "re-published, not re-embedded"
    assert hits(index, "escrow", "user:bob") == [] and hits(index, "badger", "user:bob") == []
    assert hits(index, "wombat", "user:confluence:carol") == []
    assert hits(index, "escrow", "user:alice"), "alice still reads it through finance"
    as_bob = run_cli(
        "search", "escrow", "--stage", "bm25", "--groups", "user:bob", "--json", "--index", index
    )
    assert as_bob.returncode == 0 and json.loads(as_bob.stdout) == [], as_bob.stderr
    bob_asks, alice_asks = (
        run_cli(
            "ask",
            "What is the escrow procedure?",
            "--groups",
            who,
            "--json",
            "--quiet",
            "--index",
            index,
        )  # fmt: skip
        for who in ("user:bob", "user:alice")
    )
    assert bob_asks.returncode == 0 and alice_asks.returncode == 0, bob_asks.stderr
    bob_answer, alice_answer = json.loads(bob_asks.stdout), json.loads(alice_asks.stdout)
    assert "ENG/Key escrow" in {c["source"] for c in alice_answer["citations"]}
    assert not {c["source"] for c in bob_answer["citations"]} & {
        "ENG/Key escrow",
        "ENG/Badger audit",
    }
    assert "escrow procedure has steps" not in bob_answer["answer"]


@pytest.mark.parametrize(("status", "reason"), [(403, "(403)"), (200, "(none given)")])
def test_space_permissions_that_cannot_be_read_make_the_pages_no_ones(
    stub: ConfluenceStub, tmp_path: Path, status: int, reason: str
) -> None:
    stub.space_status = status
    stub.gives_permissions = False
    index = tmp_path / "index"
    summary = corpus.add(index, [source(stub)], allow_private=True)

    assert len(summary.restricted) == 5
    assert reason in summary.restricted["ENG/Wombat rotation"]
    assert hits(index, "wombat", "engineering", "user:alice", "everyone") == []
    assert hits(index, "wombat"), "an admin still sees them"


def test_restrictions_the_listing_does_not_show_make_the_pages_no_ones(
    stub: ConfluenceStub, tmp_path: Path
) -> None:
    stub.lists_restrictions = False
    index = tmp_path / "index"
    summary = corpus.add(index, [source(stub)], allow_private=True)
    assert len(summary.restricted) == 5
    assert "read restrictions of page 1 were not listed" in summary.restricted["ENG/Pager duty"]
    assert hits(index, "wombat", "engineering", "user:confluence:carol") == []


def test_anonymous_access_is_everyone_but_a_restriction_still_narrows(
    stub: ConfluenceStub, tmp_path: Path
) -> None:
    stub.anonymous = True
    index = tmp_path / "index"
    corpus.add(index, [source(stub)], allow_private=True)
    assert [c.access for c in hits(index, "wombat procedure", "everyone")][:1] == [["everyone"]]
    assert hits(index, "escrow", "everyone") == []
    assert hits(index, "escrow", "confluence-group:finance"), "the restriction's group reads it"
    assert hits(index, "escrow", "user:bob")


def test_a_429_is_waited_out_and_the_sync_goes_on(stub: ConfluenceStub, tmp_path: Path) -> None:
    stub.rate_limit_once = "/wiki/rest/api/content"
    started = time.monotonic()
    summary = corpus.add(tmp_path / "index", [source(stub)], allow_private=True)

    assert len(summary.added) == 5 and not summary.failed
    assert time.monotonic() - started >= 1, "Retry-After: 1 was honoured"
    assert stub.rate_limit_once is None


def test_a_wait_longer_than_the_budget_stops_with_one_line(stub: ConfluenceStub) -> None:
    stub.rate_limit_once = "/wiki/rest/api/content"
    connector = ConfluenceConnector(parse_source(source(stub)), budget_s=0.5)
    with pytest.raises(ConnectorError, match="rate limit asks for a wait of 1 s"):
        connector.full_load()


def test_expired_credentials_give_one_line_and_lose_nothing(
    stub: ConfluenceStub, tmp_path: Path, run_cli: RunCli, monkeypatch: pytest.MonkeyPatch
) -> None:
    index = tmp_path / "index"
    added = run_cli("add", source(stub), "--allow-private", "--index", index)
    assert added.returncode == 0, added.stderr
    monkeypatch.setenv("FOOTNOTE_CONFLUENCE_TOKEN", "expired-token")

    synced = run_cli("sync", "--index", index)

    assert synced.returncode == 1
    output = synced.stdout + synced.stderr
    assert "Traceback" not in output and "expired-token" not in output
    (line,) = [x for x in output.splitlines() if "401" in x]
    assert "$FOOTNOTE_CONFLUENCE_TOKEN" in line and source(stub) in line
    assert len({c.source for c in hits(index, "handbook")}) == 5, "what was indexed stays"


def test_a_sync_killed_mid_way_resumes_with_no_duplicate_chunk(
    stub: ConfluenceStub, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    index = tmp_path / "index"
    first = corpus.add(index, [source(stub)], allow_private=True).checkpoints[source(stub)]
    for page_id, day in ((1, 20), (2, 21), (5, 22)):
        stub.edit(page_id, f"<h1>Revised</h1><p>Revision {day} of the handbook.</p>", day)
    record = ConfluenceConnector._page_record
    reads: list[str] = []

    def crash_after_one(self: ConfluenceConnector, page_id: str) -> dict[str, Any]:
        if reads:
            raise KeyboardInterrupt  # the process dies on the second page
        reads.append(page_id)
        return record(self, page_id)

    with monkeypatch.context() as patch:
        patch.setattr(ConfluenceConnector, "_page_record", crash_after_one)
        with pytest.raises(KeyboardInterrupt):
            corpus.sync(index, allow_private=True)
    (root,) = corpus.sources(index)["sources"]
    assert root["checkpoint"]["cursor"] == first["cursor"], "nothing published"

    resumed = corpus.sync(index, allow_private=True)

    assert sorted(resumed.updated) == [
        "ENG/Pager duty",
        "ENG/Vault unsealing",
        "ENG/Wombat rotation",
    ]
    chunks = hits(index, "handbook")
    assert len({c.source for c in chunks}) == 5
    counts = Counter((c.source, c.text) for c in chunks)
    assert max(counts.values()) == 1, counts
    assert {c.text for c in chunks if c.source == "ENG/Pager duty"} == {
        "Revision 21 of the handbook."
    }


def test_a_sync_killed_by_sigkill_mid_way_resumes_with_no_duplicate_chunk(
    stub: ConfluenceStub, tmp_path: Path
) -> None:
    """kill -9 of `footnote sync` while it waits for the second changed page's body, the
    first one read."""
    index = tmp_path / "index"
    first = corpus.add(index, [source(stub)], allow_private=True).checkpoints[source(stub)]
    for page_id, day in ((1, 20), (2, 21), (5, 22)):
        stub.edit(page_id, f"<h1>Revised</h1><p>Revision {day} of the handbook.</p>", day)
    stub.requests.clear()
    stub.hold = "/wiki/rest/api/content/2"
    env = {
        "FOOTNOTE_CONFLUENCE_USER": USER,
        "FOOTNOTE_CONFLUENCE_TOKEN": TOKEN,
        "FOOTNOTE_IDENTITY_MAP": os.environ["FOOTNOTE_IDENTITY_MAP"],
    }
    with sync_held(
        index,
        env,
        tmp_path / "sync.err",
        held=stub.arrived,
        waiting_for="page 2",
        release=stub.let_go,
    ):
        assert body_requests(stub) == ["/wiki/rest/api/content/1", "/wiki/rest/api/content/2"], (
            "killed while waiting for the second changed page, the first one read"
        )
    (root,) = corpus.sources(index)["sources"]
    assert root["checkpoint"]["cursor"] == first["cursor"], "nothing published"
    stub.requests.clear()

    resumed = corpus.sync(index, allow_private=True)

    assert not resumed.failed, resumed.failed
    assert sorted(resumed.updated) == [
        "ENG/Pager duty",
        "ENG/Vault unsealing",
        "ENG/Wombat rotation",
    ]
    assert not resumed.added and not resumed.deleted
    assert sorted(body_requests(stub)) == [f"/wiki/rest/api/content/{n}" for n in (1, 2, 5)]
    assert resumed.checkpoints[source(stub)]["cursor"] == iso(22)
    chunks = hits(index, "handbook")
    assert len({c.source for c in chunks}) == 5
    counts = Counter((c.source, c.text) for c in chunks)
    assert max(counts.values()) == 1, counts
    assert {c.text for c in chunks if c.source == "ENG/Pager duty"} == {
        "Revision 21 of the handbook."
    }
    corpus.add(tmp_path / "fresh", [source(stub)], allow_private=True)
    assert chunks_per_document(index) == chunks_per_document(tmp_path / "fresh"), (
        "as many chunks as one clean load"
    )


def test_the_credentials_are_in_no_output_or_file(
    stub: ConfluenceStub, tmp_path: Path, run_cli: RunCli
) -> None:
    index = tmp_path / "index"
    outputs = [
        run_cli("add", source(stub), "--allow-private", "--index", index),
        run_cli("sources", "--index", index),
        run_cli("sources", "--json", "--index", index),
    ]
    assert all(o.returncode == 0 for o in outputs), [o.stderr for o in outputs]
    assert f"confluence {source(stub)}" in outputs[1].stdout
    assert all(TOKEN not in o.stdout + o.stderr for o in outputs)
    for path in index.rglob("*"):
        if path.is_file():
            assert TOKEN.encode() not in path.read_bytes(), path


def test_a_missing_token_and_a_loopback_site_without_allow_private_fail_in_one_line(
    stub: ConfluenceStub, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    summary = corpus.add(tmp_path / "one", [source(stub)])
    assert "127.0.0.1" in summary.failed[source(stub)] and not summary.added
    monkeypatch.delenv("FOOTNOTE_CONFLUENCE_TOKEN")
    summary = corpus.add(tmp_path / "two", [source(stub)], allow_private=True)
    assert summary.failed == {
        source(stub): "$FOOTNOTE_CONFLUENCE_TOKEN is not set (the confluence API token)"
    }


def test_a_served_admin_may_add_only_the_operators_site(
    stub: ConfluenceStub, monkeypatch: pytest.MonkeyPatch
) -> None:
    with pytest.raises(ConnectorError, match=r"only the site in \$FOOTNOTE_CONFLUENCE_URL"):
        served(source(stub), str)
    monkeypatch.setenv("FOOTNOTE_CONFLUENCE_URL", stub.base)
    assert served(source(stub), str) == source(stub)
    with pytest.raises(ConnectorError):
        served("confluence+https://evil.example/wiki?space=ENG", str)


@pytest.mark.parametrize(
    "value",
    [
        "confluence+https://host/wiki",
        "confluence+https://host/wiki?space=",
        "confluence+https://host/wiki?space=A%22B",
        "confluence+https://host/wiki?space=ENG&space=OPS",
        "confluence+https://host/wiki?project=ENG",
        "confluence+https://user:pw@host/wiki?space=ENG",
        "confluence+http://wiki.example.com/wiki?space=ENG",
        "confluence+ftp://host/wiki?space=ENG",
        "confluence+https://host/wiki?space=ENG#frag",
        "confluence+https://host/wiki?space=..",
        "confluence+https://host/wiki?space=A/B",
    ],
)
def test_a_malformed_source_is_refused_in_one_line(value: str) -> None:
    with pytest.raises(ConnectorError):
        confluence.parse_source(value)


def test_storage_format_keeps_its_headings() -> None:
    html = "<p>Intro</p><h1>A</h1><p>one</p><h2>B</h2><ul><li>two</li></ul><h1>C</h1><p>three</p>"
    assert confluence.storage_sections(html) == [
        ([], "Intro"),
        (["A"], "one"),
        (["A", "B"], "two"),
        (["C"], "three"),
    ]
