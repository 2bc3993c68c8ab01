"""The served indexer's job queue (ingest/jobs.py): a job runs in a process of its own, one at
a time per index (the next one says it is queued), a server admits only its limit of jobs,
and a job's errors come back as their own kind, never as a class the job names."""

from __future__ import annotations

import io
import json
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from footnote.ingest import jobs
from footnote.server.langgraph_dev import SERVER_JOBS_ENV, server_command
from tests.waiting import wait_for


def _docs(tmp_path: Path) -> Path:
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "quokka.md").write_text("# Quokka\n\nThe quokka smiles at visitors.\n")
    return docs


def test_jobs_on_one_index_run_one_at_a_time_and_say_they_are_queued(tmp_path: Path) -> None:
    docs = _docs(tmp_path)
    index = str(tmp_path / "index")
    events: dict[str, list[tuple[float, dict[str, Any]]]] = {"first": [], "second": []}
    results: dict[str, dict[str, Any]] = {}
    first_reported = threading.Event()

    def report(name: str, event: dict[str, Any]) -> None:
        events[name].append((time.monotonic(), event))
        if name == "first":
            first_reported.set()

    def job(name: str, source: Path) -> None:
        results[name] = jobs.run_job(
            "add", index, {"paths_or_urls": [str(source)]}, lambda event: report(name, event)
        )
        events[name].append((time.monotonic(), {"stage": "returned"}))

    first = threading.Thread(target=job, args=("first", docs))
    first.start()
    assert first_reported.wait(120), "the first job reported nothing"
    other = tmp_path / "other.md"
    other.write_text("# Other\n\nThe other page, about wombats.\n")
    second = threading.Thread(target=job, args=("second", other))
    second.start()
    first.join(120)
    second.join(120)

    stages = [e["stage"] for _, e in events["second"]]
    assert stages[:3] == ["queued", "dequeued", "started"], stages
    first_done = events["first"][-1][0]
    second_started = next(t for t, e in events["second"] if e["stage"] == "started")
    assert second_started >= first_done - 0.5, "the second job started before the first ended"
    assert "parse" in [e["stage"] for _, e in events["first"]]  # progress from the job
    assert results["first"]["files"]["added"] == ["quokka.md"]
    assert results["second"]["files"]["added"] == ["other.md"]


def test_a_server_admits_only_its_limit_of_indexer_jobs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(jobs.JOBS_ENV, "1")
    docs = _docs(tmp_path)
    started = threading.Event()
    outcome: dict[str, Any] = {}

    def running() -> None:
        outcome["first"] = jobs.run_job(
            "add",
            str(tmp_path / "index"),
            {"paths_or_urls": [str(docs)]},
            lambda event: started.set() if event.get("stage") == "started" else None,
        )

    first = threading.Thread(target=running)
    first.start()
    assert started.wait(60)
    with pytest.raises(jobs.IndexerBusy, match=f"at most 1, {jobs.JOBS_ENV}"):
        jobs.run_job("sync", str(tmp_path / "elsewhere"), {}, lambda event: None)
    first.join(120)
    assert outcome["first"]["added"] == 1
    monkeypatch.setenv(jobs.JOBS_ENV, "none")
    with pytest.raises(ValueError, match=jobs.JOBS_ENV):
        jobs.run_job("sync", str(tmp_path / "index"), {}, lambda event: None)


def _replies(*frames: object) -> io.BytesIO:
    return io.BytesIO(b"".join(json.dumps(f).encode() + b"\n" for f in frames))


def test_a_jobs_errors_come_back_as_known_kinds_only() -> None:
    seen: list[dict[str, Any]] = []
    with pytest.raises(ValueError, match="bad crawl"):
        jobs._outcome(
            _replies(
                {"progress": {"stage": "parse", "done": 1, "total": 2}},
                {"error": {"kind": "ValueError", "message": "bad crawl"}},
            ),
            seen.append,
        )
    assert seen == [{"stage": "parse", "done": 1, "total": 2}]
    with pytest.raises(RuntimeError, match="boom") as raised:  # a name it does not know
        jobs._outcome(_replies({"error": {"kind": "SystemExit", "message": "boom"}}), seen.append)
    assert type(raised.value) is RuntimeError
    with pytest.raises(RuntimeError, match="malformed"):
        jobs._outcome(io.BytesIO(b"not json\n"), seen.append)
    with pytest.raises(RuntimeError, match="without a result"):
        jobs._outcome(io.BytesIO(b""), seen.append)
    with pytest.raises(ValueError, match="unknown indexer action"):
        jobs.run_job("sources", "x", {}, seen.append)


