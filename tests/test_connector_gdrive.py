"""The Google Drive connector through the real google-api-python-client (its bundled Drive v3
discovery document) against a loopback stub of Drive's REST API v3 (tests/gdrive_stub.py): a
full load of a folder and its subfolders over paged listings, a Google Doc exported as
Markdown and text, Markdown, HTML and PDF files downloaded and parsed by their parsers, each
cited by its webViewLink; a sync from the change feed that reads only the file that changed
and prunes the ones deleted, trashed or moved out; a reader removed at the source loses the
file at the next permission-only sync and the next full sync, without one text embedded
again; "anyone with the link" counted only when the operator allows it; permissions that
cannot be read make a file no one's; a 429 or a 403 rateLimitExceeded waited out within a
budget; a 401 in one line that loses nothing; a redirect not followed; a sync interrupted
mid-way (an exception on the second changed file, or kill -9 of `footnote sync` while it
waits for one) resuming with no duplicate chunk; the token in no output, file or audit line;
a shared drive; a service account's key file."""

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
from footnote.ingest.connectors import gdrive as gdrive_connector
from footnote.ingest.connectors.base import ConnectorError
from footnote.ingest.connectors.gdrive import DriveConnector, check_api, parse_source, served
from footnote.store.types import Caller
from footnote.tools.search import SearchRequest, search
from tests.conftest import RunCli
from tests.gdrive_stub import DOC, FOLDER, DriveStub, StubFile, user
from tests.hostile_files import minimal_pdf
from tests.killed_sync import chunks_per_document, sync_held

TOKEN = "ya29.stubTOKENthatMustNeverBeShown0123"
ROOT = "1RootFolder"
SOURCE = f"gdrive://{ROOT}"
DOCUMENTS = ["Keys/pager.txt", "Keys/vault.pdf", "Wombat rotation", "audit.html", "escrow.md"]
READERS = ["engineering", "user:alice", "user:bob", "user:gdrive:dave@acme.example"]
SHARED = [
    user("octo@acme.example", "owner"),
    user("bob@acme.example"),
    user("dave@acme.example", "writer"),
    {"type": "group", "emailAddress": "platform@acme.example", "role": "reader"},
]


