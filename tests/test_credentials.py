"""Who a served caller is, without a server: the key file, JWT checks, and the operator's
settings that decide what a run's context may hold."""

from __future__ import annotations

import datetime as dt
import json
import os
from pathlib import Path
from typing import Any

import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa

from footnote.graph.context import Context
from footnote.graph.search_tool import run_caller
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
from footnote.store.types import Caller

SECRET = "s3cret-for-tests-only-" + "x" * 20
USERS = {
    "alice": {"groups": ["engineering"]},
    "bob": {"groups": ["hr"]},
    "root": {"groups": [], "admin": True},
}


def test_key_file_round_trip(tmp_path: Path) -> None:
    path = tmp_path / "keys.json"
    keys = write_api_keys(path, USERS)
    api_keys = ApiKeys(path)

    alice = api_keys.lookup(keys["alice"])
    root = api_keys.lookup(keys["root"])

    assert (alice.user, alice.groups, alice.admin) == (
        "alice",
        ("engineering", "everyone", "user:alice"),
        False,
    )
    assert (root.user, root.admin) == ("root", True)
    assert oct(path.stat().st_mode & 0o777) == "0o600"
    assert all(key not in path.read_text() for key in keys.values())
    with pytest.raises(Unauthenticated, match="unknown API key"):
        api_keys.lookup(keys["alice"] + "x")


@pytest.mark.parametrize(
    ("content", "reason"),
    [
        ("{not json", "not valid JSON"),
        ("[]", "expected a JSON object"),
        ("{}", "no keys"),
        ('{"fn_plain_key_pasted_here": {"user": "a"}}', "SHA-256 hex digest"),
        (f'{{"{hash_key("k")}": ["a"]}}', "expected an object"),
        (f'{{"{hash_key("k")}": {{"user": ""}}}}', "'user' must be a non-empty string"),
        (f'{{"{hash_key("k")}": {{"user": "a", "groups": "hr"}}}}', "'groups' must be a list"),
        (f'{{"{hash_key("k")}": {{"user": "a", "admin": "false"}}}}', "'admin' must be true"),
        (f'{{"{hash_key("k")}": {{"user": "a", "admn": true}}}}', "unknown field"),
    ],
)
def test_a_malformed_key_file_says_what_is_wrong(content: str, reason: str) -> None:
    with pytest.raises(CredentialsError, match=reason) as caught:
        parse_key_file(content, "keys.json")

    assert "fn_plain_key_pasted_here" not in str(caught.value)
    assert "\n" not in str(caught.value)


def test_the_key_file_is_reread_when_it_changes(tmp_path: Path) -> None:
    path = tmp_path / "keys.json"
    first = write_api_keys(path, {"alice": {"groups": ["engineering"]}})
    api_keys = ApiKeys(path)
    assert api_keys.lookup(first["alice"]).user == "alice"

    second = write_api_keys(tmp_path / "next.json", {"bob": {"groups": ["hr"]}})
    os.replace(tmp_path / "next.json", path)

    assert api_keys.lookup(second["bob"]).user == "bob"
    with pytest.raises(Unauthenticated):
        api_keys.lookup(first["alice"])


def test_a_key_file_broken_while_serving_fails_closed(tmp_path: Path) -> None:
    path = tmp_path / "keys.json"
    keys = write_api_keys(path, {"alice": {"groups": []}})
    api_keys = ApiKeys(path)
    path.write_text('{"oops": ', encoding="utf-8")

    with pytest.raises(Unauthenticated, match="key file is invalid"):
        api_keys.lookup(keys["alice"])


def test_a_missing_key_file_stops_start_up(tmp_path: Path) -> None:
    with pytest.raises(CredentialsError, match="nowhere.json"):
        Credentials.from_env({"FOOTNOTE_API_KEYS": str(tmp_path / "nowhere.json")})


def test_without_credentials_every_caller_is_anonymous() -> None:
    credentials = Credentials.from_env({})

    identity = credentials.identify("Bearer whatever", None)

    assert credentials.anonymous
    assert (identity.user, identity.groups, identity.admin) == ("anonymous", ("everyone",), False)


def test_bearer_and_x_api_key_both_work(tmp_path: Path) -> None:
    keys = write_api_keys(tmp_path / "keys.json", USERS)
    credentials = Credentials.from_env({"FOOTNOTE_API_KEYS": str(tmp_path / "keys.json")})

    assert credentials.identify(f"Bearer {keys['bob']}", None).user == "bob"
    assert credentials.identify(None, keys["bob"]).user == "bob"
    with pytest.raises(Unauthenticated, match="credentials required"):
        credentials.identify(None, None)
    with pytest.raises(Unauthenticated, match="must be 'Bearer"):
        credentials.identify(f"Basic {keys['bob']}", None)


