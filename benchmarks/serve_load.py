"""Load on the production server: N signed-in users (mixed groups) asking the handbook's
questions for a fixed time, against 1 and then 2 Aegra replicas sharing PostgreSQL + Redis.

    python benchmarks/serve_load.py [--users 8] [--seconds 60] [--replicas 1,2] [--json]
    python benchmarks/serve_load.py --replicas 2 --kill-halfway   # kill -9 one replica mid-run
    python benchmarks/serve_load.py --kills 10   # kill -9 10 times: lost runs, longest wait

Each user has an API key (the team of tests/served.py: engineering, hr, finance+hr, no
groups, admin) and loops: a new thread, one question (the handbook's, or a restricted
document's), wait for the answer. Requests go round robin over the replicas, as a load
balancer would send them. Reported per replica count: answered requests per second, p50 / p95
latency, errors (anything but an answer), and leaks (a restricted document's marker in the
answer of a user outside its group). Offline graph, no model: the figures are the server's
and the retrieval's, not an LLM's. Replicas, PostgreSQL and Redis run on this machine, so on a
small machine more replicas share the same cores.

`--kill-halfway` sends `kill -9` to the last replica halfway through, with the launcher's
supervisor (`footnote.server.production.supervise`) running, and reports how long it took to
come back and the errors split by where the request went: requests keep going round robin to
the dead replica's address (no load balancer health check in between), so those fail until
it is back; a request whose connection died with the replica is counted as an error too,
even if its run was finished by the other replica.
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

HANDBOOK_QUESTIONS = (
    "How often do I have to change my API key?",
    "How many days of holiday do I get?",
    "How do I claim travel expenses?",
    "How do I connect to the VPN?",
    "What do I do on my first day?",
)


@dataclass
class Tally:
    latencies: list[float] = field(default_factory=list)
    errors: list[tuple[str, str]] = field(default_factory=list)
    """(replica URL, what went wrong)."""
    leaks: list[tuple[str, list[str]]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)


def user_loop(
    user: str, urls: list[str], headers: dict[str, str], until: float, tally: Tally, start: int
) -> None:
    from langgraph_sdk import get_sync_client

    from tests.served import RESTRICTED, leaked

    questions = list(HANDBOOK_QUESTIONS) + [q for d in RESTRICTED for q in d.questions]
    clients = [get_sync_client(url=url, headers=headers, timeout=120) for url in urls]
    for n in itertools.count(start):
        if time.monotonic() >= until:
            return
        client, url = clients[n % len(clients)], urls[n % len(clients)]
        question = questions[n % len(questions)]
        began = time.perf_counter()
        try:
            thread = client.threads.create()["thread_id"]
            output: Any = client.runs.wait(
                thread,
                "footnote",
                input={"messages": [{"role": "user", "content": question}]},
            )
            ok = isinstance(output, dict) and "__error__" not in output and output.get("messages")
            error = "" if ok else f"no answer: {str(output)[:200]}"
        except Exception as exc:  # noqa: BLE001 - every failure is counted, none stops the run
            output, error = None, f"{type(exc).__name__}: {str(exc)[:200]}"
        elapsed = time.perf_counter() - began
        found = leaked(user, output) if output is not None else []
        with tally.lock:
            if error:
                tally.errors.append((url, error))
            else:
                tally.latencies.append(elapsed)
            if found:
                tally.leaks.append((user, found))


def measure(
    index: Path,
    team: Any,
    replicas: int,
    users: int,
    seconds: float,
    workdir: Path,
    kill_halfway: bool = False,
) -> dict[str, Any]:
    import os
    import signal

    from footnote.server.production import running_deployment, supervise
    from tests.served import USERS

    with running_deployment(
        index_dir=str(index),
        workdir=workdir,
        replicas=replicas,
        extra_env=team.env,
        inherit_credentials=False,
    ) as deployment:
        urls = [r.url for r in deployment.replicas]
        names = list(USERS)
        tally = Tally()
        until = time.monotonic() + seconds
        began = time.monotonic()
        threads = [
            threading.Thread(
                target=user_loop,
                args=(
                    names[i % len(names)],
                    urls,
                    team.headers(names[i % len(names)]),
                    until,
                    tally,
                    i,
                ),
            )
            for i in range(users)
        ]
        stop = threading.Event()
        said: list[tuple[float, str]] = []
        supervisor = threading.Thread(
            target=supervise,
            args=(deployment, stop, lambda _, m: said.append((time.monotonic(), m))),
        )
        killed: dict[str, Any] = {}
        if kill_halfway:
            supervisor.start()

            def kill() -> None:
                if not stop.wait(seconds / 2):
                    victim = deployment.replicas[-1]
                    killed.update(url=victim.url, at=time.monotonic())
                    os.kill(victim.process.pid, signal.SIGKILL)

            threading.Thread(target=kill, daemon=True).start()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        wall = time.monotonic() - began
        stop.set()
        if supervisor.is_alive():
            supervisor.join()
    latencies = sorted(tally.latencies)
    back = [t for t, m in said if "restarted" in m]
    extra: dict[str, Any] = {}
    if killed:
        extra = {
            "killed": killed["url"],
            "back_after_s": round(back[0] - killed["at"], 1) if back else None,
            "errors_on_killed": sum(1 for u, _ in tally.errors if u == killed["url"]),
            "errors_elsewhere": sum(1 for u, _ in tally.errors if u != killed["url"]),
        }
    return {
        "replicas": replicas,
        "users": users,
        "seconds": round(wall, 1),
        "answered": len(latencies),
        "per_second": round(len(latencies) / wall, 2),
        "p50_s": round(statistics.median(latencies), 2) if latencies else None,
        "p95_s": round(latencies[int(0.95 * (len(latencies) - 1))], 2) if latencies else None,
        "errors": len(tally.errors),
        "leaks": len(tally.leaks),
        "first_errors": [f"{u}: {e}" for u, e in tally.errors[:3]],
        **extra,
    }


TAKEN_OVER_WITHIN_S = 45.0
"""The target: a run owned by a killed replica finishes within this long of being made."""
LOST_AFTER_S = 300.0
"""A run not finished this long after it was made is counted lost."""


@dataclass
class Takeover:
    waits: list[float] = field(default_factory=list)
    """Seconds from making each run to seeing it succeed."""
    lost: list[str] = field(default_factory=list)
    """Runs that ended in anything but success, or never ended: why."""
    lock: threading.Lock = field(default_factory=threading.Lock)


def background_loop(
    urls: list[str], headers: dict[str, str], stop: threading.Event, tally: Takeover, start: int
) -> None:
    """Make a background run (on the first replica that answers), then wait for its end,
    asking whichever replica answers, as a client behind a load balancer would."""
    from langgraph_sdk import get_sync_client

    clients = [get_sync_client(url=url, headers=headers, timeout=10) for url in urls]
    for n in itertools.count(start):
        if stop.is_set():
            return
        made = None
        for client in clients[n % 2 :] + clients[: n % 2]:
            try:
                thread = client.threads.create()["thread_id"]
                question = HANDBOOK_QUESTIONS[n % len(HANDBOOK_QUESTIONS)]
                run = client.runs.create(
                    thread, "footnote", input={"messages": [{"role": "user", "content": question}]}
                )
                made = (thread, run["run_id"], time.monotonic())
                break
            except Exception:  # noqa: BLE001 - a dead replica: try the next
                continue
        if made is None:
            time.sleep(0.5)
            continue
        outcome = _run_end(clients, *made)
        with tally.lock:
            if outcome == "success":
                tally.waits.append(time.monotonic() - made[2])
            else:
                tally.lost.append(f"{made[1]}: {outcome}")


def _run_end(clients: list[Any], thread: str, run_id: str, made: float) -> str:
    """The run's final status, or why it has none within LOST_AFTER_S."""
    while time.monotonic() - made < LOST_AFTER_S:
        for client in clients:
            try:
                status = str(client.runs.get(thread, run_id)["status"])
                break
            except Exception:  # noqa: BLE001 - that replica is down: ask another
                continue
        else:
            status = "pending"
        if status not in ("pending", "running"):
            return status
        time.sleep(0.25)
    return f"not finished after {LOST_AFTER_S:g} s"


