"""No `footnote-ingest-*` folder outlives its ingest: not after a writer that cannot start,
an error or Ctrl-C mid-run, and, for a process stopped by SIGTERM (which runs no cleanup),
not past the next ingest on the machine, which deletes the folders of processes gone."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from footnote.ingest import run, spool
from footnote.ingest.pipeline import ingest
from footnote.store.lock import IndexLocked
from tests.conftest import HANDBOOK


@pytest.fixture
def scratch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """The temporary folder ingest uses, watched by the test."""
    folder = tmp_path / "tmp"
    folder.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(folder))
    yield folder


def leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.glob("footnote-ingest-*"))


def test_a_writer_that_cannot_start_leaves_no_folder(
    scratch: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = run.open_writer

    class Locked:
        def __init__(self, backend: Any) -> None:
            self.backend = backend

        def writer(self) -> Any:
            raise IndexLocked("index is being written by another process")

        def __getattr__(self, name: str) -> Any:
            return getattr(self.backend, name)

    monkeypatch.setattr(run, "open_writer", lambda index: Locked(real(index)))
    with pytest.raises(IndexLocked) as caught:
        ingest([HANDBOOK], tmp_path / "index")
    assert caught.value is not None  # the traceback (and its frames) is still held here
    assert leftovers(scratch) == []


@pytest.mark.parametrize("stop", [RuntimeError("disk full"), KeyboardInterrupt()])
def test_an_error_or_ctrl_c_mid_run_leaves_no_folder(
    scratch: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, stop: BaseException
) -> None:
    seen: list[str] = []

    def put(self: spool.FreshSpool, *args: Any) -> None:
        seen.extend(leftovers(scratch))
        raise stop

    monkeypatch.setattr(spool.FreshSpool, "put", put)
    with pytest.raises(type(stop)):
        ingest([HANDBOOK], tmp_path / "index")
    assert seen and seen[0].startswith(f"footnote-ingest-{os.getpid()}-")
    assert leftovers(scratch) == []


SPOOLING = """
import signal, sys, tempfile
tempfile.tempdir = sys.argv[1]
from footnote.ingest.spool import FreshSpool
held = FreshSpool(384)
print("ready", flush=True)
signal.pause()  # held until the test's SIGTERM
"""


def test_a_folder_left_by_a_sigterm_is_deleted_by_the_next_spool(scratch: Path) -> None:
    process = subprocess.Popen(
        [sys.executable, "-c", SPOOLING, str(scratch)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert process.stdout is not None and process.stdout.readline().strip() == "ready"
        left = leftovers(scratch)
        assert left == [f"footnote-ingest-{process.pid}-{left[0].rsplit('-', 1)[1]}"]
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=30) == -signal.SIGTERM
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert leftovers(scratch) == left  # SIGTERM runs no cleanup
    mine = spool.FreshSpool(384)
    try:
        assert leftovers(scratch) == [Path(mine._folder.name).name]
    finally:
        mine.close()
    assert leftovers(scratch) == []


def test_the_sweep_leaves_live_processes_and_links_alone(scratch: Path, tmp_path: Path) -> None:
    live = scratch / f"footnote-ingest-{os.getpid()}-live"
    live.mkdir()
    target = tmp_path / "elsewhere"
    target.mkdir()
    gone = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        text=True,
        capture_output=True,
        check=True,
    )
    link = scratch / f"footnote-ingest-{gone.stdout.strip()}-link"
    link.symlink_to(target)  # its process is gone: subprocess.run reaped it
    assert spool.sweep_leftovers() == []
    assert live.is_dir() and link.is_symlink() and target.is_dir()
