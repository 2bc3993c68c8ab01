"""Every file is parsed in a worker process with hard limits on time and memory.

A small file can make a parser build far more than its size: a DOCX or EPUB unpacks into
hundreds of thousands of XML elements, a Markdown page into a section per line, a workbook
into a record per row. The parse takes what the libraries take, in C calls no signal
interrupts. So every format is parsed by long-lived workers (`python -m
footnote.ingest.isolation_worker`) whose address space is capped
(`$FOOTNOTE_PARSE_MEMORY_MB`, default 1024) and which are killed when the file's time
budget runs out. The wait is a plain read with a timeout, so the limit holds on any thread,
a server's included, and never blocks anything but the caller. A worker is reused for the
next file; callers on other threads take another (up to `MAX_IDLE` are kept).

Frames on the worker's stdin/stdout are an 8-byte length and JSON (the request header, then
the raw file), never pickle: the worker's replies are data, checked as a parse result, and
never longer than `reply_limit` of the file's size, so what the caller builds from a reply
stays in proportion to the file.

This module is the caller's side and imports no parser; the worker's side is
`footnote.ingest.isolation_worker`.
"""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import IO

from footnote.ingest.documents import ParsedDocument, ParseError, Section
from footnote.ingest.limits import TimeBudgetExceeded, current_deadline, setting_number

WORKER_ENV = "FOOTNOTE_PARSE_WORKER"
"""Set in the worker: there `parse_bytes` parses the file itself, never in a nested worker."""
MEMORY_ENV = "FOOTNOTE_PARSE_MEMORY_MB"
DEFAULT_MEMORY_MB = 1024
MAX_IDLE = 4
"""Started workers kept waiting for the next file: one per indexer job in flight, at most."""
REPLY_FLOOR = 32 << 20
REPLY_RATIO = 16
"""A reply (the parse result as JSON) may be `REPLY_FLOOR` plus this many times the file's
size: a CSV of short rows is several times its size as records, a bomb far more."""
MAX_REPLY_BYTES = 512 << 20
_LENGTH = 8


def reply_limit(size: int) -> int:
    """The longest reply accepted for a file of `size` bytes (see `REPLY_RATIO`)."""
    return min(MAX_REPLY_BYTES, REPLY_FLOOR + REPLY_RATIO * size)


def _worker_environment() -> dict[str, str]:
    """The environment a worker starts with: this process's now (PATH finds Tesseract, the
    OCR and parse settings), marked as a worker."""
    return {**os.environ, WORKER_ENV: "1", "OMP_NUM_THREADS": "1"}


class _Worker:
    def __init__(self, memory_mb: int, environment: dict[str, str]) -> None:
        self.memory_mb = memory_mb
        self.environment = environment
        self.process = subprocess.Popen(
            [sys.executable, "-m", "footnote.ingest.isolation_worker", str(memory_mb)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env=environment,
        )

    def usable(self, memory_mb: int, environment: dict[str, str]) -> bool:
        """Alive, with this cap, and started with this environment: a host that changes
        PATH or a parse setting between files gets a worker that sees the change."""
        return (
            self.process.poll() is None
            and self.memory_mb == memory_mb
            and self.environment == environment
        )

    def kill(self) -> None:
        self.process.kill()
        self.process.wait()


_lock = threading.Lock()
_idle: list[_Worker] = []
_started: list[_Worker] = []
"""Every live worker, idle or parsing, for `stop_workers`."""


def stop_workers() -> None:
    """Kill the parse workers now, mid-file or not: for a process about to exit, whose
    workers would otherwise parse on, orphaned, until they next read their closed stdin."""
    with _lock:
        workers = list(_started)
    for worker in workers:
        worker.process.kill()


def _memory_mb() -> int:
    try:
        return int(setting_number(MEMORY_ENV, DEFAULT_MEMORY_MB, whole=True, unit=" of megabytes"))
    except ValueError as exc:
        raise ParseError(str(exc)) from None


def _take(memory_mb: int) -> _Worker:
    """An idle worker with this cap and environment, else a new one; dead or different
    ones go."""
    environment = _worker_environment()
    with _lock:
        while _idle:
            worker = _idle.pop()
            if worker.usable(memory_mb, environment):
                return worker
            _started.remove(worker)
            worker.kill()
        worker = _Worker(memory_mb, environment)
        _started.append(worker)
        return worker


def _put_back(worker: _Worker) -> None:
    with _lock:
        if len(_idle) < MAX_IDLE:
            _idle.append(worker)
            return
        _started.remove(worker)
    worker.kill()


def _discard(worker: _Worker) -> None:
    with _lock:
        if worker in _started:
            _started.remove(worker)
    worker.kill()


def parse_isolated(data: bytes, path: Path, source: str) -> ParsedDocument:
    """`parse_bytes` in a worker, within the file's time budget (`current_deadline`) and
    the memory cap; a worker that overruns either is killed and the file fails with why."""
    deadline = current_deadline.get()
    memory = _memory_mb()
    worker = _take(memory)
    try:
        assert worker.process.stdin is not None and worker.process.stdout is not None
        header = json.dumps({"name": path.name, "source": source}).encode()
        write_frame(worker.process.stdin, header)
        write_frame(worker.process.stdin, data)
        reply = read_frame(worker.process.stdout, deadline, reply_limit(len(data)))
    except BaseException as exc:  # over its time, died (over its memory), or interrupted
        _discard(worker)
        if isinstance(exc, OSError | EOFError):
            raise ParseError(over_memory(memory)) from None
        raise
    _put_back(worker)
    return _document(reply)


def over_memory(memory_mb: int) -> str:
    return f"parsing stopped: the file needed more than {memory_mb} MB ({MEMORY_ENV})"


def write_frame(stream: IO[bytes], payload: bytes) -> None:
    stream.write(len(payload).to_bytes(_LENGTH, "big"))
    stream.write(payload)
    stream.flush()


def read_frame(stream: IO[bytes], deadline: float | None, limit: int) -> bytes:
    """One frame, refused unread when it declares more than `limit` bytes."""
    size = int.from_bytes(read_exactly(stream, _LENGTH, deadline), "big")
    if size > limit:
        raise ParseError(f"parse failed: the worker's reply of {size:,} bytes is over {limit:,}")
    return read_exactly(stream, size, deadline)


def read_exactly(stream: IO[bytes], size: int, deadline: float | None) -> bytes:
    fd = stream.fileno()
    parts: list[bytes] = []
    left = size
    while left:
        wait = None if deadline is None else deadline - time.monotonic()
        if wait is not None and wait <= 0:
            raise TimeBudgetExceeded(
                "time budget exceeded: parsing took longer than the file's budget "
                "(--max-seconds); its worker was stopped"
            )
        ready, _, _ = select.select([fd], [], [], wait)
        if not ready:
            continue
        piece = os.read(fd, min(left, 1 << 20))
        if not piece:
            raise EOFError("the worker ended")
        parts.append(piece)
        left -= len(piece)
    return b"".join(parts)


def _document(reply: bytes) -> ParsedDocument:
    try:
        found = json.loads(reply)
        if "error" in found:
            raise ParseError(str(found["error"]))
        doc = found["document"]
        sections = [Section(**section) for section in doc.pop("sections")]
        return ParsedDocument(**doc, sections=sections)
    except ParseError:
        raise
    except (ValueError, TypeError, KeyError, AttributeError) as exc:
        raise ParseError(f"parse failed: the worker's reply is malformed ({exc})") from None
