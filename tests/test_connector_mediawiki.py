"""The MediaWiki connector against a real MediaWiki (Debian's package, SQLite, PHP's built-in
server; tests/mediawiki_server.py): a full load whose pages become documents cited by their
sections' anchors, with authors and dates; a sync that re-reads only the pages edited,
created or moved and prunes the deleted one; a private wiki's pages for the groups mapped
from those holding `read`, a restricted namespace for its groups; a refused bot password in
one line that loses nothing; a busy wiki waited out; a sync killed with SIGKILL and run
again leaves no duplicate chunks."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from footnote.ingest import corpus
from footnote.ingest.connectors.base import ConnectorError
from footnote.ingest.connectors.mediawiki import MediawikiConnector, parse_source, served
from footnote.ingest.documents import ParseError
from footnote.store.files import load_index
from footnote.store.types import Caller
from footnote.tools.search import SearchRequest, search
from tests.conftest import REPO, RunCli, footnote_command
from tests.mediawiki_server import (  # noqa: F401 (a fixture)
    BOT_PASSWORDS,
    WikiServer,
    WikiTemplate,
    serve,
    wiki_template,
)
from tests.waiting import wait_for

pytestmark = pytest.mark.integration

PAGES = ["Deploy Guide", "Key Escrow", "Main Page", "Pager Rotation"]


@pytest.fixture
def wiki(wiki_template: WikiTemplate, tmp_path: Path) -> Iterator[WikiServer]:  # noqa: F811
    yield from serve(wiki_template, tmp_path / "wiki")


@pytest.fixture
def private_wiki(wiki_template: WikiTemplate, tmp_path: Path) -> Iterator[WikiServer]:  # noqa: F811
    yield from serve(wiki_template, tmp_path / "private", private=True)


@pytest.fixture
def as_bob(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The connector logs in as Bob's bot; the wiki's `user` group is Footnote's `staff`."""
    mapping = tmp_path / "identities.json"
    mapping.write_text(json.dumps({"wiki:user": "staff"}))
    monkeypatch.setenv("FOOTNOTE_MEDIAWIKI_USER", "Bob@footnote")
    monkeypatch.setenv("FOOTNOTE_MEDIAWIKI_PASSWORD", BOT_PASSWORDS["Bob"])
    monkeypatch.setenv("FOOTNOTE_IDENTITY_MAP", str(mapping))


def source(wiki: WikiServer, query: str = "") -> str:
    return f"mediawiki+{wiki.api}{query}"


def hits(index: Path, query: str, *groups: str) -> list[Any]:
    caller = Caller.of_groups(list(groups)) if groups else Caller.operator()
    request = SearchRequest(query=query, index_dir=str(index), k=20, stage="bm25", caller=caller)
    return [h.chunk for h in search(request)]


def last_edit(wiki: WikiServer, title: str) -> dict[str, Any]:
    """The page's last revision, as the wiki's API gives it to anyone."""
    params = {"action": "query", "prop": "revisions", "titles": title, "format": "json"}
    answer = httpx.get(wiki.api, params={**params, "formatversion": "2"}).json()
    return dict(answer["query"]["pages"][0]["revisions"][0])


def content_reads(wiki: WikiServer) -> list[str]:
    """The revision ids each content request of the wiki's log asked for."""
    return [
        revid
        for line in wiki.requests()
        if "rvprop=ids%7Ccontent" in line and "revids=" in line
        for revid in line.split("revids=")[1].split("&")[0].split("%7C")
    ]


def test_a_full_load_reads_every_page_with_sections_links_authors_and_dates(
    wiki: WikiServer, tmp_path: Path
) -> None:
    index = tmp_path / "index"
    summary = corpus.add(index, [source(wiki)], allow_private=True)

    assert sorted(summary.added) == PAGES and not summary.failed, summary.failed
    assert len(content_reads(wiki)) == 4, "every page's text read, in one batch"
    (canary,) = [c for c in hits(index, "platypus") if "platypus" in c.text]
    assert canary.url == f"{wiki.base}/index.php/Deploy_Guide#Canary"
    assert canary.section == "Deploy Guide > Rollback > Canary"
    assert canary.title == "Deploy Guide" and canary.access == ["everyone"]
    assert canary.metadata["author"] == "Admin" and canary.metadata["revision"] > 0
    assert canary.date == last_edit(wiki, "Deploy Guide")["timestamp"][:10]
    (lead,) = [c for c in hits(index, "Tuesdays") if c.source == "Deploy Guide"]
    assert "release pipeline" in lead.text and "'''" not in lead.text and "[[" not in lead.text
    (pager,) = hits(index, "quokkas")
    assert pager.metadata["author"] == "Bob" and "Citation" not in pager.text
    assert summary.checkpoints[source(wiki)]["cursor"].endswith("Z")


