"""The Slack connector through the real slack_sdk against a loopback stub of Slack's Web API
(tests/slack_stub.py): a full load over cursor pages, a thread and a channel-day per
document, each message cited by its permalink; a sync that re-reads only the thread that
changed and prunes a deleted thread; a member removed from a private channel loses it at the
next sync; members that cannot be read make a channel no one's; a 429 waited out; an
expired token in one line that loses nothing; a sync interrupted mid-way (an exception
after one thread, or kill -9 of `footnote sync`) resumes without duplicate chunks."""

from __future__ import annotations

import json
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
from footnote.ingest.connectors.identities import IdentityMap
from footnote.ingest.connectors.slack import SlackConnector, parse_source
from footnote.ingest.connectors.slack_api import SlackApi
from footnote.store.types import Caller
from footnote.tools.search import SearchRequest, search
from tests.conftest import RunCli
from tests.killed_sync import chunks_per_document, sync_held
from tests.slack_stub import SlackStub, StubChannel, ts

pytestmark = pytest.mark.integration

TOKEN = "xoxb-stub-TOKEN-that-must-never-be-shown-0123456789"
SOURCE = "slack://acme"
GENERAL, PRIVATE, RANDOM = "C0GENERAL", "C0ENGPRIV", "C0RANDOM"


