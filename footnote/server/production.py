"""The production server: Footnote on Aegra, one or more replicas sharing PostgreSQL + Redis.

`footnote serve --production` starts the replicas against the operator's `postgresql://` and
`redis://` URLs, or, with neither given, against a PostgreSQL (the embedded wheel) and a
`redis-server` started here for a single-machine trial. Each replica is
`python -m uvicorn aegra_api.main:app` with the config `write_config` writes: the answer
graph behind `footnote.server.aegra_app:make_graph`, Footnote's auth
(`footnote.server.aegra_auth`) and the chat page. Runs go through Redis to whichever
replica's worker takes them; a replica that dies loses its lease and another resumes the run
from its last checkpoint.

Aegra needs Python 3.12 or later; Footnote's core stays on 3.11. The replicas run under the
interpreter that has `aegra_api` (`--python`, $FOOTNOTE_PRODUCTION_PYTHON, this one, or
`.venv-prod/bin/python` in the checkout, which `./dev test` creates).

Aegra serves every caller as `anonymous` when its auth module fails to import: a replica is
only put in service after a request without credentials was refused (`check_refuses`).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from footnote.server.langgraph_dev import (
    CORS,
    CREDENTIAL_SETTINGS,
    LOOPBACK,
    _installed_file,
    free_port,
    log_tail,
    server_environment,
    stop_server,
)

PRODUCTION_PYTHON_ENV = "FOOTNOTE_PRODUCTION_PYTHON"
GRAPH_ID = "footnote"
RECOVERY_DEFAULTS = {
    # How fast a dead replica's run is taken over: its lease must lapse, then the reaper
    # (every REAPER_INTERVAL_SECONDS) requeues it. Aegra's defaults (30/10/15) recover in
    # 40-55 s; these halve that. Operators override any of them in the environment.
    "LEASE_DURATION_SECONDS": "15",
    "HEARTBEAT_INTERVAL_SECONDS": "5",
    "REAPER_INTERVAL_SECONDS": "5",
}


class ProductionError(RuntimeError):
    """The production server cannot start (or must not serve); the message says why."""


def production_python(explicit: str = "") -> str:
    """The interpreter with `aegra_api` installed (Aegra needs Python 3.12+)."""
    candidates = [explicit, os.environ.get(PRODUCTION_PYTHON_ENV, "")]
    if importlib.util.find_spec("aegra_api") is not None:
        candidates.append(sys.executable)
    candidates.append(str(Path(__file__).resolve().parents[2] / ".venv-prod" / "bin" / "python"))
    for candidate in filter(None, candidates):
        found = shutil.which(candidate) or (candidate if Path(candidate).exists() else "")
        if (
            found
            and subprocess.run(
                [found, "-c", "import aegra_api, footnote"], capture_output=True, check=False
            ).returncode
            == 0
        ):
            return found
    raise ProductionError(
        "no Python with aegra-api and footnote installed; create one with Python 3.12: "
        "python3.12 -m venv .venv-prod && .venv-prod/bin/pip install -c constraints.txt "
        "-e '.[production]'  (or pass --python)"
    )


AUTH_PATH = "footnote.server.aegra_auth:auth"


def write_config(directory: Path, auth_path: str = AUTH_PATH) -> Path:
    """Aegra's config (aegra.json) in `directory`: graphs by file, auth by module. The
    corpus graphs are langgraph.json's (`footnote.server.auth.CORPUS_GRAPHS`)."""
    app_file = _installed_file("footnote.server.aegra_app")
    indexer_file = _installed_file("footnote.graph.indexer")
    data = {
        "graphs": {
            GRAPH_ID: f"{app_file}:make_graph",
            "indexer": f"{indexer_file}:graph",
            "library": f"{indexer_file}:library",
        },
        "auth": {"path": auth_path},
        "http": {"app": f"{app_file}:app", "cors": CORS},
    }
    target = directory / "aegra.json"
    target.write_text(json.dumps(data, indent=2), encoding="utf-8")
    return target


