"""How to start the LangGraph server for Footnote: one home for the command and environment,
used by `footnote serve` and by the integration tests."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from footnote.ingest.audit import AUDIT_ENV, audit_location
from footnote.server.checkpoint import CHECKPOINT_URL_ENV
from footnote.store.backends import is_postgres

_TRACING_KEYS = ("LANGSMITH_API_KEY", "LANGCHAIN_API_KEY")


def server_environment(
    *, index_dir: str, tracing: bool = False, checkpoint_url: str = ""
) -> dict[str, str]:
    """Quiet and offline by default: no analytics, no version check, no tracing.

    With a LangSmith key in the environment the server turns tracing on by itself, so the
    keys are removed unless tracing was asked for. The audit log is named as this process
    resolves it, absolute (the server runs in a folder of its own), so the server writes
    the log `footnote audit` and `footnote keys` use here.
    """
    env = dict(os.environ)
    env.update(
        {
            "FOOTNOTE_INDEX": index_dir
            if is_postgres(index_dir)
            else str(Path(index_dir).resolve()),
            AUDIT_ENV: str(audit_location().absolute()),
            "LANGGRAPH_CLI_NO_ANALYTICS": "1",
            "LANGGRAPH_NO_VERSION_CHECK": "true",
            "TOKENIZERS_PARALLELISM": "false",
        }
    )
    if checkpoint_url:
        env[CHECKPOINT_URL_ENV] = checkpoint_url
    if tracing:
        env["LANGSMITH_TRACING"] = "true"
    else:
        env["LANGSMITH_TRACING"] = "false"
        for key in _TRACING_KEYS:
            env.pop(key, None)
    return env


GRAPH = "footnote.graph.graph:graph"
"""The served graph, named by module: the same config serves from a checkout or a wheel."""
CORPUS_GRAPHS = {
    "indexer": "footnote.graph.indexer:graph",
    "library": "footnote.graph.indexer:library",
}
"""Served beside it: the admins' indexer (add, remove, sync sources) and the reader's list."""
CHECKPOINTER_MODULE = "footnote.server.checkpoint"
"""Home of the PostgreSQL saver. The server's checkpointer loader takes a file path, not a
dotted module, so the config names the installed module's file."""


CORS = {
    "allow_origins": [],
    "allow_methods": ["GET", "POST", "PATCH", "PUT", "DELETE"],
    "allow_headers": ["authorization", "x-api-key", "content-type"],
    "allow_credentials": False,
}
"""No other origin may call the API from a browser; operators widen it with CORS_CONFIG."""


def _installed_file(module: str) -> str:
    """The file of an installed module: the server's auth and checkpointer loaders take file
    paths, not dotted names, and this works from a checkout and from a wheel alike."""
    spec = importlib.util.find_spec(module)
    assert spec is not None and spec.origin is not None
    return spec.origin


def server_config(*, directory: Path, postgres_checkpoints: bool = False) -> Path:
    """Write the langgraph.json to serve into `directory` and return its path.

    It names the graph by module and the auth handler (and the checkpointer) by installed
    file, so it needs no source tree: `footnote serve` works the same from an installed wheel.
    The repository's own langgraph.json says the same with relative paths, for `langgraph dev`
    run in a checkout.
    """
    data: dict[str, Any] = {
        "dependencies": ["."],
        "graphs": {"footnote": GRAPH, **CORPUS_GRAPHS},
        "auth": {
            "path": f"{_installed_file('footnote.server.auth')}:auth",
            "disable_studio_auth": True,
        },
        "http": {
            "app": f"{_installed_file('footnote.server.webapp')}:app",
            "disable_mcp": True,  # Footnote serves its own MCP tools at /mcp (footnote.mcp)
            "cors": CORS,
        },
        "python_version": "3.11",
    }
    if postgres_checkpoints:
        # The saver reads its database from $FOOTNOTE_CHECKPOINT_URL.
        data["checkpointer"] = {
            "path": f"{_installed_file(CHECKPOINTER_MODULE)}:server_checkpointer"
        }
    target = directory / "langgraph.json"
    target.write_text(json.dumps(data, indent=2), encoding="utf-8")
    return target


SERVER_JOBS_ENV = "FOOTNOTE_SERVER_JOBS"
DEFAULT_SERVER_JOBS = 10
"""Runs the dev server executes at once. `langgraph dev` alone runs one at a time
(N_JOBS_PER_WORKER=1, set over the environment's), so one long run, an indexer job's, made
every question wait behind it; the indexer takes at most $FOOTNOTE_INDEXER_JOBS of these."""


def server_jobs() -> int:
    from footnote.ingest.limits import setting_number

    return int(setting_number(SERVER_JOBS_ENV, DEFAULT_SERVER_JOBS, whole=True))


def server_command(*, host: str, port: int, config: Path) -> list[str]:
    """`langgraph dev` for `config`; run it with the config's folder as working directory
    (the server keeps its `.langgraph_api/` state there)."""
    langgraph = Path(sys.executable).with_name("langgraph")
    return [
        str(langgraph) if langgraph.exists() else "langgraph",
        "dev",
        "--no-browser",
        "--no-reload",
        "--n-jobs-per-worker",
        str(server_jobs()),
        "--host",
        host,
        "--port",
        str(port),
        "--config",
        str(config),
    ]


