"""Footnote's auth under Aegra's contract (`footnote.server.aegra_auth`), unit by unit: str header
keys, an attribute-style user, a flat run request whose context must be returned (not edited
in place), and the second check the graph factory makes. The served behaviour end to end is
tests/test_served_auth.py's production half."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from langgraph_sdk import Auth

from footnote.server import aegra_auth
from footnote.server import auth as served
from footnote.server.credentials import Credentials, write_api_keys
from footnote.server.settings import ContextRefused, ServerSettings


class AegraUser:
    """What Aegra hands to handlers: a model with attributes and no `.get`."""

    def __init__(self, **fields: Any) -> None:
        self.__dict__.update(fields)


@pytest.fixture
def keys(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    path = tmp_path / "keys.json"
    issued = write_api_keys(
        path, {"alice": {"groups": ["engineering"]}, "root": {"groups": [], "admin": True}}
    )
    monkeypatch.setattr(
        served, "CREDENTIALS", Credentials.from_env({"FOOTNOTE_API_KEYS": str(path)})
    )
    monkeypatch.setattr(
        served, "SETTINGS", ServerSettings.from_env({"FOOTNOTE_INDEX": str(tmp_path / "index")})
    )
    return issued


def context_for(
    user: Any, action: str = "create_run", resource: str = "threads"
) -> Auth.types.AuthContext:
    return Auth.types.AuthContext(user=user, resource=resource, action=action, permissions=[])  # type: ignore[arg-type]


def alice(keys: dict[str, str], name: str = "alice") -> AegraUser:
    user = asyncio.run(aegra_auth.authenticate({"Authorization": f"Bearer {keys[name]}"}))
    return AegraUser(**user)


def test_authenticate_reads_str_headers_in_any_case(keys: dict[str, str]) -> None:
    user = asyncio.run(aegra_auth.authenticate({"X-Api-Key": keys["alice"]}))

    assert user["identity"] == "api_key:alice" and "engineering" in user["groups"]  # type: ignore[typeddict-item]
    with pytest.raises(Auth.exceptions.HTTPException) as refused:
        asyncio.run(aegra_auth.authenticate({"authorization": "Bearer fn_not_a_key"}))
    assert refused.value.status_code == 401


def test_a_run_gets_its_context_returned_with_server_settings_pinned(keys: dict[str, str]) -> None:
    value = {"thread_id": "t", "context": {"retrieve_k": 4, "surprise": 1}, "config": {}}

    result = asyncio.run(aegra_auth.create_run(context_for(alice(keys)), value))

    context = result["context"]
    assert context["retrieve_k"] == 4
    assert context["index_dir"] == served.SETTINGS.fixed()["index_dir"]
    assert context["model_base_url"] == "" and context["web_search"] is False
    aegra_auth.enforce_server_settings({**value["context"], **context})  # as Aegra merges it


@pytest.mark.parametrize(
    "override, status",
    [
        ({"reranker": "crossencoder:/etc/passwd"}, 403),
        ({"max_answer_tokens": 0}, 403),
        ({"user_groups": ["hr"]}, 403),
        ({"model_base_url": "http://127.0.0.1:9/v1"}, 403),
        ({"retrieve_k": 0}, 422),
    ],
)
def test_a_run_context_a_caller_may_not_set_is_refused_not_dropped(
    keys: dict[str, str], override: dict[str, Any], status: int
) -> None:
    for value in (
        {"context": override, "config": {}},
        {"context": None, "config": {"configurable": override}},
    ):
        with pytest.raises(Auth.exceptions.HTTPException) as refused:
            asyncio.run(aegra_auth.create_run(context_for(alice(keys)), value))
        assert refused.value.status_code == status, (value, refused.value.detail)


@pytest.mark.parametrize(
    "change",
    [
        {"reranker": "crossencoder:/etc/passwd"},  # stored on an assistant, merged under the run's
        {"model_base_url": "http://127.0.0.1:9/v1"},
        {"index_dir": "/somewhere/else"},
    ],
)
def test_the_graph_factory_refuses_a_context_the_operator_would_not_allow(
    keys: dict[str, str], change: dict[str, Any]
) -> None:
    allowed = served.SETTINGS.run_context({})
    aegra_auth.enforce_server_settings(allowed)

    with pytest.raises(ContextRefused):
        aegra_auth.enforce_server_settings({**allowed, **change})
    with pytest.raises(ContextRefused):  # a missing server-owned field is not the default's
        aegra_auth.enforce_server_settings({k: v for k, v in allowed.items() if k != "index_dir"})


def test_owner_metadata_is_returned_and_foreign_owners_refused(keys: dict[str, str]) -> None:
    user = alice(keys)

    made = asyncio.run(aegra_auth.create_thread(context_for(user, "create"), {"metadata": {}}))
    assert made == {"metadata": {"owner": "api_key:alice", "access_scope": user.scope}}
    with pytest.raises(Auth.exceptions.HTTPException) as refused:
        asyncio.run(
            aegra_auth.create_thread(context_for(user, "create"), {"metadata": {"owner": "bob"}})
        )
    assert refused.value.status_code == 403
    stranger = AegraUser(identity="eve", scope="")  # not made by `authenticate`
    with pytest.raises(Auth.exceptions.HTTPException):
        asyncio.run(aegra_auth.read_threads(context_for(stranger, "read"), {}))


def test_the_owner_aegra_files_under_names_the_issuer() -> None:
    """Aegra stores `identity` as a thread's user_id and owner: the key file's alice and a
    token's alice are two owners, as on the dev server."""
    from footnote.server.credentials import Identity

    by_key = aegra_auth.aegra_user(Identity("alice", method="api_key"))
    by_token = aegra_auth.aegra_user(Identity("alice", method="jwt"))

    assert (by_key["identity"], by_token["identity"]) == ("api_key:alice", "jwt:alice")
    assert by_key["display_name"] == "alice"