def replica_environment(
    *,
    index_dir: str,
    database_url: str,
    redis_url: str,
    config: Path,
    host: str,
    port: int,
    migrate: bool,
    base: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """Everything one replica reads: Footnote's settings plus Aegra's."""
    env = server_environment(index_dir=index_dir)
    env.update(base or {})
    for name, value in RECOVERY_DEFAULTS.items():
        env.setdefault(name, value)
    env.update(
        {
            "AEGRA_CONFIG": str(config),
            "DATABASE_URL": database_url,
            "REDIS_URL": redis_url,
            "REDIS_BROKER_ENABLED": "true",
            # An operator who migrates out of band (`aegra db upgrade`) sets it to false.
            "RUN_MIGRATIONS_ON_STARTUP": env.get("RUN_MIGRATIONS_ON_STARTUP", "true")
            if migrate
            else "false",
            "HOST": host,
            "PORT": str(port),
            "CRON_ENABLED": "false",
            "ENABLE_PROMETHEUS_METRICS": "false",
        }
    )
    return env


def replica_command(python: str, *, host: str, port: int) -> list[str]:
    return [
        python,
        "-m",
        "uvicorn",
        "aegra_api.main:app",
        "--host",
        host,
        "--port",
        str(port),
        "--timeout-graceful-shutdown",
        "60",
        "--no-access-log",
    ]


@dataclass
class Replica:
    url: str
    log: Path
    process: subprocess.Popen[bytes]


def wait_ready(replica: Replica, timeout_s: float = 180.0) -> None:
    """Poll GET /ready; ProductionError with the log's tail if it exits or stalls."""
    import httpx

    pause = threading.Event()
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if replica.process.poll() is not None:
            raise ProductionError(
                f"replica {replica.url} exited with {replica.process.returncode}:\n"
                f"{log_tail(replica.log)}"
            )
        try:
            if httpx.get(f"{replica.url}/ready", timeout=2.0).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        pause.wait(0.3)
    raise ProductionError(f"replica {replica.url} not ready after {timeout_s:.0f} s")


def check_refuses(url: str) -> None:
    """ProductionError unless requests without credentials are refused (Aegra fails open
    when the auth module cannot be loaded)."""
    import httpx

    probes: tuple[tuple[str, str], ...] = (
        ("POST", "/threads/search"),
        ("POST", "/assistants/search"),
        ("POST", "/threads"),
    )
    for method, path in probes:
        try:
            status = httpx.request(method, f"{url}{path}", json={}, timeout=10.0).status_code
        except httpx.HTTPError as exc:
            raise ProductionError(f"{method} {path}: {exc}; refusing to serve") from None
        if status not in (401, 403):
            raise ProductionError(
                f"{method} {path} without credentials answered {status}, not 401: the auth "
                "module did not load (see the replica's log); refusing to serve"
            )


def start_replica(
    python: str, *, env_for: Mapping[str, str], host: str, port: int, log: Path, cwd: Path
) -> Replica:
    with log.open("ab") as sink:
        process = subprocess.Popen(
            replica_command(python, host=host, port=port),
            env=dict(env_for),
            cwd=cwd,
            stdout=sink,
            stderr=subprocess.STDOUT,
        )
    return Replica(f"http://{host if host != '0.0.0.0' else LOOPBACK}:{port}", log, process)


DRAIN_S = 100.0
"""How long a stopping replica may take: uvicorn's graceful shutdown (60 s) plus Aegra's
worker drain (WORKER_DRAIN_TIMEOUT, 30 s); runs still going after that are requeued."""


def stop_replica(process: subprocess.Popen[bytes], timeout_s: float = DRAIN_S) -> None:
    """SIGTERM (the replica finishes its runs), then SIGKILL if it outlives `timeout_s`."""
    if process.poll() is not None:
        return
    process.terminate()
    try:
        process.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=10)


@dataclass
class LocalRedis:
    url: str
    process: subprocess.Popen[bytes]


def start_redis(directory: Path) -> LocalRedis:
    """A `redis-server` on a free loopback port, in-memory only."""
    binary = shutil.which("redis-server")
    if binary is None:
        raise ProductionError(
            "no redis-server on PATH: install Debian's redis-server (./dev test does) or "
            "pass --redis-url"
        )
    port = free_port()
    options = ["--port", str(port), "--bind", LOOPBACK, "--save", "", "--appendonly", "no"]
    with (directory / "redis.log").open("ab") as sink:
        process = subprocess.Popen(
            [binary, *options, "--dir", str(directory), "--protected-mode", "yes"],
            stdout=sink,
            stderr=subprocess.STDOUT,
        )
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise ProductionError(f"redis-server exited:\n{log_tail(directory / 'redis.log')}")
        try:
            with socket.create_connection((LOOPBACK, port), timeout=1) as sock:
                sock.sendall(b"PING\r\n")
                if sock.recv(16).startswith(b"+PONG"):
                    return LocalRedis(f"redis://{LOOPBACK}:{port}/0", process)
        except OSError:
            time.sleep(0.1)
    stop_server(process)
    raise ProductionError("redis-server did not answer within 30 s")


@dataclass
class Deployment:
    """Running replicas and where they store state."""

    replicas: list[Replica]
    database_url: str
    redis_url: str
    config: Path
    env: dict[str, str] = field(default_factory=dict)
    """The environment the replicas were started with (less host, port, migrations)."""
    python: str = ""

    def stop(self) -> None:
        """Stop every replica (SIGTERM, each drains its runs)."""
        for replica in self.replicas:
            stop_replica(replica.process)

    def add_replica(self, log: Path, host: str = LOOPBACK, port: int = 0) -> Replica:
        """Start one more replica (no migrations: the first one ran them)."""
        port = port or free_port(host)
        env = {**self.env, "HOST": host, "PORT": str(port), "RUN_MIGRATIONS_ON_STARTUP": "false"}
        replica = start_replica(
            self.python, env_for=env, host=host, port=port, log=log, cwd=self.config.parent
        )
        self.replicas.append(replica)
        wait_ready(replica)
        check_refuses(replica.url)
        return replica


