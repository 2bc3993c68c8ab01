"""The routes `langgraph dev` serves outside its auth, and the other served holes, checked on a
real `footnote serve` process that knows users by an API-key file and by JWT at once.

Public: GET /ok, GET / and the chat page under /ui. Admin only: /info, /metrics, /docs,
/openapi.json. Closed to everyone: /internal/* and /deploy*.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import httpx
import pytest
from langgraph_sdk import get_sync_client
from langgraph_sdk.client import SyncLangGraphClient

from footnote.server.langgraph_dev import CREDENTIAL_SETTINGS, log_tail, running_server
from tests.conftest import REPO, footnote_command
from tests.served import (
    GRAPH_ID,
    PUBLIC_QUESTION,
    USERS,
    Listener,
    Team,
    api_key_team,
    jwt_team,
    sign,
)
from tests.test_served_auth import refusal

pytestmark = pytest.mark.integration

ADMIN_ONLY = ("/info", "/metrics", "/docs", "/openapi.json")


@dataclass
class Served:
    url: str
    keys: Team
    jwts: Team
    log: Path

    def headers(self, user: str, issuer: str = "keys") -> dict[str, str]:
        team = self.keys if issuer == "keys" else self.jwts
        return team.headers(user)

    def client(self, user: str, issuer: str = "keys") -> SyncLangGraphClient:
        return get_sync_client(url=self.url, headers=self.headers(user, issuer))


@pytest.fixture(scope="module")
def served(handbook_index: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """`footnote serve` with a key file and a JWKS configured together; stopped by PID."""
    directory = tmp_path_factory.mktemp("closed")
    keys, jwts = api_key_team(directory), jwt_team(directory)
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in CREDENTIAL_SETTINGS and k not in ("FOOTNOTE_INDEX", "FOOTNOTE_WEBHOOKS")
    }
    env.update({**keys.env, **jwts.env})
    log = directory / "serve.log"
    with log.open("wb") as errors:
        process = subprocess.Popen(
            [*footnote_command(), "serve", "--index", str(handbook_index), "--port", "0"],
            cwd=REPO,
            env=env,
            stdout=subprocess.PIPE,
            stderr=errors,
            text=True,
        )
    try:
        assert process.stdout is not None
        url = ""
        for line in process.stdout:
            if line.startswith("Footnote server:"):
                url = line.split()[2]
                break
        if not url:
            pytest.fail(f"footnote serve printed no URL:\n{log_tail(log)}", pytrace=False)
        # Keep reading what it prints: a full pipe would stall the server mid-request.
        drain = threading.Thread(target=_copy, args=(process.stdout, log), daemon=True)
        drain.start()
        yield Served(url, keys, jwts, log)
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)


def _copy(stream: IO[str], log: Path) -> None:
    with log.open("a", encoding="utf-8") as sink:
        for line in stream:
            sink.write(line)


def ask(client: SyncLangGraphClient, thread: str | None, **kwargs: Any) -> Any:
    message = {"messages": [{"role": "user", "content": PUBLIC_QUESTION}]}
    return client.runs.wait(thread, GRAPH_ID, input=message, **kwargs)


# --- routes ---------------------------------------------------------------------------------


def test_public_routes_answer_without_credentials(served: Served) -> None:
    for path in ("/ok", "/", "/ui", "/ui/", "/ui/app.js", "/ui/app.css", "/ui/config.json"):
        response = httpx.get(served.url + path, timeout=30)
        assert response.status_code == 200, (path, response.text)


def test_deeper_ui_paths_are_a_clean_404(served: Served) -> None:
    with httpx.Client(base_url=served.url, timeout=30) as client:
        for path in ("/ui/a/b", "/ui/a/b/c", "/ui/../ui/x/y"):
            response = client.get(path)
            assert response.status_code == 404, (path, response.text)
        assert client.get("/ok").status_code == 200  # the connection survived


def test_meta_routes_are_for_admins_only(served: Served) -> None:
    for path in ADMIN_ONLY:
        anonymous = httpx.get(served.url + path, timeout=30)
        wrong = httpx.get(served.url + path, headers={"x-api-key": "fn_made_up"}, timeout=30)
        assert anonymous.status_code == wrong.status_code == 401, (path, anonymous.text)
        for issuer in ("keys", "jwts"):
            alice = httpx.get(served.url + path, headers=served.headers("alice", issuer))
            root = httpx.get(served.url + path, headers=served.headers("root", issuer))
            assert alice.status_code == 403, (path, issuer, alice.text)
            assert root.status_code == 200, (path, issuer, root.text)
            if path == "/info":
                assert "version" in root.json()


def test_internal_and_deploy_routes_are_closed_to_everyone(served: Served) -> None:
    """alice's thread: no caller (the admin included) reads it raw or truncates it, and
    nobody starts a deployment."""
    alice = served.client("alice")
    thread = alice.threads.create()["thread_id"]
    ask(alice, thread)
    callers: dict[str, dict[str, str]] = {
        "nobody": {},
        "bob": served.headers("bob"),
        "root": served.headers("root"),
        "root (jwt)": served.headers("root", "jwts"),
        "alice": served.headers("alice"),
    }
    attempts = [
        ("GET", f"/internal/debug/thread/{thread}", None),
        ("GET", f"//internal/debug/thread/{thread}", None),
        ("POST", "/internal/truncate", {"runs": True, "threads": True, "assistants": True}),
        ("POST", "/internal/truncate/", {}),
        ("GET", "/deploy", None),
        ("POST", "/deploy", {"name": "footnote-test"}),
        ("GET", "/deploy/abc123/stream", None),
    ]
    for who, headers in callers.items():
        for method, path, body in attempts:
            response = httpx.request(
                method, served.url + path, headers=headers, json=body, timeout=30
            )
            assert response.status_code == 404, (who, method, path, response.text)
            assert PUBLIC_QUESTION not in response.text and thread not in response.text

    state = alice.threads.get_state(thread)
    assert [m["content"] for m in state["values"]["messages"] if m["type"] == "human"] == [
        PUBLIC_QUESTION
    ]
    assert "langgraph deploy" not in served.log.read_text(errors="replace")


def test_no_route_answers_without_credentials_except_the_public_ones(served: Served) -> None:
    """Every path and method the server documents (its OpenAPI, read as an admin), called
    with no credentials and made-up ids: refused, unless it is a documented public route."""
    spec = httpx.get(served.url + "/openapi.json", headers=served.headers("root"), timeout=60)
    paths: dict[str, Any] = spec.json()["paths"]
    made_up = "00000000-0000-4000-8000-000000000000"
    answered = []
    for template, operations in paths.items():
        path = re.sub(r"\{[^}]+\}", made_up, template)
        for method in operations:
            if method.upper() not in ("GET", "POST", "PUT", "PATCH", "DELETE"):
                continue
            response = httpx.request(method.upper(), served.url + path, json={}, timeout=60)
            if response.status_code not in (401, 403, 404, 405):
                answered.append((method.upper(), template, response.status_code))
    assert len(paths) > 20, sorted(paths)
    public = {("GET", p) for p in ("/ok", "/", "/ui", "/ui/", "/ui/config.json")}  # deployment.md
    assert {(m, t) for m, t, _ in answered} <= public, answered


# --- identities, ids and metadata ------------------------------------------------------------


def test_identities_are_namespaced_by_issuer(served: Served) -> None:
    """The key file's alice and a token with sub=alice are two people."""
    by_key, by_token = served.client("alice"), served.client("alice", "jwts")
    keyed = by_key.threads.create()["thread_id"]
    tokened = by_token.threads.create()["thread_id"]

    assert refusal(lambda: by_token.threads.get(keyed))[0] == 404
    assert refusal(lambda: by_key.threads.get(tokened))[0] == 404
    assert keyed not in {t["thread_id"] for t in by_token.threads.search(limit=1000)}
    assert tokened not in {t["thread_id"] for t in by_key.threads.search(limit=1000)}
    assert by_key.threads.get(keyed)["thread_id"] == keyed


