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

The launcher supervises: a replica that dies is logged and started again on its port (with
backoff) while the others keep serving; only SIGTERM / SIGINT stops the deployment, each
replica draining its runs, and the command then exits 0. The trial PostgreSQL is kept in the
data folder (`--data-dir`) unless `--ephemeral`; the trial services open only with their
generated secrets (`footnote.server.local_postgres`, `start_redis`). Replica logs go to the
launcher's stdout and to `<data folder>/logs`, as console text or JSON (`--log-format`).
"""

from __future__ import annotations

import importlib.util
import json
import os
import secrets
import shutil
import socket
import stat
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import IO

from footnote.ingest.source_policy import DATA_DIR_ENV
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
    # A run the dead replica had taken off the queue but not yet claimed holds no lease: it
    # stays pending until the reaper finds it missing from the queue this long after it was
    # made (Aegra's 120 s: one question waited 122.6 s after a kill -9). A run still queued
    # is never pushed twice, and a claim is atomic, so a shorter wait runs nothing twice.
    "STUCK_PENDING_THRESHOLD_SECONDS": "20",
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
    """Aegra's config (aegra.json) in `directory`: graphs by file, auth by module. Every
    graph (the answer graph and the corpus graphs, `footnote.server.auth.CORPUS_GRAPHS`) is
    reached through its factory in `footnote.server.aegra_app`, which re-checks the run's
    context in the process that runs it, whichever route started the run."""
    app_file = _installed_file("footnote.server.aegra_app")
    data = {
        "graphs": {
            GRAPH_ID: f"{app_file}:make_graph",
            "indexer": f"{app_file}:make_indexer",
            "library": f"{app_file}:make_library",
        },
        "auth": {"path": auth_path},
        "http": {"app": f"{app_file}:app", "cors": CORS},
    }
    target = directory / "aegra.json"
    target.write_text(json.dumps(data, indent=2), encoding="utf-8")
    return target


LOG_FORMATS = ("console", "json")
UPLOAD_DIR_ENV = "FOOTNOTE_UPLOAD_DIR"
METRICS_ENV = "FOOTNOTE_METRICS"
"""Whether the replicas serve Prometheus metrics (`footnote.server.metrics`)."""
"""Where the indexer keeps uploaded files (`footnote.graph.indexer.IndexerContext`)."""


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
    log_format: str = "console",
    tracing: bool = False,
) -> dict[str, str]:
    """Everything one replica reads: Footnote's settings plus Aegra's. Tracing is one
    switch: off, neither LangSmith (its keys removed) nor Aegra's OpenTelemetry exporters
    (`OTEL_TARGETS`) trace anything; on, both follow the operator's own settings."""
    env = server_environment(index_dir=index_dir, tracing=tracing)
    if not tracing:
        env["OTEL_TARGETS"] = ""
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
            **_REPLICA_LOG_FORMAT[log_format],
        }
    )
    return env


_REPLICA_LOG_FORMAT = {
    "console": {"ENV_MODE": "LOCAL"},
    "json": {"ENV_MODE": "PRODUCTION"},
}
"""Aegra's structlog renders JSON lines unless ENV_MODE is LOCAL (coloured console text)."""


KEEP_ALIVE_S = 75
"""How long a replica keeps an idle connection open. uvicorn's own 5 s equals the idle expiry
of httpx, which the LangGraph SDK and RemoteGraph use: a client then sends a request on a
connection the replica closes at the same moment and gets "Server disconnected without
sending a response". Longer than clients' and load balancers' idle timeouts (nginx 60 s,
an ALB 60 s), the client always lets go first."""


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
        "--timeout-keep-alive",
        str(KEEP_ALIVE_S),
        "--no-access-log",
    ]


@dataclass
class Replica:
    url: str
    log: Path
    process: subprocess.Popen[bytes]
    port: int = 0
    started_at: float = field(default_factory=time.monotonic)


def wait_ready(
    replica: Replica, timeout_s: float = 180.0, stop: threading.Event | None = None
) -> None:
    """Poll GET /ready; ProductionError with the log's tail if it exits or stalls (or the
    deployment is told to stop meanwhile)."""
    import httpx

    pause = stop or threading.Event()
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
        if pause.wait(0.3):
            raise ProductionError(f"replica {replica.url}: stopping before it was ready")
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


Echo = Callable[[str], None]
"""Where a replica's output goes besides its log file (the launcher's stdout)."""


