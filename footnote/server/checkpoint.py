"""Thread persistence in PostgreSQL for the LangGraph server and for embedded graphs.

The server loads a custom checkpointer from `langgraph.json`:

    "checkpointer": {"path": "./footnote/server/checkpoint.py:server_checkpointer"}

and `server_checkpointer` reads the database from $FOOTNOTE_CHECKPOINT_URL. It can be the
same database as a `postgresql://` index; the saver's own tables (`checkpoints`, ...) are
created by its versioned `setup()`, which is idempotent.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Any

from footnote.store.postgres import (
    PostgresUnavailable,
    _probe,
    parse_location,
    require_driver,
)

CHECKPOINT_URL_ENV = "FOOTNOTE_CHECKPOINT_URL"


def _conninfo(url: str) -> str:
    """Accept an index URL too: its `?index=` part means nothing to the saver."""
    return parse_location(url).conninfo


def check_database(url: str) -> None:
    """Before a server is started on `url`: PostgresDriverMissing naming the extra when the
    saver or psycopg is not installed, PostgresUnavailable naming the URL (password hidden)
    and the driver's reason when the database cannot be reached. The server would otherwise
    exit with a status and a traceback in its log."""
    require_driver("langgraph.checkpoint.postgres")
    try:
        _probe(_conninfo(url))
    except PostgresUnavailable as exc:
        raise PostgresUnavailable(
            f"the checkpoint database (--checkpoint-url) cannot be reached: {exc}"
        ) from exc


@contextmanager
def postgres_checkpointer(url: str) -> Iterator[Any]:
    """A synchronous PostgresSaver with its tables set up, for `make_graph(checkpointer=...)`."""
    from langgraph.checkpoint.postgres import PostgresSaver

    with PostgresSaver.from_conn_string(_conninfo(url)) as saver:
        saver.setup()
        yield saver


@asynccontextmanager
async def server_checkpointer() -> AsyncIterator[Any]:
    """For the LangGraph server: AsyncPostgresSaver on $FOOTNOTE_CHECKPOINT_URL."""
    from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver

    url = os.environ.get(CHECKPOINT_URL_ENV)
    if not url:
        raise RuntimeError(
            f"langgraph.json names the PostgreSQL checkpointer but ${CHECKPOINT_URL_ENV} is "
            "not set: set it to a postgresql:// URL, or remove `checkpointer` from langgraph.json"
        )
    async with AsyncPostgresSaver.from_conn_string(_conninfo(url)) as saver:
        await saver.setup()
        yield saver
