"""A permission-only sync and syncing on a schedule, against the loopback GitHub stub
(tests/github_stub.py): a collaborator removed at the source loses the repository at
`footnote sync --permissions-only` with no issue read and nothing embedded, on a folder
index and on PostgreSQL; readers that cannot be read make the documents no one's; a
malformed setting fails the source and changes nothing; `sync --every` runs until Ctrl-C;
every run is in the audit log."""

from __future__ import annotations

import argparse
import json
import os
import queue
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from footnote.cli.corpus import served_schedule
from footnote.ingest import corpus
from footnote.ingest.sync_schedule import Timer, parse_duration, run_schedule
from footnote.store.types import Caller
from footnote.tools.search import SearchRequest, search
from tests.conftest import REPO, Locate, RunCli, footnote_command
from tests.github_stub import GithubStub, StubIssue, StubRepo, stamp

pytestmark = pytest.mark.integration

TOKEN = "ghp_stubTOKENthatMustNeverBeShown0123456789"
SOURCE = "github://acme/vault"


@pytest.fixture
def stub(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[GithubStub]:
    """A private repository read by alice (octo on GitHub), bob and the platform team:
    three issues, one with a comment."""
    server = GithubStub(TOKEN).start()
    repo = StubRepo(
        "acme", "vault", private=True, collaborators=["octo", "bob"], teams=["platform"]
    )
    for number, topic in enumerate(["wombat rotation", "pager duty", "key escrow"], start=1):
        repo.issues[number] = StubIssue(
            number, f"About {topic}", f"We discuss {topic} here.", "octo", stamp(number)
        )
    server.repos["acme/vault"] = repo
    server.add_comment(repo, 2, "bob", "The pager rotates among the quokkas weekly.", 10)
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
    yield server
    server.stop()


def hits(index: str | Path, query: str, *groups: str) -> list[Any]:
    caller = Caller.of_groups(list(groups)) if groups else Caller.operator()
    request = SearchRequest(query=query, index_dir=str(index), k=20, stage="bm25", caller=caller)
    return [h.chunk for h in search(request)]


def contents(index: str | Path) -> dict[str, tuple[str, str | None]]:
    """Every chunk an admin finds for the corpus's words: its text and context, by id."""
    found = {}
    for word in ("wombat", "pager", "escrow", "quokkas"):
        found.update({c.id: (c.text, c.context) for c in hits(index, word)})
    return found


def audit_records(tmp_path: Path, action: str) -> list[dict[str, Any]]:
    log = tmp_path / "audit.jsonl"
    lines = log.read_text().splitlines() if log.exists() else []
    return [r for r in map(json.loads, lines) if r["action"] == action]


def test_a_revoked_collaborator_loses_the_repository_at_the_permission_sync(
    stub: GithubStub, tmp_path: Path, locate: Locate
) -> None:
    index = locate()
    corpus.add(index, [SOURCE], allow_private=True)
    assert hits(index, "wombat", "user:bob"), "bob reads the repository"
    before, version = contents(index), corpus.sources(index)["version"]
    listed = {d["source"]: d["ingested_at"] for d in corpus.sources(index)["documents"]}

    stub.repos["acme/vault"].collaborators.remove("bob")
    stub.requests.clear()
    summary = corpus.sync_permissions(index)

    assert (summary.checked, len(summary.changed), summary.embedded_texts) == (3, 3, 0)
    assert summary.changed["acme/vault/issues/1"] == ["eng", "user:alice"]
    assert not any("/issues" in r for r in stub.requests), "no issue or comment was read"
    assert hits(index, "wombat", "user:bob") == [] and hits(index, "quokkas", "user:bob") == []
    assert [c.source for c in hits(index, "wombat", "user:alice")] == ["acme/vault/issues/1"]
    assert hits(index, "quokkas", "eng"), "the team still reads it"
    assert contents(index) == before, "every chunk's text and context as it was"
    after = corpus.sources(index)
    assert after["version"] != version
    assert {d["source"]: d["ingested_at"] for d in after["documents"]} == listed, "none re-read"

    again = corpus.sync_permissions(index)
    assert (len(again.changed), again.version) == (0, after["version"]), "nothing to publish"
    full = corpus.sync(index, allow_private=True)
    assert full.embedded_texts == 0 and hits(index, "wombat", "user:bob") == []


def test_the_command_reports_the_counts_and_records_the_run(
    stub: GithubStub, tmp_path: Path, run_cli: RunCli
) -> None:
    index = tmp_path / "index"
    corpus.add(index, [SOURCE], allow_private=True)
    stub.repos["acme/vault"].collaborators.remove("bob")

    shown = run_cli("sync", "--permissions-only", "--index", str(index))
    as_json = run_cli("sync", "--permissions-only", "--json", "--index", str(index))

    assert shown.returncode == 0, shown.stderr
    assert "permissions of 3 documents checked (1 connector sources), 3 access changed" in (
        shown.stdout
    )
    assert "  access: acme/vault/issues/2: eng,user:alice" in shown.stdout
    result = json.loads(as_json.stdout)
    assert (result["checked"], result["access_changed"], result["embedded_texts"]) == (3, 0, 0)
    records = audit_records(tmp_path, "sync-permissions")
    assert [r["result"] for r in records] == ["ok", "ok"]
    assert records[0]["who"].startswith("local:") and records[0]["summary"]["access_changed"] == 3
    assert TOKEN not in (tmp_path / "audit.jsonl").read_text() + shown.stdout + shown.stderr


def test_readers_that_cannot_be_read_make_the_documents_no_ones(
    stub: GithubStub, tmp_path: Path, run_cli: RunCli
) -> None:
    index = tmp_path / "index"
    corpus.add(index, [SOURCE], allow_private=True)
    stub.repos["acme/vault"].collaborators_status = 403

    summary = corpus.sync_permissions(index)

    assert len(summary.restricted) == 3 and "(403)" in summary.restricted["acme/vault/issues/1"]
    assert summary.changed["acme/vault/issues/1"] is None
    assert hits(index, "wombat", "user:alice", "eng") == []
    assert hits(index, "wombat"), "an admin still sees them"

    del stub.repos["acme/vault"]  # the repository gone: the source answers nothing at all
    listed = run_cli("sync", "--permissions-only", "--index", str(index))
    assert listed.returncode == 1, "documents only admins may see make the status 1"
    assert "admins only: acme/vault/issues/3: its readers could not be read" in listed.stdout


def test_a_source_that_cannot_be_opened_keeps_its_documents_and_fails(
    stub: GithubStub, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    index = tmp_path / "index"
    corpus.add(index, [SOURCE], allow_private=True)
    version = corpus.sources(index)["version"]
    stub.repos["acme/vault"].collaborators.remove("bob")
    (tmp_path / "identities.json").write_text("{not json")

    summary = corpus.sync_permissions(index)

    assert list(summary.failed) == [SOURCE] and summary.version == version
    assert hits(index, "wombat", "user:bob"), "nothing changed: the next sync decides"
    assert audit_records(tmp_path, "sync-permissions") == [], "the library call is not audited"


def test_a_schedule_runs_until_interrupted_and_audits_each_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = tmp_path / "notes"
    folder.mkdir()
    (folder / "a.md").write_text("# Otters\n\nOtters hold hands while they sleep.\n")
    index = tmp_path / "index"
    corpus.add(index, [folder])
    monkeypatch.setenv("FOOTNOTE_AUDIT_LOG", str(tmp_path / "audit.jsonl"))
    env = {**os.environ, "TOKENIZERS_PARALLELISM": "false"}
    command = [*footnote_command(), "sync", "--every", "1s", "--permissions-every", "1s"]
    process = subprocess.Popen(
        [*command, "--index", str(index)],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        lines = _lines(process, wanted=3, timeout=120)
        process.send_signal(signal.SIGINT)
        assert process.wait(timeout=60) == 0, process.stderr.read() if process.stderr else ""
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert " sync: 0 added, 0 updated, 1 unchanged" in lines[0]
    assert any(" permission sync: 0 checked, 0 access changed" in line for line in lines)
    assert all(line.endswith("next in 1s") for line in lines), lines
    records = audit_records(tmp_path, "sync") + audit_records(tmp_path, "sync-permissions")
    assert len(records) >= 3 and {r["who"] for r in records} == {"schedule"}


def test_serve_syncs_the_served_index_on_its_schedule_until_it_stops(
    stub: GithubStub,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    index = tmp_path / "index"
    corpus.add(index, [SOURCE], allow_private=True)
    stub.repos["acme/vault"].collaborators.remove("bob")
    monkeypatch.setenv("FOOTNOTE_ALLOW_PRIVATE_URLS", "1")  # the stub is on loopback
    args = argparse.Namespace(index=str(index), sync_every=3600.0, permissions_every=3600.0)

    with served_schedule(args):
        deadline = time.monotonic() + 120
        while (
            len(audit_records(tmp_path, "sync") + audit_records(tmp_path, "sync-permissions")) < 2
        ):
            assert time.monotonic() < deadline, capsys.readouterr()
            time.sleep(0.1)  # polling the audit log the schedule's thread writes
    assert not any(t.name == "footnote-sync-schedule" for t in threading.enumerate())

    full, light = audit_records(tmp_path, "sync"), audit_records(tmp_path, "sync-permissions")
    assert [(r["who"], r["result"]) for r in full + light] == [("schedule", "ok")] * 2
    assert full[0]["summary"]["updated"] == 3 and full[0]["summary"].get("embedded_texts", 0) == 0
    assert hits(index, "wombat", "user:bob") == []
    lines = capsys.readouterr().out.splitlines()
    assert any("sync: 0 added, 3 updated" in line and "next in 1h" in line for line in lines)
    assert any("permission sync: 3 checked, 0 access changed" in line for line in lines)


def test_footnote_serve_runs_its_schedule_beside_the_server_and_stops_with_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = tmp_path / "notes"
    folder.mkdir()
    (folder / "a.md").write_text("# Otters\n\nOtters hold hands while they sleep.\n")
    index = tmp_path / "index"
    corpus.add(index, [folder])
    monkeypatch.setenv("FOOTNOTE_AUDIT_LOG", str(tmp_path / "audit.jsonl"))
    schedule = ["--sync-every", "1h", "--permissions-every", "1h"]
    process = subprocess.Popen(
        [*footnote_command(), "serve", "--index", str(index), "--port", "0", *schedule],
        cwd=REPO,
        env={k: v for k, v in os.environ.items() if k != "FOOTNOTE_INDEX"},
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        lines = _lines(process, wanted=3, timeout=180)
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=60) == 143
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert any(line.startswith("Footnote server: http://") for line in lines), lines
    assert any(" sync: 0 added, 0 updated, 1 unchanged" in line for line in lines), lines
    assert any(" permission sync: 0 checked" in line for line in lines), lines
    records = audit_records(tmp_path, "sync") + audit_records(tmp_path, "sync-permissions")
    assert [(r["who"], r["result"]) for r in records] == [("schedule", "ok")] * 2


def test_serve_refuses_a_malformed_schedule(run_cli: RunCli) -> None:
    refused = run_cli("serve", "--sync-every", "soon")
    assert refused.returncode == 2 and "is not a duration" in refused.stderr


def _lines(process: subprocess.Popen[str], *, wanted: int, timeout: float) -> list[str]:
    """The first `wanted` lines the process prints, read by a thread so a silent process
    fails the test at `timeout` rather than hang it."""
    got: queue.Queue[str] = queue.Queue()
    assert process.stdout is not None
    stdout = process.stdout

    def read() -> None:
        for line in stdout:
            got.put(line)

    threading.Thread(target=read, daemon=True).start()
    lines: list[str] = []
    deadline = time.monotonic() + timeout
    while len(lines) < wanted:
        try:
            lines.append(got.get(timeout=max(0.0, deadline - time.monotonic())).rstrip("\n"))
        except queue.Empty:
            pytest.fail(f"only {len(lines)} run lines in {timeout} s: {lines}")
    return lines


def test_a_failing_run_is_reported_and_the_schedule_goes_on_backing_off() -> None:
    outcomes: list[tuple[str, Exception | None, float]] = []
    stop = threading.Event()
    calls = iter([ValueError("index locked"), ValueError("index locked"), None])

    def runner(kind: Any) -> Any:
        error = next(calls)
        if error is not None:
            raise error
        return "summary"

    def report(kind: Any, summary: Any, error: Exception | None, wait: float) -> None:
        outcomes.append((kind, error, wait))
        if len(outcomes) == 3:
            stop.set()

    run_schedule([Timer("sync", 0.01, time.monotonic())], runner, report, stop=stop)

    assert [str(e) for _, e, _ in outcomes] == ["index locked", "index locked", "None"]
    assert [w for _, _, w in outcomes] == [0.02, 0.04, 0.01], "each failure doubles the wait"


@pytest.mark.parametrize(
    ("text", "seconds"), [("30s", 30), ("15m", 900), ("1h", 3600), ("1h30m", 5400), ("45", 45)]
)
def test_durations_are_read_as_written(text: str, seconds: float) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "0s", "15 minutes", "-5m", "m", "1x"])
def test_a_malformed_duration_is_refused(text: str) -> None:
    with pytest.raises(ValueError):
        parse_duration(text)