def start_replica(
    python: str,
    *,
    env_for: Mapping[str, str],
    host: str,
    port: int,
    log: Path,
    cwd: Path,
    echo: Echo | None = None,
) -> Replica:
    """One replica, its output appended to `log` (and handed line by line to `echo`)."""
    command = replica_command(python, host=host, port=port)
    if echo is None:
        with log.open("ab") as sink:
            process = subprocess.Popen(
                command, env=dict(env_for), cwd=cwd, stdout=sink, stderr=subprocess.STDOUT
            )
    else:
        process = subprocess.Popen(
            command, env=dict(env_for), cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
        )
        threading.Thread(target=_tee, args=(process, log, echo), daemon=True).start()
    return Replica(f"http://{host if host != '0.0.0.0' else LOOPBACK}:{port}", log, process, port)


def _tee(process: subprocess.Popen[bytes], log: Path, echo: Echo) -> None:
    assert process.stdout is not None
    with log.open("ab") as sink:
        for line in process.stdout:
            sink.write(line)
            sink.flush()
            echo(line.decode("utf-8", "replace").rstrip("\n"))


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
    """A `redis-server` on a free loopback port, in-memory only, that answers only a client
    that sends its generated password (`requirepass`, kept in a mode-600 config file, never
    on a command line another local user could read)."""
    binary = shutil.which("redis-server")
    if binary is None:
        raise ProductionError(
            "no redis-server on PATH: install Debian's redis-server (./dev test does) or "
            "pass --redis-url"
        )
    port = free_port()
    password = secrets.token_urlsafe(32)
    config = directory / "redis.conf"
    config.unlink(missing_ok=True)
    descriptor = os.open(config, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(descriptor, "w", encoding="utf-8") as sink:
        sink.write(
            f"port {port}\nbind {LOOPBACK}\nprotected-mode yes\nrequirepass {password}\n"
            f'save ""\nappendonly no\ndir "{directory}"\n'
        )
    with (directory / "redis.log").open("ab") as sink:
        process = subprocess.Popen([binary, str(config)], stdout=sink, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise ProductionError(f"redis-server exited:\n{log_tail(directory / 'redis.log')}")
        try:
            with socket.create_connection((LOOPBACK, port), timeout=1) as sock:
                sock.sendall(f"AUTH {password}\r\nPING\r\n".encode())
                if b"+PONG" in _read_replies(sock, 2):
                    return LocalRedis(f"redis://:{password}@{LOOPBACK}:{port}/0", process)
        except OSError:
            time.sleep(0.1)
    stop_server(process)
    raise ProductionError("redis-server did not answer within 30 s")


def _read_replies(sock: socket.socket, count: int) -> bytes:
    """What the server said until `count` reply lines have come (or it stopped talking)."""
    received = b""
    while received.count(b"\r\n") < count:
        chunk = sock.recv(256)
        if not chunk:
            break
        received += chunk
    return received


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
    echo: Echo | None = None

    def stop(self) -> None:
        """Stop every replica at once (SIGTERM: each drains its runs), then wait for all."""
        for replica in self.replicas:
            if replica.process.poll() is None:
                replica.process.terminate()
        for replica in self.replicas:
            stop_replica(replica.process)

    def _start(self, log: Path, host: str, port: int) -> Replica:
        env = {**self.env, "HOST": host, "PORT": str(port), "RUN_MIGRATIONS_ON_STARTUP": "false"}
        return start_replica(
            self.python,
            env_for=env,
            host=host,
            port=port,
            log=log,
            cwd=self.config.parent,
            echo=self.echo,
        )

    def add_replica(self, log: Path, host: str = LOOPBACK, port: int = 0) -> Replica:
        """Start one more replica (no migrations: the first one ran them)."""
        replica = self._start(log, host, port or free_port(host))
        self.replicas.append(replica)
        wait_ready(replica)
        check_refuses(replica.url)
        return replica

    def restart(self, dead: Replica, stop: threading.Event | None = None) -> Replica:
        """A new replica in `dead`'s place (its port and log), put in service only when it
        is ready and refuses callers without credentials; ProductionError if not."""
        host = self.env.get("HOST", LOOPBACK)
        replica = self._start(dead.log, host, dead.port)
        self.replicas[self.replicas.index(dead)] = replica
        try:
            wait_ready(replica, stop=stop)
            check_refuses(replica.url)
        except ProductionError:
            stop_replica(replica.process, timeout_s=10)
            raise
        return replica


Say = Callable[[str, str], None]
"""The launcher's own log lines: (level, message)."""

RESTART_BACKOFF_S = (1.0, 2.0, 5.0, 10.0, 30.0)
"""Pauses before restarting a replica that keeps dying; back to the first once it has
served for HEALTHY_S."""
HEALTHY_S = 60.0


def supervise(deployment: Deployment, stop: threading.Event, say: Say) -> None:
    """Until `stop` is set: restart each replica that exits, after a pause that grows while
    it keeps dying (logged), while the other replicas go on serving."""
    failures: dict[int, int] = {}
    due: dict[int, float] = {}
    while not stop.wait(0.5):
        for replica in list(deployment.replicas):
            code = replica.process.poll()
            if code is None:
                if time.monotonic() - replica.started_at > HEALTHY_S:
                    failures.pop(replica.port, None)
                continue
            if replica.port not in due:
                count = failures.get(replica.port, 0)
                pause = RESTART_BACKOFF_S[min(count, len(RESTART_BACKOFF_S) - 1)]
                failures[replica.port] = count + 1
                due[replica.port] = time.monotonic() + pause
                say(
                    "warning",
                    f"replica {replica.url} exited with {code}; restarting it in {pause:g} s "
                    f"(the others keep serving; log: {replica.log})",
                )
            if time.monotonic() < due[replica.port]:
                continue
            del due[replica.port]
            try:
                started = deployment.restart(replica, stop)
            except ProductionError as exc:
                if not stop.is_set():
                    say("error", f"replica {replica.url} did not come back: {exc}")
                continue
            say("info", f"replica {started.url} restarted (pid {started.process.pid})")


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
    database_dir: Path | None = None,
    log_dir: Path | None = None,
    log_format: str = "console",
    echo: Echo | None = None,
    tracing: bool = False,
) -> Iterator[Deployment]:
    """Start `replicas` replicas (and a local PostgreSQL / Redis where no URL is given),
    refuse to yield unless each refuses an unauthenticated probe; stop everything by PID.
    `inherit_credentials=False`: the operator's FOOTNOTE_API_KEYS / JWT settings in this
    environment are not passed on (tests), only those in `extra_env`.
    `database_dir`: the trial PostgreSQL's folder, kept on exit (None: a temporary one,
    deleted). `log_dir`: where replica logs go (default `workdir`)."""
    python = production_python(python)
    workdir.mkdir(parents=True, exist_ok=True)
    logs = log_dir or workdir
    logs.mkdir(mode=0o700, parents=True, exist_ok=True)
    config = write_config(workdir, auth_path)
    with ExitStack() as stack:
        if not database_url:
            from footnote.server.local_postgres import start_server
            from footnote.server.local_postgres import stop_server as stop_pg

            try:
                pg = start_server(folder=database_dir)
            except (RuntimeError, OSError) as exc:  # OSError: copying its binaries
                raise ProductionError(f"the trial PostgreSQL did not start: {exc}") from None
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
            log_format=log_format,
            tracing=tracing,
        )
        if database_dir is not None:  # the kept cluster's folder holds its password
            env.setdefault(DATA_DIR_ENV, str(database_dir.parent))
        if not inherit_credentials:  # a test's replicas know only the credentials it gives
            for name in CREDENTIAL_SETTINGS:
                if name not in (extra_env or {}):
                    env.pop(name, None)
        deployment = Deployment([], database_url, redis_url, config, env, python, echo)
        stack.callback(deployment.stop)
        for number in range(replicas):
            port = ports[number] if number < len(ports) else free_port(host)
            log = logs / f"replica-{number + 1}.log"
            if number == 0:  # runs the migrations; the others wait for it
                first = start_replica(
                    python,
                    env_for={**env, "PORT": str(port)},
                    host=host,
                    port=port,
                    log=log,
                    cwd=workdir,
                    echo=echo,
                )
                deployment.replicas.append(first)
                wait_ready(first)
                check_refuses(first.url)
            else:
                deployment.add_replica(log, host, port)
        yield deployment


