"""Provider embeddings throughput by number of concurrent requests, against the loopback
stub embeddings server (tests/stub_embeddings.py) with a fixed latency per request:

    .venv/bin/python benchmarks/provider_concurrency.py [--texts 1024] [--batch 32]
        [--latency 0.25] [--concurrency 1 2 4 8] [--rate-limited 0] [--json]

Each row embeds the same texts through `ProviderEmbeddings` (the real openai client inside
langchain-openai, over HTTP) and reports texts per second. With `--rate-limited N` the first
N requests of each row get HTTP 429 with Retry-After: 1.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from langchain.embeddings import init_embeddings  # noqa: E402

from footnote.models.embeddings import (  # noqa: E402
    ProviderEmbeddings,
    ProviderSettings,
    _client_options,
)
from tests.stub_embeddings import StubEmbeddings  # noqa: E402

SPEC = "openai:stub-embed"


def run(texts: int, batch: int, latency: float, concurrency: int, limited: int) -> dict:
    os.environ.setdefault("OPENAI_API_KEY", "sk-benchmark")
    with StubEmbeddings(latency=latency) as stub:
        settings = ProviderSettings(batch_size=batch, concurrency=concurrency)
        model = init_embeddings(SPEC, base_url=stub.base_url, **_client_options(SPEC, settings))
        embedder = ProviderEmbeddings(SPEC, model, settings)
        stub.rate_limited = limited
        inputs = [f"passage {i}: " + "words " * 40 for i in range(texts)]
        started = time.perf_counter()
        vectors = embedder.embed_array(inputs)
        seconds = time.perf_counter() - started
        assert vectors.shape[0] == texts
        statuses = [status for _, status, _ in stub.requests[1:]]
    return {
        "concurrency": concurrency,
        "seconds": round(seconds, 3),
        "texts_per_s": round(texts / seconds, 1),
        "requests": len(statuses),
        "http_429": statuses.count(429),
        "max_in_flight": stub.max_in_flight,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--texts", type=int, default=1024)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--latency", type=float, default=0.25)
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 2, 4, 8])
    parser.add_argument("--rate-limited", type=int, default=0)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    rows = [
        run(args.texts, args.batch, args.latency, c, args.rate_limited) for c in args.concurrency
    ]
    if args.json:
        print(json.dumps(rows, indent=2))
        return
    print(f"{args.texts} texts, {args.batch} per request, {args.latency:.2f} s per request")
    print("| concurrency | seconds | texts/s | requests | 429s | max in flight |")
    print("|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print(
            f"| {r['concurrency']} | {r['seconds']:.2f} | {r['texts_per_s']:.0f} | "
            f"{r['requests']} | {r['http_429']} | {r['max_in_flight']} |"
        )


if __name__ == "__main__":
    main()