def measure_takeover(
    index: Path, team: Any, kills: int, users: int, workdir: Path
) -> dict[str, Any]:
    """`kills` times, kill -9 a busy replica (each in turn, once it is back and serving
    again) while `users` clients keep background runs going; report every run's wait, the
    longest, how many waited over TAKEN_OVER_WITHIN_S and how many were lost."""
    import os
    import signal

    from footnote.server.production import running_deployment, supervise
    from tests.served import USERS

    names = list(USERS)
    tally = Takeover()
    said: list[str] = []
    with running_deployment(
        index_dir=str(index),
        workdir=workdir,
        replicas=2,
        extra_env=team.env,
        inherit_credentials=False,
    ) as deployment:
        urls = [r.url for r in deployment.replicas]
        stop, halt = threading.Event(), threading.Event()
        supervisor = threading.Thread(
            target=supervise, args=(deployment, halt, lambda _, m: said.append(m))
        )
        supervisor.start()
        clients = [
            threading.Thread(
                target=background_loop,
                args=(urls, team.headers(names[i % len(names)]), stop, tally, i),
            )
            for i in range(users)
        ]
        for t in clients:
            t.start()
        began = time.monotonic()
        for k in range(kills):
            time.sleep(6.0)  # let runs pile up on both replicas
            victim = deployment.replicas[k % len(deployment.replicas)]
            restarts = sum("restarted" in m for m in said)
            os.kill(victim.process.pid, signal.SIGKILL)
            back_by = time.monotonic() + 180
            while sum("restarted" in m for m in said) == restarts and time.monotonic() < back_by:
                time.sleep(0.5)
        stop.set()
        for t in clients:
            t.join()
        halt.set()
        supervisor.join()
    waits = sorted(tally.waits)
    return {
        "kills": kills,
        "users": users,
        "seconds": round(time.monotonic() - began, 1),
        "runs": len(waits) + len(tally.lost),
        "lost": len(tally.lost),
        "longest_wait_s": round(waits[-1], 1) if waits else None,
        "p50_wait_s": round(statistics.median(waits), 2) if waits else None,
        f"over_{TAKEN_OVER_WITHIN_S:g}_s": sum(w > TAKEN_OVER_WITHIN_S for w in waits),
        "first_lost": tally.lost[:3],
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--users", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--replicas", default="1,2", help="comma-separated replica counts")
    parser.add_argument("--json", action="store_true")
    parser.add_argument(
        "--kill-halfway", action="store_true", help="kill -9 the last replica halfway through"
    )
    parser.add_argument(
        "--kills",
        type=int,
        default=0,
        help="instead of the load table: kill -9 a busy replica this many times (2 replicas, "
        "background runs) and report lost runs and the longest wait",
    )
    args = parser.parse_args()

    from footnote.ingest.pipeline import ingest
    from tests.served import api_key_team, build_corpus

    with tempfile.TemporaryDirectory(prefix="serve-load-") as scratch:
        root = Path(scratch)
        index = root / "index"
        summary = ingest([build_corpus(root)], index)
        assert not summary.failed, summary.failed
        team = api_key_team(root)
        if args.kills:
            report = measure_takeover(index, team, args.kills, args.users, root / "kills")
            print(json.dumps(report, indent=2))
            ok = report["lost"] == 0 and not report[f"over_{TAKEN_OVER_WITHIN_S:g}_s"]
            return 0 if ok else 1
        rows = [
            measure(
                index, team, int(k), args.users, args.seconds, root / f"run-{k}", args.kill_halfway
            )
            for k in args.replicas.split(",")
        ]
    if args.json:
        print(json.dumps(rows, indent=2))
    else:
        print(
            "| replicas | users | seconds | answered | per second | p50 s | p95 s "
            "| errors | leaks |"
        )
        print("|---|---|---|---|---|---|---|---|---|")
        for r in rows:
            print(
                f"| {r['replicas']} | {r['users']} | {r['seconds']} | {r['answered']} | "
                f"{r['per_second']} | {r['p50_s']} | {r['p95_s']} | {r['errors']} | {r['leaks']} |"
            )
        for r in rows:
            if "killed" in r:
                print(
                    f"  {r['replicas']} replica(s): killed {r['killed']} halfway; back after "
                    f"{r['back_after_s']} s; errors on it {r['errors_on_killed']}, "
                    f"elsewhere {r['errors_elsewhere']}"
                )
            for error in r["first_errors"]:
                print(f"  {r['replicas']} replica(s): {error}")
    return 0 if all(r["errors"] == 0 and r["leaks"] == 0 for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