@pytest.fixture
def stub(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[DriveStub]:
    """A folder shared with alice (octo@ on Drive, its owner), bob, dave (whom the identity
    map does not name) and the platform group: a Google Doc, a Markdown file whose front
    matter claims everyone, an HTML file, and in the subfolder Keys a text file and a PDF;
    a spreadsheet (not read), a trashed file, and a file in another folder."""
    server = DriveStub(TOKEN).start()
    files = [
        StubFile(ROOT, "Handbook", FOLDER, ["root"]),
        StubFile("2Keys", "Keys", FOLDER, [ROOT]),
        StubFile("d1", "Wombat rotation", DOC, [ROOT],
                 b"# Wombat rotation\n\nWe rotate the wombat keys every spring.\n"),
        StubFile("m1", "escrow.md", "text/markdown", [ROOT],
                 b"---\naccess: everyone\n---\n# Key escrow\n\nEscrow is in the badger vault.\n"),
        StubFile("h1", "audit.html", "text/html", [ROOT],
                 b"<html><body><h1>Numbat audit</h1><p>The numbat audit is yearly.</p></body>"),
        StubFile("t1", "pager.txt", "text/plain", ["2Keys"],
                 b"The pager rotates among the quokkas weekly.\n", modifier="bob@acme.example"),
        StubFile("p1", "vault.pdf", "application/pdf", ["2Keys"],
                 minimal_pdf(["Vault unsealing", "The platypus holds the unseal key."])),
        StubFile("s1", "budget", "application/vnd.google-apps.spreadsheet", [ROOT]),
        StubFile("x1", "old.txt", "text/plain", [ROOT], b"The kangaroo plan.", trashed=True),
        StubFile("o1", "other.txt", "text/plain", ["3Other"], b"The echidna plan."),
    ]  # fmt: skip
    for file in files:
        file.permissions = [dict(p) for p in SHARED]
        server.put(file)
    mapping = tmp_path / "identities.json"
    mapping.write_text(
        json.dumps(
            {
                "gdrive:octo@acme.example": "alice",
                "gdrive:bob@acme.example": "bob",
                "gdrive:erin@acme.example": "erin",
                "gdrive-group:platform@acme.example": "engineering",
                "gdrive-domain:acme.example": "staff",
            }
        )
    )
    monkeypatch.setenv("FOOTNOTE_GDRIVE_TOKEN", TOKEN)
    monkeypatch.delenv("FOOTNOTE_GDRIVE_CREDENTIALS", raising=False)
    monkeypatch.delenv("FOOTNOTE_GDRIVE_PUBLIC", raising=False)
    monkeypatch.setenv("FOOTNOTE_GDRIVE_API", server.base)
    monkeypatch.setenv("FOOTNOTE_IDENTITY_MAP", str(mapping))
    monkeypatch.setenv("FOOTNOTE_AUDIT_LOG", str(tmp_path / "audit.jsonl"))
    yield server
    server.stop()


def hits(index: Path, query: str, *groups: str) -> list[Any]:
    caller = Caller.of_groups(list(groups)) if groups else Caller.operator()
    request = SearchRequest(query=query, index_dir=str(index), k=20, stage="bm25", caller=caller)
    return [h.chunk for h in search(request)]


def content_reads(stub: DriveStub) -> list[str]:
    """The files whose content was read (downloaded or exported)."""
    return sorted(
        r.split("?")[0].split("/")[4]
        for r in stub.requests
        if "alt=media" in r or r.split("?")[0].endswith("/export")
    )


def test_a_full_load_reads_the_tree_and_cites_each_file(stub: DriveStub, tmp_path: Path) -> None:
    index = tmp_path / "index"
    summary = corpus.add(index, [SOURCE], allow_private=True)

    assert sorted(summary.added) == DOCUMENTS
    assert not summary.failed and not summary.restricted, (summary.failed, summary.restricted)
    assert summary.skipped == {
        f"gdrive-{ROOT}/budget": "not read: type application/vnd.google-apps.spreadsheet"
    }
    assert any("pageToken=page2" in r for r in stub.requests), "the listing followed its pages"
    assert content_reads(stub) == ["d1", "h1", "m1", "p1", "t1"]
    assert any(r.startswith("/drive/v3/files/d1/export?mimeType=text%2Fmarkdown") for r in
               stub.requests)  # fmt: skip
    assert summary.checkpoints[SOURCE]["cursor"] == str(len(stub.changes) + 1)

    (rotation,) = hits(index, "wombat")
    assert rotation.url == "https://docs.google.com/document/d/d1/edit?usp=drivesdk"
    assert rotation.title == "Wombat rotation" and rotation.access == READERS
    assert rotation.metadata["author"] == "octo@acme.example"
    (pdf,) = hits(index, "platypus")
    assert pdf.source == "Keys/vault.pdf" and pdf.page == 2
    assert [c.source for c in hits(index, "numbat")] == ["audit.html"]
    assert [c.source for c in hits(index, "quokkas")] == ["Keys/pager.txt"]
    (escrow,) = hits(index, "badger")
    assert escrow.access == READERS, "front matter cannot name a file's readers"
    assert hits(index, "badger", "everyone") == []
    assert hits(index, "kangaroo") == [] and hits(index, "echidna") == []


def test_a_sync_reads_only_the_changed_file_and_prunes_the_ones_gone(
    stub: DriveStub, tmp_path: Path
) -> None:
    index = tmp_path / "index"
    corpus.add(index, [SOURCE], allow_private=True)
    stub.edit("t1", b"The pager rotates among the wallabies daily.\n", 30)
    stub.delete("h1")  # deleted for good
    stub.trash("m1")
    stub.move("p1", "3Other")  # moved out of the folder
    stub.requests.clear()

    summary = corpus.sync(index, allow_private=True)

    assert summary.updated == ["Keys/pager.txt"]
    assert sorted(summary.deleted) == ["Keys/vault.pdf", "audit.html", "escrow.md"]
    assert content_reads(stub) == ["t1"]
    assert any(r.startswith("/drive/v3/changes?") for r in stub.requests)
    assert [c.source for c in hits(index, "wallabies")] == ["Keys/pager.txt"]
    assert hits(index, "quokkas") == [] and hits(index, "badger") == []
    assert hits(index, "platypus") == [] and hits(index, "numbat") == []
    assert summary.checkpoints[SOURCE]["cursor"] == str(len(stub.changes) + 1)


def test_a_reader_removed_loses_the_file_at_the_next_permission_only_sync(
    stub: DriveStub, tmp_path: Path, run_cli: RunCli
) -> None:
    index = tmp_path / "index"
    corpus.add(index, [SOURCE], allow_private=True)
    assert hits(index, "wombat", "user:bob"), "bob reads the doc"

    stub.unshare("d1", "bob@acme.example")
    stub.requests.clear()
    summary = corpus.sync_permissions(index)

    assert (summary.checked, len(summary.changed), summary.embedded_texts) == (5, 1, 0)
    assert summary.changed["Wombat rotation"] == [r for r in READERS if r != "user:bob"]
    assert content_reads(stub) == [], "no content was read"
    assert hits(index, "wombat", "user:bob") == []
    assert hits(index, "quokkas", "user:bob"), "bob still reads the other files"
    as_bob = run_cli(
        "search", "wombat", "--stage", "bm25", "--groups", "user:bob", "--json", "--index", index
    )
    assert as_bob.returncode == 0 and json.loads(as_bob.stdout) == [], as_bob.stderr


def test_a_reader_removed_loses_the_file_at_the_next_sync_with_nothing_embedded(
    stub: DriveStub, tmp_path: Path
) -> None:
    index = tmp_path / "index"
    corpus.add(index, [SOURCE], allow_private=True)

    stub.unshare("d1", "bob@acme.example")
    summary = corpus.sync(index, allow_private=True)

    assert summary.updated == ["Wombat rotation"] and summary.embedded_texts == 0, (
        "re-published, not re-embedded"
    )
    assert hits(index, "wombat", "user:bob") == []
    assert hits(index, "wombat", "engineering"), "the group still reads it"


def test_anyone_with_the_link_counts_only_when_the_operator_allows_it(
    stub: DriveStub, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    stub.files["d1"].permissions.append({"type": "anyone", "role": "reader"})
    stub.files["t1"].permissions = [{"type": "domain", "domain": "acme.example", "role": "reader"}]
    corpus.add(tmp_path / "closed", [SOURCE], allow_private=True)
    assert hits(tmp_path / "closed", "wombat", "everyone") == []
    assert [c.access for c in hits(tmp_path / "closed", "quokkas")] == [["staff"]]

    monkeypatch.setenv("FOOTNOTE_GDRIVE_PUBLIC", "1")
    corpus.add(tmp_path / "open", [SOURCE], allow_private=True)
    assert [c.access for c in hits(tmp_path / "open", "wombat", "everyone")] == [["everyone"]]


def test_permissions_that_cannot_be_read_make_the_file_no_ones(
    stub: DriveStub, tmp_path: Path
) -> None:
    stub.files["d1"].permissions_status = 403
    stub.files["t1"].permissions = []
    index = tmp_path / "index"
    summary = corpus.add(index, [SOURCE], allow_private=True)

    assert sorted(summary.restricted) == ["Keys/pager.txt", "Wombat rotation"]
    assert "(403)" in summary.restricted["Wombat rotation"]
    assert hits(index, "wombat", *READERS) == [] and hits(index, "quokkas", *READERS) == []
    assert hits(index, "wombat"), "an admin still sees it"
    assert len(corpus.sync(index, allow_private=True).restricted) == 2, "listed at every sync"


@pytest.mark.parametrize("status", [429, 403])
def test_a_rate_limit_is_waited_out_and_the_sync_goes_on(
    stub: DriveStub, tmp_path: Path, status: int
) -> None:
    stub.rate_limit_once, stub.rate_limit_status = "/files/d1/permissions", status
    started = time.monotonic()
    summary = corpus.add(tmp_path / "index", [SOURCE], allow_private=True)

    assert len(summary.added) == 5 and not summary.failed and not summary.restricted
    assert time.monotonic() - started >= 1, "Retry-After: 1 was honoured"
    assert stub.rate_limit_once is None


def test_a_wait_longer_than_the_budget_stops_with_one_line(stub: DriveStub) -> None:
    stub.rate_limit_once = "/files"
    connector = DriveConnector(parse_source(SOURCE), api=stub.base, budget_s=0.5)
    with pytest.raises(ConnectorError, match="rate limit asks for a wait of 1 s"):
        connector.full_load()


def test_an_expired_token_gives_one_line_and_loses_nothing(
    stub: DriveStub, tmp_path: Path, run_cli: RunCli, monkeypatch: pytest.MonkeyPatch
) -> None:
    index = tmp_path / "index"
    added = run_cli("add", SOURCE, "--allow-private", "--index", index)
    assert added.returncode == 0, added.stderr
    monkeypatch.setenv("FOOTNOTE_GDRIVE_TOKEN", "expired-token")

    synced = run_cli("sync", "--index", index)

    assert synced.returncode == 1
    output = synced.stdout + synced.stderr
    assert "Traceback" not in output
    (line,) = [x for x in output.splitlines() if "401 Unauthorized" in x]
    assert "$FOOTNOTE_GDRIVE_TOKEN" in line and SOURCE in line
    assert len(hits(index, "wombat")) == 1, "what was indexed stays"


def test_a_redirect_is_not_followed(stub: DriveStub, tmp_path: Path) -> None:
    stub.redirect_once = "/files"
    summary = corpus.add(tmp_path / "index", [SOURCE], allow_private=True)
    assert "a redirect, which is not followed" in summary.failed[SOURCE]
    assert not summary.added and not any("127.0.0.2" in r for r in stub.requests)


def test_a_sync_interrupted_mid_way_resumes_with_no_duplicate_chunk(
    stub: DriveStub, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    index = tmp_path / "index"
    first = corpus.add(index, [SOURCE], allow_private=True).checkpoints[SOURCE]
    for file_id, minute in (("d1", 20), ("t1", 21), ("m1", 22)):
        old = stub.files[file_id].content.decode()
        stub.edit(file_id, f"{old}\nRevision {minute} of the runbook.\n".encode(), minute)
    content = DriveConnector._content
    reads: list[Any] = []

    def crash_after_one(self: DriveConnector, file: Any) -> bytes:
        if reads:
            raise KeyboardInterrupt  # the process dies on the second file
        reads.append(file)
        return content(self, file)

    with monkeypatch.context() as patch:
        patch.setattr(gdrive_connector.DriveConnector, "_content", crash_after_one)
        with pytest.raises(KeyboardInterrupt):
            corpus.sync(index, allow_private=True)
    (root,) = corpus.sources(index)["sources"]
    assert root["checkpoint"]["cursor"] == first["cursor"], "nothing published"

    resumed = corpus.sync(index, allow_private=True)

    assert sorted(resumed.updated) == ["Keys/pager.txt", "Wombat rotation", "escrow.md"]
    chunks = hits(index, "runbook")
    counts = Counter((c.source, c.text) for c in chunks)
    assert max(counts.values()) == 1, counts
    assert len([c for c in chunks if "Revision" in c.text]) == 3


def test_a_sync_killed_by_sigkill_mid_way_resumes_with_no_duplicate_chunk(
    stub: DriveStub, tmp_path: Path
) -> None:
    """kill -9 of `footnote sync` while it waits for the download of the second changed
    file (escrow.md), the first one (the Google Doc) exported."""
    index = tmp_path / "index"
    first = corpus.add(index, [SOURCE], allow_private=True).checkpoints[SOURCE]
    for file_id, minute in (("d1", 20), ("t1", 21), ("m1", 22)):
        old = stub.files[file_id].content.decode()
        stub.edit(file_id, f"{old}\nRevision {minute} of the runbook.\n".encode(), minute)
    stub.requests.clear()
    stub.hold = r"/drive/v3/files/m1\?.*alt=media.*"
    env = {
        "FOOTNOTE_GDRIVE_TOKEN": TOKEN,
        "FOOTNOTE_GDRIVE_API": stub.base,
        "FOOTNOTE_IDENTITY_MAP": os.environ["FOOTNOTE_IDENTITY_MAP"],
    }
    with sync_held(
        index,
        env,
        tmp_path / "sync.err",
        held=stub.arrived,
        waiting_for="escrow.md",
        release=stub.let_go,
    ):
        assert content_reads(stub) == ["d1", "m1"], (
            "killed while waiting for the second changed file, the first one read"
        )
    (root,) = corpus.sources(index)["sources"]
    assert root["checkpoint"]["cursor"] == first["cursor"], "nothing published"
    stub.requests.clear()

    resumed = corpus.sync(index, allow_private=True)

    assert not resumed.failed, resumed.failed
    assert sorted(resumed.updated) == ["Keys/pager.txt", "Wombat rotation", "escrow.md"]
    assert not resumed.added and not resumed.deleted
    assert content_reads(stub) == ["d1", "m1", "t1"], "only the changed files are read again"
    assert resumed.checkpoints[SOURCE]["cursor"] == str(len(stub.changes) + 1)
    chunks = hits(index, "runbook")
    counts = Counter((c.source, c.text) for c in chunks)
    assert max(counts.values()) == 1, counts
    assert len([c for c in chunks if "Revision" in c.text]) == 3
    corpus.add(tmp_path / "fresh", [SOURCE], allow_private=True)
    assert chunks_per_document(index) == chunks_per_document(tmp_path / "fresh"), (
        "as many chunks as one clean load"
    )


def test_a_lost_change_token_reads_the_tree_again(stub: DriveStub, tmp_path: Path) -> None:
    index = tmp_path / "index"
    corpus.add(index, [SOURCE], allow_private=True)
    stub.edit("t1", b"The pager rotates among the wallabies daily.\n", 30)
    stub.changes.clear()  # Drive no longer knows the recorded token
    stub.put(StubFile("z1", "unrelated.txt", "text/plain", ["3Other"], b"x"))

    summary = corpus.sync(index, allow_private=True)

    assert summary.updated == ["Keys/pager.txt"] and not summary.failed
    assert summary.checkpoints[SOURCE]["cursor"] == "2"


def test_the_token_is_in_no_output_file_or_audit_line(
    stub: DriveStub, tmp_path: Path, run_cli: RunCli
) -> None:
    index = tmp_path / "index"
    outputs = [
        run_cli("add", SOURCE, "--allow-private", "--index", index),
        run_cli("sources", "--index", index),
        run_cli("sources", "--json", "--index", index),
    ]
    assert all(o.returncode == 0 for o in outputs), [o.stderr for o in outputs]
    assert f"gdrive {SOURCE} (5 documents, updated " in outputs[1].stdout
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


def test_a_shared_drive_is_read_whole(stub: DriveStub, tmp_path: Path) -> None:
    for file in (
        StubFile("9Team", "Team", FOLDER, ["0ADrive"]),
        StubFile("g1", "Wallaby plan", DOC, ["9Team"], b"# Plan\n\nThe wallaby plan.\n"),
        StubFile("g2", "top.md", "text/markdown", ["0ADrive"], b"# Top\n\nThe dingo list.\n"),
    ):
        file.drive, file.owner = "0ADrive", None
        file.permissions = [user("erin@acme.example", "organizer")]
        stub.put(file)
    value = "gdrive://shared-drive/0ADrive"
    summary = corpus.add(tmp_path / "index", [value], allow_private=True)

    assert sorted(summary.added) == ["Team/Wallaby plan", "top.md"] and not summary.failed
    (plan,) = hits(tmp_path / "index", "wallaby", "user:erin")
    assert plan.metadata["author"] == "octo@acme.example", "the last to modify it"


def test_a_service_account_key_file_is_exchanged_for_a_token(
    stub: DriveStub, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    ).decode()
    key_file = tmp_path / "service-account.json"
    key_file.write_text(
        json.dumps(
            {
                "type": "service_account",
                "project_id": "acme",
                "private_key_id": "k1",
                "private_key": pem,
                "client_email": "footnote@acme.iam.gserviceaccount.com",
                "client_id": "1",
                "token_uri": f"{stub.base}/token",
            }
        )
    )
    monkeypatch.delenv("FOOTNOTE_GDRIVE_TOKEN")
    monkeypatch.setenv("FOOTNOTE_GDRIVE_CREDENTIALS", str(key_file))
    summary = corpus.add(tmp_path / "index", [SOURCE], allow_private=True)

    assert sorted(summary.added) == DOCUMENTS and not summary.failed
    assert stub.requests.count("/token") == 1
    assert all(pem[40:80] not in p.read_text(errors="ignore")
               for p in (tmp_path / "index").rglob("*") if p.is_file())  # fmt: skip


def test_without_credentials_the_sync_fails_in_one_line(
    stub: DriveStub, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("FOOTNOTE_GDRIVE_TOKEN")
    summary = corpus.add(tmp_path / "index", [SOURCE], allow_private=True)
    assert summary.failed[SOURCE].startswith("neither $FOOTNOTE_GDRIVE_CREDENTIALS")


def test_without_the_client_the_error_names_the_extra(
    stub: DriveStub, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "googleapiclient.errors", None)
    connector = DriveConnector(parse_source(SOURCE), api=stub.base)
    with pytest.raises(ConnectorError, match="needs google-api-python-client"):
        connector.full_load()


def test_a_served_admin_adds_a_folder_and_names_no_credentials(stub: DriveStub) -> None:
    assert served(SOURCE, str) == SOURCE
    assert served("gdrive://shared-drive/0ADrive/", str) == "gdrive://shared-drive/0ADrive"
    with pytest.raises(ConnectorError):
        served(f"{SOURCE}?token=AWS_SECRET_ACCESS_KEY", str)


def test_a_served_admin_adds_a_folder_through_the_indexer(stub: DriveStub, tmp_path: Path) -> None:
    context = IndexerContext(
        index_dir=str(tmp_path / "index"), upload_dir=str(tmp_path / "uploads"), allow_private=True
    )
    admin: Any = {"configurable": {"langgraph_auth_user": {"identity": "root", "admin": True}}}
    added = indexer_graph.invoke({"action": "add", "sources": [SOURCE]}, admin, context=context)
    assert added["result"]["added"] == 5 and not added["result"]["errors"]


def test_a_missing_folder_or_a_file_fails_the_source_in_one_line(
    stub: DriveStub, tmp_path: Path
) -> None:
    missing = corpus.add(tmp_path / "a", ["gdrive://1Missing"], allow_private=True)
    assert missing.failed["gdrive://1Missing"] == (
        "Google Drive folder 1Missing: not found (404), or $FOOTNOTE_GDRIVE_TOKEN may not read it"
    )
    a_file = corpus.add(tmp_path / "b", ["gdrive://t1"], allow_private=True)
    assert a_file.failed["gdrive://t1"] == "gdrive://t1: not a folder (text/plain)"


@pytest.mark.parametrize(
    "value",
    [
        "gdrive://",
        "gdrive://a/b",
        "gdrive://shared-drive",
        "gdrive://shared-drive/a/b",
        "gdrive://../x",
        "gdrive://folder?token=X",
        "gdrive://user@folder",
        "gdrive://folder#x",
        "gdrive+https://folder",
    ],
)
def test_a_malformed_source_is_refused_in_one_line(value: str) -> None:
    with pytest.raises(ConnectorError):
        parse_source(value)


@pytest.mark.parametrize(
    "value", ["http://drive.example", "ftp://127.0.0.1", "https://u:p@drive.example", "x"]
)
def test_the_api_root_is_https_or_loopback_http(value: str) -> None:
    assert check_api("https://drive.example/drive/v3/") == "https://drive.example"
    assert check_api("http://127.0.0.1:8080") == "http://127.0.0.1:8080"
    with pytest.raises(ConnectorError, match="FOOTNOTE_GDRIVE_API"):
        check_api(value)