def test_a_sync_re_reads_only_changed_pages_and_prunes_the_deleted_one(
    wiki: WikiServer, tmp_path: Path
) -> None:
    index = tmp_path / "index"
    corpus.add(index, [source(wiki)], allow_private=True)
    admin = wiki.session()
    admin.edit("Key Escrow", "Escrow moves to the numbat vault.\n")
    admin.edit("New Runbook", "== Paging ==\nPage the okapi on call.\n")
    admin.delete("Pager Rotation")
    admin.move("Deploy Guide", "Deployment Guide")
    before = len(content_reads(wiki))

    summary = corpus.sync(index, allow_private=True)

    assert summary.added == ["New Runbook"] and summary.deleted == ["Pager Rotation"]
    assert sorted(summary.updated) == ["Deploy Guide", "Key Escrow"], "a move: its old name"
    assert len(content_reads(wiki)) - before == 3, "only the changed pages were read"
    assert [c.source for c in hits(index, "numbat")] == ["Key Escrow"]
    assert hits(index, "quokkas") == []
    (okapi,) = hits(index, "okapi")
    assert okapi.url == f"{wiki.base}/index.php/New_Runbook#Paging"
    (moved,) = [c for c in hits(index, "platypus") if "platypus" in c.text]
    assert moved.source == "Deploy Guide", "the index keeps a document's name"
    assert moved.title == "Deployment Guide"
    assert moved.url == f"{wiki.base}/index.php/Deployment_Guide#Canary"
    assert corpus.sync(index, allow_private=True).updated == [], "nothing changed since"


def test_a_private_wikis_pages_are_for_the_groups_that_read_it(
    private_wiki: WikiServer, as_bob: None, tmp_path: Path, run_cli: RunCli
) -> None:
    index = tmp_path / "index"
    added = run_cli("add", source(private_wiki), "--allow-private", "--index", index)
    assert added.returncode == 0, added.stderr

    (wombat,) = hits(index, "wombat", "staff")
    assert wombat.access == ["staff"], "the wiki's `user` group, mapped"
    assert hits(index, "wombat", "everyone", "user:mallory") == []
    outsider = run_cli(
        "search", "wombat", "--stage", "bm25", "--groups", "everyone", "--json", "--index", index
    )
    insider = run_cli(
        "search", "wombat", "--stage", "bm25", "--groups", "staff", "--json", "--index", index
    )
    assert outsider.returncode == 0 and json.loads(outsider.stdout) == [], outsider.stderr
    assert [h["source"] for h in json.loads(insider.stdout)] == ["Key Escrow"]
    listed = run_cli("sources", "--index", index)
    assert f"mediawiki {source(private_wiki)} (4 documents, updated " in listed.stdout
    for output in (added, outsider, listed):
        assert BOT_PASSWORDS["Bob"] not in output.stdout + output.stderr


