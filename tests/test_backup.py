"""`footnote backup` / `footnote restore`: back up, damage and delete, restore, and the same
search results and feedback come back; an archive that is damaged, escapes its folder or
holds links is refused before anything is touched."""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import stat
import tarfile
from pathlib import Path

import pytest

from footnote.cli.backup import MANIFEST, BackupError, backup, restore
from footnote.cli.main import main
from footnote.feedback.records import FeedbackStore
from footnote.ingest.pipeline import ingest
from footnote.store.file_checks import read_current
from footnote.tools.search import SearchRequest, search
from tests.conftest import HANDBOOK

QUESTION = "How often do I have to change my API key?"


def ranked(index: Path) -> list[tuple[str, str, float]]:
    """The ranking: ids, texts and scores (to 4 places: the query's own embedding varies in
    the last float bits from one call to the next)."""
    hits = search(SearchRequest(query=QUESTION, index_dir=str(index), k=5))
    return [(h.chunk.id, h.chunk.text, round(h.score, 4)) for h in hits]


def rows(db: Path) -> list[tuple[str, str, int | None]]:
    return [(r.user_id, r.answer, r.rating) for r in FeedbackStore(str(db)).all()]


@pytest.fixture
def team(tmp_path: Path) -> tuple[Path, Path]:
    index = tmp_path / "team" / "index"
    assert not ingest([HANDBOOK], index).failed
    db = tmp_path / "team" / "feedback.sqlite3"
    answer = {
        "thread_id": "t1",
        "message_id": "m1",
        "question": QUESTION,
        "answer": "Every 90 days. [1]",
        "not_covered": False,
        "citations": [{"n": 1, "chunk_id": "keys.md#rotation:0", "source": "keys.md"}],
    }
    FeedbackStore(str(db)).record(user="api_key:alice", answer=answer, rating=1)
    return index, db


def test_backup_damage_restore_gives_the_same_results_and_feedback(
    team: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    index, db = team
    before, feedback = ranked(index), rows(db)
    assert before[0][0].startswith("keys.md") and feedback
    archive = tmp_path / "backup.tar.gz"
    assert main(["backup", str(archive), "--index", str(index), "--db", str(db)]) == 0
    assert "feedback: included" in capsys.readouterr().out
    assert stat.S_IMODE(archive.stat().st_mode) == 0o600
    assert main(["backup", str(archive), "--index", str(index)]) == 2  # never overwritten

    live = index / "versions" / str(read_current(index))
    vectors = live / "vectors.faiss"
    data = bytearray(vectors.read_bytes())
    data[len(data) // 2] ^= 0xFF
    vectors.write_bytes(bytes(data))
    (index / "sources.json").unlink()
    db.unlink()
    assert main(["sources", "--index", str(index)]) != 0  # damaged: said so
    capsys.readouterr()

    assert main(["restore", str(archive), "--index", str(index), "--db", str(db)]) == 0
    assert ranked(index) == before
    assert rows(db) == feedback
    assert (index / "sources.json").is_file()
    assert stat.S_IMODE(db.stat().st_mode) == 0o600

    shutil.rmtree(index)  # gone altogether: restored from nothing
    assert main(["restore", str(archive), "--index", str(index), "--no-feedback"]) == 0
    assert ranked(index) == before


def test_a_damaged_index_is_not_backed_up(team: tuple[Path, Path], tmp_path: Path) -> None:
    index, _ = team
    live = index / "versions" / str(read_current(index))
    (live / "files.json").write_text("{}")
    with pytest.raises(Exception, match="damaged|checksum|corrupt"):
        backup(str(index), tmp_path / "b.tar.gz")
    assert not (tmp_path / "b.tar.gz").exists()


def rewritten(archive: Path, target: Path, change: str) -> Path:
    """A copy of `archive` with one thing wrong, its listed checksums made to fit where the
    change is not the checksum itself (so only the rule under test can refuse it)."""
    with tarfile.open(archive) as tar:
        members = [(m, tar.extractfile(m).read()) for m in tar.getmembers()]  # type: ignore[union-attr]
    manifest = json.loads(members[0][1])
    out: list[tuple[tarfile.TarInfo, bytes]] = []
    for member, data in members[1:]:
        if change == "flip" and member.name.endswith("chunks.sqlite"):
            data = data[:-1] + bytes([data[-1] ^ 1])
        out.append((member, data))
    if change in ("escape", "absolute", "symlink", "unlisted"):
        name = {"escape": "index/../../escaped.txt", "absolute": "/tmp/escaped.txt"}.get(
            change, "index/versions/x"
        )
        info = tarfile.TarInfo(name)
        if change == "symlink":
            info.type, info.linkname = tarfile.SYMTYPE, "/etc/passwd"
            name = info.name = f"index/versions/{manifest['index_version']}/link"
        payload = b"" if change == "symlink" else b"escaped"
        info.size = len(payload)
        out.append((info, payload))
        if change != "unlisted":
            digest = hashlib.sha256(payload).hexdigest()
            manifest["files"][name] = {"size": len(payload), "sha256": digest}
    data = json.dumps(manifest).encode()
    head = tarfile.TarInfo(MANIFEST)
    head.size = len(data)
    with tarfile.open(target, "w:gz") as tar:
        tar.addfile(head, io.BytesIO(data))
        for member, payload in out:
            tar.addfile(member, io.BytesIO(payload) if member.isreg() else None)
    return target


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        ("flip", "checksum differs"),
        ("escape", "may not restore"),
        ("absolute", "may not restore"),
        ("symlink", "not a regular file"),
        ("unlisted", "does not list"),
    ],
)
def test_a_damaged_or_escaping_archive_is_refused_and_nothing_changes(
    team: tuple[Path, Path], tmp_path: Path, change: str, reason: str
) -> None:
    index, db = team
    archive = tmp_path / "backup.tar.gz"
    backup(str(index), archive, db=str(db))
    bad = rewritten(archive, tmp_path / f"{change}.tar.gz", change)
    target = tmp_path / "restored" / "index"
    with pytest.raises(BackupError, match=reason):
        restore(bad, str(target), db=str(tmp_path / "restored" / "feedback.sqlite3"))
    assert read_current(target) is None
    assert not (tmp_path / "restored" / "feedback.sqlite3").exists()
    assert not list(tmp_path.rglob("escaped.txt")) and not Path("/tmp/escaped.txt").exists()
    assert not [p for p in (tmp_path / "restored").rglob("*") if p.is_symlink()]
    assert os.listdir(target) in ([], ["LOCK"])


def test_the_upgrade_note_names_the_versions_this_footnote_writes() -> None:
    """docs/deployment.md's table of Footnote's own data versions says what the code says."""
    from footnote.cli.backup import BACKUP_VERSION
    from footnote.feedback.records import SCHEMA_VERSION
    from footnote.store.files import FORMAT_VERSION
    from footnote.store.postgres import SCHEMA_VERSION as PG_SCHEMA_VERSION
    from tests.conftest import REPO

    note = (REPO / "docs" / "deployment.md").read_text(encoding="utf-8")
    rows = {line.split("|")[1].strip(): line for line in note.splitlines() if line.startswith("| ")}
    assert f"(now {FORMAT_VERSION})" in rows["Index (files backend)"]
    assert f"`footnote_schema` (now {PG_SCHEMA_VERSION})" in rows["Index (PostgreSQL)"]
    assert f"(now {SCHEMA_VERSION})" in rows["Feedback store"]
    assert f"(now {BACKUP_VERSION})" in rows["Backup archive"]