def test_reserved_metadata_is_refused_everywhere(keys: dict[str, str]) -> None:
    user, system = alice(keys), {"metadata": {"created_by": "system"}}
    calls = [
        (aegra_auth.create_thread, "create"),
        (aegra_auth.update_thread, "update"),
        (aegra_auth.create_run, "create_run"),
    ]
    for handler, action in calls:
        with pytest.raises(Auth.exceptions.HTTPException) as refused:
            asyncio.run(handler(context_for(user, action), {**system, "config": {}}))
        assert refused.value.status_code == 403, handler
    assistant = context_for(user, "update", "assistants")
    with pytest.raises(Auth.exceptions.HTTPException) as refused:
        asyncio.run(aegra_auth.write_assistant(assistant, {**system, "graph_id": "footnote"}))
    assert refused.value.status_code == 403


def test_the_indexer_runs_for_admins_only_with_the_operators_index(keys: dict[str, str]) -> None:
    value = {"assistant_id": "indexer", "context": None, "config": {}}
    with pytest.raises(Auth.exceptions.HTTPException) as refused:
        asyncio.run(aegra_auth.create_run(context_for(alice(keys)), value))
    assert refused.value.status_code == 403

    admin = alice(keys, "root")
    result = asyncio.run(aegra_auth.create_run(context_for(admin), value))
    assert result["context"] == {
        "index_dir": served.SETTINGS.fixed()["index_dir"],
        "embeddings": served.SETTINGS.embeddings,
    }
    for sneaked in ({"context": {"embeddings": "x"}}, {"config": {"configurable": {"x": 1}}}):
        with pytest.raises(Auth.exceptions.HTTPException) as refused:
            asyncio.run(aegra_auth.create_run(context_for(admin), {**value, **sneaked}))
        assert refused.value.status_code == 403, sneaked
    library = asyncio.run(
        aegra_auth.create_run(context_for(alice(keys)), {**value, "assistant_id": "library"})
    )
    assert set(library["context"]) == {"index_dir", "embeddings"}
    for graph in ("indexer", "library"):
        creating = context_for(admin, "create", "assistants")
        with pytest.raises(Auth.exceptions.HTTPException) as refused:
            asyncio.run(aegra_auth.write_assistant(creating, {"graph_id": graph}))
        assert refused.value.status_code == 403


def test_a_corpus_graphs_own_assistant_is_known_by_its_id() -> None:
    """The dev runtime names a graph's assistant in the namespace `footnote.server.auth` keeps (the
    production half: tests/test_production_parity.py)."""
    import importlib.util
    from uuid import uuid5

    spec = importlib.util.find_spec("langgraph_api")
    assert spec is not None and spec.submodule_search_locations
    source = (Path(spec.submodule_search_locations[0]) / "graph.py").read_text()
    assert f'NAMESPACE_GRAPH = UUID("{served.GRAPH_NAMESPACE}")' in source
    assert served.corpus_graph_of(uuid5(served.GRAPH_NAMESPACE, "indexer")) == "indexer"
    assert served.corpus_graph_of("library") == "library"
    assert served.corpus_graph_of(uuid5(served.GRAPH_NAMESPACE, "footnote")) is None
