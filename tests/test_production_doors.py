"""No side doors on the production runtime (`footnote serve --production`), as real processes
on loopback ports, stopped by PID:

- only the routes Footnote vetted answer (`footnote.server.aegra_routes`); Aegra's
  `/threads/{id}/commands` and every other route answer 404, to an admin too;
- the corpus graphs (`library`, `indexer`) given a caller's path, URL or option through any
  run route are refused, and the graph factories refuse them even when no auth handler ran;
- the trial PostgreSQL and Redis refuse a connection without their generated secret;
- the launcher restarts a replica killed with `kill -9` while the other serves, the run in
  flight completes, SIGTERM stops it with exit 0, and the trial database survives.
"""

from __future__ import annotations

import base64
import json
import os
import re
import signal
import socket
import stat
import subprocess
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
from langgraph_sdk import get_sync_client

from footnote.ingest import audit
from footnote.ingest.pipeline import ingest
from footnote.server.aegra_routes import VETTED, vetted
from footnote.server.langgraph_dev import free_port, log_tail
from footnote.server.production import (
    METRICS_ENV,
    Deployment,
    ProductionError,
    production_python,
    running_deployment,
)
from tests.conftest import REPO, footnote_command
from tests.served import HANDBOOK, PUBLIC_QUESTION, Listener, Team, api_key_team, build_corpus
from tests.stub_openai import StubOpenAI
from tests.test_indexer_served import assert_audited
from tests.test_production import slow_model

pytestmark = pytest.mark.integration

SECRET_DOCUMENT = "payroll.md"
"""In the index the operator never configured: no served caller may list or read it."""


@pytest.fixture(scope="module")
def team(tmp_path_factory: pytest.TempPathFactory) -> Team:
    return api_key_team(tmp_path_factory.mktemp("doors-team"))


