"""Regression tests for the served holes closed without a server: which routes the custom
app's middleware closes, passwords in every URL form, the key file's change check, nesting-safe
JSON reads, the assistant / run context policy and the webhook allowlist."""

from __future__ import annotations

import asyncio
import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from footnote.server.closed_routes import ClosedRoutes, verdict
from footnote.server.credentials import (
    ApiKeys,
    Credentials,
    CredentialsError,
    Unauthenticated,
    hash_key,
    parse_key_file,
    write_api_keys,
)
from footnote.server.settings import ContextRefused, ServerSettings, SettingsError
from footnote.store.redaction import redact
from tests.conftest import RunCli

SECRET = "s3cr3t-Pa55"


# --- routes -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("/internal/truncate", "closed"),
        ("/internal/debug/thread/0b1d", "closed"),
        ("//internal//truncate/", "closed"),
        ("/internal", "closed"),
        ("/deploy", "closed"),
        ("/deploy/", "closed"),
        ("/deploy/abc/stream", "closed"),
        ("/info", "admin"),
        ("/metrics", "admin"),
        ("/metrics/", "admin"),
        ("/docs", "admin"),
        ("/openapi.json", "admin"),
        ("/ok", "pass"),
        ("/", "pass"),
        ("/ui", "pass"),
        ("/ui/app.js", "pass"),
        ("/threads", "pass"),
        ("/deployments", "pass"),
        ("/internals", "pass"),
        ("/store/items/search", "refused"),
        ("//store/items", "refused"),
        ("/store/namespaces", "refused"),
        ("/stores", "pass"),
    ],
)
def test_each_path_gets_its_verdict(path: str, expected: str) -> None:
    assert verdict(path) == expected


def call(app: ClosedRoutes, path: str, headers: dict[str, str], method: str = "GET") -> int:
    """The status the middleware (over an app that always answers 200) gives a request."""
    sent: list[dict[str, Any]] = []
    scope = {
        "type": "http",
        "method": method,
        "path": path,
        "headers": [(k.lower().encode(), v.encode()) for k, v in headers.items()],
    }

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b""}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    asyncio.run(app(scope, receive, send))
    return int(sent[0]["status"])


def test_meta_routes_need_an_admin_and_internal_routes_are_closed(tmp_path: Path) -> None:
    keys = write_api_keys(tmp_path / "keys.json", {"root": {"admin": True}, "alice": {}})

    async def ok(scope: Any, receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"{}"})

    app = ClosedRoutes(ok, Credentials(ApiKeys(tmp_path / "keys.json"), None))
    root = {"Authorization": f"Bearer {keys['root']}"}
    alice = {"x-api-key": keys["alice"]}

    assert call(app, "/metrics", {}) == 401
    assert call(app, "/metrics", {"Authorization": "Bearer fn_nope"}) == 401
    assert call(app, "/metrics", alice) == 403
    assert call(app, "/metrics", root) == 200
    assert call(app, "/internal/truncate", root, "POST") == 404
    assert call(app, "/deploy", root, "POST") == 404
    assert call(app, "/ok", {}) == 200
    for path, method in (("/store/items/search", "POST"), ("/store/items", "PUT")):
        assert call(app, path, {}, method) == 401
        assert call(app, path, alice, method) == 403
        assert call(app, path, root, method) == 403  # never reaches the server's own handler
    anonymous = ClosedRoutes(ok, Credentials(None, None))
    assert call(anonymous, "/store/items/search", {}, "POST") == 403
    assert call(anonymous, "/openapi.json", {}) == 403
    assert call(anonymous, "/internal/debug/thread/x", {}) == 404


def test_a_conflict_on_create_answers_404_not_409() -> None:
    async def conflict(scope: Any, receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 409, "headers": []})
        await send({"type": "http.response.body", "body": b'{"detail":"already exists"}'})

    app = ClosedRoutes(conflict, Credentials(None, None))

    assert call(app, "/threads", {}, "POST") == 404
    assert call(app, "/assistants", {}, "POST") == 404
    assert call(app, "/threads/x/runs", {}, "POST") == 409  # only creation hides existence


