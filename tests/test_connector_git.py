"""The git connector on real repositories made here: a full load cited by file, line and
commit; a sync that reads only what changed and prunes what was deleted; bad files reported
while the rest goes on; links never followed; a served admin held to the operator's folders;
a sync killed before its publish resuming from the last checkpoint, and `footnote sync`
killed by kill -9 while it reads the second changed file resuming with no duplicate chunk;
the command line."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from footnote.ingest import corpus
from footnote.ingest.connectors import git as git_connector
from footnote.ingest.connectors.base import ConnectorError, Permissions
from footnote.ingest.connectors.git import GitConnector, GitSource
from footnote.ingest.source_policy import ServedSourcePolicy, SourceRefused
from footnote.store.types import Caller
from footnote.tools.search import SearchRequest, search
from tests.conftest import Locate, RunCli
from tests.killed_sync import sync_held

KEYS_PY = '''"""Key handling for the service."""

import os


def rotate_key(old: str) -> str:
    """Rotate an API key: the old one keeps working for a grace period."""
    return old[::-1]


class Vault:
    """Holds the secrets."""

    def open_vault(self) -> str:
        return os.getcwd()
'''


def git(repo: Path, *args: str) -> str:
    done = subprocess.run(
        ["git", "-c", "user.name=Ada Lovelace", "-c", "user.email=ada@example.org", *args],
        cwd=repo,
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout.strip()


def commit(repo: Path, files: dict[str, str | bytes | None], message: str = "change") -> str:
    """Write (text or bytes), or delete (None), these files and commit them; the new sha."""
    for name, content in files.items():
        path = repo / name
        if content is None:
            git(repo, "rm", "-q", name)
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content)
        git(repo, "add", name)
    git(repo, "commit", "-q", "-m", message)
    return git(repo, "rev-parse", "HEAD")


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    folder = tmp_path / "repo"
    folder.mkdir()
    git(folder, "init", "-q")
    commit(
        folder,
        {
            "pkg/keys.py": KEYS_PY,
            "README.md": "# Service\n\nThe service rotates keys nightly.\n",
            "notes/ops.md": "# Operations\n\nPager duty rotates weekly among the wombats.\n",
        },
        "first",
    )
    return folder


def source_of(repo: Path) -> str:
    return f"git+file://{repo}"


def hits(index: str | Path, query: str) -> list[Any]:
    return search(
        SearchRequest(
            query=query,
            index_dir=str(index),
            k=20,
            stage="bm25",
            caller=Caller(groups=frozenset({"everyone"}), admin=True),
        )
    )


def test_a_full_load_cites_a_function_by_file_line_and_commit(repo: Path, tmp_path: Path) -> None:
    index = tmp_path / "index"
    summary = corpus.add(index, [source_of(repo)])
    head = git(repo, "rev-parse", "HEAD")
    assert sorted(summary.added) == ["README.md", "notes/ops.md", "pkg/keys.py"]
    assert summary.checkpoints[source_of(repo)]["cursor"] == head

    best = hits(index, "rotate_key")[0].chunk
    assert best.source == "pkg/keys.py"
    assert "def rotate_key" in best.section and "def rotate_key" in best.text
    assert best.lines == [6, 8]
    assert best.url == f"{source_of(repo)}@{head}#pkg/keys.py:L6-L8"
    assert best.metadata["commit"] == head and best.metadata["author"] == "Ada Lovelace"
    method = next(h.chunk for h in hits(index, "open_vault") if "open_vault" in h.chunk.text)
    assert method.section == "class Vault > def open_vault"

    listing = corpus.sources(index)
    (root,) = listing["sources"]
    assert root["kind"] == "git" and root["checkpoint"]["cursor"] == head
    assert root["documents"] == 3


def test_a_sync_reads_only_the_changed_file_and_prunes_the_deleted_one(
    repo: Path, locate: Locate, monkeypatch: pytest.MonkeyPatch
) -> None:
    index = locate()  # both backends: the checkpoint is published with either
    corpus.add(index, [source_of(repo)])
    second = commit(
        repo,
        {"README.md": "# Service\n\nThe service rotates keys hourly now.\n", "notes/ops.md": None},
    )
    blobs_read: list[str] = []
    real_run = git_connector.run_git

    def counting(where: Path, args: Sequence[str], **kwargs: Any) -> bytes:
        if list(args[:2]) == ["cat-file", "blob"]:
            blobs_read.append(args[2])
        return real_run(where, args, **kwargs)

    monkeypatch.setattr(git_connector, "run_git", counting)
    summary = corpus.sync(index)
    assert (summary.updated, summary.added, summary.unchanged) == (
        ["README.md"],
        [],
        ["pkg/keys.py"],
    )
    assert summary.deleted == ["notes/ops.md"]
    assert len(blobs_read) == 1  # the changed file alone was read from git
    assert not [h for h in hits(index, "wombats") if h.chunk.source == "notes/ops.md"]
    assert any("hourly" in h.chunk.text for h in hits(index, "hourly"))
    assert corpus.sources(index)["sources"][0]["checkpoint"]["cursor"] == second

    blobs_read.clear()
    again = corpus.sync(index)  # nothing new: nothing read, nothing published
    assert (again.updated, again.added, again.deleted, blobs_read) == ([], [], [], [])
    assert sorted(again.unchanged) == ["README.md", "pkg/keys.py"]


def test_a_bad_file_is_reported_and_the_rest_goes_on(repo: Path, tmp_path: Path) -> None:
    commit(
        repo,
        {
            "latin1.txt": b"caf\xe9 au lait\n",
            "blob.py": b"\x00\x01\x02binary\x00",
            "logo.bin": b"\x89PNG\r\n\x1a\n\x00\x00",
            "good.md": "# Good\n\nThe capybara is indexed.\n",
        },
    )
    summary = corpus.add(tmp_path / "index", [source_of(repo)])
    assert "not valid UTF-8" in summary.failed["latin1.txt"]
    assert "binary" in summary.failed["blob.py"]
    assert summary.skipped["repo/logo.bin"] == "unsupported file type .bin"
    assert "good.md" in summary.added and "pkg/keys.py" in summary.added


def test_a_symlink_out_of_the_repository_is_never_followed(repo: Path, tmp_path: Path) -> None:
    outside = tmp_path / "outside.md"
    outside.write_text("# Secret\n\nThe launch code is narwhal-42.\n")
    (repo / "secret.md").symlink_to(outside)
    git(repo, "add", "secret.md")
    git(repo, "commit", "-q", "-m", "link")
    index = tmp_path / "index"
    summary = corpus.add(index, [source_of(repo)])
    assert "never read" in summary.skipped["repo/secret.md"]
    assert not [h for h in hits(index, "narwhal") if "narwhal" in h.chunk.text]


def test_a_git_folder_outside_the_named_one_is_not_read(repo: Path, tmp_path: Path) -> None:
    inner = repo / "pkg"  # no repository of its own: git must not read the one above it
    summary = corpus.add(tmp_path / "index", [f"git+file://{inner}"])
    assert "not a git repository" in summary.failed[f"git+file://{inner}"]
    pointer = tmp_path / "pointer"  # a `.git` file naming objects elsewhere
    pointer.mkdir()
    (pointer / ".git").write_text(f"gitdir: {repo / '.git'}\n")
    summary = corpus.add(tmp_path / "index", [f"git+file://{pointer}"])
    assert "outside the repository" in summary.failed[f"git+file://{pointer}"]


def test_a_sync_killed_before_its_publish_resumes_from_the_last_checkpoint(
    repo: Path, locate: Locate, monkeypatch: pytest.MonkeyPatch
) -> None:
    index = locate()
    first = corpus.add(index, [source_of(repo)]).checkpoints[source_of(repo)]["cursor"]
    commit(repo, {"README.md": "# Service\n\nKeys now rotate every minute.\n"})
    from footnote.ingest import pipeline

    def killed(*args: Any, **kwargs: Any) -> None:
        raise KeyboardInterrupt

    with monkeypatch.context() as patch:
        patch.setattr(pipeline.IndexRun, "publish", killed)
        with pytest.raises(KeyboardInterrupt):
            corpus.sync(index)
    assert corpus.sources(index)["sources"][0]["checkpoint"]["cursor"] == first
    resumed = corpus.sync(index)
    assert resumed.updated == ["README.md"]
    assert any("minute" in h.chunk.text for h in hits(index, "minute"))


HOLDING_GIT = """#!/bin/sh
# git for one `footnote sync` (tests/test_connector_git.py): each call is noted in {log},
# and the one that names blob {blob} waits until {release} exists, then runs git.
echo "$*" >> {log}
for arg in "$@"; do
  if [ "$arg" = {blob} ]; then
    : > {held}
    while [ ! -e {release} ]; do sleep 0.05; done
  fi