def test_creating_with_someone_elses_id_answers_404(served: Served) -> None:
    alice, bob = served.client("alice"), served.client("bob")
    thread = alice.threads.create()["thread_id"]
    assistant = alice.assistants.create(GRAPH_ID, name="alice's")["assistant_id"]

    for if_exists in ("raise", "do_nothing"):
        status, body = refusal(
            lambda e=if_exists: bob.threads.create(thread_id=thread, if_exists=e)
        )
        assert status == 404, (if_exists, body)
        status, body = refusal(
            lambda e=if_exists: bob.assistants.create(GRAPH_ID, assistant_id=assistant, if_exists=e)
        )
        assert status == 404, (if_exists, body)
    assert alice.threads.create(thread_id=thread, if_exists="do_nothing")["thread_id"] == thread


def test_reserved_metadata_is_refused(served: Served) -> None:
    alice, bob = served.client("alice"), served.client("bob")
    system = {"created_by": "system"}

    assert refusal(lambda: bob.assistants.create(GRAPH_ID, metadata=system))[0] == 403
    mine = bob.assistants.create(GRAPH_ID, name="bob's plain")["assistant_id"]
    assert refusal(lambda: bob.assistants.update(mine, metadata=system))[0] == 403
    assert refusal(lambda: bob.threads.create(metadata=system))[0] == 403
    thread = bob.threads.create()["thread_id"]
    assert refusal(lambda: bob.threads.update(thread, metadata=system))[0] == 403
    assert refusal(lambda: ask(bob, None, metadata=system))[0] == 403
    seen = {a["assistant_id"] for a in alice.assistants.search(limit=100)}  # Aegra's most
    assert mine not in seen
    for assistant in alice.assistants.search(limit=100):  # the server's, or alice's own
        metadata = assistant["metadata"]
        assert metadata.get("created_by") == "system" or metadata["owner"] == "api_key:alice"