# --- passwords in every URL form -----------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        f"postgresql://me:{SECRET}@db:5432/footnote?index=team",
        f"postgresql://me@db/footnote?password={SECRET}",
        f"postgresql://db/footnote?index=team&password={SECRET}&sslmode=require",
        f"postgresql://db/footnote?sslpassword={SECRET}",
        f"postgresql://db/footnote?pass%77ord={SECRET}",
        f"postgres://me:{SECRET}@db/x",
        f"host=db user=me password={SECRET} dbname=footnote",
        f"host=db password = '{SECRET} with spaces' dbname=footnote",
        f"cannot connect to PostgreSQL at postgresql://db/x?password={SECRET}: refused",
        f"postgresql://me:{SECRET}@[::1]:5432/x",
    ],
)
def test_passwords_are_redacted_in_every_url_form(text: str) -> None:
    shown = redact(text)

    assert SECRET not in shown
    assert "***" in shown


@pytest.mark.parametrize(
    "url",
    [
        f"postgresql://db/footnote?index=x;password={SECRET}",
        f"postgresql://db/footnote?index=x%3Bpassword%3D{SECRET}",
        f"postgresql://db/footnote?sslmode=require&index=x;password={SECRET}&a=b",
    ],
)
def test_a_bad_index_name_holding_a_password_is_not_echoed(url: str) -> None:
    from footnote.store.postgres import parse_location
    from footnote.store.types import IndexError_

    with pytest.raises(IndexError_, match="index name") as refused:
        parse_location(url)
    assert SECRET not in str(refused.value)
    assert SECRET not in redact(url)


def test_redaction_keeps_what_is_not_secret() -> None:
    url = "postgresql://me@db:5432/footnote?index=team&sslmode=require"

    assert redact(url) == url
    assert redact("/srv/footnote/index") == "/srv/footnote/index"


def test_the_cli_never_prints_a_url_password(run_cli: RunCli, tmp_path: Path) -> None:
    """An unreachable database in a URL whose password travels as a query parameter."""
    (tmp_path / "a.md").write_text("# A\n\ntext\n")
    url = f"postgresql://me@127.0.0.1:9/footnote?password={SECRET}&connect_timeout=1"

    result = run_cli("ingest", str(tmp_path / "a.md"), "--index", url, timeout=120)

    assert result.returncode != 0
    assert "Traceback" not in result.stderr, result.stderr[-2000:]
    assert SECRET not in result.stdout + result.stderr
    assert "password=***" in result.stdout + result.stderr


# --- the key file ---------------------------------------------------------------------------


def test_an_in_place_edit_of_the_same_size_with_the_old_mtime_is_noticed(tmp_path: Path) -> None:
    path = tmp_path / "keys.json"
    keys = write_api_keys(path, {"alice": {"groups": ["engineering"]}})
    api_keys = ApiKeys(path)
    assert api_keys.lookup(keys["alice"]).groups == ("engineering", "everyone", "user:alice")
    before = os.stat(path)

    revoked = path.read_text().replace(hash_key(keys["alice"]), "0" * 64)
    assert len(revoked) == before.st_size
    with path.open("r+", encoding="utf-8") as handle:  # in place: same inode, same size
        handle.write(revoked)
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))  # as `cp -p` leaves it
    after = os.stat(path)
    assert (after.st_ino, after.st_size, after.st_mtime_ns) == (
        before.st_ino,
        before.st_size,
        before.st_mtime_ns,
    )

    with pytest.raises(Unauthenticated, match="unknown API key"):
        api_keys.lookup(keys["alice"])


def test_a_deeply_nested_key_file_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(CredentialsError, match="not valid JSON .*nested too deeply"):
        parse_key_file("[" * 100_000, "keys.json")


# --- nesting-safe index reads ----------------------------------------------------------------


def test_a_deeply_nested_manifest_is_a_clear_error(
    handbook_index: Path, tmp_path: Path, run_cli: RunCli
) -> None:
    index = tmp_path / "index"
    shutil.copytree(handbook_index, index)
    version = (index / "CURRENT").read_text().strip()
    (index / "versions" / version / "manifest.json").write_text("[" * 100_000)

    result = run_cli("search", "API key", "--index", str(index), timeout=120)

    assert result.returncode == 2, result.stderr[-2000:]
    assert "RecursionError" not in result.stderr and "Traceback" not in result.stderr
    assert "nested too deeply" in result.stderr


# --- contexts and webhooks -------------------------------------------------------------------


