"""Finding 21: everything Footnote writes that holds document text (the index, its
`sources.json`, the embedding cache, the state folder) is its owner's alone: folders 0700,
files 0600, whatever the umask, and an index an older Footnote left readable to all is
tightened on its next write."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from footnote.ingest.pipeline import ingest
from footnote.models.embedding_choice import RECORD_FILE, remember
from footnote.store.embedding_cache import CACHE_FILE
from footnote.store.files import REMEMBERED
from footnote.store.private import make_private, private_dir, private_file
from footnote.store.report_cache import ReportCache
from tests.conftest import RunCli


@pytest.fixture
def open_umask() -> Iterator[None]:
    """The usual umask (022), under which files are world-readable unless made private."""
    before = os.umask(0o022)
    yield
    os.umask(before)


def readable_by_others(*roots: Path) -> list[str]:
    """Every path under `roots` that group or others may read, write or enter."""
    found = []
    for root in roots:
        for path in [root, *root.rglob("*")]:
            mode = path.lstat().st_mode
            if not stat.S_ISLNK(mode) and stat.S_IMODE(mode) & 0o077:
                found.append(f"{oct(stat.S_IMODE(mode))} {path}")
    return found


def _docs(folder: Path) -> Path:
    folder.mkdir()
    (folder / "pay.md").write_text("---\naccess: [hr]\n---\n# Pay\n\nSalaries in zanzibar.\n")
    (folder / "open.md").write_text("# Open\n\nAnyone may read this.\n")
    return folder


def test_cli_ingest_writes_nothing_others_can_read(
    tmp_path: Path, run_cli: RunCli, open_umask: None
) -> None:
    docs = _docs(tmp_path / "docs")
    index = tmp_path / "index"
    result = run_cli("ingest", str(docs), "--index", str(index))
    assert result.returncode == 0, result.stderr
    assert (index / REMEMBERED).is_file() and (index / CACHE_FILE).is_file()
    assert readable_by_others(index) == []


def test_an_index_left_readable_by_an_older_footnote_is_tightened_on_write(
    tmp_path: Path, open_umask: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    docs = _docs(tmp_path / "docs")
    index = tmp_path / "index"
    assert not ingest([docs], str(index)).failed
    for path in [index, *index.rglob("*")]:  # as an index written before this rule was
        path.chmod(0o755 if path.is_dir() else 0o644)
    state = tmp_path / "state"
    state.mkdir(mode=0o755)
    monkeypatch.setenv("FOOTNOTE_STATE_DIR", str(state))
    (docs / "more.md").write_text("# More\n\nAnother page.\n")
    assert not ingest([docs], str(index)).failed
    remember(index, "openai:text-embedding-3-small")  # the record in the state folder
    assert (state / RECORD_FILE).is_file()
    assert readable_by_others(index, state) == []


def test_a_fresh_state_folder_and_its_parents_are_made_private(
    tmp_path: Path, open_umask: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    state = tmp_path / "home" / "state" / "footnote"
    monkeypatch.setenv("FOOTNOTE_STATE_DIR", str(state))
    remember(tmp_path / "index", "openai:text-embedding-3-small")
    assert readable_by_others(tmp_path / "home") == []


def test_the_report_cache_and_the_helpers_are_private(tmp_path: Path, open_umask: None) -> None:
    cache_dir = private_dir(tmp_path / "a" / "b")
    ReportCache(cache_dir).put("key", "a community report quoting a document")
    private_file(cache_dir / "made.sqlite")
    loose = tmp_path / "loose"
    loose.mkdir(mode=0o755)
    (loose / "text.txt").write_text("document text")
    outside = tmp_path / "outside.txt"
    outside.write_text("not Footnote's")
    (loose / "link").symlink_to(outside)
    make_private(loose)
    assert readable_by_others(tmp_path / "a", loose) == []
    assert stat.S_IMODE(outside.stat().st_mode) == 0o644, "a link is not followed"


@pytest.mark.integration
def test_root_keeps_the_trial_database_in_its_private_state_folder(
    monkeypatch: pytest.MonkeyPatch, open_umask: None
) -> None:
    """As root with $FOOTNOTE_STATE_DIR, the default data folder lies in the private state
    folder: the database's own user may pass through it (0711, nothing listed), and a later
    ingest that makes the state folder private again does not lock the database out."""
    import shutil
    import tempfile

    from footnote.server import production
    from footnote.server.local_postgres import start_server, stop_server

    assert os.geteuid() == 0, "CI runs as root: this is root's set-up"
    scratch = Path(tempfile.mkdtemp(prefix="footnote-root-state-"))
    scratch.chmod(0o755)
    state = scratch / "footnote"
    monkeypatch.setenv("FOOTNOTE_STATE_DIR", str(state))
    try:
        private_dir(state)  # what an ingest does first
        chosen = production.prepare_data_dir(production.default_data_dir())
        assert chosen == state / "production"
        for _ in range(2):
            server = start_server(folder=chosen / "postgres")
            stop_server(server)
            private_dir(state)  # a later ingest
            assert stat.S_IMODE(state.stat().st_mode) & 0o066 == 0
        assert stat.S_IMODE((chosen / "postgres").stat().st_mode) == 0o700
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