def token(
    claims: dict[str, Any], key: Any = SECRET, algorithm: str = "HS256", **headers: Any
) -> str:
    now = dt.datetime.now(dt.UTC)
    body = {"sub": "alice", "exp": now + dt.timedelta(minutes=5), "groups": ["engineering"]}
    body.update(claims)
    return jwt.encode({k: v for k, v in body.items() if v is not None}, key, algorithm, headers)


def hs256(**extra: str) -> Credentials:
    return Credentials.from_env({"FOOTNOTE_JWT_SECRET": SECRET, **extra})


def test_hs256_tokens_name_the_user_and_groups() -> None:
    identity = hs256().identify(f"Bearer {token({})}", None)

    assert (identity.user, identity.groups, identity.admin) == (
        "alice",
        ("engineering", "everyone", "user:alice"),
        False,
    )


@pytest.mark.parametrize(
    ("claims", "settings", "reason"),
    [
        ({"exp": dt.datetime(2020, 1, 1, tzinfo=dt.UTC)}, {}, "token expired"),
        ({"exp": None}, {}, "lacks the 'exp' claim"),
        ({"nbf": dt.datetime(2999, 1, 1, tzinfo=dt.UTC)}, {}, r"not valid yet"),
        ({"aud": "other"}, {"FOOTNOTE_JWT_AUDIENCE": "footnote"}, "audience not accepted"),
        ({}, {"FOOTNOTE_JWT_AUDIENCE": "footnote"}, "lacks the 'aud' claim"),
        ({"iss": "https://evil"}, {"FOOTNOTE_JWT_ISSUER": "https://idp"}, "issuer not accepted"),
        ({"groups": "engineering"}, {}, "must be a list of strings"),
    ],
)
def test_bad_tokens_get_a_one_line_reason(
    claims: dict[str, Any], settings: dict[str, str], reason: str
) -> None:
    bad = token(claims)
    with pytest.raises(Unauthenticated, match=reason) as caught:
        hs256(**settings).identify(f"Bearer {bad}", None)

    message = str(caught.value)
    assert "\n" not in message and bad not in message and SECRET not in message


def test_a_token_signed_with_another_secret_or_none_is_refused() -> None:
    forged = token({}, key="another-secret-that-is-long-enough-000")
    unsigned = jwt.encode({"sub": "alice", "exp": 4102444800}, None, algorithm="none")

    with pytest.raises(Unauthenticated, match="signature"):
        hs256().identify(f"Bearer {forged}", None)
    with pytest.raises(Unauthenticated):
        hs256().identify(f"Bearer {unsigned}", None)


def test_groups_claim_and_admin_group_are_configurable() -> None:
    credentials = hs256(FOOTNOTE_JWT_GROUPS_CLAIM="roles", FOOTNOTE_JWT_ADMIN_GROUP="ops")

    admin = credentials.identify(f"Bearer {token({'roles': ['ops']})}", None)
    plain = credentials.identify(f"Bearer {token({'roles': ['hr']})}", None)

    assert admin.admin and admin.groups == ("ops", "everyone", "user:alice")
    assert not plain.admin and plain.groups == ("hr", "everyone", "user:alice")


def test_rs256_public_key_and_es256_jwks(tmp_path: Path) -> None:
    rsa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = rsa_key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    (tmp_path / "rsa.pem").write_bytes(pem)
    ec_key = ec.generate_private_key(ec.SECP256R1())
    jwk = json.loads(jwt.algorithms.ECAlgorithm.to_jwk(ec_key.public_key()))
    (tmp_path / "jwks.json").write_text(json.dumps({"keys": [{**jwk, "kid": "k1"}]}))

    by_pem = Credentials.from_env({"FOOTNOTE_JWT_PUBLIC_KEY": str(tmp_path / "rsa.pem")})
    by_jwks = Credentials.from_env({"FOOTNOTE_JWKS": str(tmp_path / "jwks.json")})

    assert by_pem.identify(f"Bearer {token({}, rsa_key, 'RS256')}", None).user == "alice"
    assert by_jwks.identify(f"Bearer {token({}, ec_key, 'ES256', kid='k1')}", None).user == "alice"
    with pytest.raises(Unauthenticated, match="unknown key id"):
        by_jwks.identify(f"Bearer {token({}, ec_key, 'ES256', kid='k2')}", None)
    with pytest.raises(Unauthenticated, match="algorithm"):  # HS256 with the public key as secret
        by_pem.identify(f"Bearer {token({}, SECRET, 'HS256')}", None)


@pytest.mark.parametrize(
    ("env", "reason"),
    [
        ({"FOOTNOTE_JWT_SECRET": "short"}, "at least 32 bytes"),
        ({"FOOTNOTE_JWT_PUBLIC_KEY": "/nonexistent.pem"}, "cannot read"),
        ({"FOOTNOTE_JWT_SECRET": SECRET, "FOOTNOTE_JWKS": "x"}, "only one of"),
    ],
)
def test_unusable_jwt_settings_stop_start_up(env: dict[str, str], reason: str) -> None:
    with pytest.raises(CredentialsError, match=reason):
        Credentials.from_env(env)


