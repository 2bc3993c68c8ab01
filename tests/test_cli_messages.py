"""The command line says one clear line where a newcomer needs it: an unreachable PostgreSQL
index (exit 3, within seconds, no connection-pool noise), an index folder that cannot be
made, an empty folder to ingest, a `remove` that matches nothing, and `sources` listing each
document under the source that gave it."""

from __future__ import annotations

import socket
import time
from pathlib import Path

import pytest

from footnote.cli.main import main
from tests.conftest import HANDBOOK, RunCli


def closed_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def write(folder: Path, name: str, text: str) -> Path:
    path = folder / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_unreachable_postgres_is_one_line_and_exit_3(run_cli: RunCli) -> None:
    url = f"postgresql://footnote@127.0.0.1:{closed_port()}/footnote?index=handbook"
    for command in (["search", "api key"], ["sources"], ["ingest", str(HANDBOOK), "--quiet"]):
        result = run_cli(*command, "--index", url)
        lines = result.stderr.strip().splitlines()
        assert result.returncode == 3, (command, result.stderr)
        assert len(lines) == 1, (command, result.stderr)  # no pool warnings, no traceback
        assert lines[0].startswith("footnote: cannot connect to PostgreSQL at postgresql://"), lines


@pytest.mark.parametrize("host", ["127.0.0.1", "192.0.2.1"])  # refused; TEST-NET, unanswered
def test_unreachable_postgres_fails_within_5_seconds(
    host: str, capsys: pytest.CaptureFixture[str]
) -> None:
    port = closed_port() if host == "127.0.0.1" else 5432
    url = f"postgresql://footnote@{host}:{port}/footnote?index=h{closed_port()}"
    main(["sources", "--index", "postgresql://x@127.0.0.1:1/warm"])  # imports, not timed
    capsys.readouterr()
    started = time.monotonic()
    status = main(["search", "api key", "--index", url])
    elapsed = time.monotonic() - started
    err = capsys.readouterr().err
    assert status == 3 and err.count("\n") == 1, err
    assert elapsed < 5, f"{elapsed:.1f} s before saying the database cannot be reached"


def test_an_index_folder_that_cannot_be_made_is_one_line(
    tmp_path: Path,
    run_cli: RunCli,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    in_the_way = write(tmp_path, "a-file", "not a folder\n")
    result = run_cli("ingest", str(HANDBOOK), "--index", str(in_the_way / "index"), "--quiet")
    assert result.returncode == 2, result.stderr
    assert result.stderr.strip() == (
        f"footnote: cannot create or write the index folder {in_the_way / 'index'}: "
        "Not a directory; choose another --index"
    )
    # No permission (the tests may run as root, for whom no folder is read-only): mkdir
    # refuses as it would for another user.
    target = tmp_path / "locked" / "index"
    real_mkdir = Path.mkdir

    def refuse(self: Path, *args: object, **kwargs: object) -> None:
        if self == target:
            raise PermissionError(13, "Permission denied", str(self))
        real_mkdir(self, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(Path, "mkdir", refuse)
    assert main(["add", str(HANDBOOK), "--index", str(target), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err == (
        f"footnote: cannot create or write the index folder {target}: Permission denied; "
        "choose another --index\n"
    )


def test_ingest_of_a_folder_without_documents_says_so(tmp_path: Path, run_cli: RunCli) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    write(empty, "photo.bin", "\x00")
    result = run_cli("ingest", str(empty), "--index", str(tmp_path / "index"))
    assert result.returncode == 1
    assert f"footnote: no documents to index in {empty}" in result.stderr
    assert "skipped: 1 file(s): unsupported file type .bin" in result.stderr


def test_remove_without_a_match_names_it_and_exits_1(tmp_path: Path, run_cli: RunCli) -> None:
    docs = tmp_path / "docs"
    write(docs, "a.md", "# A\n\nThe okapi page.\n")
    write(docs, "b.md", "# B\n\nThe second okapi page.\n")
    index = str(tmp_path / "index")
    assert run_cli("add", str(docs), "--index", index, "--quiet").returncode == 0
    nothing = run_cli("remove", "c.md", "--index", index)
    assert nothing.returncode == 1 and nothing.stdout == ""
    assert f"footnote: nothing in {index} matches 'c.md'" in nothing.stderr
    both = run_cli("remove", "c.md", "a.md", "--index", index)
    assert both.returncode == 1, "like rm: the match is removed, the miss still counts"
    assert "deleted: a.md: removed by `footnote remove`" in both.stdout
    assert "matches 'c.md'" in both.stderr and "'a.md'" not in both.stderr
    found = run_cli("remove", "b*", "--index", index)
    assert found.returncode == 0 and found.stderr == "", found.stderr


def test_sources_lists_documents_under_their_source(tmp_path: Path, run_cli: RunCli) -> None:
    first, second = tmp_path / "first", tmp_path / "second"
    write(first, "a.md", "# A\n\nThe quokka page.\n")
    write(second, "b.md", "# B\n\nThe wombat page.\n")
    write(second, "c.md", "# C\n\nThe numbat page.\n")
    index = str(tmp_path / "index")
    assert run_cli("add", str(first), "--index", index, "--quiet").returncode == 0
    assert run_cli("add", str(second), "--index", index, "--quiet").returncode == 0
    lines = run_cli("sources", "--index", index).stdout.splitlines()
    assert lines[0] == f"{index}: 2 sources, 3 documents"
    assert lines[1] == f"  folder {first} (1 documents)"
    assert lines[2].startswith("    a.md: 1 chunks, ")
    assert lines[3] == f"  folder {second} (2 documents)"
    assert lines[4].startswith("    b.md: 1 chunks, ") and lines[5].startswith("    c.md: ")
    assert len(lines) == 6
