"""The deployment examples agree with the server they front (deploy/)."""

from __future__ import annotations

import re
from pathlib import Path

from footnote.graph.indexer import MAX_UPLOAD_BYTES

DEPLOY = Path(__file__).resolve().parents[1] / "deploy"
_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30}


def nginx_body_limit() -> int:
    found = re.findall(
        r"client_max_body_size\s+(\d+)([kmg]?);", (DEPLOY / "nginx.conf").read_text()
    )
    assert len(found) == 1, found
    number, unit = found[0]
    return int(number) * _UNITS[unit.lower()]


def test_nginx_lets_the_largest_upload_through_and_little_more() -> None:
    """An upload the indexer takes (MAX_UPLOAD_BYTES once decoded) arrives as base64 in a JSON
    run request, 4/3 its size: nginx must pass it, and refuse bodies far beyond it (so an
    oversized one is refused at the edge, not buffered by a replica)."""
    as_sent = -(-MAX_UPLOAD_BYTES // 3) * 4
    limit = nginx_body_limit()
    assert as_sent + 64 * 1024 <= limit <= as_sent + (4 << 20), (as_sent, limit)
