"""A served indexer's work (add, remove, sync) in a job process of its own, queued one at a
time per index, so that it never holds the server's answering capacity.

A server runs every graph's runs in one process: its event loop, a few executor threads and
a fixed number of job slots (`langgraph dev`'s N_JOBS_PER_WORKER, Aegra's workers). An
ingest that parses, chunks and embeds for minutes in there competes with every answer for
the GIL and for memory. So the indexer graph hands its action to `run_job`, which

- admits at most `FOOTNOTE_INDEXER_JOBS` (default 2) indexer jobs per server process, running
  or queued; one more is refused at once (`IndexerBusy`), so answers keep their slots;
- queues the job behind any other on the same index (an flock, so it holds across the
  replicas of one machine too), reporting `{"stage": "queued"}` while it waits;
- runs it in `python -m footnote.ingest.jobs`, whose main thread the per-file SIGALRM budget
  reaches (`$FOOTNOTE_MAX_SECONDS`, default 300 s a file) and whose office parsing goes to
  the memory-capped worker (`ingest/isolation.py`); its progress comes back as it goes.

The waiting thread sits in a blocking read, holding no GIL. Frames are JSON lines on a pipe
of the job's own (its stdout is pointed at stderr, so a library's print cannot forge one),
never pickle; an error comes back as one of the known kinds below, or as a plain RuntimeError.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import IO, Any

from footnote.ingest.documents import ParseError
from footnote.ingest.isolation import stop_workers
from footnote.ingest.limits import setting_number
from footnote.ingest.pipeline import DEFAULT_MAX_SECONDS
from footnote.store import lock, types
from footnote.store.private import state_dir

JOBS_ENV = "FOOTNOTE_INDEXER_JOBS"
DEFAULT_JOBS = 2
MAX_SECONDS_ENV = "FOOTNOTE_MAX_SECONDS"
"""The served indexer's per-file time budget (parsing, chunking, embedding), in seconds."""
ACTIONS = ("add", "remove", "sync")
MAX_LINE_BYTES = 256 << 20
_QUEUE_POLL_S = 0.25

KNOWN_ERRORS: dict[str, type[Exception]] = {
    "IndexCorrupt": types.IndexCorrupt,
    "IndexNotFound": types.IndexNotFound,
    "IndexUnreachable": types.IndexUnreachable,
    "IndexMismatch": types.IndexMismatch,
    "IndexError_": types.IndexError_,
    "IndexLocked": lock.IndexLocked,
    "IndexNotWritable": lock.IndexNotWritable,
    "ParseError": ParseError,
    "ValueError": ValueError,
    "PermissionError": PermissionError,
}
"""The errors a job may report by name; the parent raises the same class with its message."""

Progress = Callable[[dict[str, Any]], None]


class IndexerBusy(RuntimeError):
    """This server process already has its limit of indexer jobs running or queued."""


def job_limit() -> int:
    return int(setting_number(JOBS_ENV, DEFAULT_JOBS, whole=True))


def max_seconds() -> float:
    # 0 turns the per-file budget off, as `max_seconds=0` does for ingest
    return setting_number(
        MAX_SECONDS_ENV, DEFAULT_MAX_SECONDS, whole=False, unit=" of seconds", at_least=0
    )


_admitted = 0
_admitted_guard = threading.Lock()


@contextmanager
def _admission() -> Iterator[None]:
    global _admitted
    limit = job_limit()
    with _admitted_guard:
        if _admitted >= limit:
            raise IndexerBusy(
                f"the indexer already has {_admitted} job(s) running or queued on this server "
                f"(at most {limit}, {JOBS_ENV}); try again when one has finished"
            )
        _admitted += 1
    try:
        yield
    finally:
        with _admitted_guard:
            _admitted -= 1


