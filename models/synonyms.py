"""First-sense WordNet synonyms, stemmed: how a question's word counts as present in a chunk
that says it in another word ("ill" against "sick", "vacation" against "holiday").

The table is built by training/synonyms/build.py from Debian's `wordnet-base` and ships as
package data. Its bytes are checked against `SYNONYMS_SHA256` before they are parsed, so a
tampered or truncated file is refused with one clear error instead of changing what the grader
counts. Only the first sense of each word is kept: the later ones are where "key" meets "name".
"""

from __future__ import annotations

import functools
import gzip
import hashlib
import io
import json
from collections.abc import Collection, Mapping
from importlib import resources
from pathlib import Path

SYNONYMS_FILE = Path(str(resources.files("footnote.models") / "data" / "synonyms.json.gz"))
SYNONYMS_SHA256 = "9845593df349496292e19990c0a0062b7470ae87ce66d2140b260e186390ed5d"
"""The sha256 of the file training/synonyms/build.py writes (it prints it)."""
MAX_UNPACKED_BYTES = 16 * 1024 * 1024
"""The table unpacks to about 1 MB; anything far larger is not the file that was checked."""


class SynonymsError(RuntimeError):
    """The synonym table is missing, damaged, or not the file this code was built with."""


def read_table(path: Path = SYNONYMS_FILE, sha256: str = SYNONYMS_SHA256) -> dict[str, list[str]]:
    """The stem -> synonym stems table, once its bytes match `sha256`."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise SynonymsError(f"cannot read the synonym table {path}: {exc}") from None
    if hashlib.sha256(data).hexdigest() != sha256:
        raise SynonymsError(
            f"the synonym table {path} does not match its checksum (tampered with or "
            "truncated): refusing it; reinstall footnote-rag"
        )
    try:
        with gzip.GzipFile(fileobj=io.BytesIO(data)) as stream:
            raw = stream.read(MAX_UNPACKED_BYTES + 1)
        table = json.loads(raw)["synonyms"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise SynonymsError(f"the synonym table {path} is malformed: {exc}") from None
    valid = (
        len(raw) <= MAX_UNPACKED_BYTES
        and isinstance(table, dict)
        and all(
            isinstance(values, list) and all(isinstance(v, str) for v in values)
            for values in table.values()
        )
    )
    if not valid:
        raise SynonymsError(f"the synonym table {path} is malformed")
    return table


@functools.lru_cache(maxsize=1)
def synonym_table() -> Mapping[str, list[str]]:
    """The shipped table, read and checked once per process."""
    return read_table()


def present_in(token: str, present: Collection[str]) -> bool:
    """Whether a question's keyword stem, or one of its first-sense synonyms, is in `present`."""
    return token in present or any(s in present for s in synonym_table().get(token, ()))