SYSTEM_DATA_DIR = Path("/var/lib/footnote/production")
"""Root's default data folder. PostgreSQL refuses to run as root, so the trial database runs
as an unprivileged user (`footnote.server.local_postgres`), who cannot enter /root (mode 700):
root's deployment keeps its data where a system service's state lives instead."""


def default_data_dir() -> Path:
    """Where a trial deployment keeps its database and logs: the user's Footnote folder, or
    for root (unless $FOOTNOTE_STATE_DIR or $XDG_STATE_HOME names one) `SYSTEM_DATA_DIR`."""
    from footnote.store.private import STATE_ENV, state_dir

    if os.geteuid() == 0 and not (os.environ.get(STATE_ENV) or os.environ.get("XDG_STATE_HOME")):
        return SYSTEM_DATA_DIR
    return state_dir() / "production"


def prepare_data_dir(folder: Path) -> Path:
    """`folder`, made if missing (its missing parents as mkdir makes them): mode 711 as root,
    so the database's own user can pass through it to its mode-700 cluster folder while
    nobody may list it; else 700. A folder given whose parents that user cannot enter is
    refused when the database starts, with a line saying so."""
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    folder.chmod(0o711 if os.geteuid() == 0 else 0o700)
    if os.geteuid() == 0 and folder == default_data_dir().resolve():
        # The default one lies in Footnote's own state folder, kept 0700 (it holds the
        # embedding cache): the database's user may pass through it, never list it.
        state = folder.parent
        state.chmod(stat.S_IMODE(state.stat().st_mode) | 0o011)
    return folder


