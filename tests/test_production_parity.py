"""The dev server's auth rules (tests/test_closed_routes.py, tests/test_indexer_served.py) held
by the production mode too: one Aegra replica on PostgreSQL + Redis that knows users by an
API-key file and by JWT at once, as real processes on loopback ports, stopped by PID.

Where a dev check applies unchanged, it is the same function, called on this server.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from footnote.server.auth import GRAPH_NAMESPACE
from footnote.server.production import ProductionError, production_python, running_deployment
from tests import test_closed_routes as dev
from tests.served import api_key_team, jwt_team
from tests.test_served_auth import refusal

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def served(handbook_index: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dev.Served]:
    directory = tmp_path_factory.mktemp("parity")
    keys, jwts = api_key_team(directory), jwt_team(directory)
    env = {**keys.env, **jwts.env, "FOOTNOTE_UPLOAD_DIR": str(directory / "uploads")}
    try:
        with running_deployment(
            index_dir=str(handbook_index),
            workdir=directory / "run",
            extra_env=env,
            inherit_credentials=False,
        ) as deployment:
            replica = deployment.replicas[0]
            yield dev.Served(replica.url, keys, jwts, replica.log)
    except ProductionError as exc:
        pytest.fail(str(exc), pytrace=False)


def test_public_routes_answer_without_credentials(served: dev.Served) -> None:
    dev.test_public_routes_answer_without_credentials(served)


def test_deeper_ui_paths_are_a_clean_404(served: dev.Served) -> None:
    dev.test_deeper_ui_paths_are_a_clean_404(served)


def test_internal_and_deploy_routes_are_closed_to_everyone(served: dev.Served) -> None:
    dev.test_internal_and_deploy_routes_are_closed_to_everyone(served)


def test_identities_are_namespaced_by_issuer(served: dev.Served) -> None:
    dev.test_identities_are_namespaced_by_issuer(served)


def test_creating_with_someone_elses_id_answers_404(served: dev.Served) -> None:
    dev.test_creating_with_someone_elses_id_answers_404(served)


def test_reserved_metadata_is_refused(served: dev.Served) -> None:
    dev.test_reserved_metadata_is_refused(served)


def test_assistant_contexts_are_checked_like_run_contexts(served: dev.Served) -> None:
    dev.test_assistant_contexts_are_checked_like_run_contexts(served)


def test_webhooks_are_refused_unless_the_operator_allows_them(served: dev.Served) -> None:
    dev.test_webhooks_are_refused_unless_the_operator_allows_them(served)


def test_the_corpus_graphs_are_served_and_the_indexer_is_an_admins(served: dev.Served) -> None:
    root, alice = served.client("root"), served.client("alice")
    status, body = refusal(lambda: alice.runs.wait(None, "indexer", input={"action": "sync"}))
    assert status == 403 and "only admins" in body, body
    for graph in ("indexer", "library"):
        assert refusal(lambda g=graph: alice.assistants.create(g))[0] == 403, graph
    status, body = refusal(
        lambda: root.runs.wait(None, "indexer", input={}, context={"embeddings": "x"})
    )
    assert status == 403, body  # the index's settings are the operator's

    sources = root.runs.wait(None, "indexer", input={"action": "sources"})
    assert "keys.md" in str(sources["result"]), sources  # type: ignore[index]
    for issuer in ("keys", "jwts"):
        listed = served.client("alice", issuer).runs.wait(None, "library", input={})
        names = str(listed["documents"])  # type: ignore[index]
        assert "keys.md" in names and "oncall.md" in names, (issuer, listed)
        dave = served.client("dave", issuer).runs.wait(None, "library", input={})
        assert "oncall.md" not in str(dave["documents"]), dave  # type: ignore[index]


def test_feedback_routes_and_page_assets_are_served(served: dev.Served) -> None:
    for path in ("/ui/library.js", "/ui/feedback.js", "/ui/feedback.css", "/ui/app.js"):
        assert httpx.get(served.url + path, timeout=30).status_code == 200, path
    assert httpx.get(served.url + "/feedback/me", timeout=30).status_code == 401
    for issuer in ("keys", "jwts"):
        me = httpx.get(served.url + "/feedback/me", headers=served.headers("alice", issuer))
        assert me.status_code == 200, (issuer, me.text)


def test_aegra_names_a_graphs_assistant_in_footnotes_namespace() -> None:
    """`footnote.server.auth.corpus_graph_of` knows the corpus graphs' own assistants by id."""
    printed = subprocess.run(
        [production_python(), "-c",
         "from aegra_api.constants import ASSISTANT_NAMESPACE_UUID as n; print(n)"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    assert printed == str(GRAPH_NAMESPACE)
