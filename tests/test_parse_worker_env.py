"""A parse worker is reused only by files parsed under the environment it started with: a
host (or a test) that changes PATH or a parse setting between files gets a worker that sees
the change. A worker started while Tesseract was off PATH had made every later scanned page
fail OCR in the same process."""

from __future__ import annotations

from pathlib import Path

import pytest

from footnote.ingest import isolation
from footnote.ingest.parsers import parse_bytes


def _worker_pids() -> set[int]:
    with isolation._lock:
        return {worker.process.pid for worker in isolation._started}


def test_a_worker_started_under_another_environment_is_not_reused(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    page = b"# Page\n\nThe wombat sleeps by day.\n"
    monkeypatch.setenv("PATH", str(tmp_path))  # as a test hiding Tesseract does
    assert parse_bytes(page, Path("a.md"), "a.md").sections
    started_hidden = _worker_pids()
    monkeypatch.undo()
    assert parse_bytes(page, Path("a.md"), "a.md").sections
    reused = _worker_pids() & started_hidden
    assert not reused, "a worker started with another PATH parsed again"
    again = _worker_pids()
    assert parse_bytes(page, Path("b.md"), "b.md").sections
    assert _worker_pids() & again, "a worker with the same environment is reused"
