"""Issue 29's DOCX bomb sent through a served indexer while a user asks a question: the
scenario both runtimes run (tests/test_indexer_budgets_served.py).

The bomb passes the archive's inflation guard (each paragraph its own word) but needs
~0.7 GB and ~15 s to parse here; the server runs with a per-file budget and a parse memory
cap far below that. A smaller DOCX beside it parses within the cap but is slow to chunk, so
the time budget is tried too. The question's bound comes from its own latency on the idle server,
measured first: answering must not wait for the indexer, though it shares the CPU with it.
"""

from __future__ import annotations

import base64
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import psutil
from langgraph_sdk import get_sync_client

from tests.served import PUBLIC_QUESTION
from tests.test_office import _many_paragraphs

BUDGET_S = 6
"""The per-file budget the served indexer runs with ($FOOTNOTE_MAX_SECONDS)."""
PARSE_MEMORY_MB = 400
"""The parse worker's cap ($FOOTNOTE_PARSE_MEMORY_MB); the bomb needs ~700 MB."""
SERVER_ENV = {
    "FOOTNOTE_MAX_SECONDS": str(BUDGET_S),
    "FOOTNOTE_PARSE_MEMORY_MB": str(PARSE_MEMORY_MB),
}
BOMB_PARAGRAPHS = 800_000
SLOW_PARAGRAPHS = 100_000
"""A smaller one that parses within the cap (about 90 MB) but then takes about a minute to
chunk, in Python: only the budget's timer on the job's main thread stops that."""
JOB_WORK_S = 45
"""What the job may take besides the two office files' budgets: starting, the small file, publishing
(about 6 s here); unbounded, the bomb alone takes minutes."""
SERVER_GROWTH_MB = 256
"""How much the server process itself may grow while indexing: the upload's request and
state, not the parse (that lives in the job's worker)."""
NOTE = b"# Numbat note\n\nThe numbat memo says the quarterly review moves to Thursday.\n"


def question() -> dict[str, Any]:
    return {"messages": [{"role": "user", "content": PUBLIC_QUESTION}]}


def asked(client: Any) -> float:
    """Seconds one question takes to be answered, checked to cite keys.md."""
    started = time.monotonic()
    values = client.runs.wait(None, "footnote", input=question())
    took = time.monotonic() - started
    assert "keys.md" in {c["source"] for c in values.get("citations", [])}, values
    return took


@dataclass
class MemoryWatch:
    """The server process's own RSS, sampled until stopped, and its descendants' peaks."""

    pid: int
    server_peak: int = 0
    workers: dict[int, tuple[str, int]] = field(default_factory=dict)
    stop: threading.Event = field(default_factory=threading.Event)

    def __post_init__(self) -> None:
        self.server = psutil.Process(self.pid)
        self.baseline = self.server.memory_info().rss
        self.thread = threading.Thread(target=self._sample, daemon=True)
        self.thread.start()

    def _sample(self) -> None:
        while not self.stop.wait(0.1):
            try:
                self.server_peak = max(self.server_peak, self.server.memory_info().rss)
                for child in self.server.children(recursive=True):
                    try:
                        rss = child.memory_info().rss
                        line = " ".join(child.cmdline())
                    except psutil.Error:
                        continue
                    seen = self.workers.get(child.pid, ("", 0))  # a zombie's line is ""
                    self.workers[child.pid] = (line or seen[0], max(seen[1], rss))
            except psutil.Error:
                return

    def finish(self) -> None:
        self.stop.set()
        self.thread.join(timeout=5)


def bomb_upload() -> list[dict[str, str]]:
    bomb = _many_paragraphs(BOMB_PARAGRAPHS, varied=True)
    slow = _many_paragraphs(SLOW_PARAGRAPHS, varied=True)
    return [
        {"name": "bomb.docx", "content": base64.b64encode(bomb).decode()},
        {"name": "slow.docx", "content": base64.b64encode(slow).decode()},
        {"name": "numbat.md", "content": base64.b64encode(NOTE).decode()},
    ]


def check_bomb_bounded_while_answering(
    url: str, admin_headers: dict[str, str], user_headers: dict[str, str], server_pid: int
) -> None:
    admin = get_sync_client(url=url, headers=admin_headers)
    user = get_sync_client(url=url, headers=user_headers)
    asked(user)  # the first answer loads the models
    idle = [asked(user) for _ in range(3)]
    bound = 4 * max(idle) + 2.0
    uploads = bomb_upload()

    watch = MemoryWatch(server_pid)
    events: list[tuple[float, str, Any]] = []
    started = threading.Event()

    def index() -> None:
        for part in admin.runs.stream(
            None, "indexer", input={"action": "add", "uploads": uploads},
            stream_mode=["custom", "values"],
        ):  # fmt: skip
            events.append((time.monotonic(), part.event, part.data))
            if part.event == "custom" and part.data.get("stage") == "started":
                started.set()

    indexing = threading.Thread(target=index, daemon=True)
    sent = time.monotonic()
    indexing.start()
    assert started.wait(120), f"the indexer job never started: {events}"
    took = asked(user)
    answered = time.monotonic()
    assert indexing.is_alive(), "the indexer finished before the question was answered"
    indexing.join(timeout=BUDGET_S + 240)
    watch.finish()
    assert not indexing.is_alive(), f"the indexer run did not finish: {events[-3:]}"

    assert took <= bound, (
        f"a question took {took:.1f} s while the indexer ran, against {max(idle):.1f} s idle "
        f"(bound {bound:.1f} s): it waited behind the indexer"
    )
    values = [data for _, event, data in events if event == "values"]
    assert values and "result" in values[-1], events[-3:]
    result = values[-1]["result"]
    errors = {e["source"]: e["error"] for e in result["errors"]}
    assert set(errors) == {"bomb.docx", "slow.docx"}, result
    assert "time budget exceeded" in errors["bomb.docx"] or (
        f"more than {PARSE_MEMORY_MB} MB" in errors["bomb.docx"]
    ), errors
    assert (
        f"time budget exceeded: parsing, chunking and embedding took more than {BUDGET_S} s"
        in (errors["slow.docx"])
    ), errors
    assert result["files"]["added"] == ["numbat.md"], result  # the rest of the job went on
    parsed = [t for t, event, data in events if event == "custom" and data.get("stage") == "parse"]
    assert len(parsed) == 3, events  # progress, file by file
    ran = events[-1][0] - next(t for t, event, data in events if data.get("stage") == "started")
    assert ran <= 2 * BUDGET_S + JOB_WORK_S, f"the job ran {ran:.0f} s: over the bomb's budget"

    grown = (watch.server_peak - watch.baseline) >> 20
    assert grown <= SERVER_GROWTH_MB, f"the server grew by {grown} MB while indexing"
    parse_workers = [rss for line, rss in watch.workers.values() if "ingest.isolation" in line]
    assert parse_workers, f"no parse worker seen under the server: {watch.workers}"
    assert max(parse_workers) >> 20 <= PARSE_MEMORY_MB, watch.workers
    print(
        f"question idle max {max(idle):.2f} s, while indexing {took:.2f} s (bound {bound:.2f} s); "
        f"bomb: {errors['bomb.docx']!r}; slow: {errors['slow.docx']!r}; "
        f"the job ran {ran:.1f} s ({answered - sent:.1f} s "
        f"after the upload was sent, the question had its answer); server grew {grown} MB; "
        f"parse worker peak {max(parse_workers) >> 20} MB"
    )
    listed = {d["source"] for d in admin.runs.wait(None, "library", input={})["documents"]}
    assert "numbat.md" in listed, listed
