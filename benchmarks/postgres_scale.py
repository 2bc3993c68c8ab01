"""Synthetic scale test of the PostgreSQL backend's vector search: HNSW against exact search.

    python benchmarks/postgres_scale.py [--rows 200000] [--dim 384] [--queries 200] [--url ...]

Loads N random unit vectors (the worst case for HNSW: no cluster structure) into a table
shaped like an index's chunk table, builds the HNSW index (vector_ip_ops, m=16,
ef_construction=64, as `store/postgres.py` does), then for random queries compares the
HNSW top-10 at several ef_search values with the exact top-10: recall@10 and p50/p95
latency (after one warm-up pass per setting), plus the table and index sizes and the
server's resident memory.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from footnote.store.postgres import vector_literal  # noqa: E402

TABLE = "footnote_scale_chunks"


def percentile(values: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(values) * 1000, q * 100))


def server_rss_mb(conn: Any) -> float | None:
    """Resident memory of every server process (postmaster and backends), summed."""
    try:
        import psutil
    except ImportError:
        return None
    pid = conn.execute("SELECT pg_backend_pid()").fetchone()[0]
    try:
        parent = psutil.Process(pid).parent()
        procs = [parent, *parent.children()]
        return sum(p.memory_info().rss for p in procs) / 2**20
    except psutil.Error:
        return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--dim", type=int, default=384)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--ef", default="40,100,400", help="ef_search values to try")
    parser.add_argument(
        "--data",
        choices=["clustered", "random"],
        default="clustered",
        help="clustered: 1,000 topics with noise, like real embeddings; random: uniform on the "
        "sphere, HNSW's worst case",
    )
    parser.add_argument("--url", default=None, help="PostgreSQL URL (default: embedded server)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    import psycopg

    server = None
    if args.url is None:
        sys.path.insert(0, str(HERE.parent / "tests"))
        from pg_fixture import start_server

        server = start_server()
        args.url = server.url
    rng = np.random.default_rng(7)
    centers = rng.standard_normal((1000, args.dim))

    def sample(n: int) -> np.ndarray:
        if args.data == "random":
            block = rng.standard_normal((n, args.dim))
        else:
            block = centers[rng.integers(0, len(centers), n)] + rng.standard_normal((n, args.dim))
        return (block / np.linalg.norm(block, axis=1, keepdims=True)).astype(np.float32)

    out: dict[str, Any] = {
        "rows": args.rows,
        "dim": args.dim,
        "queries": args.queries,
        "data": args.data,
    }
    try:
        # prepare_threshold=None: a plan cached under `enable_indexscan = off` (the exact
        # pass) must not be reused by the HNSW passes.
        with psycopg.connect(args.url, autocommit=True, prepare_threshold=None) as conn:
            conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
            conn.execute(f"DROP TABLE IF EXISTS {TABLE}")
            conn.execute(
                f"CREATE TABLE {TABLE} (row_id bigint PRIMARY KEY, embedding vector({args.dim}))"
            )
            started = time.perf_counter()
            with conn.cursor().copy(f"COPY {TABLE} (row_id, embedding) FROM STDIN") as copy:
                for start in range(0, args.rows, 10_000):
                    for i, vector in enumerate(sample(min(10_000, args.rows - start))):
                        copy.write_row((start + i, vector_literal(vector)))
            out["load_s"] = time.perf_counter() - started
            conn.execute("SET maintenance_work_mem = '2GB'")
            started = time.perf_counter()
            conn.execute(
                f"CREATE INDEX ON {TABLE} USING hnsw (embedding vector_ip_ops) "
                "WITH (m = 16, ef_construction = 64)"
            )
            out["hnsw_build_s"] = time.perf_counter() - started
            conn.execute(f"ANALYZE {TABLE}")
            out["table_mb"] = conn.execute(
                f"SELECT pg_table_size('{TABLE}') / 1048576.0"
            ).fetchone()[0]
            out["hnsw_index_mb"] = conn.execute(
                f"SELECT pg_indexes_size('{TABLE}') / 1048576.0"
            ).fetchone()[0]
            queries = sample(args.queries)
            sql = f"SELECT row_id FROM {TABLE} ORDER BY embedding <#> %s::vector LIMIT 10"
            exact: list[set[int]] = []
            exact_s: list[float] = []
            with conn.transaction():
                conn.execute("SET LOCAL enable_indexscan = off")
                for q in queries:
                    started = time.perf_counter()
                    rows = conn.execute(sql, (vector_literal(q),)).fetchall()
                    exact_s.append(time.perf_counter() - started)
                    exact.append({r[0] for r in rows})
            out["exact"] = {"p50_ms": percentile(exact_s, 0.5), "p95_ms": percentile(exact_s, 0.95)}
            for ef in [int(v) for v in args.ef.split(",")]:
                seconds: list[float] = []
                recall: list[float] = []
                with conn.transaction():
                    conn.execute(f"SET LOCAL hnsw.ef_search = {ef}")
                    conn.execute("SET LOCAL enable_seqscan = off")  # measure HNSW, not a scan
                    for q in queries:  # warm: the index is larger than shared_buffers
                        conn.execute(sql, (vector_literal(q),)).fetchall()
                    for q, truth in zip(queries, exact, strict=True):
                        started = time.perf_counter()
                        rows = conn.execute(sql, (vector_literal(q),)).fetchall()
                        seconds.append(time.perf_counter() - started)
                        recall.append(len({r[0] for r in rows} & truth) / 10)
                out[f"hnsw_ef{ef}"] = {
                    "recall@10": float(np.mean(recall)),
                    "p50_ms": percentile(seconds, 0.5),
                    "p95_ms": percentile(seconds, 0.95),
                }
            out["server_rss_mb"] = server_rss_mb(conn)
            conn.execute(f"DROP TABLE {TABLE}")
    finally:
        if server is not None:
            from pg_fixture import stop_server

            stop_server(server)
    print(json.dumps(out, indent=2, default=float))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
