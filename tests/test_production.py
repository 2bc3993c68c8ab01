"""Production mode (`footnote serve --production`): Aegra replicas sharing one PostgreSQL and
one Redis, as real processes on loopback ports, stopped by PID.

Runs are made slow on purpose: the replicas' model is a loopback OpenAI stub that waits
before each reply, so a run is still going when a replica is killed or told to stop.
"""

from __future__ import annotations

import http.client
import os
import re
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from langgraph_sdk import get_sync_client
from langgraph_sdk.client import SyncLangGraphClient

from footnote.ingest.pipeline import ingest
from footnote.server.langgraph_dev import free_port, log_tail
from footnote.server.production import (
    Deployment,
    ProductionError,
    Replica,
    check_refuses,
    running_deployment,
    write_config,
)
from tests.served import HANDBOOK, PUBLIC_QUESTION, Team, api_key_team
from tests.stub_openai import Reply, StubOpenAI, structured, text, tool_call, tool_names
from tests.test_providers import numbered_sources

pytestmark = pytest.mark.integration

GRAPH_ID = "footnote"
REPLY_DELAY_S = 1.5
"""How long the stub model thinks before each reply: a run takes several of them."""


def slow_model(body: dict[str, Any]) -> Reply:
    """Search once, grade every source as relevant, then answer citing the first."""
    time.sleep(REPLY_DELAY_S)
    searched = any(m.get("role") == "tool" for m in body.get("messages", []))
    if "search_documents" in tool_names(body) and not searched:
        return tool_call("search_documents", {"query": "API key rotation"})
    forced = body.get("response_format") or body.get("tool_choice") not in (None, "auto", "none")
    if forced and numbered_sources(body):
        return structured({"scores": [9] * len(numbered_sources(body))})
    return text("API keys are rotated every 90 days [1].")


@pytest.fixture(scope="module")
def model() -> Iterator[StubOpenAI]:
    with StubOpenAI() as stub:
        stub.default = slow_model
        yield stub


@pytest.fixture(scope="module")
def team(tmp_path_factory: pytest.TempPathFactory) -> Team:
    return api_key_team(tmp_path_factory.mktemp("production-team"))


@pytest.fixture(scope="module")
def deployment(
    tmp_path_factory: pytest.TempPathFactory, model: StubOpenAI, team: Team
) -> Iterator[Deployment]:
    root = tmp_path_factory.mktemp("production")
    summary = ingest([HANDBOOK], root / "index")
    assert not summary.failed, summary.failed
    env = {
        **team.env,
        "FOOTNOTE_MODEL": "openai:stub-model",
        "FOOTNOTE_MODEL_BASE_URL": model.base_url,
        "OPENAI_API_KEY": "sk-stub-not-a-real-key",
    }
    try:
        with running_deployment(
            index_dir=str(root / "index"),
            workdir=root / "run",
            replicas=2,
            extra_env=env,
            inherit_credentials=False,
        ) as running:
            yield running
    except ProductionError as exc:
        pytest.fail(str(exc), pytrace=False)


def client(replica: Replica, team: Team, user: str = "alice") -> SyncLangGraphClient:
    return get_sync_client(url=replica.url, headers=team.headers(user))


def question() -> dict[str, Any]:
    return {"messages": [{"role": "user", "content": PUBLIC_QUESTION}]}


def claimed_by(deployment: Deployment, run_id: str, timeout_s: float = 60.0) -> Replica:
    """The replica whose worker holds the run's lease (Aegra names workers host-PID-n)."""
    pause = threading.Event()
    deadline = time.monotonic() + timeout_s
    with psycopg.connect(deployment.database_url, autocommit=True) as conn:
        while time.monotonic() < deadline:
            row = conn.execute(
                "SELECT claimed_by, status FROM runs WHERE run_id = %s", (run_id,)
            ).fetchone()
            if row and row[0]:
                pid = int(re.search(r"-(\d+)-worker-\d+$", row[0]).group(1))  # type: ignore[union-attr]
                return next(r for r in deployment.replicas if r.process.pid == pid)
            pause.wait(0.05)
    raise AssertionError(f"run {run_id} was not claimed within {timeout_s:.0f} s")


def logs(deployment: Deployment) -> str:
    return "\n".join(log_tail(r.log, 30) for r in deployment.replicas)


def live(deployment: Deployment) -> list[Replica]:
    return [r for r in deployment.replicas if r.process.poll() is None]


def assert_answered(thread_state: dict[str, Any]) -> None:
    values = thread_state["values"]
    humans = [m for m in values["messages"] if m["type"] == "human"]
    assert [m["content"] for m in humans] == [PUBLIC_QUESTION], humans
    assert values["messages"][-1]["type"] == "ai"
    assert "keys.md" in {c["source"] for c in values.get("citations", [])}, values