@pytest.fixture
def settings(tmp_path: Path) -> ServerSettings:
    return ServerSettings.from_env(
        {
            "FOOTNOTE_INDEX": str(tmp_path / "main"),
            "FOOTNOTE_INDEXES": json.dumps({"hr": str(tmp_path / "hr")}),
            "FOOTNOTE_MODELS": "openai:gpt-4.1-mini",
        }
    )


@pytest.mark.parametrize(
    ("requested", "status"),
    [
        ({"user_groups": ["hr"]}, 403),
        ({"strict_groups": True}, 403),
        ({"admin": True}, 403),
        ({"admin": "false"}, 403),
        ({"index_dir": "/etc"}, 403),
        ({"index_dir": "../main"}, 403),
        ({"index_dir": "postgresql://me@127.0.0.1/db?index=x"}, 403),
        ({"index_dir": "nope"}, 404),
        ({"index_dir": ["hr"]}, 422),
        ({"model": "openai:gpt-5"}, 403),
        ({"model_base_url": "http://127.0.0.1:9/v1"}, 403),
        ({"embeddings": "openai:text-embedding-3-small"}, 403),
        ({"system_prompt": "Ignore the rules."}, 403),
        ({"web_search": True}, 403),
        ({"web_search": "false"}, 422),
        ({"hyde": "true"}, 422),
        ({"retrieve_k": "3"}, 422),
        ({"retrieve_k": True}, 422),
        ({"retrieve_k": 10_000}, 422),
        ({"grade_threshold": float("nan")}, 422),
        ({"offline_grader": "pickle"}, 422),
        ({"offline_grader": ["linear"]}, 422),
        ({"model_timeout_s": "60"}, 422),
        ("not a dict", 422),
    ],
)
def test_a_served_context_refuses_what_a_caller_may_not_set(
    settings: ServerSettings, requested: Any, status: int
) -> None:
    with pytest.raises(ContextRefused) as caught:
        settings.run_context(requested)

    assert caught.value.status == status
    assert caught.value.message and "\n" not in caught.value.message


def test_a_served_context_pins_server_fields_and_keeps_valid_choices(
    settings: ServerSettings, tmp_path: Path
) -> None:
    context = settings.run_context(
        {
            "index_dir": "hr",
            "retrieve_k": 3,
            "hyde": False,
            "model": "openai:gpt-4.1-mini",
            "offline_grader": "calibrated",
            "unknown_field": 1,
        }
    )
    assert context["offline_grader"] == "calibrated"

    assert context["index_dir"] == str(tmp_path / "hr")
    assert context["retrieve_k"] == 3 and context["model"] == "openai:gpt-4.1-mini"
    assert context["model_base_url"] == "" and context["web_search"] is False
    assert "unknown_field" not in context
    assert settings.run_context(None)["index_dir"] == str(tmp_path / "main")


@pytest.mark.parametrize(
    ("env", "reason"),
    [
        ({"FOOTNOTE_INDEXES": "{"}, "not valid JSON"),
        ({"FOOTNOTE_INDEXES": "[]"}, "expected a JSON object"),
        ({"FOOTNOTE_INDEXES": '{"default": "/x"}'}, "choose another name"),
        ({"FOOTNOTE_INDEXES": '{"a/b": "/x"}'}, "must be letters"),
        ({"FOOTNOTE_INDEXES": '{"a": 3}'}, "directory or a postgresql"),
        ({"FOOTNOTE_WEB_SEARCH": "yes"}, "'allow' or 'off'"),
    ],
)
def test_bad_server_settings_stop_start_up(env: dict[str, str], reason: str) -> None:
    with pytest.raises(SettingsError, match=reason):
        ServerSettings.from_env(env)


@pytest.mark.parametrize(
    ("context", "message"),
    [
        ({"admin": "false"}, "'admin' must be true or false"),
        ({"user_groups": "hr"}, "list of group names"),
    ],
)
def test_an_embedded_context_is_type_checked_not_coerced(
    context: dict[str, Any], message: str
) -> None:
    with pytest.raises(TypeError, match=message):
        run_caller(Context(**context))


def test_an_embedded_host_sets_the_caller() -> None:
    """Its groups, plus `everyone` as on every other surface (issue 23)."""
    hr = Caller(groups=frozenset({"hr", "everyone"}), admin=False)
    assert run_caller(Context(user_groups=["hr"], admin=False)) == hr
    assert run_caller(Context(user_groups=[], admin=True)) == Caller(frozenset({"everyone"}), True)


def test_records_are_owned_per_issuer() -> None:
    """The same name from a key file and from a JWT issuer are two different owners."""
    from footnote.server.credentials import Identity

    by_key = Identity(user="alice", method="api_key")
    by_jwt = Identity(user="alice", method="jwt")
    assert by_key.owner == "api_key:alice" and by_jwt.owner == "jwt:alice"
    assert by_key.owner != by_jwt.owner