def test_the_dev_server_runs_many_runs_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """`langgraph dev` alone runs one at a time: an indexer job then held every question."""
    monkeypatch.delenv(SERVER_JOBS_ENV, raising=False)
    command = server_command(host="127.0.0.1", port=1, config=Path("langgraph.json"))
    assert command[command.index("--n-jobs-per-worker") + 1] == "10"
    monkeypatch.setenv(SERVER_JOBS_ENV, "4")
    command = server_command(host="127.0.0.1", port=1, config=Path("langgraph.json"))
    assert command[command.index("--n-jobs-per-worker") + 1] == "4"
    monkeypatch.setenv(SERVER_JOBS_ENV, "0")
    with pytest.raises(ValueError, match=SERVER_JOBS_ENV):
        server_command(host="127.0.0.1", port=1, config=Path("langgraph.json"))


def test_a_job_ends_when_the_server_that_asked_for_it_goes(tmp_path: Path) -> None:
    """A replica that dies mid-job closes its end of the job's stdin: the job and its parse
    worker stop then, rather than run on orphaned while holding the index's queue."""
    import os
    import subprocess
    import sys

    import psutil

    from tests.test_office import _many_paragraphs

    docs = _docs(tmp_path)
    (docs / "slow.docx").write_bytes(_many_paragraphs(800_000, varied=True))  # ~15 s to parse
    read_end, write_end = os.pipe()
    process = subprocess.Popen(
        [sys.executable, "-m", "footnote.ingest.jobs", str(write_end)],
        stdin=subprocess.PIPE,
        pass_fds=(write_end,),
    )
    os.close(write_end)
    assert process.stdin is not None
    request = {"action": "add", "index": str(tmp_path / "index"), "arguments": {}}
    request["arguments"] = {"paths_or_urls": [str(docs)]}
    process.stdin.write(json.dumps(request).encode() + b"\n")
    process.stdin.flush()
    with os.fdopen(read_end, "rb") as replies:
        while json.loads(replies.readline())["progress"] != {
            "stage": "parse",
            "done": 2,
            "total": 2,
        }:
            pass  # now slow.docx (after quokka.md) is being parsed
        job = psutil.Process(process.pid)
        wait_for(lambda: bool(job.children(recursive=True)), process=process,
                 what="the job's parse worker")  # fmt: skip
        workers = job.children(recursive=True)
        assert workers, "the job's parse worker was not running"
        process.stdin.close()
        process.wait(timeout=10)
        assert process.returncode != 0
        psutil.wait_procs(workers, timeout=10)
        assert not [w for w in workers if w.is_running() and w.status() != "zombie"]
        assert replies.read() == b""  # no result: the index was not written


def test_budget_settings_are_read_one_way(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every budget set in the environment fails the same way on a bad value: one line that
    names the setting; FOOTNOTE_MAX_SECONDS=0 turns the per-file budget off."""
    from footnote.ingest import isolation, jobs
    from footnote.ingest.documents import ParseError

    monkeypatch.setenv(jobs.MAX_SECONDS_ENV, "0")
    assert jobs.max_seconds() == 0
    monkeypatch.setenv(jobs.MAX_SECONDS_ENV, "soon")
    with pytest.raises(ValueError, match=r"^FOOTNOTE_MAX_SECONDS must be a number of seconds"):
        jobs.max_seconds()
    monkeypatch.setenv(jobs.JOBS_ENV, "1.5")
    with pytest.raises(ValueError, match=rf"^{jobs.JOBS_ENV} must be a whole number, not '1.5'"):
        jobs.job_limit()
    monkeypatch.setenv(isolation.MEMORY_ENV, "0")
    with pytest.raises(ParseError, match=r"FOOTNOTE_PARSE_MEMORY_MB must be at least 1, not 0"):
        isolation._memory_mb()