def test_every_replica_refuses_callers_without_credentials(deployment: Deployment) -> None:
    for replica in deployment.replicas:
        check_refuses(replica.url)


def test_a_thread_made_on_one_replica_runs_on_the_other(deployment: Deployment, team: Team) -> None:
    a, b = live(deployment)[:2]
    thread = client(a, team).threads.create()["thread_id"]
    run = client(b, team).runs.create(thread, GRAPH_ID, input=question())
    output = client(a, team).runs.join(thread, run["run_id"])

    assert "keys.md" in {c["source"] for c in output.get("citations", [])}, (
        output,
        logs(deployment),
    )
    assert client(a, team).runs.get(thread, run["run_id"])["status"] == "success"
    assert_answered(client(b, team).threads.get_state(thread))
    assert thread not in {t["thread_id"] for t in client(b, team, "bob").threads.search()}


def test_a_killed_replicas_run_completes_on_another(
    deployment: Deployment, team: Team, model: StubOpenAI, tmp_path: Path
) -> None:
    """kill -9 of the replica running a job: its lease lapses, another replica's worker
    takes the run over from its last checkpoint, and the thread is whole."""
    entry = live(deployment)[0]
    thread = client(entry, team).threads.create()["thread_id"]
    asked = len(model.chat_requests)
    run = client(entry, team).runs.create(thread, GRAPH_ID, input=question())
    victim = claimed_by(deployment, run["run_id"])
    pause = threading.Event()
    while len(model.chat_requests) <= asked:  # mid-run: the model has been asked
        pause.wait(0.05)
    os.kill(victim.process.pid, signal.SIGKILL)
    killed_at = time.monotonic()
    victim.process.wait(timeout=10)
    survivor = live(deployment)[0]

    status = ""
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        status = client(survivor, team).runs.get(thread, run["run_id"])["status"]
        if status in ("success", "error"):
            break
        pause.wait(1.0)
    assert status == "success", (status, logs(deployment))
    print(f"run taken over and finished {time.monotonic() - killed_at:.1f} s after kill -9")
    assert_answered(client(survivor, team).threads.get_state(thread))
    deployment.add_replica(tmp_path / "replacement.log")  # two again for the next test


def test_sigterm_drains_the_run_in_progress(
    deployment: Deployment, team: Team, model: StubOpenAI
) -> None:
    """SIGTERM: the replica stops taking work, finishes the run it holds (or hands it back
    for another replica), shuts down cleanly, and the run succeeds with its thread whole."""
    entry = live(deployment)[0]
    thread = client(entry, team).threads.create()["thread_id"]
    asked = len(model.chat_requests)
    run = client(entry, team).runs.create(thread, GRAPH_ID, input=question())
    stopping = claimed_by(deployment, run["run_id"])
    pause = threading.Event()
    while len(model.chat_requests) <= asked:
        pause.wait(0.05)
    stopping.process.send_signal(signal.SIGTERM)

    # uvicorn shuts down gracefully, then re-raises the signal it caught.
    assert stopping.process.wait(timeout=120) in (0, -signal.SIGTERM), log_tail(stopping.log)
    assert "Application shutdown complete" in log_tail(stopping.log, 400)
    other = live(deployment)[0]
    final = client(other, team).runs.get(thread, run["run_id"])
    assert final["status"] == "success", final
    assert_answered(client(other, team).threads.get_state(thread))


@pytest.mark.parametrize(
    "auth_path, env",
    [
        ("footnote.no_such_auth_module:auth", {}),  # Aegra logs it and serves `anonymous`
        ("footnote.server.aegra_auth:auth", {"FOOTNOTE_API_KEYS": "/nonexistent/keys.json"}),
    ],
    ids=["auth-module-missing", "key-file-missing"],
)
def test_a_replica_whose_auth_did_not_load_is_not_served(
    tmp_path: Path, auth_path: str, env: dict[str, str]
) -> None:
    """Aegra fails open when the auth module cannot be imported: the production start
    notices (a request without credentials is not refused) and stops instead of serving."""
    with (
        pytest.raises(ProductionError, match="refusing to serve|exited"),
        running_deployment(
            index_dir=str(HANDBOOK),
            workdir=tmp_path / "run",
            extra_env=env,
            inherit_credentials=False,
            auth_path=auth_path,
        ),
    ):
        pytest.fail("a replica without working auth was put in service")
    assert auth_path in write_config(tmp_path, auth_path).read_text()


