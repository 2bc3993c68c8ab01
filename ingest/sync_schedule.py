"""Syncing on a schedule: a full sync every so often and a permission-only sync more often,
each run audited, a failing run reported and the schedule kept going.

`footnote sync --every 15m --permissions-every 5m` runs `run_schedule` in the foreground
until Ctrl-C; `footnote serve --sync-every ...` runs it in a thread beside the server
(`ScheduleThread`), stopped when the server stops. Both call the same ingest functions as
`footnote sync` (`corpus.sync`, `permission_sync.sync_permissions`), so a scheduled run
takes the writer lock, publishes atomically and is recorded like any other.
"""

from __future__ import annotations

import datetime as dt
import re
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from footnote.ingest import audit

Kind = Literal["sync", "permissions"]
MAX_BACKOFF_S = 3600.0
"""The longest a failing run's next try is put off, however short its interval."""
_DURATION = re.compile(r"(\d+(?:\.\d+)?)([dhms])", re.ASCII)
_UNIT_S = {"d": 86400.0, "h": 3600.0, "m": 60.0, "s": 1.0}


def parse_duration(text: str) -> float:
    """Seconds in `15m`, `30s`, `1h`, `1h30m`, `2d` (a plain number is seconds); ValueError
    for anything else, or for no time at all."""
    value = text.strip().lower()
    if re.fullmatch(r"\d+(?:\.\d+)?", value):
        seconds = float(value)
    elif re.fullmatch(r"(?:\d+(?:\.\d+)?[dhms])+", value):
        seconds = sum(float(n) * _UNIT_S[u] for n, u in _DURATION.findall(value))
    else:
        raise ValueError(f"{text[:40]!r} is not a duration: write it as 30s, 15m, 1h or 1h30m")
    if seconds <= 0:
        raise ValueError(f"{text[:40]!r}: a schedule's interval must be longer than nothing")
    return seconds


def audited_run(index: str | Path, kind: Kind, who: str, run: Callable[[], Any]) -> Any:
    """`run()` (a full or permission-only sync of `index`) recorded in the audit log; its
    summary, or its exception (recorded as the run's failure)."""
    try:
        summary = run()
    except Exception as exc:
        record_run(index, kind, who, None, exc)
        raise
    record_run(index, kind, who, summary)
    return summary


def record_run(
    index: str | Path, kind: Kind, who: str, summary: Any, error: Exception | None = None
) -> None:
    """One audit record for a sync run by `who` (the operator at the command line, the
    schedule, a served caller): done with its counts and the sources that failed, or
    failed with its reason. A log that cannot be written is logged, never raised: the
    sync has already happened."""
    action = "sync" if kind == "sync" else "sync-permissions"
    trail: dict[str, Any] = {"who": who, "action": action, "index": str(index)}
    where = audit.audit_location()
    if error is not None or summary is None:
        audit.record_quietly(where, **trail, result="error", reason=str(error))
        return
    result = summary.to_dict()
    audit.record_quietly(where, **trail, result="ok", summary=result, reason=failed_sources(result))


def failed_sources(result: Mapping[str, Any]) -> str:
    """A run's failed sources with their errors (the first five), as an audit record's
    reason: the served indexer's permission-only sync records it as this module does."""
    return "; ".join(f"{e['source']}: {e['error']}" for e in result.get("errors", [])[:5])


def sync_runner(index: str | Path, who: str, **options: Any) -> Runner:
    """The runner a schedule calls: a full sync (`corpus.sync`, with `options`) or a
    permission-only one (`corpus.sync_permissions`), each audited under `who`."""
    from footnote.ingest import corpus

    def run(kind: Kind) -> Any:
        if kind == "sync":
            return audited_run(index, kind, who, lambda: corpus.sync(index, **options))
        light = {k: options[k] for k in ("allow_private", "embeddings") if k in options}
        return audited_run(index, kind, who, lambda: corpus.sync_permissions(index, **light))

    return run


class _JobResult:
    """A job's summary as the served indexer gets it back (`IngestSummary.to_dict()`)."""

    def __init__(self, result: dict[str, Any]) -> None:
        self.result = result

    def to_dict(self) -> dict[str, Any]:
        return self.result


def served_runner(index: str, who: str, **options: Any) -> Runner:
    """The runner a served deployment's schedule calls: a full sync as the served "Sync
    all" runs it (`jobs.run_job`: in a job process with the per-file time budget, queued
    behind any admin's job on the same index), a permission-only sync in this process (it
    parses nothing; the index's writer lock orders it with the jobs). Each is audited."""
    from footnote.ingest import corpus
    from footnote.ingest.jobs import run_job

    def run(kind: Kind) -> Any:
        if kind == "sync":
            return audited_run(
                index, kind, who, lambda: _JobResult(run_job("sync", index, options, _unshown))
            )
        light = {k: options[k] for k in ("allow_private", "embeddings") if k in options}
        return audited_run(index, kind, who, lambda: corpus.sync_permissions(index, **light))

    return run


