"""Shared fixtures: the sample handbook, one index built from it, and a way to run the CLI.

Building an index embeds text with the real offline model, which takes a second or two, so
the handbook index is built once per session. Tests must treat it as read-only; a test that
writes to an index builds its own under `tmp_path`.
"""

from __future__ import annotations

import inspect
import itertools
import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.pg_fixture import PgServer, server_fixture

REPO = Path(__file__).resolve().parents[1]
HANDBOOK = REPO / "samples" / "handbook"

RunCli = Callable[..., subprocess.CompletedProcess[str]]
Locate = Callable[[], str]
"""Gives a fresh index location on the test's backend each call."""
_index_names = itertools.count()


@pytest.fixture(scope="session")
def handbook_dir() -> Path:
    """The sample corpus in the repository; copy it before changing anything in it."""
    return HANDBOOK


@pytest.fixture(scope="session")
def handbook_index(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An index of samples/handbook built with the default offline embeddings (read-only)."""
    from footnote.ingest.pipeline import ingest

    index = tmp_path_factory.mktemp("handbook") / "index"
    summary = ingest([HANDBOOK], index)
    assert not summary.failed, summary.failed
    return index


def footnote_command() -> list[str]:
    """The installed `footnote` script next to this interpreter, else the module."""
    script = Path(sys.executable).parent / "footnote"
    if script.is_file() and os.access(script, os.X_OK):
        return [str(script)]
    found = shutil.which("footnote")
    return [found] if found else [sys.executable, "-m", "footnote.cli.main"]


@pytest.fixture(scope="session")
def run_cli() -> RunCli:
    """Run `footnote ARGS...` in a subprocess from the repository root; never raises on rc."""

    def run(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
        env = {**os.environ, "TOKENIZERS_PARALLELISM": "false"}
        env.pop("FOOTNOTE_INDEX", None)
        return subprocess.run(
            [*footnote_command(), *args],
            cwd=REPO,
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    return run


@pytest.fixture(scope="session")
def pg_server() -> Iterator[PgServer]:
    """One real PostgreSQL with pgvector for the whole run (see tests/pg_fixture.py)."""
    yield from server_fixture()


@pytest.fixture(params=["files", "postgres"])
def locate(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Locate]:
    """Fresh index locations on the parametrised backend (a directory or a URL); the
    database indexes made are dropped afterwards."""
    made: list[str] = []

    def new() -> str:
        n = next(_index_names)
        if request.param == "files":
            location = str(tmp_path / f"index{n}")
        else:
            server: PgServer = request.getfixturevalue("pg_server")
            location = f"{server.url}?index=t{n}"
        made.append(location)
        return location

    yield new
    if request.param == "postgres":
        from footnote.store.postgres import drop_index

        for location in made:
            drop_index(location)


@pytest.fixture(scope="session", autouse=True)
def state_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The user's Footnote state folder (embeddings record, serve logs) lives in the session's
    scratch space, for this process and every command it starts, and is restored after."""
    folder = tmp_path_factory.mktemp("footnote-state")
    before = os.environ.get("FOOTNOTE_STATE_DIR")
    os.environ["FOOTNOTE_STATE_DIR"] = str(folder)
    yield folder
    if before is None:
        os.environ.pop("FOOTNOTE_STATE_DIR", None)
    else:
        os.environ["FOOTNOTE_STATE_DIR"] = before


PROCESS_CALLS = ("run_cli", "subprocess.", "Popen(", "footnote_command(", "sync_held(")
"""What in a test's own body starts another process: the CLI fixture, subprocess, Popen,
and `tests.killed_sync.sync_held` (a `footnote sync` to kill)."""


def starts_processes(item: pytest.Item) -> bool:
    """Whether the test runs the CLI or another program in a process of its own (its
    fixtures or its body say so)."""
    if "run_cli" in getattr(item, "fixturenames", ()):
        return True
    try:
        body = inspect.getsource(getattr(item, "function", None) or (lambda: None))
    except (OSError, TypeError):
        return False
    return any(call in body for call in PROCESS_CALLS)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Markers that keep the fast subset honest without each file having to remember them.

    A test that starts the embedded PostgreSQL is an integration test, however it reaches
    it: the `pg_server` fixture, or the `locate` fixture's postgres backend (which asks for
    the server only when run). A test that starts another process (the `footnote` command,
    a worker it kills) is a `process` test: each one pays an interpreter's start and
    Footnote's imports, seconds apiece. `./dev test --fast` leaves out both."""
    for item in items:
        fixtures = getattr(item, "fixturenames", ())
        params = getattr(getattr(item, "callspec", None), "params", {})
        if "pg_server" in fixtures or params.get("locate") == "postgres":
            item.add_marker(pytest.mark.integration)
        if starts_processes(item):
            item.add_marker(pytest.mark.process)