def launcher_log(log_format: str, stream: IO[str]) -> tuple[Say, Echo]:
    """The launcher's own lines and the replicas' lines, to `stream`, one per line (JSON
    objects with `--log-format json`); thread-safe, since each replica's output has a thread."""
    lock = threading.Lock()

    def write(line: str) -> None:
        with lock:
            stream.write(line + "\n")
            stream.flush()

    def as_json(level: str, logger: str, message: str) -> str:
        now = datetime.now(UTC).isoformat(timespec="milliseconds")
        return json.dumps({"timestamp": now, "level": level, "logger": logger, "event": message})

    def say(level: str, message: str) -> None:
        if log_format == "json":
            write(as_json(level, "footnote.launcher", message))
        else:
            write(f"footnote: {message}" if level != "info" else message)

    def echo(line: str) -> None:
        """A replica's line; in JSON mode, one Aegra printed before its JSON logging was set
        up (plain text) is wrapped, so every line on stdout is one JSON object."""
        if log_format == "json" and not line.startswith("{"):
            line = as_json("info", "aegra", line)
        write(line)

    return say, echo


@dataclass(frozen=True)
class LaunchSettings:
    """What `footnote serve --production` was asked for (`footnote.cli.serve` reads the
    command line into it), so the launcher does not depend on how it was asked."""

    index_dir: str
    host: str
    port: int
    replicas: int = 1
    database_url: str = ""
    redis_url: str = ""
    python: str = ""
    data_dir: Path | None = None
    ephemeral: bool = False
    metrics: bool = False
    tracing: bool = False
    log_format: str = "console"


def serve_production(args: LaunchSettings) -> int:
    """Start the deployment, say where it serves, restart replicas that die, and stop it
    (draining) on SIGTERM / Ctrl-C, exiting 0."""
    import signal

    from footnote.server.langgraph_dev import available_port
    from footnote.store.private import private_dir
    from footnote.store.redaction import redact

    if args.replicas < 1:
        print("footnote: --replicas must be at least 1", file=sys.stderr)
        return 2
    first = available_port(args.host, args.port)
    ports = tuple([first] + [available_port(args.host, first + n) for n in range(1, args.replicas)])
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    say, echo = launcher_log(args.log_format, sys.stdout)
    data_dir: Path = prepare_data_dir((args.data_dir or default_data_dir()).resolve())
    workdir = Path(tempfile.mkdtemp(prefix="footnote-production-"))
    try:
        with running_deployment(
            index_dir=args.index_dir,
            workdir=workdir,
            replicas=args.replicas,
            database_url=args.database_url,
            redis_url=args.redis_url,
            python=args.python,
            host=args.host,
            ports=ports,
            database_dir=None if args.ephemeral else data_dir / "postgres",
            # Uploaded files are sources `sync` reads again: kept beside the database.
            extra_env={
                UPLOAD_DIR_ENV: os.environ.get(UPLOAD_DIR_ENV)
                or str(private_dir(data_dir / "uploads")),  # 0700: uploads are documents
                DATA_DIR_ENV: str(data_dir),  # never a source a served admin may add
                **({METRICS_ENV: "1"} if args.metrics else {}),
            },
            tracing=args.tracing,
            log_dir=data_dir / "logs",
            log_format=args.log_format,
            echo=echo,
        ) as deployment:
            for replica in deployment.replicas:
                say("info", f"Footnote replica: {replica.url}  (log: {replica.log})")
            say("info", f"Chat page: {deployment.replicas[0].url}/ui  (index: {args.index_dir})")
            say(
                "info",
                f"PostgreSQL: {redact(deployment.database_url)}  "
                f"Redis: {redact(deployment.redis_url)}",
            )
            if not args.database_url:
                say(
                    "info",
                    "Trial database: deleted when this command stops (--ephemeral)."
                    if args.ephemeral
                    else f"Trial database: kept in {data_dir / 'postgres'}.",
                )
            supervise(deployment, stop, say)
            say("info", "stopping: each replica finishes its runs (up to 100 s)")
        say("info", "stopped")
        return 0
    except ProductionError as exc:
        say("error", str(exc))
        return 2
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