LOOPBACK = "127.0.0.1"
CREDENTIAL_SETTINGS = (
    "FOOTNOTE_API_KEYS",
    "FOOTNOTE_JWT_SECRET",
    "FOOTNOTE_JWT_PUBLIC_KEY",
    "FOOTNOTE_JWKS",
    "FOOTNOTE_JWT_AUDIENCE",
    "FOOTNOTE_JWT_ISSUER",
    "FOOTNOTE_JWT_GROUPS_CLAIM",
    "FOOTNOTE_JWT_ADMIN_GROUP",
)
"""Who may call the server: `running_server` starts from none of these, so a test's server
never inherits an operator's credentials by accident."""
_ANSI_COLOUR = re.compile(r"\x1b\[[0-9;]*m")


class ServerFailed(RuntimeError):
    """`langgraph dev` exited or did not become ready; the message ends with its log."""


@dataclass
class RunningServer:
    """A `langgraph dev` process on a loopback port, and where its log goes."""

    url: str
    log: Path
    process: subprocess.Popen[bytes]


def free_port(host: str = LOOPBACK) -> int:
    with socket.socket() as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def log_tail(log: Path, lines: int = 60) -> str:
    """The end of a server log, without terminal colours."""
    text = _ANSI_COLOUR.sub("", log.read_text(errors="replace")) if log.exists() else ""
    return "\n".join(text.splitlines()[-lines:])


_EXCEPTION_LINE = re.compile(r"^(?:[A-Za-z_]\w*\.)*[A-Za-z_]\w*(?:Error|Exception|Exit)\b: \S.*")


def exit_reason(log: Path) -> str:
    """The last exception a server's log names (`psycopg.OperationalError: connection failed:
    ...`), for the one line that says why it exited; "" when it names none."""
    found = [line.strip() for line in log_tail(log, 400).splitlines()]
    reasons = [line for line in found if _EXCEPTION_LINE.match(line)]
    return reasons[-1][:300] if reasons else ""


def wait_until_ready(server: RunningServer, timeout_s: float = 180.0) -> None:
    """Poll GET /ok until the server answers; ServerFailed if it exits or stalls (a loaded
    shared machine can take a minute or more to import and start it)."""
    import httpx

    pause = threading.Event()
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if server.process.poll() is not None:
            raise ServerFailed(
                f"langgraph dev exited with {server.process.returncode}:\n{log_tail(server.log)}"
            )
        try:
            response = httpx.get(f"{server.url}/ok", timeout=1.0)
            if response.status_code == 200 and response.json().get("ok"):
                return
        except httpx.HTTPError:
            pass
        pause.wait(0.2)
    raise ServerFailed(f"langgraph dev not ready after {timeout_s:.0f} s:\n{log_tail(server.log)}")


def stop_server(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM, then SIGKILL if it has not exited within ten seconds."""
    if process.poll() is not None:
        return
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=10)


@contextmanager
def running_server(
    *,
    index_dir: str,
    log: Path,
    extra_env: Mapping[str, str] | None = None,
    config: Path | None = None,
    timeout_s: float = 180.0,
) -> Iterator[RunningServer]:
    """`langgraph dev` on a free loopback port, started as `footnote serve` starts it (with the
    config it writes, run in that config's folder unless `config` says otherwise); stopped by
    PID on exit. `extra_env` adds settings such as FOOTNOTE_API_KEYS."""
    port = free_port()
    if config is None:
        workdir = log.parent / f"server-{port}"
        workdir.mkdir(parents=True, exist_ok=True)
        config = server_config(directory=workdir)
    env = server_environment(index_dir=index_dir)
    for name in CREDENTIAL_SETTINGS:
        env.pop(name, None)
    env.update(extra_env or {})
    with log.open("wb") as sink:
        process = subprocess.Popen(
            server_command(host=LOOPBACK, port=port, config=config),
            env=env,
            cwd=config.parent,
            stdout=sink,
            stderr=subprocess.STDOUT,
        )
    server = RunningServer(url=f"http://{LOOPBACK}:{port}", log=log, process=process)
    try:
        wait_until_ready(server, timeout_s)
        yield server
    finally:
        stop_server(process)


def available_port(host: str, wanted: int) -> int:
    """`wanted` if nothing listens there, else a free port the OS picks.

    `langgraph dev` moves to a random port by itself when its port is taken, and says so only
    in its log; choosing the port here means the URL we print is the one it listens on.
    """
    for port in (wanted, 0):
        with socket.socket() as sock:
            # As the server will bind it: a port in TIME_WAIT counts as free.
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                sock.bind((host, port))
            except OSError:
                continue
            return int(sock.getsockname()[1])
    raise OSError(f"no free port on {host}")


def wait_until_serving(url: str, process: subprocess.Popen[bytes], timeout_s: float) -> bool:
    """Poll GET /ok until the server answers; False if it exits or stays silent."""
    direct = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # loopback: no proxy
    pause = threading.Event()
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and process.poll() is None:
        try:
            with direct.open(f"{url}/ok", timeout=1.0) as response:
                if response.status == 200:
                    return True
        except OSError:
            pass
        pause.wait(0.2)
    return False
