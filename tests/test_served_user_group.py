"""A served caller carries its own `user:<name>` group, made from its authenticated name
alone: an API key's user and a token's subject are in it, the anonymous caller is not, a key
file that lists a `user:` group is refused and a token's `user:` groups are dropped. So a
document whose source names its readers (`user:alice`) is found by alice and by no one else."""

from __future__ import annotations

import json
import time
from pathlib import Path

import jwt
import pytest

from footnote.server.credentials import (
    ANONYMOUS_IDENTITY,
    ApiKeys,
    Credentials,
    CredentialsError,
    Identity,
    JwtVerifier,
    hash_key,
    parse_key_file,
    write_api_keys,
)
from footnote.store.types import Caller, Chunk

SECRET = "s" * 40


def named_for(*readers: str) -> Chunk:
    return Chunk(id="doc#a:0", text="t", source="doc", title="t", section="a", access=[*readers])


def test_an_api_key_user_is_in_its_own_user_group_and_sees_what_names_it(tmp_path: Path) -> None:
    path = tmp_path / "keys.json"
    keys = write_api_keys(path, {"alice": {"groups": ["hr"]}, "bob": {"groups": ["hr"]}})
    api_keys = ApiKeys(path)
    alice, bob = api_keys.lookup(keys["alice"]), api_keys.lookup(keys["bob"])

    assert alice.groups == ("hr", "everyone", "user:alice")
    for_alice = named_for("user:alice")
    assert Caller.of_groups(alice.groups, strict=True).may_see(for_alice)
    assert not Caller.of_groups(bob.groups, strict=True).may_see(for_alice)
    assert alice.as_user()["groups"] == ["hr", "everyone", "user:alice"]


def test_the_scope_of_threads_leaves_the_user_group_out() -> None:
    """Threads and ratings made before callers carried `user:` keep their scope."""
    assert (
        Identity(user="alice", groups=("everyone", "hr"), method="api_key").scope == "everyone,hr"
    )


def test_a_key_file_that_lists_a_user_group_is_refused() -> None:
    text = json.dumps({hash_key("k"): {"user": "mallory", "groups": ["user:alice"]}})
    with pytest.raises(CredentialsError, match="may not list a 'user:' group"):
        parse_key_file(text, "keys.json")


def test_a_token_naming_another_user_group_is_that_user_only_by_its_subject() -> None:
    verifier = JwtVerifier(keys={None: SECRET}, algorithms={None: ["HS256"]})
    credentials = Credentials(None, verifier)
    claims = {"sub": "mallory", "groups": ["user:alice", "hr"], "exp": int(time.time()) + 600}
    token = jwt.encode(claims, SECRET, algorithm="HS256")

    identity = credentials.identify(f"Bearer {token}", None)

    assert identity.groups == ("hr", "everyone", "user:mallory")
    assert not Caller.of_groups(identity.groups, strict=True).may_see(named_for("user:alice"))


def test_a_listed_user_group_never_survives_building_an_identity() -> None:
    forged = Identity(user="mallory", groups=("user:alice",), method="api_key")
    assert forged.groups == ("everyone", "user:mallory")


def test_the_anonymous_caller_has_no_user_group() -> None:
    assert ANONYMOUS_IDENTITY.groups == ("everyone",)
    assert not Caller.of_groups(ANONYMOUS_IDENTITY.groups, strict=True).may_see(
        named_for("user:anonymous")
    )