# --- assistant contexts and webhooks ---------------------------------------------------------


def test_assistant_contexts_are_checked_like_run_contexts(served: Served) -> None:
    bob = served.client("bob")
    for stored in (
        {"reranker": "crossencoder:/etc/passwd"},
        {"reranker": "llm"},
        {"max_answer_tokens": 0},
        {"max_internal_tokens": 0},
    ):
        for how in ("context", "config"):
            kwargs: dict[str, Any] = (
                {"context": stored} if how == "context" else {"config": {"configurable": stored}}
            )
            status, body = refusal(lambda kw=kwargs: bob.assistants.create(GRAPH_ID, **kw))
            assert status in (403, 422), (stored, how, body)
            status, body = refusal(lambda kw=kwargs: ask(bob, None, **kw))
            assert status in (403, 422), (stored, how, body)

    kept = bob.assistants.create(GRAPH_ID, context={"retrieve_k": 4, "surprise": "x"})
    stored_context = bob.assistants.get(kept["assistant_id"])["context"]
    assert stored_context == {"retrieve_k": 4}
    output = bob.runs.wait(
        None,
        kept["assistant_id"],
        input={"messages": [{"role": "user", "content": PUBLIC_QUESTION}]},
    )
    assert "keys.md" in {c["source"] for c in output["citations"]}