@pytest.fixture
def settings(tmp_path: Path) -> ServerSettings:
    return ServerSettings.from_env(
        {"FOOTNOTE_INDEX": str(tmp_path), "FOOTNOTE_WEBHOOKS": "https://hooks.example.com"}
    )


@pytest.mark.parametrize(
    "requested",
    [
        {"reranker": "crossencoder:/etc/passwd"},
        {"reranker": "llm"},
        {"max_answer_tokens": 0},
        {"max_internal_tokens": 0},
        {"model_max_retries": 100},
    ],
)
def test_graph_fields_a_caller_may_not_choose_are_refused(
    settings: ServerSettings, requested: dict[str, Any]
) -> None:
    with pytest.raises(ContextRefused) as caught:
        settings.check(requested)

    assert caught.value.status in (403, 422)
    name = next(iter(requested))
    assert name in caught.value.message


def test_the_run_context_pins_every_field_a_caller_may_not_choose(
    settings: ServerSettings,
) -> None:
    context = settings.run_context({"retrieve_k": 4})

    assert context["reranker"] == "none"
    assert context["max_answer_tokens"] > 0 and context["max_internal_tokens"] > 0
    assert context["retrieve_k"] == 4
    assert "user_groups" not in context and "admin" not in context


@pytest.mark.parametrize(
    "webhook",
    [
        "https://hooks.example.com.evil.test/x",
        "http://hooks.example.com/x",
        "https://hooks.example.com:8443/x",
        "https://me:pw@hooks.example.com/x",
        "/threads",
        "https://10.0.0.1/x",
        42,
    ],
)
def test_webhooks_go_only_to_allowed_origins(settings: ServerSettings, webhook: Any) -> None:
    with pytest.raises(ContextRefused) as caught:
        settings.webhook(webhook)
    assert caught.value.status == 403


def test_webhooks_are_off_unless_the_operator_allows_them(
    settings: ServerSettings, tmp_path: Path
) -> None:
    settings.webhook("https://HOOKS.example.com/footnote/done")
    settings.webhook(None)
    closed = ServerSettings.from_env({"FOOTNOTE_INDEX": str(tmp_path)})
    with pytest.raises(ContextRefused, match="not enabled"):
        closed.webhook("https://hooks.example.com/x")
    for bad in ("hooks.example.com", "ftp://x", "https://x/path", "https://u:p@x"):
        with pytest.raises(SettingsError, match="FOOTNOTE_WEBHOOKS"):
            ServerSettings.from_env({"FOOTNOTE_INDEX": str(tmp_path), "FOOTNOTE_WEBHOOKS": bad})


def test_deeply_nested_indexes_setting_is_a_settings_error() -> None:
    with pytest.raises(SettingsError, match="nested too deeply"):
        ServerSettings.from_env({"FOOTNOTE_INDEXES": "[" * 100_000})


# --- uploads sized before they are decoded ------------------------------------------------


def test_an_oversized_upload_is_refused_before_it_is_decoded_or_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import base64

    from footnote.graph import indexer

    decoded: list[int] = []
    real = base64.b64decode
    monkeypatch.setattr(indexer, "MAX_UPLOAD_BYTES", 3_000)
    monkeypatch.setattr(indexer, "_DECODE_STEP", 400)
    monkeypatch.setattr(
        indexer.base64, "b64decode", lambda s, **kw: decoded.append(len(s)) or real(s, **kw)
    )
    folder = tmp_path / "uploads"
    small = base64.b64encode(b"# Fine\n\nA small note.\n" * 50).decode()
    big = base64.b64encode(b"x" * 3_003).decode()
    with pytest.raises(ValueError, match="over the limit"):
        indexer._save_uploads(
            [{"name": "a.md", "content": small}, {"name": "b.md", "content": big}], folder
        )
    assert decoded == [] and not folder.exists()  # nothing decoded, nothing on disk
    (saved,) = indexer._save_uploads([{"name": "a.md", "content": small}], folder)
    assert saved.read_bytes() == b"# Fine\n\nA small note.\n" * 50
    assert decoded and max(decoded) <= 400  # decoded a step at a time
    with pytest.raises(ValueError, match="not base64"):
        indexer._save_uploads([{"name": "c.md", "content": "!!!!" * 10}], folder)
    assert sorted(p.name for p in folder.iterdir()) == ["a.md"]  # no part file left
