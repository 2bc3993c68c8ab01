"""Office files parsed in a worker process with hard limits on time and memory.

A small DOCX can unpack into hundreds of thousands of XML elements: its parse takes what
python-docx and lxml take, in C calls no signal interrupts, and gigabytes of memory. So
DOCX and PPTX are parsed by one long-lived worker (`python -m footnote.ingest.isolation`)
whose address space is capped (`$FOOTNOTE_PARSE_MEMORY_MB`, default 1024) and which is
killed when the file's time budget runs out. The wait is a plain read with a timeout, so the
limit holds on any thread, a server's included, and never blocks anything but the caller.

Frames on the worker's stdin/stdout are an 8-byte length and JSON (the request header, then
the raw file), never pickle: the worker's replies are data, checked as a parse result.
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
from typing import IO, Any

from footnote.ingest.documents import ParsedDocument, ParseError, Section
from footnote.ingest.limits import TimeBudgetExceeded, current_deadline, setting_number

ISOLATED_SUFFIXES = frozenset({".docx", ".pptx"})
WORKER_ENV = "FOOTNOTE_PARSE_WORKER"
"""Set in the worker: there `parse_bytes` parses office files itself."""
MEMORY_ENV = "FOOTNOTE_PARSE_MEMORY_MB"
DEFAULT_MEMORY_MB = 1024
MAX_REPLY_BYTES = 512 << 20
_LENGTH = 8


class _Worker:
    def __init__(self, memory_mb: int) -> None:
        self.memory_mb = memory_mb
        self.process = subprocess.Popen(
            [sys.executable, "-m", "footnote.ingest.isolation", str(memory_mb)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env={**os.environ, WORKER_ENV: "1", "OMP_NUM_THREADS": "1"},
        )

    def kill(self) -> None:
        self.process.kill()
        self.process.wait()


_lock = threading.Lock()
_workers: list[_Worker] = []


def stop_workers() -> None:
    """Kill the parse workers now, mid-file or not: for a process about to exit, whose
    worker would otherwise parse on, orphaned, until it next reads its closed stdin."""
    for worker in list(_workers):
        worker.process.kill()


def _memory_mb() -> int:
    try:
        return int(setting_number(MEMORY_ENV, DEFAULT_MEMORY_MB, whole=True, unit=" of megabytes"))
    except ValueError as exc:
        raise ParseError(str(exc)) from None


def parse_isolated(data: bytes, path: Path, source: str) -> ParsedDocument:
    """`parse_bytes` in the worker, within the file's time budget (`current_deadline`) and
    the memory cap; a worker that overruns either is killed and the file fails with why."""
    deadline = current_deadline.get()
    memory = _memory_mb()
    with _lock:  # one worker, one file at a time
        if _workers and (_workers[0].process.poll() is not None or _workers[0].memory_mb != memory):
            _workers.pop().kill()
        if not _workers:
            _workers.append(_Worker(memory))
        worker = _workers[0]
        try:
            assert worker.process.stdin is not None and worker.process.stdout is not None
            header = json.dumps({"name": path.name, "source": source}).encode()
            _write_frame(worker.process.stdin, header)
            _write_frame(worker.process.stdin, data)
            reply = _read_frame(worker.process.stdout, deadline)
        except TimeBudgetExceeded:
            _workers.remove(worker)
            worker.kill()
            raise
        except BaseException as exc:  # died (over its memory), or interrupted: start afresh
            _workers.remove(worker)
            worker.kill()
            if isinstance(exc, OSError | EOFError):
                raise ParseError(_over_memory(memory)) from None
            raise
    return _document(reply)


def _over_memory(memory_mb: int) -> str:
    return f"parsing stopped: the file needed more than {memory_mb} MB ({MEMORY_ENV})"


def _ran_out_of_memory(exc: BaseException) -> bool:
    """Whether a parse failed for want of memory: a MemoryError, or libxml2's own
    out-of-memory error, which lxml reports as an XMLSyntaxError ("unknown error")."""
    from lxml import etree

    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, MemoryError) or (
            isinstance(seen, etree.XMLSyntaxError) and seen.code == etree.ErrorTypes.ERR_NO_MEMORY
        ):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def _write_frame(stream: IO[bytes], payload: bytes) -> None:
    stream.write(len(payload).to_bytes(_LENGTH, "big"))
    stream.write(payload)
    stream.flush()


def _read_frame(stream: IO[bytes], deadline: float | None) -> bytes:
    size = int.from_bytes(_read_exactly(stream, _LENGTH, deadline), "big")
    if size > MAX_REPLY_BYTES:
        raise EOFError("reply too large")
    return _read_exactly(stream, size, deadline)


def _read_exactly(stream: IO[bytes], size: int, deadline: float | None) -> bytes:
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


def _serve(memory_mb: int) -> None:
    """The worker: cap the address space, then parse each file sent until stdin closes."""
    import dataclasses
    import resource

    from footnote.ingest.parsers import parse_bytes

    limit = memory_mb << 20
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    source, sink = sys.stdin.buffer, sys.stdout.buffer
    while True:
        try:
            header = json.loads(_read_exactly(source, _frame_size(source), None))
            data = _read_exactly(source, _frame_size(source), None)
        except EOFError:
            return
        reply: dict[str, Any]
        try:
            doc = parse_bytes(data, Path(str(header["name"])), str(header["source"]))
            reply = {"document": dataclasses.asdict(doc)}
        except ParseError as exc:
            reply = {"error": _over_memory(memory_mb) if _ran_out_of_memory(exc) else str(exc)}
        except MemoryError:
            os._exit(3)  # the parent reports it: over the memory limit
        _write_frame(sink, json.dumps(reply).encode())


def _frame_size(stream: IO[bytes]) -> int:
    return int.from_bytes(_read_exactly(stream, _LENGTH, None), "big")


if __name__ == "__main__":
    _serve(int(sys.argv[1]))
