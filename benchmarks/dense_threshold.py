"""Where the file index should switch from exact flat search to IVF: latency of both, by size.

    nice -n 10 .venv/bin/python benchmarks/dense_threshold.py [--rows 10000,30000,100000]

For each size: clustered 384-d unit vectors (as in scale_files.py), an exact `IndexFlatIP`
and the `IndexIVFFlat` the writer builds at that size (sqrt(N) lists, nprobe 32), p50 query
latency of each (unfiltered, k=10, one query at a time) and the IVF's recall@10 against
the exact result. `store.files.DENSE_IVF_FROM` is the size from which IVF pays off.
"""

from __future__ import annotations

import argparse
import json
import time

import faiss
import numpy as np

DIM = 384


def clustered(rng: np.random.Generator, centres: np.ndarray, n: int) -> np.ndarray:
    rows = centres[rng.integers(0, len(centres), n)] + 0.9 * rng.standard_normal((n, DIM))
    return (rows / np.linalg.norm(rows, axis=1, keepdims=True)).astype(np.float32)


def p50_ms(index: faiss.Index, queries: np.ndarray) -> tuple[float, np.ndarray]:
    index.search(queries[:3], 10)  # warm
    seconds, rows = [], []
    for query in queries:
        started = time.perf_counter()
        _, found = index.search(query[None, :], 10)
        seconds.append(time.perf_counter() - started)
        rows.append(found[0])
    return float(np.percentile(np.asarray(seconds) * 1000, 50)), np.asarray(rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", default="10000,30000,100000")
    parser.add_argument("--queries", type=int, default=50)
    args = parser.parse_args(argv)
    faiss.omp_set_num_threads(1)  # one query at a time, as a served search runs
    rng = np.random.default_rng(7)
    centres = rng.standard_normal((1000, DIM))
    queries = clustered(rng, centres, args.queries)
    out = []
    for n in [int(v) for v in args.rows.split(",")]:
        vectors = clustered(rng, centres, n)
        flat = faiss.IndexFlatIP(DIM)
        flat.add(vectors)
        nlist = int(np.sqrt(n))
        ivf = faiss.IndexIVFFlat(faiss.IndexFlatIP(DIM), DIM, nlist, faiss.METRIC_INNER_PRODUCT)
        ivf.train(vectors[rng.choice(n, min(n, 32 * nlist), replace=False)])
        ivf.add(vectors)
        ivf.nprobe = 32
        flat_ms, exact = p50_ms(flat, queries)
        ivf_ms, found = p50_ms(ivf, queries)
        recall = np.mean([len(set(a) & set(b)) / 10 for a, b in zip(found, exact, strict=True)])
        out.append({"rows": n, "flat_p50_ms": flat_ms, "ivf_p50_ms": ivf_ms, "nlist": nlist,
                    "ivf_recall@10": float(recall)})  # fmt: skip
        print(json.dumps(out[-1]), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