def test_webhooks_are_refused_unless_the_operator_allows_them(served: Served) -> None:
    listener = Listener()
    bob = served.client("bob")
    thread = bob.threads.create()["thread_id"]
    try:
        for webhook in (
            "https://93.184.215.14/footnote-hook",  # a public address: langgraph accepts it
            "http://10.1.2.3/hook",
            f"http://127.0.0.1:{listener.port}/hook",
        ):
            for target in (None, thread):
                status, body = refusal(lambda t=target, w=webhook: ask(bob, t, webhook=w))
                assert status in (403, 422), (webhook, target, body)
        status, body = refusal(lambda: ask(bob, None, webhook="https://93.184.215.14/x"))
        assert status == 403 and "webhooks are not enabled" in body, body
    finally:
        listener.close()
    assert listener.received == []


# --- the page's source links -------------------------------------------------------------------


@pytest.mark.browser
def test_only_sources_from_urls_become_links(served: Served) -> None:
    """A document's URL is its stored path: one stored under a folder named `https:` must not
    open an external site; web results keep their own links."""
    from tests.test_webui import chromium, require_browser

    base = "https://docs.example.com/handbook/"
    cases = [
        ({"kind": "document", "url": "https:/evil.example/page.html"}, None),
        ({"kind": "document", "url": "https://evil.example/page.html"}, None),
        ({"kind": "document", "url": "HTTPS:evil.example/page.html"}, None),
        ({"kind": "document", "url": "//evil.example/page.html"}, None),
        ({"kind": "document", "url": "/\\evil.example/page.html"}, None),
        ({"kind": "document", "url": "/other/page.html"}, None),
        ({"kind": "document", "url": "../../elsewhere.html"}, None),
        ({"kind": "document", "url": "library/os.html#getcwd"}, base + "library/os.html#getcwd"),
        ({"kind": "web", "url": "https://example.org/page"}, "https://example.org/page"),
        ({"kind": "web", "url": "javascript:alert(1)"}, None),
    ]
    with chromium(require_browser()) as driver:
        driver.get(served.url + "/ui")
        hrefs = driver.execute_script(
            "state.config.source_base_url = arguments[0];"
            "const first = arguments[1].map((c) => sourceHref(c));"
            "state.config.source_base_url = '';"
            "return [first, sourceHref({kind: 'document', url: 'library/os.html'})];",
            base,
            [citation for citation, _ in cases],
        )
    assert hrefs[0] == [expected for _, expected in cases]
    assert hrefs[1] is None


def test_every_user_is_known_to_both_issuers(served: Served) -> None:
    """The fixture's premise: each user signs in by key and by token."""
    for user in USERS:
        for issuer in ("keys", "jwts"):
            assert served.client(user, issuer).threads.search(limit=1) is not None
    token = sign(served.jwts, sub="alice", groups=["engineering"], lifetime_s=-60)
    expired = httpx.get(served.url + "/metrics", headers={"Authorization": f"Bearer {token}"})
    assert expired.status_code == 401


def test_a_database_password_stays_out_of_answers_and_the_server_log(tmp_path: Path) -> None:
    """An index URL whose password travels as `?password=`, on a port where nothing listens:
    the caller's error and the server's log say where, never the password."""
    secret = "pw-in-the-query-Zq81"
    url = f"postgresql://footnote@127.0.0.1:9/footnote?password={secret}&connect_timeout=1"
    log = tmp_path / "server.log"
    with running_server(index_dir=url, log=log) as server:
        client = get_sync_client(url=server.url)
        with pytest.raises(Exception, match="PostgresUnavailable") as caught:
            ask(client, None)
        parts = client.runs.stream(
            None,
            GRAPH_ID,
            # A question that needs the documents (a greeting is answered without a search).
            input={"messages": [{"role": "user", "content": "How do I rotate an API key?"}]},
        )
        stream = repr([(part.event, part.data) for part in parts])
    text = log.read_text(errors="replace")
    assert "PostgresUnavailable" in stream, stream
    assert "cannot connect to PostgreSQL at postgresql://footnote@127.0.0.1:9/" in text
    assert "password=***" in text
    assert secret not in str(caught.value) and secret not in stream and secret not in text
