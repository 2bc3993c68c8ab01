"""Waiting in tests for something another process or thread does: on the event itself, or
on the process's exit, never a bare sleep, so the wait ends as soon as either happens."""

from __future__ import annotations

import contextlib
import subprocess
import threading
import time
from collections.abc import Callable

INTERVAL_S = 0.05
"""How often a check that has no event of its own is looked at again."""


def wait_for(
    ready: threading.Event | Callable[[], bool],
    *,
    what: str,
    process: subprocess.Popen[bytes] | None = None,
    timeout_s: float = 120.0,
) -> None:
    """Until `ready` holds or `process` (when given) has ended; fails naming `what` after
    `timeout_s`. The caller checks which of the two it was. Without a process: a state
    another process changes that sends no event (a served index picking up a changed file)."""
    is_ready = ready.is_set if isinstance(ready, threading.Event) else ready
    deadline = time.monotonic() + timeout_s
    while not is_ready() and (process is None or process.poll() is None):
        assert time.monotonic() < deadline, f"gave up waiting: {what}"
        if isinstance(ready, threading.Event):
            ready.wait(INTERVAL_S)
        elif process is None:
            time.sleep(INTERVAL_S)
        else:
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(INTERVAL_S)
