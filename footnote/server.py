"""How to start the LangGraph server for Footnote: one home for the command and environment,
used by `footnote serve` and by the integration tests."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

from footnote.checkpoint import CHECKPOINT_URL_ENV
from footnote.store.backends import is_postgres

PROJECT_ROOT = Path(__file__).resolve().parent.parent

_TRACING_KEYS = ("LANGSMITH_API_KEY", "LANGCHAIN_API_KEY")


def server_environment(
    *, index_dir: str, tracing: bool = False, checkpoint_url: str = ""
) -> dict[str, str]:
    """Quiet and offline by default: no analytics, no version check, no tracing.

    With a LangSmith key in the environment the server turns tracing on by itself, so the
    keys are removed unless tracing was asked for.
    """
    env = dict(os.environ)
    env.update(
        {
            "FOOTNOTE_INDEX": index_dir
            if is_postgres(index_dir)
            else str(Path(index_dir).resolve()),
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


def server_config(*, postgres_checkpoints: bool, directory: Path) -> Path:
    """The langgraph.json to serve: the project's own, or a copy that keeps threads in
    PostgreSQL (the saver reads its database from $FOOTNOTE_CHECKPOINT_URL)."""
    config = PROJECT_ROOT / "langgraph.json"
    if not postgres_checkpoints:
        return config
    data = json.loads(config.read_text(encoding="utf-8"))
    data["checkpointer"] = {"path": "./footnote/checkpoint.py:server_checkpointer"}
    target = directory / "langgraph.postgres.json"
    target.write_text(json.dumps(data, indent=2), encoding="utf-8")
    return target


def server_command(*, host: str, port: int, config: Path | None = None) -> list[str]:
    langgraph = Path(sys.executable).with_name("langgraph")
    return [
        str(langgraph) if langgraph.exists() else "langgraph",
        "dev",
        "--no-browser",
        "--no-reload",
        "--host",
        host,
        "--port",
        str(port),
        "--config",
        str(config or PROJECT_ROOT / "langgraph.json"),
    ]


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
