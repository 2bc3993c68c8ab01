"""Who a served caller is: API keys from an operator's key file, or JWT / OIDC bearer tokens.

Pure logic with no server imports, so it is unit-tested directly and shared by the server's
auth handler (`footnote/server/auth.py`) and by anyone writing a key file (`write_api_keys`).

Key file (`FOOTNOTE_API_KEYS=PATH`): a JSON object mapping the SHA-256 hex digest of each key
to `{"user": "...", "groups": [...], "admin": false}`. Only digests are stored, so the file
does not hold usable keys. Every served identity is also in the group `everyone`, and an
authenticated one in its own group `user:NAME`, so a document whose source names its readers
(a GitHub repository's collaborators) is found by them alone. That group comes only from the
authenticated name: a key file that lists a `user:` group is refused, and `user:` groups in
a token's groups claim are dropped.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import re
import secrets
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from footnote.store import jsonfile
from footnote.store.revocations import RevocationWatch
from footnote.store.types import EVERYONE, caller_groups

ANONYMOUS = "anonymous"
USER_GROUP_PREFIX = "user:"
_DIGEST = re.compile(r"[0-9a-f]{64}")
_ENTRY_FIELDS = {"user", "groups", "admin"}


class CredentialsError(ValueError):
    """The operator's credential settings are unusable (a bad key file, a missing key)."""


class Unauthenticated(Exception):
    """The request's credentials are missing or invalid; the message is one safe line."""


@dataclass(frozen=True)
class Identity:
    """A served caller as the server knows it; never built from anything the caller sends."""

    user: str
    groups: tuple[str, ...] = (EVERYONE,)
    admin: bool = False
    method: str = "anonymous"
    """How the caller proved it: `api_key`, `jwt` or `anonymous`."""
    revoked: str = ""
    """When a source last took a document from one of these groups (`footnote.store.
    revocations`), as the served indexes say now; "" if never."""

    def __post_init__(self) -> None:
        """An authenticated caller is also in `user:<user>`, whatever groups it was given:
        the group is made here, from the authenticated name, and never taken from a list."""
        if self.method != "anonymous":
            object.__setattr__(self, "groups", authenticated_groups(self.user, self.groups))

    @property
    def owner(self) -> str:
        """The name records are owned under: one namespace per issuer (`jwt:alice`)."""
        return f"{self.method}:{self.user}"

    @property
    def scope(self) -> str:
        """What this identity may see, as one comparable string (`admin`, or its groups, and
        when a source last took something from them). Its own `user:` group is left out of
        the names: the owner already names the user, and a thread or rating made before
        callers carried that group keeps the scope it was made under. A revocation stamp
        changes the scope without changing the groups, so threads written before it, which
        may quote what was taken, are no longer served (`footnote.server.auth`)."""
        if self.admin:
            return "admin"
        shared = ",".join(sorted(g for g in self.groups if not g.startswith(USER_GROUP_PREFIX)))
        return f"{shared}@{self.revoked}" if self.revoked else shared

    def as_user(self) -> dict[str, Any]:
        """The user dict the LangGraph server stores and injects into runs."""
        return {
            "identity": self.user,
            "display_name": self.user,
            "is_authenticated": self.method != "anonymous",
            "groups": list(self.groups),
            "admin": self.admin,
            "scope": self.scope,
            "auth_method": self.method,
        }


ANONYMOUS_IDENTITY = Identity(user=ANONYMOUS)


def with_everyone(groups: list[str] | tuple[str, ...]) -> tuple[str, ...]:
    """Every served caller is in `everyone`: a signed-in user never sees less than anonymous."""
    return caller_groups(groups)


def authenticated_groups(user: str, groups: list[str] | tuple[str, ...]) -> tuple[str, ...]:
    """An authenticated caller's groups: the given ones, `everyone`, and `user:<user>`, the
    one group that names this caller alone (never taken from what the caller or its
    credentials list; see the module's docstring)."""
    given = [g for g in groups if not g.startswith(USER_GROUP_PREFIX)]
    return (*with_everyone(given), f"{USER_GROUP_PREFIX}{user}")


def hash_key(key: str) -> str:
    """The digest a key file stores for `key`."""
    return hashlib.sha256(key.encode("utf-8")).hexdigest()


def new_key() -> str:
    """A fresh random API key (43 URL-safe characters, 256 bits)."""
    return "fn_" + secrets.token_urlsafe(32)


