"""A served admin may add as sources only files under the folders the operator names (the
upload folder and $FOOTNOTE_SOURCE_ROOTS), never the server's own files, whatever the path's
spelling (`..`, symbolic links); the in-process host, the operator itself, is not limited.

The attack this answers: an admin key added the trial PostgreSQL's password file and a file
of plaintext keys as sources readable by everyone. The unit tests hold the policy to its
rules; the graph test runs the indexer as a served admin; the integration test runs the
attack on both runtimes, through the indexer graph and MCP `add_source`.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from langgraph_sdk import get_sync_client

from footnote.graph.indexer import IndexerContext
from footnote.graph.indexer import graph as indexer_graph
from footnote.ingest import corpus
from footnote.ingest.pipeline import ingest
from footnote.ingest.source_policy import (
    DATA_DIR_ENV,
    SOURCE_ROOTS_ENV,
    ServedSourcePolicy,
    SourceRefused,
)
from footnote.server.langgraph_dev import ServerFailed, running_server
from footnote.server.production import ProductionError, prepare_data_dir, running_deployment
from tests.conftest import HANDBOOK
from tests.served import Team, api_key_team
from tests.test_mcp_openai import Served, error_text, mcp_session, structured

SECRET = "The superuser password is quokka-2991."


@pytest.fixture
def server_disk(tmp_path: Path) -> dict[str, Path]:
    """A server's folders: docs (a source root) holding a link out and the data folder,
    uploads inside the data folder as production keeps them, a key file outside."""
    docs = tmp_path / "srv"
    (docs / "handbook").mkdir(parents=True)
    (docs / "handbook" / "page.md").write_text("# Page\n\nOrdinary text.\n")
    data = docs / "footnote-data"
    (data / "postgres").mkdir(parents=True)
    (data / "postgres" / "password").write_text(SECRET)
    (data / "uploads").mkdir()
    (data / "uploads" / "memo.md").write_text("# Memo\n")
    keys = tmp_path / "etc" / "keys.json"
    keys.parent.mkdir()
    keys.write_text('{"k": "plaintext"}')
    (docs / "handbook" / "link.md").symlink_to(keys)
    (docs / "handbook" / "up").symlink_to(data)
    return {"docs": docs, "data": data, "keys": keys, "root": tmp_path}


def policy_for(disk: dict[str, Path]) -> ServedSourcePolicy:
    env = {DATA_DIR_ENV: str(disk["data"]), "FOOTNOTE_API_KEYS": str(disk["keys"])}
    return ServedSourcePolicy.from_settings(
        upload_dir=str(disk["data"] / "uploads"),
        source_roots=[str(disk["docs"])],
        indexes=[str(disk["root"] / "index")],
        env=env,
    )


def test_paths_under_the_roots_are_allowed_and_resolved(server_disk: dict[str, Path]) -> None:
    policy = policy_for(server_disk)
    docs = server_disk["docs"]
    assert policy.checked(str(docs / "handbook")) == str((docs / "handbook").resolve())
    assert policy.checked(str(docs / "handbook" / "page.md")).endswith("page.md")
    spelled = docs / "handbook" / ".." / "handbook" / "page.md"
    assert policy.checked(str(spelled)) == str((docs / "handbook" / "page.md").resolve())
    uploads = server_disk["data"] / "uploads"
    assert policy.checked(str(uploads / "memo.md")) == str((uploads / "memo.md").resolve())
    assert policy.checked("https://example.com/page") == "https://example.com/page"


@pytest.mark.parametrize(
    ("spelling", "reason"),
    [
        ("{data}/postgres/password", "server's own files"),
        ("{data}", "server's own files"),
        ("{docs}", "server's own files"),  # holds the data folder
        ("{docs}/handbook/up/postgres/password", "server's own files"),  # through a link
        ("{data}/uploads/../postgres/password", "server's own files"),
        ("{keys}", "outside the folders"),
        ("{docs}/handbook/link.md", "outside the folders"),  # a link out of the root
        ("{docs}/../etc/keys.json", "outside the folders"),
        ("/etc/passwd", "outside the folders"),
        ("/", "outside the folders"),
        ("handbook/page.md", "absolute path"),
        ("~/.ssh/id_rsa", "outside the folders"),
        ("file:///etc/passwd", "absolute path"),
    ],
)
def test_everything_else_is_refused(
    server_disk: dict[str, Path], spelling: str, reason: str
) -> None:
    path = spelling.format(**{k: str(v) for k, v in server_disk.items()})
    with pytest.raises(SourceRefused, match=reason):
        policy_for(server_disk).checked(path)


def test_protected_files_inside_the_upload_folder_are_refused(tmp_path: Path) -> None:
    """An operator who points the upload folder at the data folder still cannot have its
    database published."""
    data = tmp_path / "data"
    (data / "postgres").mkdir(parents=True)
    (data / "postgres" / "password").write_text(SECRET)
    policy = ServedSourcePolicy.from_settings(
        upload_dir=str(data),
        source_roots=[],
        indexes=[],
        env={DATA_DIR_ENV: str(data / "postgres")},
    )
    with pytest.raises(SourceRefused):
        policy.checked(str(data / "postgres" / "password"))


def test_every_served_index_and_the_state_folder_are_protected(tmp_path: Path) -> None:
    other = tmp_path / "srv" / "other-index"
    state = tmp_path / "srv" / "state"
    env = {
        "FOOTNOTE_INDEXES": json.dumps({"other": str(other)}),
        "FOOTNOTE_STATE_DIR": str(state),
    }
    policy = ServedSourcePolicy.from_settings(
        upload_dir=str(tmp_path / "up"), source_roots=[str(tmp_path / "srv")], indexes=[], env=env
    )
    for path in (other / "manifest.json", state / "embedding-cache", tmp_path / "srv"):
        with pytest.raises(SourceRefused, match="server's own files"):
            policy.checked(str(path))


def test_source_roots_must_be_absolute() -> None:
    with pytest.raises(SourceRefused, match="absolute"):
        ServedSourcePolicy.from_settings(upload_dir="/u", source_roots=["docs"], indexes=[])


# --- the indexer graph as a served admin and as the in-process host -------------------------


SERVED_ADMIN = {"langgraph_auth_user": {"identity": "root", "groups": [], "admin": True}}


def test_a_served_admin_cannot_publish_the_servers_files(
    server_disk: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FOOTNOTE_API_KEYS", str(server_disk["keys"]))
    monkeypatch.setenv(DATA_DIR_ENV, str(server_disk["data"]))
    index = server_disk["root"] / "index"
    assert not ingest([HANDBOOK], index).failed
    context = IndexerContext(
        index_dir=str(index),
        upload_dir=str(server_disk["data"] / "uploads"),
        source_roots=[str(server_disk["docs"])],
    )
    config: Any = {"configurable": SERVED_ADMIN}
    for target in (
        server_disk["data"] / "postgres" / "password",
        server_disk["keys"],
        server_disk["docs"] / "handbook" / "link.md",
    ):
        with pytest.raises(SourceRefused):
            indexer_graph.invoke(
                {"action": "add", "sources": [str(target)], "uploads": [_upload()]},
                config,
                context=context,
            )
    assert not (server_disk["data"] / "uploads" / "note.md").exists()  # refused before writing
    listing = corpus.sources(str(index))
    assert not {s["id"] for s in listing["sources"]} & {
        str(server_disk["keys"]),
        str(server_disk["data"] / "postgres" / "password"),
    }
    added = indexer_graph.invoke(
        {"action": "add", "sources": [str(server_disk["docs"] / "handbook")]},
        config,
        context=context,
    )["result"]
    assert added["added"] == 1  # page.md; the links are not followed


def test_the_in_process_host_is_the_operator(server_disk: dict[str, Path]) -> None:
    """Embedded, no served user: the host chose the paths, as on the command line."""
    index = server_disk["root"] / "index"
    assert not ingest([HANDBOOK], index).failed
    outside = server_disk["root"] / "elsewhere.md"
    outside.write_text("# Elsewhere\n\nThe host's own file.\n")
    context = IndexerContext(index_dir=str(index), upload_dir=str(server_disk["root"] / "up"))
    added = indexer_graph.invoke({"action": "add", "sources": [str(outside)]}, context=context)
    assert added["result"]["added"] == 1


def test_uploads_are_private_to_the_server(tmp_path: Path) -> None:
    index = tmp_path / "index"
    assert not ingest([HANDBOOK], index).failed
    uploads = tmp_path / "uploads"
    uploads.mkdir(mode=0o755)
    uploads.chmod(0o755)
    context = IndexerContext(index_dir=str(index), upload_dir=str(uploads))
    indexer_graph.invoke({"action": "add", "uploads": [_upload()]}, context=context)
    assert uploads.stat().st_mode & 0o777 == 0o700
    assert (uploads / "note.md").stat().st_mode & 0o777 == 0o600


def _upload() -> dict[str, str]:
    return {"name": "note.md", "content": "IyBOb3RlCg=="}  # "# Note"


# --- the attack, served, on both runtimes ---------------------------------------------------


@dataclass
class Attacked:
    served: Served
    disk: dict[str, Path]


@pytest.fixture(scope="module", params=["dev", "production"])
def attacked(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Attacked]:
    root = tmp_path_factory.mktemp(f"source-roots-{request.param}")
    # PostgreSQL's own user must pass through to its cluster: a folder it may enter
    docs = Path(tempfile.mkdtemp(prefix="footnote-source-roots-"))
    docs.chmod(0o711)
    (docs / "handbook").mkdir(parents=True)
    (docs / "handbook" / "page.md").write_text("# Page\n\nThe numbat procedure.\n")
    team: Team = api_key_team(root)
    (docs / "handbook" / "keys.md").symlink_to(team.env["FOOTNOTE_API_KEYS"])
    index = root / "index"
    assert not ingest([HANDBOOK], index).failed
    data = docs / "data"  # inside the operator's source folder: still never a source
    env = {
        **team.env,
        "FOOTNOTE_UPLOAD_DIR": str(data / "uploads"),
        SOURCE_ROOTS_ENV: str(docs),
    }
    disk = {"docs": docs, "data": data, "keys": Path(team.env["FOOTNOTE_API_KEYS"])}
    try:
        if request.param == "production":
            prepare_data_dir(data)
            with running_deployment(
                index_dir=str(index),
                workdir=root / "production",
                extra_env=env,
                inherit_credentials=False,
                database_dir=data / "postgres",
            ) as deployment:
                yield Attacked(Served(deployment.replicas[0], team, index), disk)
        else:
            (data / "postgres").mkdir(parents=True)
            (data / "postgres" / "password").write_text(SECRET)
            env[DATA_DIR_ENV] = str(data)
            with running_server(
                index_dir=str(index), log=root / "server.log", extra_env=env
            ) as server:
                yield Attacked(Served(server, team, index), disk)
    except (ServerFailed, ProductionError) as exc:
        pytest.fail(str(exc), pytrace=False)
    finally:
        shutil.rmtree(docs, ignore_errors=True)


@pytest.mark.integration
def test_an_admin_key_cannot_publish_the_servers_files(attacked: Attacked) -> None:
    served, disk = attacked.served, attacked.disk
    password = disk["data"] / "postgres" / "password"
    assert password.is_file()
    admin = get_sync_client(url=served.server.url, headers=served.headers("root"))
    targets = [
        password,
        disk["keys"],
        disk["docs"] / "handbook" / "keys.md",
        disk["data"] / "uploads" / ".." / "postgres" / "password",
        Path("/etc/passwd"),
        disk["docs"],
    ]
    for target in targets:
        with pytest.raises(Exception) as refused:
            admin.runs.wait(None, "indexer", input={"action": "add", "sources": [str(target)]})
        reason = str(refused.value)
        assert "own files" in reason or "outside the folders" in reason, (target, reason[:300])
    texts = asyncio.run(_mcp_add_sources(served, [str(t) for t in targets]))
    for target, text in zip(targets, texts, strict=True):
        assert "own files" in text or "outside the folders" in text, (target, text)

    listing = admin.runs.wait(None, "indexer", input={"action": "sources"})
    ids = {s["id"] for s in listing["result"]["sources"]}  # type: ignore[index]
    assert not ids & {str(t) for t in targets} and not ids & {str(password.resolve())}
    added = admin.runs.wait(
        None, "indexer", input={"action": "add", "sources": [str(disk["docs"] / "handbook")]}
    )
    assert added["result"]["added"] == 1  # type: ignore[index]
    alice = get_sync_client(url=served.server.url, headers=served.headers("alice"))
    seen = {d["source"] for d in alice.runs.wait(None, "library", input={})["documents"]}  # type: ignore[index]
    assert "page.md" in seen and "password" not in seen and "keys.json" not in seen


async def _mcp_add_sources(served: Served, paths: list[str]) -> list[str]:
    async with mcp_session(served, "root") as session:
        texts = [
            error_text(await session.call_tool("add_source", {"sources": [path]})) for path in paths
        ]
        structured(await session.call_tool("list_sources", {}))
        return texts


def test_a_caller_cannot_name_the_source_folders() -> None:
    """The folders come from the operator's environment only: a served run that names them
    (or the upload folder) is refused by the run handler's rule, which the graph factory
    applies again where the run executes."""
    from footnote.server.aegra_auth import enforce_corpus_settings
    from footnote.server.settings import ContextRefused

    admin = {"identity": "root", "groups": [], "admin": True}
    for field in ("source_roots", "upload_dir"):
        with pytest.raises(ContextRefused, match="set by the server's operator"):
            enforce_corpus_settings("indexer", admin, {field: ["/"]})