def _unshown(frame: dict[str, Any]) -> None:
    """A scheduled job's progress frames: a schedule reports a line per run, not its stages."""


@dataclass
class Timer:
    """One kind of run's interval, when it is next due, and its failures in a row (each
    doubles the wait before the next try, up to MAX_BACKOFF_S)."""

    kind: Kind
    every: float
    due: float
    failures: int = 0

    def done(self, now: float, ok: bool) -> float:
        """Schedule the next run after one that ended at `now`; the wait until it."""
        self.failures = 0 if ok else self.failures + 1
        wait = self.every * 2 ** min(self.failures, 16)
        wait = min(wait, max(self.every, MAX_BACKOFF_S))
        self.due = now + wait
        return wait


Runner = Callable[[Kind], Any]
"""Runs one sync of the kind given; returns its summary, raises on failure."""
Report = Callable[[Kind, Any, Exception | None, float], None]
"""Told of each run: (kind, summary or None, its exception or None, seconds to the next)."""


def run_schedule(
    timers: list[Timer],
    runner: Runner,
    report: Report,
    *,
    stop: threading.Event | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> None:
    """Run each timer's sync when it is due (the first at once), until `stop` is set (or
    the caller is interrupted). A run that fails is reported with its reason and the
    schedule goes on; only an interrupt or `stop` ends it."""
    stop = stop or threading.Event()
    while not stop.is_set():
        timer = min(timers, key=lambda t: (t.due, t.kind != "sync"))
        if stop.wait(max(0.0, timer.due - clock())):
            return
        error: Exception | None = None
        summary = None
        try:
            summary = runner(timer.kind)
        except Exception as exc:  # one failed run: reported, the schedule goes on
            error = exc
        wait = timer.done(clock(), error is None)
        report(timer.kind, summary, error, wait)


def timers_for(every: float | None, permissions_every: float | None) -> list[Timer]:
    """The timers for a full sync every `every` seconds and a permission-only sync every
    `permissions_every`; either may be None (that kind does not run)."""
    now = time.monotonic()
    pairs: list[tuple[Kind, float | None]] = [("sync", every), ("permissions", permissions_every)]
    timers = [Timer(kind, seconds, now) for kind, seconds in pairs if seconds is not None]
    if not timers:
        raise ValueError("a schedule needs --every or --permissions-every")
    return timers


def run_line(kind: Kind, summary: Any, error: Exception | None, wait: float) -> str:
    """One line for a scheduled run: when, what it did (or why it failed), the next run."""
    when = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    name = "sync" if kind == "sync" else "permission sync"
    after = f"next in {_shown(wait)}"
    if error is not None:
        return f"{when} {name} failed: {' '.join(str(error).split())[:300]}; {after}"
    result = summary.to_dict()
    if kind == "sync":
        counts = (
            f"{result['added']} added, {result['updated']} updated, {result['unchanged']} "
            f"unchanged, {result['deleted']} deleted, {result['failed']} failed, "
            f"{result['embedded_texts']} embedded"
        )
    else:
        counts = (
            f"{result['checked']} checked, {result['access_changed']} access changed, "
            f"{result['restricted']} admins only, {result['failed']} failed"
        )
    return f"{when} {name}: {counts}; {after}"


def _shown(seconds: float) -> str:
    if seconds >= 3600 and seconds % 3600 == 0:
        return f"{seconds / 3600:g}h"
    if seconds >= 60 and seconds % 60 == 0:
        return f"{seconds / 60:g}m"
    return f"{seconds:g}s"


class ScheduleThread:
    """A schedule run in a daemon thread beside a server: started by `footnote serve
    --sync-every`, stopped (after the run in progress, if any) by `stop`. Each run is
    audited under `who` and reported through `report` (a log line)."""

    def __init__(self, timers: list[Timer], runner: Runner, report: Callable[[str], None]) -> None:
        self.event = threading.Event()
        self.thread = threading.Thread(
            target=run_schedule,
            args=(timers, runner, lambda *run: report(run_line(*run))),
            kwargs={"stop": self.event},
            name="footnote-sync-schedule",
            daemon=True,
        )

    def start(self) -> ScheduleThread:
        self.thread.start()
        return self

    def stop(self, timeout: float = 30.0) -> None:
        self.event.set()
        self.thread.join(timeout)