@contextmanager
def running_deployment(
    *,
    index_dir: str,
    workdir: Path,
    replicas: int = 1,
    database_url: str = "",
    redis_url: str = "",
    python: str = "",
    host: str = LOOPBACK,
    ports: tuple[int, ...] = (),
    extra_env: Mapping[str, str] | None = None,
    inherit_credentials: bool = True,
    auth_path: str = AUTH_PATH,
) -> Iterator[Deployment]:
    """Start `replicas` replicas (and a local PostgreSQL / Redis where no URL is given),
    refuse to yield unless each refuses an unauthenticated probe; stop everything by PID.
    `inherit_credentials=False`: the operator's FOOTNOTE_API_KEYS / JWT settings in this
    environment are not passed on (tests), only those in `extra_env`."""
    python = production_python(python)
    workdir.mkdir(parents=True, exist_ok=True)
    config = write_config(workdir, auth_path)
    with ExitStack() as stack:
        if not database_url:
            from footnote.server.local_postgres import start_server
            from footnote.server.local_postgres import stop_server as stop_pg

            pg = start_server()
            stack.callback(stop_pg, pg)
            database_url = pg.url
        if not redis_url:
            redis = start_redis(workdir)
            stack.callback(stop_server, redis.process)
            redis_url = redis.url
        env = replica_environment(
            index_dir=index_dir,
            database_url=database_url,
            redis_url=redis_url,
            config=config,
            host=host,
            port=0,
            migrate=True,
            base=extra_env,
        )
        if not inherit_credentials:  # a test's replicas know only the credentials it gives
            for name in CREDENTIAL_SETTINGS:
                if name not in (extra_env or {}):
                    env.pop(name, None)
        deployment = Deployment([], database_url, redis_url, config, env, python)
        stack.callback(deployment.stop)
        for number in range(replicas):
            port = ports[number] if number < len(ports) else free_port(host)
            log = workdir / f"replica-{number + 1}.log"
            if number == 0:  # runs the migrations; the others wait for it
                first = start_replica(
                    python,
                    env_for={**env, "PORT": str(port)},
                    host=host,
                    port=port,
                    log=log,
                    cwd=workdir,
                )
                deployment.replicas.append(first)
                wait_ready(first)
                check_refuses(first.url)
            else:
                deployment.add_replica(log, host, port)
        yield deployment


def add_production_options(parser: argparse.ArgumentParser) -> None:
    """`footnote serve --production` and its settings (added to the serve command)."""
    group = parser.add_argument_group("production (Aegra on PostgreSQL + Redis)")
    group.add_argument(
        "--production",
        action="store_true",
        help="serve on Aegra: replicas sharing PostgreSQL + Redis (needs Python 3.12+)",
    )
    group.add_argument(
        "--replicas", type=int, default=1, help="replicas to start here (ports PORT, PORT+1, ...)"
    )
    group.add_argument(
        "--database-url",
        default=os.environ.get("DATABASE_URL", ""),
        metavar="POSTGRESQL_URL",
        help="threads, runs and checkpoints (default: $DATABASE_URL; unset: a local trial "
        "PostgreSQL, deleted on exit)",
    )
    group.add_argument(
        "--redis-url",
        default=os.environ.get("REDIS_URL", ""),
        metavar="REDIS_URL",
        help="the run queue and event bus (default: $REDIS_URL; unset: a local redis-server)",
    )
    group.add_argument(
        "--python",
        default="",
        help="interpreter with aegra-api (default: see footnote.server.production)",
    )


def cmd_serve_production(args: argparse.Namespace) -> int:
    """Start the deployment, print where it serves, and stop it on SIGTERM / Ctrl-C."""
    import signal

    from footnote.server.langgraph_dev import available_port
    from footnote.store.postgres import redact

    if args.replicas < 1:
        print("footnote: --replicas must be at least 1", file=sys.stderr)
        return 2
    first = available_port(args.host, args.port)
    ports = tuple([first] + [available_port(args.host, first + n) for n in range(1, args.replicas)])
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    workdir = Path(tempfile.mkdtemp(prefix="footnote-production-"))
    try:
        with running_deployment(
            index_dir=args.index,
            workdir=workdir,
            replicas=args.replicas,
            database_url=args.database_url,
            redis_url=args.redis_url,
            python=args.python,
            host=args.host,
            ports=ports,
        ) as deployment:
            for replica in deployment.replicas:
                print(f"Footnote replica: {replica.url}  (log: {replica.log})")
            print(f"Chat page: {deployment.replicas[0].url}/ui  (index: {args.index})")
            print(
                f"PostgreSQL: {redact(deployment.database_url)}  "
                f"Redis: {redact(deployment.redis_url)}"
            )
            if not args.database_url:
                print("Trial database: threads are deleted when this command stops.")
            sys.stdout.flush()
            while all(r.process.poll() is None for r in deployment.replicas):
                threading.Event().wait(1.0)
            dead = [r for r in deployment.replicas if r.process.poll() is not None]
            print(f"footnote: replica {dead[0].url} exited; stopping", file=sys.stderr)
            return 1
    except ProductionError as exc:
        print(f"footnote: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
