"""A time budget for the work on one file during ingest.

A parser can meet input that makes it crawl (a pathological PDF content stream, a page
built to be slow). The budget stops that file with a reason and the run goes on. Office
files, whose parsing is C work no signal stops, are parsed in a worker process that the
budget's deadline stops on any thread (ingest/isolation.py).
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from types import FrameType

current_deadline: ContextVar[float | None] = ContextVar("current_deadline", default=None)
"""When the file being worked on must be done (`time.monotonic()`), inside
`FileBudget.running()`: a worker process (ingest/isolation.py) is stopped then, on any
thread, where the SIGALRM timer reaches the main thread only."""


def setting_number(
    name: str, default: float, *, whole: bool, unit: str = "", at_least: float = 1
) -> float:
    """A number from the environment setting `name`, or `default` when unset: the one
    reading of every budget an operator sets this way, with the same one-line errors."""
    value = os.environ.get(name, "")
    kind = "a whole number" if whole else "a number"
    try:
        number = (int(value) if whole else float(value)) if value else default
    except ValueError:
        raise ValueError(f"{name} must be {kind}{unit}, not {value!r}") from None
    if number < at_least:
        raise ValueError(f"{name} must be at least {at_least:g}, not {number:g}")
    return number


class TimeBudgetExceeded(BaseException):
    """One file took longer than its budget; the message is the per-file reason.

    A BaseException, like KeyboardInterrupt, so that a library's `except Exception` around
    its own work (pypdf has many) cannot swallow it and carry on.
    """


@contextmanager
def time_budget(seconds: float, reason: str | None = None) -> Iterator[None]:
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
            reason or f"time budget exceeded: parsing took more than {seconds:g} s (--max-seconds)"
        )

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous if previous is not None else signal.SIG_DFL)


class FileBudget:
    """The time one file may take for all its work: parsing, chunking and embedding.

    Only time spent inside `running()` counts, so a file is not charged for the others'
    work between its parsing and its embedding. There a SIGALRM timer stops pure-Python work
    (main thread only, as `time_budget`), and `check()` between embedding batches stops it
    in any thread, so a file too slow to embed is dropped whole even in a server thread.
    """

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.spent = 0.0
        self._since: float | None = None

    def remaining(self) -> float:
        running = time.monotonic() - self._since if self._since is not None else 0.0
        return self.seconds - self.spent - running

    def check(self) -> None:
        if self.seconds > 0 and self.remaining() <= 0:
            raise TimeBudgetExceeded(self.reason())

    def charge(self, seconds: float) -> bool:
        """Count work done for this file among others' (embedding several files' texts in
        one step); False once it is over its budget."""
        self.spent += seconds
        return self.seconds <= 0 or self.remaining() > 0

    def reason(self) -> str:
        return (
            f"time budget exceeded: parsing, chunking and embedding took more than "
            f"{self.seconds:g} s (--max-seconds)"
        )

    @contextmanager
    def running(self) -> Iterator[None]:
        """Work on this file now, in the time it has left."""
        if self.seconds <= 0:
            yield
            return
        self.check()
        self._since = time.monotonic()
        token = current_deadline.set(self._since + max(self.remaining(), 0.001))
        try:
            with time_budget(max(self.remaining(), 0.001), reason=self.reason()):
                yield
        finally:
            current_deadline.reset(token)
            self.spent += time.monotonic() - self._since
            self._since = None