@pytest.fixture
def stub(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[SlackStub]:
    """#general (public): two unthreaded messages on 2 Nov and a thread with two replies;
    #eng-private: alice, bob and carol (whom the map does not name) and the bot, a thread
    and two days of messages; #random, which the bot is not in."""
    server = SlackStub(TOKEN).start()
    server.add_user("U0ALICE", "alice", "Alice@acme.test")
    server.add_user("U0BOB", "bob", "bob@acme.test")
    server.add_user("U0CAROL", "carol", "carol@acme.test")
    server.add_user("U0BOT", "footnote", "", is_bot=True)
    server.channels[GENERAL] = StubChannel(GENERAL, "general", private=False)
    server.channels[PRIVATE] = StubChannel(
        PRIVATE, "eng-private", private=True, members=["U0ALICE", "U0BOB", "U0CAROL", "U0BOT"]
    )
    server.channels[RANDOM] = StubChannel(RANDOM, "random", private=False, bot_member=False)
    server.post(GENERAL, 1, "U0ALICE", "The wombat census starts Monday.")
    server.post(GENERAL, 2, "U0BOB", "Bring binoculars for the census.")
    parent = server.post(GENERAL, 3, "U0ALICE", "Who owns the pager rotation?")
    server.post(GENERAL, 4, "U0BOB", "The quokkas rotate it weekly, ask <@U0ALICE>.", thread=parent)
    server.post(GENERAL, 5, "U0ALICE", "Thanks, noted.", thread=parent)
    secret = server.post(PRIVATE, 6, "U0ALICE", "Key escrow moves to the badger vault.")
    server.post(PRIVATE, 7, "U0CAROL", "Escrow keys rotate at dawn.", thread=secret)
    server.post(PRIVATE, 8, "U0BOB", "Unseal drill on Friday.")
    server.post(PRIVATE, 60 * 24 + 1, "U0BOB", "Drill moved to the numbat room.")
    server.post(RANDOM, 9, "U0BOB", "Lunch is pangolin soup.")
    mapping = tmp_path / "identities.json"
    mapping.write_text(json.dumps({"slack:alice@acme.test": "alice", "slack:U0BOB": "bob"}))
    monkeypatch.setenv("FOOTNOTE_SLACK_TOKEN", TOKEN)
    monkeypatch.setenv("FOOTNOTE_SLACK_API_URL", server.api)
    monkeypatch.setenv("FOOTNOTE_IDENTITY_MAP", str(mapping))
    yield server
    server.stop()


def hits(index: Path, query: str, *groups: str) -> list[Any]:
    caller = Caller.of_groups(list(groups)) if groups else Caller.operator()
    request = SearchRequest(query=query, index_dir=str(index), k=50, stage="bm25", caller=caller)
    return [h.chunk for h in search(request)]


GENERAL_THREAD, PRIVATE_THREAD = ts(3, 102), ts(6, 100)
"""The threads' ts: the minute posted, and the message's place in its channel."""


def thread_id(channel: str, stamp: str) -> str:
    return f"acme/#{channel}/thread-{stamp}"


def test_a_full_load_pages_every_listing_and_cites_each_message(
    stub: SlackStub, tmp_path: Path
) -> None:
    index = tmp_path / "index"
    summary = corpus.add(index, [SOURCE], allow_private=True)

    assert not summary.failed, summary.failed
    assert sorted(summary.added) == sorted(
        [
            "acme/#general/2026-11-02",
            thread_id("general", GENERAL_THREAD),
            thread_id("eng-private", PRIVATE_THREAD),
            "acme/#eng-private/2026-11-02",
            "acme/#eng-private/2026-11-03",
        ]
    ), "threads and channel-days; #random, which the bot is not in, is not read"
    assert any("cursor" in p for p in stub.called("conversations.history")), "pages followed"
    assert any("cursor" in p for p in stub.called("conversations.members"))
    assert summary.checkpoints[SOURCE]["cursor"] == "2026-11-03T09:01:00Z"

    (reply,) = [c for c in hits(index, "quokkas") if "quokkas" in c.text]
    assert reply.url == (
        f"https://acme.slack.com/archives/{GENERAL}/p{ts(4, 103).replace('.', '')}"
        f"?thread_ts={GENERAL_THREAD}&cid={GENERAL}"
    )
    assert reply.metadata["author"] == "Bob"
    assert "ask @alice." in reply.text, "a mention reads as the person's name"
    assert reply.access == ["everyone"]
    (escrow,) = {c.source: c for c in hits(index, "escrow")}.values()
    assert escrow.access == ["user:alice", "user:bob", "user:slack:U0CAROL"]
    assert hits(index, "pangolin") == []


def test_a_sync_rereads_only_the_changed_thread_and_prunes_deleted_ones(
    stub: SlackStub, tmp_path: Path
) -> None:
    index = tmp_path / "index"
    corpus.add(index, [SOURCE], allow_private=True)
    stub.post(
        PRIVATE, 100, "U0ALICE", "Escrow now lives in the numbat vault.", thread=PRIVATE_THREAD
    )
    stub.delete_thread(GENERAL, GENERAL_THREAD)
    edited = next(
        k for k, m in stub.channels[GENERAL].messages.items() if "binoculars" in m["text"]
    )
    stub.edit(GENERAL, edited, 101, "Bring a telescope for the census.")
    stub.calls.clear()

    summary = corpus.sync(index, allow_private=True)

    assert summary.deleted == [thread_id("general", GENERAL_THREAD)]
    assert sorted(summary.updated) == [
        thread_id("eng-private", PRIVATE_THREAD),
        "acme/#general/2026-11-02",
    ]
    assert {p["ts"] for p in stub.called("conversations.replies")} == {PRIVATE_THREAD}, (
        "only the thread with a new reply is read again"
    )
    history = stub.called("conversations.history")
    assert {p.get("oldest") for p in history if "oldest" in p} >= {ts(24 * 60 + 1, 103)}
    assert [c.source for c in hits(index, "telescope")] == ["acme/#general/2026-11-02"]
    assert hits(index, "binoculars") == [] and hits(index, "quokkas") == []


def test_a_channel_gone_or_left_and_a_lone_message_deleted_are_pruned(
    stub: SlackStub, tmp_path: Path
) -> None:
    index = tmp_path / "index"
    corpus.add(index, [SOURCE], allow_private=True)
    del stub.channels[GENERAL]
    (lone,) = [k for k, m in stub.channels[PRIVATE].messages.items() if "numbat" in m["text"]]
    stub.delete_thread(PRIVATE, lone)

    summary = corpus.sync(index, allow_private=True)

    assert sorted(summary.deleted) == [
        "acme/#eng-private/2026-11-03",
        "acme/#general/2026-11-02",
        thread_id("general", GENERAL_THREAD),
    ]
    assert not summary.updated and not summary.added
    assert hits(index, "wombat") == [] and hits(index, "numbat") == []
    assert hits(index, "escrow"), "the rest of #eng-private stays"


def test_a_member_removed_from_a_private_channel_loses_it_at_the_next_sync(
    stub: SlackStub, tmp_path: Path, run_cli: RunCli
) -> None:
    index = tmp_path / "index"
    corpus.add(index, [SOURCE], allow_private=True)
    assert hits(index, "escrow", "user:bob"), "bob reads #eng-private"

    stub.channels[PRIVATE].members.remove("U0BOB")
    summary = corpus.sync(index, allow_private=True)

    assert summary.embedded_texts == 0, "re-published with new readers, not re-embedded"
    assert hits(index, "escrow", "user:bob") == [] and hits(index, "numbat", "user:bob") == []
    assert hits(index, "escrow", "user:alice"), "alice still reads it"
    assert hits(index, "quokkas", "user:bob"), "the public channel stays bob's"
    as_bob = run_cli(
        "search", "escrow", "--stage", "bm25", "--groups", "user:bob", "--json", "--index", index
    )
    assert as_bob.returncode == 0 and json.loads(as_bob.stdout) == [], as_bob.stderr
    question = "Where does key escrow move?"
    asked = {
        who: run_cli("ask", question, "--user-groups", who, "--json", "--index", index)
        for who in ("user:bob", "user:alice")
    }
    assert all(a.returncode == 0 for a in asked.values()), [a.stderr for a in asked.values()]
    bob, alice = (json.loads(asked[who].stdout) for who in ("user:bob", "user:alice"))
    assert bob["citations"] == [] and "badger" not in bob["answer"]
    assert "badger" in alice["answer"]
    assert {c["url"].split("/p")[0] for c in alice["citations"]} == {
        f"https://acme.slack.com/archives/{PRIVATE}"
    }


def test_members_that_cannot_be_read_make_the_channel_no_ones(
    stub: SlackStub, tmp_path: Path
) -> None:
    stub.channels[PRIVATE].members_error = "missing_scope"
    index = tmp_path / "index"
    summary = corpus.add(index, [SOURCE], allow_private=True)

    assert sorted(summary.restricted) == [
        "acme/#eng-private/2026-11-02",
        "acme/#eng-private/2026-11-03",
        thread_id("eng-private", PRIVATE_THREAD),
    ]
    assert "missing_scope" in summary.restricted["acme/#eng-private/2026-11-02"]
    assert hits(index, "escrow", "user:alice", "everyone") == []
    assert hits(index, "escrow"), "an admin still sees it"
    assert hits(index, "quokkas", "everyone"), "the public channel is read as before"


def test_a_history_slack_refuses_fails_the_source_in_one_line_and_changes_nothing(
    stub: SlackStub, tmp_path: Path
) -> None:
    index = tmp_path / "index"
    corpus.add(index, [SOURCE], allow_private=True)
    stub.post(GENERAL, 500, "U0BOB", "The aardvark census is cancelled.")
    stub.channels[PRIVATE].history_error = "missing_scope"

    summary = corpus.sync(index, allow_private=True)

    assert summary.failed == {
        SOURCE: "acme: Slack answered missing_scope to conversations.history of #eng-private"
    }
    assert not summary.deleted and not summary.updated and not summary.added
    assert hits(index, "escrow") and hits(index, "aardvark") == []


def test_a_429_is_waited_out_and_the_sync_goes_on(stub: SlackStub, tmp_path: Path) -> None:
    stub.rate_limit_once = "conversations.history"
    started = time.monotonic()
    summary = corpus.add(tmp_path / "index", [SOURCE], allow_private=True)

    assert len(summary.added) == 5 and not summary.failed, summary.failed
    assert time.monotonic() - started >= 1, "Retry-After: 1 was honoured"
    assert stub.rate_limit_once is None


def test_a_wait_longer_than_the_budget_stops_with_one_line(stub: SlackStub) -> None:
    stub.rate_limit_once = "conversations.list"
    stub.retry_after = 30
    api = SlackApi(api=stub.api, token=TOKEN, workspace="acme", budget_s=5)
    connector = SlackConnector(parse_source(SOURCE), api, identities=IdentityMap({}))
    with pytest.raises(ConnectorError, match="rate limit asks for a wait of 30 s"):
        connector.full_load()


def test_an_expired_token_gives_one_line_and_loses_nothing(
    stub: SlackStub, tmp_path: Path, run_cli: RunCli
) -> None:
    index = tmp_path / "index"
    added = run_cli("add", SOURCE, "--allow-private", "--index", index)
    assert added.returncode == 0, added.stderr
    listed = run_cli("sources", "--index", index).stdout
    assert "slack slack://acme (5 documents, updated 2026-11-03T09:01:00Z, synced" in listed
    stub.expired.add(TOKEN)

    synced = run_cli("sync", "--index", index)

    assert synced.returncode == 1
    output = synced.stdout + synced.stderr
    assert "Traceback" not in output and TOKEN not in output + added.stdout + added.stderr
    (line,) = [x for x in output.splitlines() if "token_expired" in x]
    assert "$FOOTNOTE_SLACK_TOKEN" in line and SOURCE in line
    assert [c.source for c in hits(index, "quokkas")] == [thread_id("general", GENERAL_THREAD)]
    for path in index.rglob("*"):
        if path.is_file():
            assert TOKEN.encode() not in path.read_bytes(), path


def test_an_interrupted_sync_resumes_without_duplicate_chunks(
    stub: SlackStub, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    index = tmp_path / "index"
    first = corpus.add(index, [SOURCE], allow_private=True).checkpoints[SOURCE]
    for n, parent in enumerate([GENERAL_THREAD, PRIVATE_THREAD]):
        channel = GENERAL if n == 0 else PRIVATE
        stub.post(channel, 200 + n, "U0ALICE", f"Update {n}: the echidna audit is done.", parent)
    stub.post(GENERAL, 300, "U0BOB", "Echidna audit report filed.")
    real = SlackApi.replies
    read: list[str] = []

    def crashing(self: SlackApi, channel: str, stamp: str) -> list[dict[str, Any]]:
        read.append(stamp)
        if len(read) == 2:
            raise KeyboardInterrupt  # the process dies after one thread was read
        return real(self, channel, stamp)

    with monkeypatch.context() as patch:
        patch.setattr(SlackApi, "replies", crashing)
        with pytest.raises(KeyboardInterrupt):
            corpus.sync(index, allow_private=True)
    assert corpus.sources(index)["sources"][0]["checkpoint"]["cursor"] == first["cursor"]

    resumed = corpus.sync(index, allow_private=True)

    assert sorted(resumed.updated) == [
        thread_id("eng-private", PRIVATE_THREAD),
        "acme/#general/2026-11-02",
        thread_id("general", GENERAL_THREAD),
    ]
    assert len(hits(index, "echidna audit")) == 3
    everything = [(c.source, c.text) for c in hits(index, "the")]
    assert not [k for k, n in Counter(everything).items() if n > 1], "no chunk twice"

    def chunks(where: Path) -> dict[str, int]:
        return {d["source"]: d["chunks"] for d in corpus.sources(where)["documents"]}

    corpus.add(tmp_path / "fresh", [SOURCE], allow_private=True)
    assert chunks(index) == chunks(tmp_path / "fresh"), "as many chunks as one clean load"


def test_a_sync_killed_mid_read_resumes_without_duplicate_chunks(
    stub: SlackStub, tmp_path: Path
) -> None:
    """kill -9 of `footnote sync` while it waits for a thread's replies."""
    index = tmp_path / "index"
    corpus.add(index, [SOURCE], allow_private=True)
    stub.post(PRIVATE, 400, "U0BOB", "The platypus drill is on.", thread=PRIVATE_THREAD)
    stub.hold = "conversations.replies"

    def release() -> None:
        stub.hold = None
        stub.released.set()

    with sync_held(
        index,
        {},
        tmp_path / "sync.err",
        held=lambda: stub.called("held:conversations.replies"),
        waiting_for="a thread's replies",
        release=release,
    ):
        pass  # the held call for the replies is all there is to see before the kill

    resumed = corpus.sync(index, allow_private=True)

    assert resumed.updated == [thread_id("eng-private", PRIVATE_THREAD)]
    assert [c.source for c in hits(index, "platypus")] == [thread_id("eng-private", PRIVATE_THREAD)]
    corpus.add(tmp_path / "fresh", [SOURCE], allow_private=True)
    assert chunks_per_document(index) == chunks_per_document(tmp_path / "fresh"), (
        "as many chunks as one clean load"
    )


def test_the_token_and_api_are_the_operators(
    stub: SlackStub, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    summary = corpus.add(tmp_path / "index", [SOURCE])
    assert "127.0.0.1" in summary.failed[SOURCE] and not summary.added, "a private API refused"
    monkeypatch.delenv("FOOTNOTE_SLACK_TOKEN")
    again = corpus.add(tmp_path / "index", [SOURCE], allow_private=True)
    assert again.failed == {SOURCE: "$FOOTNOTE_SLACK_TOKEN is not set (the Slack bot token)"}


def test_named_channels_only_are_read(stub: SlackStub, tmp_path: Path) -> None:
    value = f"{SOURCE}?channels=eng-private,%23random,nowhere"
    summary = corpus.add(tmp_path / "index", [value], allow_private=True)
    (root,) = corpus.sources(tmp_path / "index")["sources"]
    assert root["id"] == "slack://acme?channels=eng-private,nowhere,random"
    assert sorted(summary.added) == [
        "acme/#eng-private/2026-11-02",
        "acme/#eng-private/2026-11-03",
        thread_id("eng-private", PRIVATE_THREAD),
    ]
    assert summary.skipped["acme/#nowhere"] == "no such channel, or the bot is not a member"
    assert summary.skipped["acme/#random"] == "no such channel, or the bot is not a member"


def test_a_served_admin_adds_a_workspace_and_the_token_is_in_no_audit_line(
    stub: SlackStub, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    audit = tmp_path / "audit.jsonl"
    monkeypatch.setenv("FOOTNOTE_AUDIT_LOG", str(audit))
    context = IndexerContext(
        index_dir=str(tmp_path / "index"), upload_dir=str(tmp_path / "uploads"), allow_private=True
    )
    admin: Any = {"configurable": {"langgraph_auth_user": {"identity": "root", "admin": True}}}
    value = f"{SOURCE}?channels=general"
    added = indexer_graph.invoke({"action": "add", "sources": [value]}, admin, context=context)
    assert added["result"]["added"] == 2 and not added["result"]["errors"], added["result"]
    synced = indexer_graph.invoke({"action": "sync"}, admin, context=context)["result"]
    assert not synced["errors"], synced
    assert '"action": "sync"' in audit.read_text()
    assert TOKEN not in audit.read_text()


def test_without_slack_sdk_the_error_names_the_extra(
    stub: SlackStub, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "slack_sdk", None)
    api = SlackApi(api=stub.api, token=TOKEN, workspace="acme", budget_s=5)
    connector = SlackConnector(parse_source(SOURCE), api, identities=IdentityMap({}))
    with pytest.raises(ConnectorError, match="needs slack_sdk: .*slack"):
        connector.full_load()


@pytest.mark.parametrize(
    "value",
    [
        "slack://",
        "slack://acme/general",
        "slack://ac me",
        "slack://acme?channel=general",
        "slack://acme?channels=ok&channels=twice",
        "slack://acme?channels=Bad Name",
        "slack://acme?token=XOXB",
    ],
)
def test_a_malformed_source_is_refused_in_one_line(value: str) -> None:
    with pytest.raises(ConnectorError):
        parse_source(value)
