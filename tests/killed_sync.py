"""`footnote sync` killed with SIGKILL mid-way, as every connector's resume test does it:
started as the operator runs it, held by the source's stand-in at a chosen read, killed
there, and reaped (and the stand-in released) whatever the test's own checks find."""

from __future__ import annotations

import os
import signal
import subprocess
import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

from footnote.ingest import corpus
from tests.conftest import REPO, footnote_command
from tests.waiting import wait_for


@contextmanager
def sync_held(
    index: Path,
    env: Mapping[str, str],
    log: Path,
    *,
    held: threading.Event | Callable[[], bool],
    waiting_for: str,
    release: Callable[[], None],
) -> Iterator[subprocess.Popen[bytes]]:
    """`footnote sync --index INDEX` in its own process (this environment plus `env`, no
    inherited FOOTNOTE_INDEX), run until `held` says the source holds the chosen read; the
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
        wait_for(held, process=sync, what=f"the sync to ask for {waiting_for}")
        assert sync.poll() is None, f"the sync ended before it was killed: {log.read_text()}"
        yield sync
        os.kill(sync.pid, signal.SIGKILL)
        assert sync.wait(30) == -signal.SIGKILL
    finally:
        if sync.poll() is None:
            os.kill(sync.pid, signal.SIGKILL)
            sync.wait(30)
        release()


def chunks_per_document(index: Path) -> dict[str, int]:
    return {d["source"]: d["chunks"] for d in corpus.sources(index)["documents"]}
