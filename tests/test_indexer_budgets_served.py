"""Issue 29, item 7: a DOCX bomb sent to the served indexer is stopped by its per-file
budgets (time and memory, in the job's worker process) and the rest of its job is indexed,
while a user's question is answered within a bound from its own idle latency, on the dev
server (`langgraph dev`) and on production (an Aegra replica on PostgreSQL + Redis)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from footnote.ingest.pipeline import ingest
from footnote.server.langgraph_dev import ServerFailed, running_server
from footnote.server.production import ProductionError, running_deployment
from tests.conftest import HANDBOOK
from tests.indexer_load import SERVER_ENV, check_bomb_bounded_while_answering
from tests.served import api_key_team

pytestmark = pytest.mark.integration


def _index(root: Path) -> Path:
    """An index of its own: the indexer adds to it."""
    index = root / "index"
    corpus = root / "handbook"
    shutil.copytree(HANDBOOK, corpus)
    assert not ingest([corpus], index).failed
    return index


def test_dev_server_answers_while_a_docx_bomb_is_indexed(tmp_path: Path) -> None:
    team = api_key_team(tmp_path)
    env = {**team.env, **SERVER_ENV, "FOOTNOTE_UPLOAD_DIR": str(tmp_path / "uploads")}
    try:
        with running_server(
            index_dir=str(_index(tmp_path)), log=tmp_path / "server.log", extra_env=env
        ) as server:
            check_bomb_bounded_while_answering(
                server.url, team.headers("root"), team.headers("alice"), server.process.pid
            )
    except ServerFailed as exc:
        pytest.fail(str(exc), pytrace=False)


def test_production_answers_while_a_docx_bomb_is_indexed(tmp_path: Path) -> None:
    team = api_key_team(tmp_path)
    env = {**team.env, **SERVER_ENV, "FOOTNOTE_UPLOAD_DIR": str(tmp_path / "uploads")}
    try:
        with running_deployment(
            index_dir=str(_index(tmp_path)),
            workdir=tmp_path / "run",
            extra_env=env,
            inherit_credentials=False,
        ) as deployment:
            replica = deployment.replicas[0]
            check_bomb_bounded_while_answering(
                replica.url, team.headers("root"), team.headers("alice"), replica.process.pid
            )
    except ProductionError as exc:
        pytest.fail(str(exc), pytrace=False)
