"""`footnote sync` killed with SIGKILL mid-way, as every connector's resume test does it:
started as the operator runs it, held by the source's stand-in at a chosen read, killed
there, and reaped (and the stand-in released) whatever the test's own checks find."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from footnote.ingest import corpus
from tests.conftest import REPO, footnote_command


@contextmanager
def sync_held(
    index: Path,
    env: Mapping[str, str],
    log: Path,
    *,
    held: Callable[[], bool],
    waiting_for: str,
    release: Callable[[], None],
) -> Iterator[subprocess.Popen[bytes]]:
    """`footnote sync --index INDEX` in its own process (this environment plus `env`, no
    inherited FOOTNOTE_INDEX), run until `held()` says the source holds the chosen read; the
    block then checks what was read before it, and on leaving it the process is killed with
    SIGKILL (it must die of it, still running until then) and the source released."""
    environment = {**os.environ, "TOKENIZERS_PARALLELISM": "false", **env}
    environment.pop("FOOTNOTE_INDEX", None)
    with log.open("wb") as stderr:
        sync = subprocess.Popen(
            [*footnote_command(), "sync", "--index", str(index)],
            cwd=REPO,
            env=environment,
            stdout=subprocess.DEVNULL,
            stderr=stderr,
        )
    try:
        deadline = time.monotonic() + 120
        while not held() and sync.poll() is None:
            assert time.monotonic() < deadline, f"the sync never asked for {waiting_for}"
            time.sleep(0.05)
        assert sync.poll() is None, f"the sync ended before it was killed: {log.read_text()}"
        yield sync
        os.kill(sync.pid, signal.SIGKILL)
        assert sync.wait(30) == -signal.SIGKILL
    finally:
        if sync.poll() is None:
            os.kill(sync.pid, signal.SIGKILL)
            sync.wait(30)
        release()


def released(stub: Any) -> Callable[[], None]:
    """Lets a loopback stub's held request go (`hold` / `released`, as the stubs name them)."""

    def release() -> None:
        stub.hold = None
        stub.released.set()

    return release


def chunks_per_document(index: Path) -> dict[str, int]:
    return {d["source"]: d["chunks"] for d in corpus.sources(index)["documents"]}