@pytest.fixture(scope="module")
def other_index(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An index on this machine that is not one of the server's."""
    root = tmp_path_factory.mktemp("doors-other")
    corpus = build_corpus(root, open_everything=True)
    summary = ingest([corpus], root / "index")
    assert not summary.failed, summary.failed
    return root / "index"


@pytest.fixture(scope="module")
def served_index(tmp_path_factory: pytest.TempPathFactory) -> Path:
    index = tmp_path_factory.mktemp("doors-index") / "index"
    summary = ingest([HANDBOOK], index)
    assert not summary.failed, summary.failed
    return index


def deploy(
    root: Path, index: Path, team: Team, **options: Any
) -> Iterator[tuple[Deployment, Path]]:
    uploads = root / "uploads"
    env = {
        **team.env,
        "FOOTNOTE_UPLOAD_DIR": str(uploads),
        # this deployment's own audit log: the session's state folder holds other tests'
        "FOOTNOTE_AUDIT_LOG": str(root / "audit.jsonl"),
        **options.pop("extra_env", {}),
    }
    try:
        with running_deployment(
            index_dir=str(index),
            workdir=root / "run",
            extra_env=env,
            inherit_credentials=False,
            **options,
        ) as running:
            yield running, uploads
    except ProductionError as exc:
        pytest.fail(str(exc), pytrace=False)


@pytest.fixture(scope="module")
def doors(
    tmp_path_factory: pytest.TempPathFactory, served_index: Path, team: Team
) -> Iterator[tuple[Deployment, Path]]:
    yield from deploy(tmp_path_factory.mktemp("doors"), served_index, team)


def url_of(deployment: Deployment) -> str:
    return deployment.replicas[0].url


# --- deny by default ------------------------------------------------------------------------


ROUTES_SCRIPT = """
import json, os
os.environ.setdefault("AEGRA_CONFIG", os.devnull)
from fastapi import FastAPI
from aegra_api.main import _include_core_routers

app = FastAPI(docs_url=None, redoc_url=None, openapi_url=None)
_include_core_routers(app)
seen = []
def walk(routes, prefix=""):
    for route in routes:
        if hasattr(route, "original_router"):  # FastAPI's lazily included router
            walk(route.original_router.routes, prefix + (route.include_context.prefix or ""))
        for method in sorted(getattr(route, "methods", None) or []):
            seen.append((method, prefix + route.path))
walk(app.routes)
print(json.dumps(seen))
"""


def aegra_routes() -> list[tuple[str, str]]:
    """Every (method, path template) the installed Aegra serves, from its own routers."""
    found = subprocess.run(
        [production_python(), "-c", ROUTES_SCRIPT], capture_output=True, text=True, check=False
    )
    assert found.returncode == 0, found.stderr[-3000:]
    return [tuple(r) for r in json.loads(found.stdout.splitlines()[-1])]  # type: ignore[misc]


def concrete(template: str) -> str:
    return re.sub(r"\{[^}]+\}", lambda m: "x" + uuid.uuid4().hex[:8], template)


def test_commands_and_every_unvetted_route_answer_404(
    doors: tuple[Deployment, Path], team: Team
) -> None:
    """`/threads/{id}/commands` (a run that skipped Footnote's run checks), the store, crons
    and any route Aegra has that Footnote did not vet: 404 for an admin, a user and nobody,
    before Aegra acts (the thread `/commands` would create does not exist afterwards)."""
    deployment, _ = doors
    url = url_of(deployment)
    routes = aegra_routes()
    unvetted = [(m, p) for m, p in routes if m != "HEAD" and not vetted(m, concrete(p))]
    assert ("POST", "/threads/{thread_id}/commands") in unvetted, routes
    assert len(unvetted) > 5, unvetted  # the store, crons, versions, ...
    thread = str(uuid.uuid4())
    command = {
        "id": "1",
        "method": "run.start",
        "params": {
            "assistant_id": "library",
            "input": {},
            "context": {"index_dir": "/etc"},
            "if_not_exists": "create",
        },
    }
    for user in ("root", "alice", None):
        headers = team.headers(user) if user else {}
        answer = httpx.post(f"{url}/threads/{thread}/commands", json=command, headers=headers)
        assert answer.status_code == 404, (user, answer.text)
        for method, template in unvetted:
            path = concrete(template)
            answer = httpx.request(method, url + path, json={}, headers=headers)
            assert answer.status_code == 404, (user, method, template, answer.text)
        for method, path in (("PUT", "/threads"), ("GET", "/no-such-route"), ("POST", "/ok")):
            assert httpx.request(method, url + path, headers=headers).status_code == 404
    with psycopg.connect(deployment.database_url, autocommit=True) as conn:
        made = conn.execute("SELECT 1 FROM thread WHERE thread_id = %s", (thread,)).fetchone()
    assert made is None


def test_every_vetted_route_is_one_the_server_has(doors: tuple[Deployment, Path]) -> None:
    """The list names real routes (Aegra's or Footnote's own app's): a stale line is a
    defect. The meta pages Aegra does not serve here are listed so that they answer 401/403
    (`footnote.server.aegra_app.AdminOnlyMeta`), not 404."""
    served = {(m, re.sub(r"\{[^}]+\}", "{}", p)) for m, p in [*aegra_routes(), *own_routes()]}
    for entry in VETTED:
        method, template = entry.split(" ", 1)
        if template in ("/docs", "/redoc", "/openapi.json", "/metrics"):
            continue
        assert (method, re.sub(r"\{[^}]+\}", "{}", template)) in served, entry


def own_routes() -> list[tuple[str, str]]:
    """Footnote's own routes: those of the app Aegra mounts its API on."""
    script = (
        "import json\n"
        "from footnote.server.aegra_app import app\n"
        "print(json.dumps([(m, r.path) for r in app.routes for m in sorted(r.methods or [])]))\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("FOOTNOTE_")}
    found = subprocess.run(
        [production_python(), "-c", script], capture_output=True, text=True, check=False, env=env
    )
    assert found.returncode == 0, found.stderr[-3000:]
    return [tuple(r) for r in json.loads(found.stdout.splitlines()[-1])]  # type: ignore[misc]


CLIENT_CHOICES: list[dict[str, Any]] = [
    {"index_dir": "OTHER"},
    {"index_dir": "postgresql://footnote@127.0.0.1:LISTENER/db?index=x"},
    {"index_dir": "default", "upload_dir": "UPLOADS_ELSEWHERE"},
    {"index_dir": "default", "allow_private": True},
    {"index_dir": "default", "embeddings": "fastembed:BAAI/bge-small-en-v1.5"},
]
"""What a caller tried to choose for a corpus graph (filled in per test)."""


def filled(choice: dict[str, Any], other: Path, listener: Listener, elsewhere: Path) -> Any:
    text = json.dumps(choice)
    text = text.replace("OTHER", str(other)).replace("LISTENER", str(listener.port))
    return json.loads(text.replace("UPLOADS_ELSEWHERE", str(elsewhere)))


def finished_status(database_url: str, run_id: str, timeout_s: float = 120.0) -> str:
    """A run's status once it is no longer pending or running; `gone` once Aegra deleted it
    with its ephemeral thread (a stateless run's, when it ended)."""
    pause = threading.Event()
    deadline = time.monotonic() + timeout_s
    with psycopg.connect(database_url, autocommit=True) as conn:
        while time.monotonic() < deadline:
            row = conn.execute("SELECT status FROM runs WHERE run_id = %s", (run_id,)).fetchone()
            if row is None:
                return "gone"
            if row[0] not in ("pending", "running"):
                return str(row[0])
            pause.wait(0.1)
    raise AssertionError(f"run {run_id} still going after {timeout_s:.0f} s")


def run_routes(
    url: str, headers: dict[str, str], database_url: str
) -> dict[str, Callable[[dict[str, Any]], Any]]:
    """Every route that starts a run, each given the whole request body."""

    def on_thread(suffix: str) -> Callable[[dict[str, Any]], Any]:
        def start(body: dict[str, Any]) -> httpx.Response:
            thread = httpx.post(f"{url}/threads", json={}, headers=headers).json()["thread_id"]
            answer = httpx.post(
                f"{url}/threads/{thread}/runs{suffix}", json=body, headers=headers, timeout=120
            )
            if answer.is_success and suffix == "":  # a background run: its outcome counts
                run = answer.json()["run_id"]
                joined = httpx.get(
                    f"{url}/threads/{thread}/runs/{run}/join", headers=headers, timeout=120
                )
                status = httpx.get(f"{url}/threads/{thread}/runs/{run}", headers=headers)
                return httpx.Response(
                    200, json={"joined": joined.text, "status": status.json()["status"]}
                )
            return answer

        return start

    def stateless(suffix: str) -> Callable[[dict[str, Any]], Any]:
        def start(body: dict[str, Any]) -> httpx.Response:
            answer = httpx.post(f"{url}/runs{suffix}", json=body, headers=headers, timeout=120)
            if answer.is_success and suffix == "":  # its thread is nobody's: ask the database
                status = finished_status(database_url, answer.json()["run_id"])
                return httpx.Response(200, json={"status": status})
            return answer

        return start

    return {
        "threads/runs": on_thread(""),
        "threads/runs/wait": on_thread("/wait"),
        "threads/runs/stream": on_thread("/stream"),
        "runs": stateless(""),
        "runs/wait": stateless("/wait"),
        "runs/stream": stateless("/stream"),
        "commands": lambda body: httpx.post(
            f"{url}/threads/{uuid.uuid4()}/commands",
            json={"id": "1", "method": "run.start", "params": body},
            headers=headers,
        ),
    }


def refused(answer: httpx.Response) -> bool:
    """A 4xx, or a run that failed instead of producing output (a stateless background run
    whose record went with its thread gave its caller no output: what it could have done is
    what the side-effect checks look for)."""
    if answer.status_code >= 400:
        return True
    text = answer.text
    if text == '{"status":"gone"}':
        return True
    return '"status": "error"' in text or '"error"' in text or "event: error" in text


def assert_no_side_door(
    deployment: Deployment,
    team: Team,
    other: Path,
    uploads: Path,
    tmp_path: Path,
    *,
    expect_refusal: Callable[[httpx.Response], bool],
) -> None:
    url = url_of(deployment)
    listener = Listener()
    elsewhere = tmp_path / "elsewhere"
    upload = {"name": "planted.md", "content": "IyBQbGFudGVkCg=="}  # "# Planted"
    try:
        for user, graph_id, run_input in (
            ("alice", "library", {}),
            ("root", "library", {}),
            ("root", "indexer", {"action": "add", "uploads": [upload]}),
            ("root", "indexer", {"action": "sources"}),
        ):
            routes = run_routes(url, team.headers(user), deployment.database_url)
            for choice in CLIENT_CHOICES:
                context = filled(choice, other, listener, elsewhere)
                for holder in ("context", "configurable"):
                    body: dict[str, Any] = {"assistant_id": graph_id, "input": run_input}
                    if holder == "context":
                        body["context"] = context
                    else:
                        body["config"] = {"configurable": context}
                    for name, start in routes.items():
                        answer = start(body)
                        where = (user, graph_id, choice, holder, name, answer.text[:300])
                        assert SECRET_DOCUMENT not in answer.text, where
                        assert expect_refusal(answer), where
        assert not listener.received, "the server connected to a caller's postgresql:// URL"
        assert not elsewhere.exists(), "an upload was written where the caller chose"
        assert not (uploads / "planted.md").exists(), "a refused run still saved its upload"
    finally:
        listener.close()


def test_corpus_graphs_refuse_client_paths_urls_and_options_on_every_run_route(
    doors: tuple[Deployment, Path], team: Team, other_index: Path, tmp_path: Path
) -> None:
    """library and indexer runs, from a user and from an admin, with an index path, a
    postgresql:// URL, an upload folder, the private-URL switch or embeddings of the
    caller's, in the run's context or its configurable, through every run route: each is
    refused, nothing of the other index is listed, nothing connects, nothing is written."""
    deployment, uploads = doors
    assert_no_side_door(
        deployment, team, other_index, uploads, tmp_path, expect_refusal=lambda a: a.status_code
        in (403, 404, 422)
    )  # fmt: skip


def test_the_corpus_graphs_still_answer_their_callers(
    doors: tuple[Deployment, Path], team: Team
) -> None:
    """The refusals above are not a broken graph: the library lists the index by name."""
    deployment, _ = doors
    client = get_sync_client(url=url_of(deployment), headers=team.headers("root"))
    listed = client.runs.wait(None, "library", input={}, context={"index_dir": "default"})
    assert "keys.md" in json.dumps(listed), listed


def test_the_audit_log_names_who_changed_what_and_only_admins_read_it(
    doors: tuple[Deployment, Path], team: Team, served_index: Path
) -> None:
    """As on the dev runtime (tests/test_indexer_served.py): an admin's upload and sync are
    recorded under the admin's authenticated identity, a user's refused sync as refused;
    only an admin reads GET /audit; the log is mode 600, the deployment's one log."""
    deployment, uploads = doors
    url = url_of(deployment)
    root = get_sync_client(url=url, headers=team.headers("root"))
    note = base64.b64encode(b"# Audited\n\nThe audited numbat memo.\n").decode()
    default = {"index_dir": "default"}
    upload = {"action": "add", "uploads": [{"name": "audited.md", "content": note}]}
    added = root.runs.wait(None, "indexer", input=upload, context=default)
    assert added["result"]["added"] == 1, added  # type: ignore[index,call-overload]
    synced = root.runs.wait(None, "indexer", input={"action": "sync"}, context=default)
    assert "deleted" in synced["result"], synced  # type: ignore[index,call-overload]
    refused = httpx.post(
        f"{url}/runs/wait",
        json={"assistant_id": "indexer", "input": {"action": "sync"}, "context": default},
        headers=team.headers("alice"),
    )
    assert refused.status_code == 403, refused.text
    assert_audited(url, team, upload="audited.md")
    log = uploads.parent / "audit.jsonl"  # the deployment's one log, as deploy() names it
    assert stat.S_IMODE(log.stat().st_mode) == 0o600


METRICS_QUESTION = "How often do I have to change my API key?"


@pytest.fixture(scope="module")
def measured(
    tmp_path_factory: pytest.TempPathFactory, served_index: Path, team: Team
) -> Iterator[tuple[Deployment, Path]]:
    yield from deploy(
        tmp_path_factory.mktemp("metrics"), served_index, team, extra_env={METRICS_ENV: "1"}
    )


def test_metrics_off_by_default_on_when_asked_and_for_admins_only(
    doors: tuple[Deployment, Path], measured: tuple[Deployment, Path], team: Team
) -> None:
    """The default deployment serves no metrics (404, to an admin too); one started with
    metrics on counts an answer, a refused indexer run and an ingest job, to an admin only,
    and says nothing of the question, the users or the index."""
    assert httpx.get(url_of(doors[0]) + "/metrics", headers=team.headers("root")).status_code == 404
    url = url_of(measured[0])
    answered = httpx.post(
        f"{url}/runs/wait",
        json={
            "assistant_id": "footnote",
            "input": {"messages": [{"role": "user", "content": METRICS_QUESTION}]},
        },
        headers=team.headers("alice"),
        timeout=300,
    )
    assert answered.status_code == 200, answered.text
    refused = httpx.post(
        f"{url}/runs/wait",
        json={"assistant_id": "indexer", "input": {"action": "sync"}},
        headers=team.headers("alice"),
    )
    assert refused.status_code == 403
    listed = httpx.post(
        f"{url}/runs/wait",
        json={"assistant_id": "indexer", "input": {"action": "sources"}},
        headers=team.headers("root"),
        timeout=120,
    )
    assert listed.status_code == 200, listed.text
    assert httpx.get(f"{url}/metrics").status_code == 401
    assert httpx.get(f"{url}/metrics", headers=team.headers("alice")).status_code == 403
    scraped = httpx.get(f"{url}/metrics", headers=team.headers("root"))
    assert scraped.status_code == 200, scraped.text
    text = scraped.text
    assert 'footnote_runs_total{graph="footnote",outcome="ok",route="wait"} 1.0' in text
    assert 'footnote_ingest_jobs_total{action="sync",outcome="refused"} 1.0' in text
    assert 'footnote_ingest_jobs_total{action="sources",outcome="ok"} 1.0' in text
    assert 'footnote_run_seconds_count{graph="footnote",route="wait"} 1.0' in text
    for secret in ("API key", "alice", "root", "keys.md", str(Path(os.sep, "tmp"))):
        assert secret not in text, secret


OPEN_AUTH = '''
"""Footnote's authentication with none of its run handlers: a route that skipped them."""
from langgraph_sdk import Auth

from footnote.server.aegra_auth import authenticate

auth = Auth()
auth.authenticate(authenticate)
'''


def test_the_graph_factories_refuse_what_no_handler_checked(
    tmp_path: Path, served_index: Path, team: Team, other_index: Path
) -> None:
    """With the run handlers gone (as on a route that skips them), the factories still
    refuse every corpus run whose context the operator would not give it: the run fails
    before any node, nothing of the other index is listed, nothing is connected or written."""
    module = tmp_path / "modules" / "open_aegra_auth.py"
    module.parent.mkdir()
    module.write_text(OPEN_AUTH, encoding="utf-8")
    path = os.pathsep.join(filter(None, [str(module.parent), os.environ.get("PYTHONPATH")]))
    log = tmp_path / "audit.jsonl"  # deploy() gives the deployment its own
    for deployment, uploads in deploy(
        tmp_path,
        served_index,
        team,
        auth_path="open_aegra_auth:auth",
        extra_env={"PYTHONPATH": path},
    ):
        assert_no_side_door(
            deployment, team, other_index, uploads, tmp_path, expect_refusal=refused
        )
    # No handler ran here: the indexer's factory recorded each refused run itself.
    recorded = audit.read(log, limit=1_000_000)[0]
    assert recorded and {(r["who"], r["result"]) for r in recorded} == {("api_key:root", "refused")}


def test_no_route_makes_a_thread_without_its_owner(
    doors: tuple[Deployment, Path], team: Team
) -> None:
    """Aegra makes a thread for any run on an unknown id, and keeps a stateless run's when
    asked, in both cases without the caller's access scope (lost to its owner). Here a run on
    an unknown id answers 404 unless it asks to create the thread (then it is the caller's,
    tests/test_production.py), and a stateless run may not keep its thread: no thread is
    made by any of these requests."""
    deployment, _ = doors
    url = url_of(deployment)
    headers = team.headers("alice")
    body = {"assistant_id": "footnote", "input": {"messages": []}}

    def threads() -> int:
        with psycopg.connect(deployment.database_url, autocommit=True) as conn:
            return int(conn.execute("SELECT count(*) FROM thread").fetchone()[0])  # type: ignore[index]

    before = threads()
    for suffix in ("", "/wait", "/stream"):
        unknown = str(uuid.uuid4())
        answer = httpx.post(f"{url}/threads/{unknown}/runs{suffix}", json=body, headers=headers)
        assert answer.status_code == 404, (suffix, answer.text)
        kept = httpx.post(
            f"{url}/runs{suffix}", json={**body, "on_completion": "keep"}, headers=headers
        )
        assert kept.status_code == 422, (suffix, kept.text)
    assert threads() == before


def test_a_thread_state_write_is_refused_to_its_owner_and_an_admin(
    doors: tuple[Deployment, Path], team: Team
) -> None:
    """`POST /threads/{id}/state` is refused (403) as on the dev runtime, to the thread's
    owner and to an admin on their own thread alike (feedback trusts a thread's state as the
    record of its runs); someone else's thread stays 404; the state is left unwritten."""
    url = url_of(doors[0])
    forged = {"values": {"messages": [{"type": "ai", "id": "forged", "content": "FORGED"}]}}
    for user in ("alice", "root"):
        headers = team.headers(user)
        thread = httpx.post(f"{url}/threads", json={}, headers=headers).json()["thread_id"]
        written = httpx.post(f"{url}/threads/{thread}/state", json=forged, headers=headers)
        assert written.status_code == 403, (user, written.text)
        other = "bob" if user == "alice" else "alice"
        foreign = httpx.post(
            f"{url}/threads/{thread}/state", json=forged, headers=team.headers(other)
        )
        assert foreign.status_code == 404, (user, foreign.text)
        state = httpx.get(f"{url}/threads/{thread}/state", headers=headers)
        assert state.status_code == 200 and "FORGED" not in state.text, state.text


# --- the trial services ---------------------------------------------------------------------


def test_the_trial_services_refuse_a_connection_without_their_secret(
    doors: tuple[Deployment, Path],
) -> None:
    """The throw-away PostgreSQL asks every connection for its generated password
    (scram-sha-256, no `trust`); Redis answers nothing but NOAUTH until it is given its own;
    both secrets sit in mode-600 files, not on a command line."""
    deployment, _ = doors
    with psycopg.connect(deployment.database_url, autocommit=True) as conn:
        assert conn.execute("SELECT 1").fetchone() == (1,)
        rules = conn.execute(
            "SELECT DISTINCT auth_method FROM pg_hba_file_rules WHERE error IS NULL"
        ).fetchall()
    assert {r[0] for r in rules} == {"scram-sha-256"}, rules
    password = re.search(r"://postgres:([^@]+)@", deployment.database_url)
    assert password, "the trial database URL carries a password"
    for wrong in ("", ":not-the-password"):
        attempt = deployment.database_url.replace(f":{password.group(1)}@", f"{wrong}@")
        with pytest.raises(psycopg.OperationalError, match="password"):
            psycopg.connect(attempt, connect_timeout=10).close()

    found = re.fullmatch(r"redis://:([^@]+)@([\d.]+):(\d+)/0", deployment.redis_url)
    assert found, "the trial Redis URL carries a password"
    secret, host, port = found.group(1), found.group(2), int(found.group(3))
    assert host == "127.0.0.1"

    def ask(*commands: str) -> bytes:
        """Redis's replies to `commands`, read until each has its line: every reply asked for
        here is one line (+OK, +PONG, -NOAUTH, -WRONGPASS), so no fixed wait is needed."""
        with socket.create_connection((host, port), timeout=5) as sock:
            sock.sendall("".join(c + "\r\n" for c in commands).encode())
            replies = b""
            while replies.count(b"\r\n") < len(commands):
                received = sock.recv(65536)
                assert received, f"Redis closed the connection after {replies!r}"
                replies += received
            return replies

    assert ask("PING").startswith(b"-NOAUTH"), "Redis answered a client without its password"
    assert b"-NOAUTH" in ask("KEYS *") and b"aegra" not in ask("KEYS *")
    assert ask("AUTH wrong-password").startswith(b"-WRONGPASS")
    assert b"+PONG" in ask(f"AUTH {secret}", "PING")

    config = deployment.config.parent / "redis.conf"
    assert stat.S_IMODE(config.stat().st_mode) == 0o600
    for pid in (p for p in os.listdir("/proc") if p.isdigit()):
        try:
            command = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        assert secret.encode() not in command and password.group(1).encode() not in command


def test_health_and_ready_report_postgresql_and_redis(doors: tuple[Deployment, Path]) -> None:
    """Public, and saying only whether each dependency answers (no error text)."""
    url = url_of(doors[0])
    for path, status in (("/health", "healthy"), ("/ready", "ready")):
        answer = httpx.get(url + path)
        assert answer.status_code == 200, answer.text
        assert answer.json() == {"status": status, "postgresql": "ok", "redis": "ok"}


def test_the_default_data_folder_works_as_root(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Root's home is out of reach of the user the trial PostgreSQL runs as, so root's
    default data folder is a system one (`SYSTEM_DATA_DIR`, here moved to a fresh folder):
    made mode 711, the cluster in it starts, opens with its password, and is kept.
    Anyone else keeps theirs in their own Footnote folder, mode 700."""
    from footnote.server import production
    from footnote.server.local_postgres import start_server
    from footnote.server.local_postgres import stop_server as stop_pg

    monkeypatch.delenv("FOOTNOTE_STATE_DIR", raising=False)
    monkeypatch.delenv("XDG_STATE_HOME", raising=False)
    system = Path(tempfile.mkdtemp(prefix="footnote-system-")) / "production"
    system.parent.chmod(0o755)  # as /var/lib is
    monkeypatch.setattr(production, "SYSTEM_DATA_DIR", system)
    try:
        chosen = production.prepare_data_dir(production.default_data_dir())
        if os.geteuid() != 0:
            assert chosen == Path.home() / ".local" / "state" / "footnote" / "production"
            assert stat.S_IMODE(chosen.stat().st_mode) == 0o700
            return
        assert chosen == system and stat.S_IMODE(system.stat().st_mode) == 0o711
        server = start_server(folder=chosen / "postgres")
        try:
            with psycopg.connect(server.url, autocommit=True) as conn:
                assert conn.execute("SELECT 1").fetchone() == (1,)
        finally:
            stop_pg(server)
        assert (chosen / "postgres" / "data" / "PG_VERSION").is_file()
        assert stat.S_IMODE((chosen / "postgres").stat().st_mode) == 0o700
    finally:
        subprocess.run(["rm", "-rf", str(system.parent)], check=False)


# --- supervision ----------------------------------------------------------------------------


def start_launcher(
    data: Path, port: int, env: dict[str, str], log: Path, *extra: str
) -> subprocess.Popen[bytes]:
    with log.open("ab") as sink:
        return subprocess.Popen(
            [*footnote_command(), "serve", "--production", "--index", env["FOOTNOTE_INDEX"],
             "--port", str(port), "--data-dir", str(data), *extra],
            env=env,
            cwd=REPO,
            stdout=sink,
            stderr=subprocess.STDOUT,
        )  # fmt: skip


def wait_for(log: Path, text: str, process: subprocess.Popen[bytes], timeout_s: float) -> str:
    pause = threading.Event()
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        printed = log.read_text(errors="replace")
        if text in printed:
            return printed
        assert process.poll() is None, printed[-4000:]
        pause.wait(0.5)
    raise AssertionError(f"{text!r} not printed within {timeout_s:.0f} s:\n{log_tail(log)}")


def trial_database_url(data: Path, printed: str) -> str:
    """The trial database as the launcher opens it: its port from what it printed (the
    password redacted), the password from its mode-600 file."""
    port = re.findall(r"postgresql://postgres:\*+@127\.0\.0\.1:(\d+)/postgres", printed)[-1]
    secret = (data / "postgres" / "password").read_text().strip()
    return f"postgresql://postgres:{secret}@127.0.0.1:{port}/postgres"


def stop(process: subprocess.Popen[bytes], log: Path) -> int:
    process.send_signal(signal.SIGTERM)
    try:
        return process.wait(timeout=200)
    except subprocess.TimeoutExpired:
        process.kill()
        raise AssertionError(f"the launcher did not stop on SIGTERM:\n{log_tail(log)}") from None


def test_a_killed_replica_is_restarted_while_the_other_serves_and_nothing_is_lost(
    tmp_path: Path, served_index: Path, team: Team
) -> None:
    """`kill -9` of the replica running a job: the launcher says so and starts it again on
    its port, the other replica keeps answering, the run completes, SIGTERM stops the
    deployment with exit 0, and the trial database is still there for the next start
    (which logs JSON lines with `--log-format json`)."""
    data = Path(tempfile.mkdtemp(prefix="footnote-doors-data-"))
    data.chmod(0o755)  # run as root, PostgreSQL runs as footnote-pg, who must enter it
    with StubOpenAI() as model:
        model.default = slow_model
        env = {
            **os.environ,
            **team.env,
            "FOOTNOTE_INDEX": str(served_index),
            "FOOTNOTE_MODEL": "openai:stub-model",
            "FOOTNOTE_MODEL_BASE_URL": model.base_url,
            "OPENAI_API_KEY": "sk-stub-not-a-real-key",
            "TOKENIZERS_PARALLELISM": "false",
        }
        for name in ("DATABASE_URL", "REDIS_URL"):
            env.pop(name, None)
        port, log = free_port(), tmp_path / "launcher.log"
        launcher = start_launcher(data, port, env, log, "--replicas", "2")
        try:
            printed = wait_for(log, "Chat page:", launcher, 300)
            urls = re.findall(r"Footnote replica: (http://\S+)", printed)
            assert len(urls) == 2, printed
            database = trial_database_url(data, printed)
            entry = get_sync_client(url=urls[0], headers=team.headers("alice"))
            thread = entry.threads.create()["thread_id"]
            asked = len(model.chat_requests)
            question = {"messages": [{"role": "user", "content": PUBLIC_QUESTION}]}
            run = entry.runs.create(thread, "footnote", input=question)
            victim_pid = claimer_pid(database, run["run_id"])
            victim = next(u for u in urls if pid_listening(u) == victim_pid)
            survivor = next(u for u in urls if u != victim)
            pause = threading.Event()
            while len(model.chat_requests) <= asked:  # mid-run: the model has been asked
                pause.wait(0.05)
            os.kill(victim_pid, signal.SIGKILL)
            killed_at = time.monotonic()

            # The survivor answers while the victim is down and coming back.
            other = get_sync_client(url=survivor, headers=team.headers("alice"))
            assert httpx.get(survivor + "/ready").status_code == 200
            assert thread in {t["thread_id"] for t in other.threads.search(limit=100)}
            wait_for(log, "restarting it in", launcher, 30)
            wait_for(log, f"replica {victim} restarted", launcher, 240)
            assert httpx.get(victim + "/ready").status_code == 200
            assert httpx.post(victim + "/threads", json={}).status_code == 401

            status = ""
            deadline = time.monotonic() + 180
            while time.monotonic() < deadline:
                status = other.runs.get(thread, run["run_id"])["status"]
                if status in ("success", "error"):
                    break
                pause.wait(1.0)
            assert status == "success", (status, log_tail(log, 200))
            print(f"run finished {time.monotonic() - killed_at:.1f} s after kill -9")
            assert launcher.poll() is None, "one replica's death stopped the deployment"
        finally:
            code = stop(launcher, log)
        assert code == 0, log_tail(log, 100)
        assert (data / "postgres" / "data" / "PG_VERSION").is_file(), "the trial database went"
        assert "replica-1.log" in os.listdir(data / "logs"), os.listdir(data / "logs")

        # The next start reuses it: the thread and its answer are still there.
        log = tmp_path / "second.log"
        again = start_launcher(data, free_port(), env, log, "--log-format", "json")
        try:
            wait_for(log, "Chat page:", again, 300)
            lines = [ln for ln in log.read_text().splitlines() if ln.strip()]
            url = re.findall(r"Footnote replica: (http://[^ \"]+)", log.read_text())[0]
            state = get_sync_client(url=url, headers=team.headers("alice")).threads.get_state(
                thread
            )
            cited = {c["source"] for c in state["values"].get("citations", [])}
            assert "keys.md" in cited, state
        finally:
            code = stop(again, log)
        assert code == 0, log_tail(log, 100)
    not_json = [ln for ln in lines if not _is_json(ln)]
    assert not not_json, not_json[:5]


def _is_json(line: str) -> bool:
    try:
        return isinstance(json.loads(line), dict)
    except ValueError:
        return False


def claimer_pid(database_url: str, run_id: str, timeout_s: float = 60.0) -> int:
    """The PID of the replica whose worker holds the run (Aegra names workers host-PID-n)."""
    pause = threading.Event()
    deadline = time.monotonic() + timeout_s
    with psycopg.connect(database_url, autocommit=True) as conn:
        while time.monotonic() < deadline:
            row = conn.execute(
                "SELECT claimed_by FROM runs WHERE run_id = %s", (run_id,)
            ).fetchone()
            if row and row[0]:
                return int(re.search(r"-(\d+)-worker-\d+$", row[0]).group(1))  # type: ignore[union-attr]
            pause.wait(0.05)
    raise AssertionError(f"run {run_id} was not claimed within {timeout_s:.0f} s")


def pid_listening(url: str) -> int | None:
    """The PID of the process listening on the URL's port (None: nobody now)."""
    port = int(url.rsplit(":", 1)[1])
    found = subprocess.run(
        ["ss", "-Hltnp", f"sport = :{port}"], capture_output=True, text=True, check=False
    ).stdout
    pids = re.findall(r"pid=(\d+)", found)
    return int(pids[0]) if pids else None
