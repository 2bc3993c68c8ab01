"""A time budget for the work on one file during ingest.

A parser can meet input that makes it crawl (a pathological PDF content stream, a page
built to be slow). The budget stops that file with a reason and the run goes on; no worker
process is needed, so a normal ingest starts as fast as before.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType


class TimeBudgetExceeded(BaseException):
    """One file took longer than its budget; the message is the per-file reason.

    A BaseException, like KeyboardInterrupt, so that a library's `except Exception` around
    its own work (pypdf has many) cannot swallow it and carry on.
    """


@contextmanager
def time_budget(seconds: float) -> Iterator[None]:
    """Raise `TimeBudgetExceeded` inside the block once `seconds` have passed.

    A SIGALRM timer interrupts pure-Python work wherever it is; a C call in progress
    finishes first (they are bounded by the size cap). Signals reach only the main thread,
    so elsewhere (ingest run from a server thread) the block runs without a time budget;
    the size and chunk caps still apply. `seconds <= 0` means no budget.
    """
    if (
        seconds <= 0
        or not hasattr(signal, "setitimer")
        or threading.current_thread() is not threading.main_thread()
    ):
        yield
        return

    def expire(signum: int, frame: FrameType | None) -> None:
        raise TimeBudgetExceeded(
            f"time budget exceeded: parsing took more than {seconds:g} s (--max-seconds)"
        )

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous if previous is not None else signal.SIG_DFL)