@contextmanager
def _index_queue(index: str, progress: Progress) -> Iterator[None]:
    """Wait for the index's job lock (one job at a time per index), saying it is queued."""
    folder = state_dir() / "indexer-queue"
    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    name = hashlib.sha256(index.encode()).hexdigest()[:32]
    fd = os.open(folder / f"{name}.lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        since = time.monotonic()
        reported = False
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if not reported:
                    progress({"stage": "queued", "reason": "another job is indexing this index"})
                    reported = True
                time.sleep(_QUEUE_POLL_S)
        if reported:
            progress({"stage": "dequeued", "waited_s": round(time.monotonic() - since, 3)})
        yield
    finally:
        os.close(fd)  # releases the flock


def run_job(
    action: str, index: str, arguments: Mapping[str, Any], progress: Progress
) -> dict[str, Any]:
    """Run `corpus.<action>(index, **arguments)` in a job process, after the jobs queued
    before it on this index; its summary (`IngestSummary.to_dict()`) or its error."""
    if action not in ACTIONS:
        raise ValueError(f"unknown indexer action {action!r}")
    request = json.dumps({"action": action, "index": index, "arguments": dict(arguments)})
    with _admission(), _index_queue(index, progress):
        read_end, write_end = os.pipe()
        try:
            process = subprocess.Popen(
                [sys.executable, "-m", "footnote.ingest.jobs", str(write_end)],
                stdin=subprocess.PIPE,
                stdout=subprocess.DEVNULL,
                env={**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")},
                pass_fds=(write_end,),
            )
        finally:
            os.close(write_end)
        assert process.stdin is not None
        with os.fdopen(read_end, "rb") as replies, process.stdin:
            try:
                # One line, then the pipe stays open: the job ends when it closes (the
                # server that asked for it stopped or died) rather than run on orphaned.
                process.stdin.write(request.encode() + b"\n")
                process.stdin.flush()
                progress({"stage": "started", "pid": process.pid})
                return _outcome(replies, progress)
            finally:
                if process.poll() is None:
                    process.kill()
                process.wait()


def _outcome(replies: IO[bytes], progress: Progress) -> dict[str, Any]:
    for line in iter(lambda: replies.readline(MAX_LINE_BYTES), b""):
        try:
            frame = json.loads(line)
        except ValueError:
            raise RuntimeError("the indexer job sent a malformed reply") from None
        if not isinstance(frame, dict):
            raise RuntimeError("the indexer job sent a malformed reply")
        if "progress" in frame and isinstance(frame["progress"], dict):
            progress(frame["progress"])
        elif "result" in frame and isinstance(frame["result"], dict):
            return frame["result"]
        elif "error" in frame and isinstance(frame["error"], dict):
            kind = KNOWN_ERRORS.get(str(frame["error"].get("kind")), RuntimeError)
            raise kind(str(frame["error"].get("message", "the indexer job failed")))
    raise RuntimeError("the indexer job ended without a result (it was killed or crashed)")


def _serve(reply_fd: int) -> None:
    """The job: read the request, run it on this main thread, write progress and outcome."""
    from footnote.ingest import corpus

    sink = os.fdopen(reply_fd, "wb")
    os.dup2(2, 1)  # anything printed goes to stderr, never among the frames
    lock_out = threading.Lock()

    def send(frame: dict[str, Any]) -> None:
        with lock_out:
            sink.write(json.dumps(frame).encode() + b"\n")
            sink.flush()

    request = json.loads(sys.stdin.buffer.readline())
    threading.Thread(target=_end_with_the_server, daemon=True).start()
    arguments = dict(request["arguments"])
    arguments.setdefault("max_seconds", max_seconds())
    arguments["progress"] = lambda stage, done, total: send(
        {"progress": {"stage": stage, "done": done, "total": total}}
    )
    actions: dict[str, Callable[..., Any]] = {
        "add": corpus.add,
        "remove": corpus.remove,
        "sync": corpus.sync,
    }
    action = actions[request["action"]]
    try:
        summary = action(request["index"], **arguments)
    except Exception as exc:  # reported by kind; the parent raises it
        kind = next(
            (c.__name__ for c in type(exc).__mro__ if KNOWN_ERRORS.get(c.__name__) is c),
            "RuntimeError",
        )
        send({"error": {"kind": kind, "message": str(exc)}})
        return
    send({"result": summary.to_dict()})


def _end_with_the_server() -> None:
    """Stop the job at once when the server's end of stdin closes: it stopped waiting."""
    while sys.stdin.buffer.read(1 << 16):
        pass
    stop_workers()  # a worker mid-parse reads no stdin, so it would not notice
    os._exit(1)


if __name__ == "__main__":
    _serve(int(sys.argv[1]))
    sys.stderr.flush()
    os._exit(0)  # at once: the stdin watcher's read must not hold up the interpreter's exit
