"""JSON from files a caller or an attacker may have shaped (index files, the key file)."""

from __future__ import annotations

import json
from typing import Any


def loads(data: str | bytes) -> Any:
    """`json.loads`, but input nested too deeply (100,000 `[` fit under any size cap) is a
    ValueError like any other malformed JSON, not a RecursionError traceback."""
    try:
        return json.loads(data)
    except RecursionError:
        raise ValueError("JSON nested too deeply") from None