def write_api_keys(path: str | Path, users: Mapping[str, Mapping[str, Any]]) -> dict[str, str]:
    """Write a key file with one new key per user; returns {user: key} (shown only once).

    `users` maps a user name to `{"groups": [...], "admin": bool}`. The file is written with
    mode 0600 and checked by the same parser the server uses.
    """
    keys: dict[str, str] = {}
    entries: dict[str, dict[str, Any]] = {}
    for user, spec in users.items():
        key = new_key()
        keys[user] = key
        entries[hash_key(key)] = {
            "user": user,
            "groups": list(spec.get("groups", [])),
            "admin": bool(spec.get("admin", False)),
        }
    text = json.dumps(entries, indent=2) + "\n"
    parse_key_file(text, str(path))
    target = Path(path)
    fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as sink:
        sink.write(text)
    return keys


def parse_key_file(text: str, where: str) -> dict[str, Identity]:
    """Digest -> identity, or CredentialsError naming the first thing wrong and where."""
    try:
        data = jsonfile.loads(text)
    except ValueError as exc:
        raise CredentialsError(f"{where}: not valid JSON ({exc})") from None
    if not isinstance(data, dict):
        raise CredentialsError(
            f"{where}: expected a JSON object mapping SHA-256 key digests to users"
        )
    if not data:
        raise CredentialsError(f"{where}: no keys (an empty file would let nobody in)")
    identities: dict[str, Identity] = {}
    for number, (digest, entry) in enumerate(data.items(), start=1):
        label = f"{where}: entry {number}"  # never echo the name: it may be a pasted key
        if not _DIGEST.fullmatch(digest):
            raise CredentialsError(
                f"{label}: the key must be the lowercase SHA-256 hex digest of an API key "
                "(64 characters), not the key itself"
            )
        if not isinstance(entry, dict):
            raise CredentialsError(f"{label}: expected an object with user, groups, admin")
        unknown = set(entry) - _ENTRY_FIELDS
        if unknown:
            raise CredentialsError(f"{label}: unknown field(s) {', '.join(sorted(unknown))}")
        user, groups, admin = entry.get("user"), entry.get("groups", []), entry.get("admin", False)
        if not isinstance(user, str) or not user.strip():
            raise CredentialsError(f"{label}: 'user' must be a non-empty string")
        if not isinstance(groups, list) or not all(isinstance(g, str) and g for g in groups):
            raise CredentialsError(f"{label}: 'groups' must be a list of non-empty strings")
        if not isinstance(admin, bool):
            raise CredentialsError(f"{label}: 'admin' must be true or false")
        if any(g.startswith(USER_GROUP_PREFIX) for g in groups):
            raise CredentialsError(
                f"{label}: 'groups' may not list a {USER_GROUP_PREFIX!r} group; the server "
                f"gives each user their own {USER_GROUP_PREFIX}NAME"
            )
        identities[digest] = Identity(
            user=user, groups=with_everyone(groups), admin=admin, method="api_key"
        )
    return identities


