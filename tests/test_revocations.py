"""The revocation log (footnote.store.revocations): a publish that takes a document from a
group records it, on a folder index and on PostgreSQL, through a full sync, a
permission-only sync and a plain re-ingest; a grant, a new document or a deletion records
nothing; a rebuild keeps the log; and a served caller's scope (what its threads are filed
and served under) changes exactly when something was taken from one of its groups. The
served end of it is tests/test_served_connector_leaks.py's thread test."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from footnote.ingest import corpus
from footnote.ingest.pipeline import ingest
from footnote.server.credentials import Credentials, write_api_keys
from footnote.store import revocations
from footnote.store.backends import open_writer
from footnote.store.types import FileRecord
from tests.conftest import Locate
from tests.github_stub import GithubStub, StubIssue, StubRepo, stamp

TOKEN = "ghp_stubTOKENforTheRevocationLog0123456789"


def record(access: list[str] | None) -> FileRecord:
    return FileRecord(sha256="0" * 64, chunk_ids=[], size=1, mtime=0.0, access=access)


def test_only_narrowing_counts() -> None:
    before = {
        "a": record(["hr", "eng"]),
        "b": record(["everyone"]),
        "c": record(["ops"]),
        "old": record(None),
        "gone": record(["legal"]),
    }
    after = {
        "a": record(["eng", "sales"]),  # hr loses it, sales gains it
        "b": record(None),  # unreadable now: no one
        "c": record(["ops", "hr"]),  # a grant
        "old": record(["x"]),  # nothing known before
        "new": record(["finance"]),
    }
    assert revocations.revoked_groups(before, after) == {"hr", "everyone"}
    assert revocations.revoked_groups(before, before) == set()


def test_the_log_only_grows_and_a_caller_takes_the_latest_of_its_groups() -> None:
    first = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    log = revocations.with_revocations({}, {"hr"}, now=first)
    log = revocations.with_revocations(log, {"eng"}, now=first + dt.timedelta(days=1))
    log = revocations.with_revocations(log, set())
    assert log == {"hr": "2026-01-01T00:00:00.000000Z", "eng": "2026-01-02T00:00:00.000000Z"}
    assert revocations.latest(log, ["hr", "eng", "everyone"]) == log["eng"]
    assert revocations.latest(log, ["sales", "everyone"]) == ""


@pytest.mark.parametrize(
    "stored", [None, [], "hr", {"hr": 1}, {1: "x"}, {"hr": ["x"]}, {"hr": None}]
)
def test_a_log_not_shaped_as_published_reads_as_empty(stored: object) -> None:
    assert revocations.checked_log(stored) == {}


def write_doc(folder: Path, access: str) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "pay.md").write_text(
        f"---\naccess: [{access}]\n---\n# Pay\n\nSalaries are paid by the okapi ledger.\n"
    )


def logged(index: str | Path) -> dict[str, str]:
    live = open_writer(index).previous()
    assert live is not None
    return revocations.checked_log(live.manifest.get(revocations.MANIFEST_KEY))


def test_a_reingest_that_narrows_a_document_records_the_group_and_a_rebuild_keeps_it(
    tmp_path: Path, locate: Locate
) -> None:
    docs, index = tmp_path / "docs", locate()
    write_doc(docs, "hr, eng")
    ingest([docs], index)
    assert logged(index) == {}

    write_doc(docs, "hr, eng, sales")  # a grant
    ingest([docs], index)
    assert logged(index) == {}

    write_doc(docs, "hr")
    ingest([docs], index)
    log = logged(index)
    assert set(log) == {"eng", "sales"}

    (docs / "pay.md").unlink()  # a deletion at the source takes nothing from anyone
    (docs / "other.md").write_text("# Other\n\nNothing here.\n")
    ingest([docs], index)
    assert logged(index) == log

    ingest([docs], index, rebuild=True)
    assert logged(index) == log


@pytest.fixture
def stub(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[GithubStub]:
    server = GithubStub(TOKEN).start()
    repo = StubRepo("acme", "vault", private=True, collaborators=["octo", "bob"])
    repo.issues[1] = StubIssue(1, "Escrow", "The numbat notary holds the escrow.", "octo", stamp(1))
    server.repos["acme/vault"] = repo
    mapping = tmp_path / "identities.json"
    mapping.write_text(json.dumps({"github:octo": "alice", "github:bob": "bob"}))
    monkeypatch.setenv("GITHUB_TOKEN", TOKEN)
    monkeypatch.setenv("FOOTNOTE_GITHUB_API", server.base)
    monkeypatch.setenv("FOOTNOTE_IDENTITY_MAP", str(mapping))
    monkeypatch.setenv("FOOTNOTE_AUDIT_LOG", str(tmp_path / "audit.jsonl"))
    yield server
    server.stop()


@pytest.mark.integration
@pytest.mark.parametrize("sync", ["permissions", "full"])
def test_a_reader_removed_at_the_source_changes_their_served_scope_and_no_one_elses(
    stub: GithubStub, tmp_path: Path, locate: Locate, sync: str
) -> None:
    index = locate()
    corpus.add(index, ["github://acme/vault"], allow_private=True)
    keys_file = tmp_path / "keys.json"
    keys = write_api_keys(
        keys_file,
        {"alice": {"groups": ["eng"]}, "bob": {"groups": ["eng"]}, "root": {"admin": True}},
    )
    credentials = Credentials.from_env({"FOOTNOTE_API_KEYS": str(keys_file)}, indexes=[index])

    def scope(user: str) -> str:
        return credentials.identify(None, keys[user]).scope

    before = {user: scope(user) for user in keys}
    assert before == {"alice": "eng,everyone", "bob": "eng,everyone", "root": "admin"}

    stub.repos["acme/vault"].collaborators.remove("bob")
    if sync == "permissions":
        corpus.sync_permissions(index)
    else:
        corpus.sync(index, allow_private=True)

    after = {user: scope(user) for user in keys}
    assert set(logged(index)) == {"user:bob"}
    assert after["bob"] == f"eng,everyone@{logged(index)['user:bob']}"
    assert (after["alice"], after["root"]) == (before["alice"], before["root"])
    corpus.sync_permissions(index)  # nothing more taken: the scope holds still
    assert scope("bob") == after["bob"]


def test_an_unreadable_index_scopes_every_caller_apart(tmp_path: Path) -> None:
    docs, index = tmp_path / "docs", tmp_path / "index"
    write_doc(docs, "hr")
    ingest([docs], index)
    watch = revocations.RevocationWatch([str(index)])
    assert watch.stamp(["hr", "everyone"]) == ""
    (index / "CURRENT").write_text("../../etc\n")
    assert watch.stamp(["hr", "everyone"]) == revocations.UNREADABLE
    missing = revocations.RevocationWatch([str(tmp_path / "nothing-yet")])
    assert missing.stamp(["hr"]) == ""