done
exec {git} "$@"
"""


def holding_git(folder: Path, blob: str) -> Path:
    """A `bin` folder whose `git` holds the reading of `blob` (see HOLDING_GIT): the calls
    are noted in folder/calls, the hold in folder/held, and folder/release ends it."""
    real = shutil.which("git")
    assert real is not None
    names = {n: shlex.quote(str(folder / n)) for n in ("calls", "held", "release")}
    script = HOLDING_GIT.format(
        log=names["calls"], held=names["held"], release=names["release"],
        blob=shlex.quote(blob), git=shlex.quote(real),
    )  # fmt: skip
    (folder / "bin").mkdir(parents=True)
    wrapper = folder / "bin" / "git"
    wrapper.write_text(script)
    wrapper.chmod(0o755)
    return folder / "bin"


def test_a_sync_killed_by_sigkill_mid_way_resumes_with_no_duplicate_chunk(
    repo: Path, tmp_path: Path
) -> None:
    """kill -9 of `footnote sync` while it reads the second changed file from git, the
    first one read. A repository has no server to hold a request, and the connector has no
    hook to pause at (nor should a product grow one for a test), and a large blob or a FIFO
    would hold git only for a while or not at all, since git reads its own objects: so the
    sync runs with a small wrapper `git` first on its PATH (HOLDING_GIT) that waits, before
    running the real git, on the `git cat-file blob` of the second changed file until the
    test releases it; every other git call passes straight through."""
    commit(repo, {"notes/dev.md": "# Development\n\nThe build runs on the numbat farm.\n"})
    index = tmp_path / "index"
    first = corpus.add(index, [source_of(repo)]).checkpoints[source_of(repo)]["cursor"]
    head = commit(
        repo,
        {
            name: (repo / name).read_text() + f"\nRevision {n} of the runbook.\n"
            for n, name in enumerate(["README.md", "notes/dev.md", "notes/ops.md"], start=20)
        },
    )
    blob = {name: git(repo, "rev-parse", f"HEAD:{name}") for name in ("README.md", "notes/dev.md")}
    hold = tmp_path / "hold"
    bin_folder = holding_git(hold, blob["notes/dev.md"])
    env = {"PATH": f"{bin_folder}{os.pathsep}{os.environ.get('PATH', '')}"}

    def blobs_read() -> list[str]:
        calls = (hold / "calls").read_text().splitlines() if (hold / "calls").exists() else []
        return [c.split()[-1] for c in calls if c.split()[-3:-1] == ["cat-file", "blob"]]

    with sync_held(
        index,
        env,
        tmp_path / "sync.err",
        held=lambda: (hold / "held").exists(),
        waiting_for="notes/dev.md",
        release=lambda: (hold / "release").touch(),  # the orphaned wrapper runs git, ends
    ):
        assert blobs_read() == [blob["README.md"], blob["notes/dev.md"]], (
            "killed while reading the second changed file, the first one read"
        )
    assert corpus.sources(index)["sources"][0]["checkpoint"]["cursor"] == first, "nothing published"

    resumed = corpus.sync(index)

    assert not resumed.failed, resumed.failed
    assert sorted(resumed.updated) == ["README.md", "notes/dev.md", "notes/ops.md"]
    assert resumed.unchanged == ["pkg/keys.py"]
    assert not resumed.added and not resumed.deleted
    assert resumed.checkpoints[source_of(repo)]["cursor"] == head
    chunks = [h.chunk for h in hits(index, "runbook")]
    counts = Counter((c.source, c.text) for c in chunks)
    assert max(counts.values()) == 1, counts
    assert sorted(c.source for c in chunks if "Revision" in c.text) == [
        "README.md", "notes/dev.md", "notes/ops.md"
    ]  # fmt: skip
    corpus.add(tmp_path / "fresh", [source_of(repo)])
    assert {d["source"]: d["chunks"] for d in corpus.sources(index)["documents"]} == {
        d["source"]: d["chunks"] for d in corpus.sources(tmp_path / "fresh")["documents"]
    }, "as many chunks as one clean load"


def test_a_served_admin_is_held_to_the_operators_folders(repo: Path, tmp_path: Path) -> None:
    allowed = tmp_path / "allowed"
    allowed.mkdir()
    inside = allowed / "handbook"
    inside.mkdir()
    git(inside, "init", "-q")
    policy = ServedSourcePolicy.from_settings(
        upload_dir=str(tmp_path / "uploads"),
        source_roots=[str(allowed)],
        indexes=[str(tmp_path / "index")],
        env={},
    )
    assert policy.checked(f"git+file://{inside}") == f"git+file://{inside.resolve()}"
    for refused in (
        source_of(repo),  # a real repository outside the allowed folders
        "git+file:///no/such/repository",  # refused as outside, not told it is missing
        f"git+file://{allowed}/../repo",
        "git+file://relative/path",
        "git+ext::sh -c id",
        f"file://{repo}",
        "git+https://user:token@example.org/team/repo.git",
        "git+ssh://-oProxyCommand=id/repo.git",
        "git+ssh://-oProxyCommand=id@example.org/repo.git",
    ):
        with pytest.raises(SourceRefused) as caught:
            policy.checked(refused)
        assert "no such path" not in str(caught.value)
    assert (
        policy.checked("git+https://example.org/team/repo.git")
        == "git+https://example.org/team/repo.git"
    )


def test_a_clone_is_fetched_only_over_the_allowed_protocols(repo: Path, tmp_path: Path) -> None:
    source = GitSource(
        id="git+https://example.org/team/repo.git", path=None, remote=f"file://{repo}"
    )
    with pytest.raises(ConnectorError, match="clone failed"):
        GitConnector(source, cache=tmp_path / "refused").full_load()  # file:// is not https
    cache = tmp_path / "state" / "git" / "cache"
    batch = GitConnector(source, cache=cache, protocols="file").full_load()
    assert sorted(d.id for d in batch.documents) == ["README.md", "notes/ops.md", "pkg/keys.py"]
    assert batch.checkpoint.cursor == git(repo, "rev-parse", "HEAD")
    for folder in (cache, cache.parent, cache.parent.parent):
        assert folder.stat().st_mode & 0o777 == 0o700


def test_unreadable_permissions_make_a_document_nobodys() -> None:
    assert Permissions.nobody("the wiki refused to say").access_groups() == []
    assert Permissions(public=True).access_groups() == ["everyone"]
    assert Permissions(groups=("eng",), users=("ada",)).access_groups() == ["eng", "user:ada"]
    assert Permissions().access_groups() is None  # the index's default, as for a folder


def test_the_command_line_adds_lists_and_refuses_in_one_line(
    repo: Path, tmp_path: Path, run_cli: RunCli
) -> None:
    index = str(tmp_path / "index")
    added = run_cli("add", source_of(repo), "--access", "engineering", "--index", index)
    assert added.returncode == 0, added.stderr
    listed = run_cli("sources", "--index", index)
    head = git(repo, "rev-parse", "HEAD")
    assert f"git {source_of(repo)} (3 documents, access engineering, commit {head[:12]}" in (
        listed.stdout
    )
    missing = run_cli("add", "git+file:///no/such/repository", "--index", index)
    assert missing.returncode == 2
    assert missing.stderr.strip().splitlines() == [
        "footnote: git+file:///no/such/repository: no such path"
    ]
    assert "git+https://" in run_cli("add", "--help").stdout


def test_a_file_removed_from_a_repository_source_stays_out(repo: Path, tmp_path: Path) -> None:
    index = tmp_path / "index"
    corpus.add(index, [source_of(repo)])
    assert corpus.remove(index, ["notes/ops.md"]).deleted == ["notes/ops.md"]
    assert corpus.sources(index)["sources"][0]["exclude"] == ["notes/ops.md"]
    assert "notes/ops.md" not in corpus.sync(index).added
    assert not [h for h in hits(index, "wombats") if h.chunk.source == "notes/ops.md"]


def test_a_file_that_failed_is_tried_again_at_every_sync(repo: Path, tmp_path: Path) -> None:
    index = tmp_path / "index"
    commit(repo, {"latin1.txt": b"caf\xe9 au lait\n"})
    assert "latin1.txt" in corpus.add(index, [source_of(repo)]).failed
    commit(repo, {"README.md": "# Service\n\nKeys rotate daily.\n"})
    synced = corpus.sync(index)  # unchanged since the checkpoint, yet never indexed
    assert "not valid UTF-8" in synced.failed["latin1.txt"]
    assert synced.updated == ["README.md"]
    commit(repo, {"latin1.txt": "café au lait, fixed\n"})
    assert corpus.sync(index).added == ["latin1.txt"]


def test_removing_the_repository_forgets_it_and_its_documents(repo: Path, tmp_path: Path) -> None:
    repo = repo.rename(tmp_path / "team[docs]")  # named as it is, not as a glob
    index = tmp_path / "index"
    corpus.add(index, [source_of(repo)])
    pattern = f"git+file://{repo}/../{repo.name}"  # named another way: not this source
    assert corpus.unmatched(index, [pattern]) == [pattern]
    assert corpus.unmatched(index, [source_of(repo)]) == []
    gone = corpus.remove(index, [source_of(repo)])
    assert sorted(gone.deleted) == ["README.md", "notes/ops.md", "pkg/keys.py"]
    assert corpus.sources(index)["sources"] == []


def test_the_served_indexer_adds_a_repository_only_inside_the_operators_folders(
    repo: Path, tmp_path: Path
) -> None:
    from footnote.graph.indexer import IndexerContext
    from footnote.graph.indexer import graph as indexer_graph

    allowed = tmp_path / "allowed"
    allowed.mkdir()
    inside = repo.rename(allowed / "handbook")
    outside = tmp_path / "private"
    outside.mkdir()
    git(outside, "init", "-q")
    commit(outside, {"salaries.md": "# Salaries\n\nThe pay bands of the team.\n"})
    context = IndexerContext(
        index_dir=str(tmp_path / "index"),
        upload_dir=str(tmp_path / "uploads"),
        source_roots=[str(allowed)],
    )
    admin: Any = {"configurable": {"langgraph_auth_user": {"identity": "root", "admin": True}}}
    with pytest.raises(SourceRefused, match="outside the folders"):
        indexer_graph.invoke(
            {"action": "add", "sources": [source_of(outside)]}, admin, context=context
        )
    added = indexer_graph.invoke(
        {"action": "add", "sources": [source_of(inside)]}, admin, context=context
    )["result"]
    assert added["added"] == 3 and not added["errors"]
    listed = {s["id"] for s in corpus.sources(str(tmp_path / "index"))["sources"]}
    assert listed == {source_of(inside)}