class ApiKeys:
    """The operator's key file, re-read whenever its content changes.

    The check is a digest of the file's bytes, not its stat: an in-place edit of the same
    size with the modification time preserved (`cp -p`, `rsync -t --inplace`) is noticed.

    Lookups hash the presented key and compare it with every stored digest in constant time.
    A file that becomes malformed while serving fails closed: no key is accepted until fixed.
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._lock = threading.Lock()
        self._signature: str | None = None
        self._identities: dict[str, Identity] = {}
        self._error = ""
        self._load(strict=True)

    def _load(self, *, strict: bool) -> None:
        try:
            if not self.path.is_file():
                raise CredentialsError(f"{self.path}: not a regular file")
            data = self.path.read_bytes()
            signature = hashlib.sha256(data).hexdigest()
            if signature == self._signature:
                return
            identities = parse_key_file(data.decode("utf-8"), str(self.path))
        except (OSError, UnicodeDecodeError, CredentialsError) as exc:
            message = str(exc) if isinstance(exc, CredentialsError) else f"{self.path}: {exc}"
            if strict:
                raise CredentialsError(message) from None
            self._error, self._identities, self._signature = message, {}, None
            return
        self._signature, self._identities, self._error = signature, identities, ""

    def lookup(self, key: str) -> Identity:
        with self._lock:
            self._load(strict=False)
            identities, error = self._identities, self._error
        if error:
            raise Unauthenticated("the server's API key file is invalid; ask the operator")
        presented = hash_key(key)
        found: Identity | None = None
        for digest, identity in identities.items():  # no early exit: time does not depend on
            if hmac.compare_digest(presented, digest):  # which entry matched
                found = identity
        if found is None:
            raise Unauthenticated("unknown API key")
        return found


@dataclass
class JwtVerifier:
    """Bearer tokens signed by the operator's identity provider, checked with PyJWT."""

    keys: dict[str | None, Any]
    """Verification key per `kid` (None: the one key used whatever the token's kid)."""
    algorithms: dict[str | None, list[str]]
    audience: str | None = None
    issuer: str | None = None
    groups_claim: str = "groups"
    admin_group: str | None = None
    user_claim: str = "sub"
    leeway_s: float = 0.0

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> JwtVerifier | None:
        """Configured by FOOTNOTE_JWT_SECRET, FOOTNOTE_JWT_PUBLIC_KEY or FOOTNOTE_JWKS."""
        import jwt
        from jwt.algorithms import ECAlgorithm, RSAAlgorithm

        secret = env.get("FOOTNOTE_JWT_SECRET", "")
        public = env.get("FOOTNOTE_JWT_PUBLIC_KEY", "")
        jwks = env.get("FOOTNOTE_JWKS", "")
        chosen = [
            name
            for name, value in (("SECRET", secret), ("PUBLIC_KEY", public), ("JWKS", jwks))
            if value
        ]
        if not chosen:
            return None
        if len(chosen) > 1:
            raise CredentialsError(
                "set only one of FOOTNOTE_JWT_SECRET, FOOTNOTE_JWT_PUBLIC_KEY, FOOTNOTE_JWKS"
            )
        keys: dict[str | None, Any] = {}
        algorithms: dict[str | None, list[str]] = {}
        if secret:
            if len(secret.encode()) < 32:
                raise CredentialsError("FOOTNOTE_JWT_SECRET must be at least 32 bytes")
            keys[None], algorithms[None] = secret, ["HS256"]
        elif public:
            pem = (
                public
                if public.lstrip().startswith("-----BEGIN")
                else _read(public, "FOOTNOTE_JWT_PUBLIC_KEY")
            )
            key, algorithm = _public_key(pem)
            keys[None], algorithms[None] = key, [algorithm]
        else:
            try:
                data = json.loads(_read(jwks, "FOOTNOTE_JWKS"))
                key_set = jwt.PyJWKSet.from_dict(data)
            except (ValueError, jwt.PyJWKError, jwt.PyJWKSetError) as exc:
                raise CredentialsError(
                    f"FOOTNOTE_JWKS: {jwks}: not a usable JWKS ({exc})"
                ) from None
            for jwk in key_set.keys:
                algorithm = jwk.algorithm_name
                if isinstance(jwk.Algorithm, RSAAlgorithm):
                    algorithm = "RS256"
                elif isinstance(jwk.Algorithm, ECAlgorithm):
                    algorithm = "ES256"
                else:
                    raise CredentialsError(
                        f"FOOTNOTE_JWKS: key {jwk.key_id!r}: only RSA (RS256) and EC (ES256) "
                        "keys are accepted"
                    )
                keys[jwk.key_id], algorithms[jwk.key_id] = jwk.key, [algorithm]
        return cls(
            keys=keys,
            algorithms=algorithms,
            audience=env.get("FOOTNOTE_JWT_AUDIENCE") or None,
            issuer=env.get("FOOTNOTE_JWT_ISSUER") or None,
            groups_claim=env.get("FOOTNOTE_JWT_GROUPS_CLAIM") or "groups",
            admin_group=env.get("FOOTNOTE_JWT_ADMIN_GROUP") or None,
        )

    def verify(self, token: str) -> Identity:
        import jwt

        try:
            header = jwt.get_unverified_header(token)
        except jwt.PyJWTError:
            raise Unauthenticated("malformed bearer token") from None
        kid = header.get("kid") if None not in self.keys else None
        if kid not in self.keys:
            raise Unauthenticated("token signed with an unknown key id")
        try:
            claims = jwt.decode(
                token,
                self.keys[kid],
                algorithms=self.algorithms[kid],
                audience=self.audience,
                issuer=self.issuer,
                leeway=self.leeway_s,
                options={"require": ["exp", self.user_claim]},
            )
        except jwt.ExpiredSignatureError:
            raise Unauthenticated("token expired") from None
        except jwt.ImmatureSignatureError:
            raise Unauthenticated("token not valid yet (nbf)") from None
        except jwt.InvalidAudienceError:
            raise Unauthenticated("token audience not accepted") from None
        except jwt.InvalidIssuerError:
            raise Unauthenticated("token issuer not accepted") from None
        except jwt.MissingRequiredClaimError as exc:
            raise Unauthenticated(f"token lacks the {exc.claim!r} claim") from None
        except jwt.InvalidAlgorithmError:
            raise Unauthenticated("token signed with an algorithm that is not accepted") from None
        except jwt.InvalidSignatureError:
            raise Unauthenticated("token signature does not verify") from None
        except jwt.PyJWTError:
            raise Unauthenticated("invalid bearer token") from None
        user = claims.get(self.user_claim)
        groups = claims.get(self.groups_claim, [])
        if not isinstance(user, str) or not user:
            raise Unauthenticated(f"token claim {self.user_claim!r} must be a non-empty string")
        if not isinstance(groups, list) or not all(isinstance(g, str) and g for g in groups):
            raise Unauthenticated(f"token claim {self.groups_claim!r} must be a list of strings")
        admin = self.admin_group is not None and self.admin_group in groups
        # an identity provider's group named `user:bob` is dropped: it never makes anyone bob
        return Identity(user=user, groups=with_everyone(groups), admin=admin, method="jwt")


