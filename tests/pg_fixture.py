"""A real PostgreSQL (with pgvector) for tests: `footnote.server.local_postgres`, whose fixture
fails loudly when the server cannot start (a PostgreSQL test that silently skipped would hide a
broken backend)."""

from footnote.server.local_postgres import PgServer, server_fixture, start_server, stop_server

__all__ = ["PgServer", "server_fixture", "start_server", "stop_server"]
