"""One writer at a time per index directory: an flock on `DIR/LOCK`.

The kernel releases the lock when its holder exits, however it dies (kill -9 included), so
a crashed ingest never leaves an index locked. A second writer waits for the first to finish
(it would otherwise rebuild from a version about to be replaced, and the two would prune
each other's work); `timeout` makes it give up instead, with a message naming the holder.
The lock is re-entrant within a thread, so ingest can hold it from reading the live version
to publishing the new one while `write_index` takes it too. Readers never take it.
"""

from __future__ import annotations

import fcntl
import os
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from footnote.store.private import PRIVATE_FILE, private_dir
from footnote.store.types import IndexError_

LOCK_NAME = "LOCK"


class IndexLocked(IndexError_):
    """Another writer holds the index and the caller chose not to wait any longer."""


class IndexNotWritable(IndexError_):
    """The index folder cannot be created or written (a missing parent that cannot be made, a
    file in the way, no permission): one line naming the folder, not an OSError's traceback."""


class _Held:
    def __init__(self) -> None:
        self.thread_lock = threading.RLock()
        self.depth = 0
        self.fd: int | None = None


_held: dict[str, _Held] = {}
_held_guard = threading.Lock()


@contextmanager
def writer_lock(root: str | Path, *, timeout: float | None = None) -> Iterator[None]:
    """Hold the index's writer lock for the block (waiting for it; at most `timeout` s)."""
    root = Path(root)
    try:
        private_dir(root)  # the index holds every document's text: its owner's alone
    except OSError as exc:
        raise IndexNotWritable(_unwritable(root, exc)) from exc
    key = os.path.realpath(root)
    with _held_guard:
        held = _held.setdefault(key, _Held())
    if not held.thread_lock.acquire(timeout=-1 if timeout is None else max(timeout, 0)):
        raise IndexLocked(f"index {root} is being written by another thread; try again later")
    try:
        if held.depth == 0:
            held.fd = _acquire(root, timeout)
        held.depth += 1
        try:
            yield
        finally:
            held.depth -= 1
            if held.depth == 0 and held.fd is not None:
                os.close(held.fd)  # closing the descriptor releases the flock
                held.fd = None
    finally:
        held.thread_lock.release()


def _acquire(root: Path, timeout: float | None) -> int:
    path = root / LOCK_NAME
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, PRIVATE_FILE)
    except OSError as exc:
        raise IndexNotWritable(_unwritable(root, exc)) from exc
    try:
        if not _try_lock(fd):
            holder = _holder(fd)
            if timeout is not None and timeout <= 0:
                raise IndexLocked(_busy(root, holder))
            print(
                f"footnote: waiting for another ingest of {root} ({holder}) to finish",
                file=sys.stderr,
                flush=True,
            )
            deadline = None if timeout is None else time.monotonic() + timeout
            while not _try_lock(fd):
                if deadline is not None and time.monotonic() > deadline:
                    raise IndexLocked(_busy(root, holder))
                time.sleep(0.1)
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _unwritable(root: Path, exc: OSError) -> str:
    reason = exc.strerror or type(exc).__name__
    return f"cannot create or write the index folder {root}: {reason}; choose another --index"


def _try_lock(fd: int) -> bool:
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


def _holder(fd: int) -> str:
    text = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
    return f"pid {text}" if text.isdigit() else "pid unknown"


def _busy(root: Path, holder: str) -> str:
    return f"index {root} is being written by another ingest ({holder}); try again when it ends"