def test_only_documented_routes_answer_without_credentials(
    deployment: Deployment, team: Team
) -> None:
    """Readiness and the chat page are public; Aegra's meta routes are an admin's; the rest
    needs credentials."""
    import httpx

    url = live(deployment)[0].url
    for path in ("/health", "/ready", "/live", "/ok", "/", "/ui", "/ui/config.json"):
        assert httpx.get(url + path).status_code == 200, path
    for path in ("/info", "/docs", "/redoc", "/openapi.json", "/metrics"):
        assert httpx.get(url + path).status_code == 401, path
        assert httpx.get(url + path, headers=team.headers("alice")).status_code == 403, path
    admin = httpx.get(url + "/info", headers=team.headers("root"))
    assert admin.status_code == 200, admin.text
    assert "version" not in httpx.get(url + "/").text


def test_a_thread_a_run_creates_belongs_to_its_caller(deployment: Deployment, team: Team) -> None:
    """`if_not_exists: "create"`: the new thread is the caller's (owner and scope), readable
    by them from any replica and by nobody else."""
    import uuid

    replicas = live(deployment)
    thread = str(uuid.uuid4())
    output = client(replicas[0], team).runs.wait(
        thread, GRAPH_ID, input=question(), if_not_exists="create"
    )

    assert "keys.md" in {c["source"] for c in output.get("citations", [])}, output
    assert_answered(client(replicas[-1], team).threads.get_state(thread))
    with pytest.raises(Exception) as refused:
        client(replicas[-1], team, "bob").threads.get_state(thread)
    assert getattr(refused.value, "response", None) is not None
    assert refused.value.response.status_code == 404  # type: ignore[attr-defined]


def test_footnote_serve_production_starts_a_trial_and_stops_it(tmp_path: Path, team: Team) -> None:
    """The command itself: with no URLs it starts a local PostgreSQL and Redis and a replica,
    prints where it serves, answers, and on SIGTERM stops all of them and exits 0."""
    import subprocess

    import httpx

    from tests.conftest import footnote_command

    port = free_port()
    env = {**os.environ, **team.env, "TOKENIZERS_PARALLELISM": "false"}
    for name in ("DATABASE_URL", "REDIS_URL"):
        env.pop(name, None)
    log = tmp_path / "serve.log"
    with log.open("wb") as sink:
        process = subprocess.Popen(
            [*footnote_command(), "serve", "--production", "--index", str(HANDBOOK),
             "--port", str(port), "--ephemeral", "--data-dir", str(tmp_path / "data")],
            env=env,
            stdout=sink,
            stderr=subprocess.STDOUT,
        )  # fmt: skip
    try:
        pause = threading.Event()
        deadline = time.monotonic() + 240
        while "Chat page:" not in log.read_text() and time.monotonic() < deadline:
            assert process.poll() is None, log.read_text()
            pause.wait(0.5)
        printed = log.read_text()
        assert f"http://127.0.0.1:{port}" in printed, printed
        url = f"http://127.0.0.1:{port}"
        assert httpx.get(url + "/ready").status_code == 200
        assert httpx.post(url + "/threads", json={}).status_code == 401
        assert httpx.post(url + "/threads", json={}, headers=team.headers("alice")).is_success
        children = subprocess.run(
            ["pgrep", "-P", str(process.pid)], capture_output=True, text=True, check=False
        ).stdout.split()
        assert children, "the replica and redis-server run as the command's children"
    finally:
        process.send_signal(signal.SIGTERM)
        status = process.wait(timeout=150)
    assert status == 0, log.read_text()
    assert (tmp_path / "data" / "logs" / "replica-1.log").is_file()
    assert not (tmp_path / "data" / "postgres").exists()  # --ephemeral
    for child in children:
        assert (
            not Path(f"/proc/{child}").exists()
            or "zombie" in Path(f"/proc/{child}/status").read_text()
        ), child


def test_an_idle_connection_outlives_the_clients_own_idle_expiry(deployment: Deployment) -> None:
    """A replica keeps an idle connection open past 5 s, httpx's (the SDK's) idle expiry:
    the client lets go first, so it never sends on a connection the replica is closing.
    With uvicorn's own 5 s, the second request below found the connection closed."""
    live = next(r for r in deployment.replicas if r.process.poll() is None)  # others were killed
    host, port = live.url.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=10)
    try:
        conn.request("GET", "/ok")
        assert conn.getresponse().read() == b'{"ok":true}'
        line = conn.sock.getsockname()
        threading.Event().wait(6.0)  # idle past the client's 5 s expiry
        conn.request("GET", "/ok")  # on the same connection: raises if the replica closed it
        assert conn.getresponse().read() == b'{"ok":true}'
        assert conn.sock.getsockname() == line
    finally:
        conn.close()
