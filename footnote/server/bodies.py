"""Request bodies read under a byte limit, for the routes Footnote serves beside the API.

Starlette's `Request.body()` reads the whole body before a route can look at its size, so a
100 MB upload was received in full only to be answered 413. Here a declared Content-Length
over the limit is refused before anything is read, and a body sent without one (chunked) is
read only until it passes the limit.
"""

from __future__ import annotations

from starlette.requests import Request


class BodyTooLarge(Exception):
    """The body is, or says it is, over the limit: answer 413 without reading on."""

    def __init__(self, limit: int) -> None:
        super().__init__(f"request body over {limit} bytes")
        self.limit = limit


async def limited_body(request: Request, limit: int) -> bytes:
    """The request's body, at most `limit` bytes; BodyTooLarge as soon as it is known to be
    longer (from Content-Length, or from what has arrived)."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise BodyTooLarge(limit)
    received = bytearray()
    async for chunk in request.stream():
        received += chunk
        if len(received) > limit:
            raise BodyTooLarge(limit)
    return bytes(received)