def _read(path: str, variable: str) -> str:
    try:
        return Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise CredentialsError(f"{variable}: cannot read {path} ({exc})") from None


def _public_key(pem: str) -> tuple[Any, str]:
    from cryptography.hazmat.primitives.asymmetric import ec, rsa
    from cryptography.hazmat.primitives.serialization import load_pem_public_key

    try:
        key = load_pem_public_key(pem.encode("utf-8"))
    except ValueError as exc:
        raise CredentialsError(f"FOOTNOTE_JWT_PUBLIC_KEY: not a PEM public key ({exc})") from None
    if isinstance(key, rsa.RSAPublicKey):
        return key, "RS256"
    if isinstance(key, ec.EllipticCurvePublicKey):
        return key, "ES256"
    raise CredentialsError("FOOTNOTE_JWT_PUBLIC_KEY: only RSA and EC public keys are accepted")


def looks_like_jwt(token: str) -> bool:
    return token.count(".") == 2 and all(token.split("."))


class Credentials:
    """Everything that can identify a served caller; neither configured means anonymous."""

    def __init__(
        self,
        api_keys: ApiKeys | None,
        jwt: JwtVerifier | None,
        revocations: RevocationWatch | None = None,
    ) -> None:
        self.api_keys = api_keys
        self.jwt = jwt
        self.revocations = revocations

    @classmethod
    def from_env(
        cls, env: Mapping[str, str] | None = None, *, indexes: Iterable[str] = ()
    ) -> Credentials:
        """Read FOOTNOTE_API_KEYS and the JWT settings; CredentialsError if unusable.
        `indexes`: the served index locations, whose revocation logs scope each caller."""
        env = os.environ if env is None else env
        keys_path = env.get("FOOTNOTE_API_KEYS", "")
        watch = RevocationWatch(list(indexes)) if indexes else None
        return cls(ApiKeys(keys_path) if keys_path else None, JwtVerifier.from_env(env), watch)

    @property
    def anonymous(self) -> bool:
        return self.api_keys is None and self.jwt is None

    def identify(self, authorization: str | None, api_key: str | None) -> Identity:
        """The caller behind these headers, or Unauthenticated with a one-line reason, with
        the latest revocation that hit its groups (admins see everything: none hits them)."""
        identity = self._verified(authorization, api_key)
        if self.revocations is None or identity.admin:
            return identity
        return replace(identity, revoked=self.revocations.stamp(identity.groups))

    def _verified(self, authorization: str | None, api_key: str | None) -> Identity:
        if self.anonymous:
            return ANONYMOUS_IDENTITY
        token = _bearer(authorization) if authorization else (api_key or "").strip()
        if not token:
            raise Unauthenticated(
                "credentials required: send 'Authorization: Bearer <API key or token>' "
                "or 'x-api-key: <API key>'"
            )
        if self.jwt is not None and looks_like_jwt(token):
            return self.jwt.verify(token)
        if self.api_keys is not None:
            return self.api_keys.lookup(token)
        raise Unauthenticated("invalid bearer token")


def _bearer(authorization: str) -> str:
    scheme, _, value = authorization.strip().partition(" ")
    if scheme.lower() != "bearer" or not value.strip():
        raise Unauthenticated("the Authorization header must be 'Bearer <API key or token>'")
    return value.strip()
