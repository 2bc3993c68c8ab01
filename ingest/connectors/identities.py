"""Who a source system's readers are in Footnote: the operator's mapping file.

`$FOOTNOTE_IDENTITY_MAP` names a JSON object mapping a source's user or group to a Footnote
name: `{"github:octocat": "alice", "github-team:acme/platform": "engineering"}`. A mapped
user becomes the Footnote identity the server authenticates (its documents carry
`user:alice`); a mapped group becomes that Footnote group. Anything unmapped keeps its
source-qualified name (`user:github:octocat`, `github-team:acme/platform`), which no Footnote
identity or group holds unless the operator gives it that name. The file is read as
untrusted input: anything but an object of non-empty strings is refused, and the sync that
needed it fails with one line rather than guessing who may read what.
"""

from __future__ import annotations

import os
from pathlib import Path

from footnote.ingest.connectors.base import ConnectorError
from footnote.store import jsonfile

IDENTITY_MAP_ENV = "FOOTNOTE_IDENTITY_MAP"
_MAX_BYTES = 5_000_000


class IdentityMap:
    """Source names (`github:login`, `github-team:org/slug`) -> Footnote names."""

    def __init__(self, names: dict[str, str]) -> None:
        self.names = names

    @classmethod
    def from_env(cls) -> IdentityMap:
        """The operator's mapping file, or an empty map when none is set."""
        path = os.environ.get(IDENTITY_MAP_ENV, "")
        return cls.read(Path(path)) if path else cls({})

    @classmethod
    def read(cls, path: Path) -> IdentityMap:
        where = f"${IDENTITY_MAP_ENV} ({path})"
        try:
            with path.open("rb") as handle:
                raw = handle.read(_MAX_BYTES + 1)
        except OSError as exc:
            raise ConnectorError(f"{where}: cannot be read ({exc.strerror})") from None
        if len(raw) > _MAX_BYTES:
            raise ConnectorError(f"{where}: larger than {_MAX_BYTES} bytes")
        try:
            data = jsonfile.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, ValueError) as exc:
            raise ConnectorError(f"{where}: not valid JSON ({exc})") from None
        if not isinstance(data, dict) or not all(
            isinstance(k, str) and ":" in k and isinstance(v, str) and v.strip()
            for k, v in data.items()
        ):
            raise ConnectorError(
                f'{where}: expected an object like {{"github:login": "footnote-user"}} '
                "whose names are non-empty strings"
            )
        return cls(dict(data))

    def user(self, system: str, login: str) -> str:
        """The Footnote identity of `login` on `system`; unmapped: `system:login`."""
        name = f"{system}:{login}"
        return self.names.get(name, name)

    def group(self, kind: str, name: str) -> str:
        """The Footnote group of a source's group; unmapped: `kind:name`."""
        qualified = f"{kind}:{name}"
        return self.names.get(qualified, qualified)
