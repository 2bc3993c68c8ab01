"""The parse worker (`python -m footnote.ingest.isolation_worker MEMORY_MB`): caps its own
address space, then parses each file sent on stdin until stdin closes (see `isolation`).

A parse that runs out of memory fails its file with the reason, and the worker goes on to
the next; one that cannot even report it exits, and the caller reports it. A result longer
than the caller accepts (`reply_limit`) fails here, with its size, rather than crossing.
"""

from __future__ import annotations

import dataclasses
import json
import os
import resource
import sys
from pathlib import Path
from typing import Any

from footnote.ingest.documents import ParseError
from footnote.ingest.isolation import over_memory, read_frame, reply_limit, write_frame
from footnote.ingest.parsers import parse_here


def _ran_out_of_memory(exc: BaseException) -> bool:
    """Whether a parse failed for want of memory: a MemoryError, or libxml2's own
    out-of-memory error, which lxml reports as an XMLSyntaxError ("unknown error")."""
    from lxml import etree

    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, MemoryError) or (
            isinstance(seen, etree.XMLSyntaxError) and seen.code == etree.ErrorTypes.ERR_NO_MEMORY
        ):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def _reply(data: bytes, header: dict[str, Any], memory_mb: int) -> bytes:
    """The parse result as a JSON frame, or the reason the file failed."""
    try:
        doc = parse_here(data, Path(str(header["name"])), str(header["source"]))
        reply = json.dumps({"document": dataclasses.asdict(doc)}).encode()
    except ParseError as exc:
        reason = over_memory(memory_mb) if _ran_out_of_memory(exc) else str(exc)
        return json.dumps({"error": reason}).encode()
    limit = reply_limit(len(data))
    if len(reply) > limit:
        reason = (
            f"parsed text too large: {len(reply):,} bytes from a file of {len(data):,} "
            f"(over {limit:,}; a file that expands this much is refused)"
        )
        return json.dumps({"error": reason}).encode()
    return reply


def serve(memory_mb: int) -> None:
    limit = memory_mb << 20
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    source, sink = sys.stdin.buffer, sys.stdout.buffer
    while True:
        try:
            header = json.loads(read_frame(source, None, limit))
            data = read_frame(source, None, limit)  # more than the cap could never be held
        except EOFError:
            return
        try:
            reply = _reply(data, header, memory_mb)
        except MemoryError:
            os._exit(3)  # the caller reports it: over the memory limit
        del data
        write_frame(sink, reply)


if __name__ == "__main__":
    serve(int(sys.argv[1]))