def test_a_wiki_made_private_is_re_published_for_its_readers_without_re_embedding(
    wiki: WikiServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    index = tmp_path / "index"
    corpus.add(index, [source(wiki)], allow_private=True)
    assert hits(index, "wombat", "everyone")
    wiki.restart(private=True)
    mapping = tmp_path / "identities.json"
    mapping.write_text(json.dumps({"wiki:user": "staff"}))
    monkeypatch.setenv("FOOTNOTE_IDENTITY_MAP", str(mapping))
    monkeypatch.setenv("FOOTNOTE_MEDIAWIKI_USER", "Bob@footnote")
    monkeypatch.setenv("FOOTNOTE_MEDIAWIKI_PASSWORD", BOT_PASSWORDS["Bob"])

    summary = corpus.sync(index, allow_private=True)

    assert sorted(summary.updated) == PAGES and summary.embedded_texts == 0, summary
    assert hits(index, "wombat", "everyone") == []
    assert [c.access for c in hits(index, "wombat", "staff")] == [["staff"]]


def test_a_private_wiki_read_anonymously_fails_in_one_line(
    private_wiki: WikiServer, tmp_path: Path
) -> None:
    summary = corpus.add(tmp_path / "index", [source(private_wiki)], allow_private=True)
    assert not summary.added
    assert "lets no anonymous reader in" in summary.failed[source(private_wiki)]


def test_a_restricted_namespace_is_for_its_groups_alone(
    wiki: WikiServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    mapping = tmp_path / "identities.json"
    mapping.write_text(json.dumps({"wiki:sysop": "admins"}))
    monkeypatch.setenv("FOOTNOTE_IDENTITY_MAP", str(mapping))
    index = tmp_path / "index"
    summary = corpus.add(index, [source(wiki, "?ns=0,4&restrict=4:sysop")], allow_private=True)

    assert "Test Wiki:Policy" in summary.added
    (policy,) = hits(index, "narwhal")
    assert policy.access == ["admins"]
    assert hits(index, "narwhal", "everyone") == [] and hits(index, "narwhal", "admins")
    assert hits(index, "wombat", "everyone"), "the main namespace stays public"


def test_a_refused_bot_password_is_one_line_and_loses_nothing(
    private_wiki: WikiServer, as_bob: None, tmp_path: Path, run_cli: RunCli,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    index = tmp_path / "index"
    added = run_cli("add", source(private_wiki), "--allow-private", "--index", index)
    assert added.returncode == 0, added.stderr
    wrong = "not-the-bot-password-31337"
    monkeypatch.setenv("FOOTNOTE_MEDIAWIKI_PASSWORD", wrong)

    synced = run_cli("sync", "--index", index)

    assert synced.returncode == 1
    output = synced.stdout + synced.stderr
    assert "Traceback" not in output and wrong not in output
    (line,) = [x for x in output.splitlines() if "refused the login" in x]
    assert "$FOOTNOTE_MEDIAWIKI_USER" in line
    assert len(hits(index, "wombat", "staff")) == 1, "what was indexed stays"
    for path in index.rglob("*"):
        if path.is_file():
            assert BOT_PASSWORDS["Bob"].encode() not in path.read_bytes(), path


class Busy(httpx.BaseTransport):
    """Answers the first request busy (a 429, or MediaWiki's `maxlag` error) with
    `Retry-After`, then passes requests to the wiki."""

    def __init__(self, wait: str, *, maxlag: bool = False) -> None:
        self.wait = wait
        self.maxlag = maxlag
        self.busy = 1
        self.inner = httpx.HTTPTransport()

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        if not self.busy:
            return self.inner.handle_request(request)
        self.busy -= 1
        if self.maxlag:
            lagged = {"error": {"code": "maxlag", "info": "Waiting for a database server"}}
            return httpx.Response(200, headers={"Retry-After": self.wait}, json=lagged)
        return httpx.Response(429, headers={"Retry-After": self.wait})


class WithoutRights(httpx.BaseTransport):
    """Passes requests to the wiki, but drops the groups' rights from siteinfo's answer."""

    def __init__(self) -> None:
        self.inner = httpx.HTTPTransport()

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        response = self.inner.handle_request(request)
        if "siteinfo" not in str(request.url):
            return response
        response.read()
        data = response.json()
        data["query"].pop("usergroups", None)
        return httpx.Response(response.status_code, json=data)


@pytest.mark.parametrize("maxlag", [False, True], ids=["429", "maxlag"])
def test_a_busy_wiki_is_waited_out_within_the_budget(wiki: WikiServer, maxlag: bool) -> None:
    patient = MediawikiConnector(parse_source(source(wiki)), transport=Busy("1", maxlag=maxlag))
    started = time.monotonic()
    assert len(patient.full_load().documents) == 4
    assert time.monotonic() - started >= 1, "Retry-After: 1 was honoured"

    hurried = MediawikiConnector(
        parse_source(source(wiki)), transport=Busy("600", maxlag=maxlag), budget_s=5
    )
    with pytest.raises(ConnectorError, match="asks for a wait of 600 s, more than this sync"):
        hurried.full_load()


def test_readers_that_cannot_be_read_make_the_pages_no_ones(
    private_wiki: WikiServer, as_bob: None
) -> None:
    connector = MediawikiConnector(parse_source(source(private_wiki)), transport=WithoutRights())
    documents = connector.full_load().documents
    assert len(documents) == 4
    for document in documents:
        assert document.permissions.public is False
        assert document.permissions.access_groups() == []
        assert "did not list which groups may read it" in (document.permissions.problem or "")


def test_a_page_gone_mid_run_is_one_documents_reason(wiki: WikiServer) -> None:
    connector = MediawikiConnector(parse_source(source(wiki)))
    documents = {d.name: d for d in connector.full_load().documents}
    wiki.session().delete("Key Escrow")

    with pytest.raises(ParseError, match="no longer readable in the wiki"):
        documents["Key Escrow"].read()
    record = json.loads(documents["Pager Rotation"].read())
    assert "quokkas" in record["wikitext"], "the other pages are still read"


def test_a_sync_killed_mid_run_and_run_again_leaves_no_duplicate_chunks(
    wiki: WikiServer, tmp_path: Path
) -> None:
    index = tmp_path / "index"
    corpus.add(index, [source(wiki)], allow_private=True)
    admin = wiki.session()
    for n in range(12):
        admin.edit(f"Runbook {n}", f"== Step ==\nRunbook {n} tells of the capybara {n}.\n")
    admin.edit("Key Escrow", "Escrow moves to the numbat vault.\n")
    before = len(content_reads(wiki))
    env = {**os.environ, "TOKENIZERS_PARALLELISM": "false"}
    process = subprocess.Popen(
        [*footnote_command(), "sync", "--allow-private", "--index", str(index)],
        cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        wait_for(
            lambda: len(content_reads(wiki)) > before,
            process=process,
            what="the sync to read a page's content",
        )
        assert process.poll() is None, "the sync ended before it could be killed"
        os.kill(process.pid, signal.SIGKILL)
    finally:
        process.kill()
        process.wait()
    assert hits(index, "capybara") == [], "killed before it published"

    summary = corpus.sync(index, allow_private=True)

    assert not summary.failed, summary.failed
    chunks = load_index(index).chunks
    repeated = Counter((c.source, c.section, c.text) for c in chunks)
    assert [key for key, n in repeated.items() if n > 1] == []
    assert len({c.id for c in chunks}) == len(chunks)
    assert sorted({c.source for c in chunks}) == sorted(
        [*PAGES, *(f"Runbook {n}" for n in range(12))]
    )
    assert [c.source for c in hits(index, "numbat")] == ["Key Escrow"]
    assert hits(index, "wombat") == []


def test_a_served_admin_cannot_name_the_secret_or_send_it_elsewhere(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    wiki = "mediawiki+https://wiki.example/w/api.php"
    assert served(wiki, str) == wiki
    with pytest.raises(ConnectorError, match="cannot set user= or password="):
        served(f"{wiki}?password=AWS_SECRET_ACCESS_KEY", str)
    monkeypatch.setenv("FOOTNOTE_MEDIAWIKI_USER", "Bot@footnote")
    with pytest.raises(ConnectorError, match="FOOTNOTE_MEDIAWIKI_HOSTS"):
        served(wiki, str)
    monkeypatch.setenv("FOOTNOTE_MEDIAWIKI_HOSTS", "wiki.example")
    assert served(wiki, str) == wiki


def test_a_loopback_wiki_needs_allow_private(wiki: WikiServer, tmp_path: Path) -> None:
    summary = corpus.add(tmp_path / "index", [source(wiki)])
    assert "127.0.0.1" in summary.failed[source(wiki)] and not summary.added


@pytest.mark.parametrize(
    "value",
    [
        "mediawiki+ftp://wiki.example/api.php",
        "mediawiki+https://user:pw@wiki.example/api.php",
        "mediawiki+https:///api.php",
        "mediawiki+https://wiki.example/api.php?ns=main",
        "mediawiki+https://wiki.example/api.php?restrict=4",
        "mediawiki+https://wiki.example/api.php?restrict=4:a&restrict=4:b",
        "mediawiki+https://wiki.example/api.php?user=lower",
        "mediawiki+https://wiki.example/api.php?since=1",
    ],
)
def test_a_malformed_source_is_refused_in_one_line(value: str) -> None:
    with pytest.raises(ConnectorError):
        parse_source(value)


def test_a_source_records_its_settings_not_its_secrets() -> None:
    parsed = parse_source("mediawiki+https://wiki.example/w/api.php?restrict=4:sysop,bot&ns=4,0")
    assert parsed.id == (
        "mediawiki+https://wiki.example/w/api.php?ns=0%2C4&restrict=4%3Abot%2Csysop"
    )
    assert parse_source(parsed.id) == parsed
