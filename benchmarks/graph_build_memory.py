"""What building the entity graph costs the files writer: the graph step alone
(`GraphBuilder.finish` over a finished chunk database) on synthetic team-document chunks that
hold what the extractor finds (capitalised names, code identifiers, noun phrases between
stopwords, titles of other documents), their number growing with the corpus; its time and its
peak RSS above what the process held before (the peak is reset first, /proc/self/clear_refs),
in a fresh interpreter per size.

    nice -n 10 .venv/bin/python benchmarks/graph_build_memory.py --rows 20000 40000 [--json]

Prints one line per size (or one JSON list): rows, entities, mentions, pairs, seconds,
peak_rss_mb (the whole process), graph_rss_mb (peak minus the RSS before the step). The
step's growth with the corpus is what says whether it is bounded: edges are numpy arrays
(a few bytes each), entities one dictionary entry each.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

SEED = 7
WORDS = 20_000
NAMES_PER_ROW = 0.5
"""Distinct capitalised names (and as many codes) per chunk of the corpus."""
SOURCES_PER_ROW = 0.02


def status_mb(field: str) -> float:
    with open("/proc/self/status", encoding="utf-8") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    return 0.0


def chunk_dicts(rows: int, start: int, stop: int) -> list[dict[str, Any]]:
    """Rows start..stop: six sentences each, with names, codes, phrases and a title link."""
    rng = np.random.default_rng([SEED, start])
    names, sources = max(10, int(rows * NAMES_PER_ROW)), max(2, int(rows * SOURCES_PER_ROW))
    out = []
    for row in range(start, stop):
        source = row * sources // rows
        sentences = []
        for _ in range(6):
            first, second, code = rng.integers(0, names, 3)
            w = rng.zipf(1.3, 4) % WORDS
            other = int(rng.integers(0, sources))
            sentences.append(
                f"The Team Alder{first} Birch{second} runs `svc_{code}_job` for w{w[0]} w{w[1]} "
                f"of the w{w[2]} w{w[3]} as Document {other} says."
            )
        access = [["everyone"], ["engineering"], ["finance"]][source % 3]
        out.append({"id": f"doc{source}.md#part:{row}", "text": " ".join(sentences),
                    "source": f"doc{source}.md", "title": f"Document {source}",
                    "section": f"Part {row % 7}", "access": access})  # fmt: skip
    return out


def measure(rows: int) -> dict[str, Any]:
    from footnote.store.chunkdb import ChunkDbWriter, ChunkTable
    from footnote.store.graph_files import GraphBuilder
    from footnote.store.types import Chunk

    with tempfile.TemporaryDirectory(prefix="footnote-graph-mem-") as work:
        db = Path(work) / "chunks.sqlite"
        writer = ChunkDbWriter(db)
        builder = GraphBuilder()
        for start in range(0, rows, 5000):
            chunks = [Chunk(**d) for d in chunk_dicts(rows, start, min(start + 5000, rows))]
            writer.add(chunks)
            builder.add(chunks)
        writer.close()
        table = ChunkTable(db, rows)
        before = status_mb("VmRSS")
        Path("/proc/self/clear_refs").write_text("5")  # the peak starts again from here
        started = time.perf_counter()
        entry = builder.finish(Path(work) / "graph", table, 2048)
        seconds = time.perf_counter() - started
        table.close()
        peak = status_mb("VmHWM")
    return {"rows": rows, "entities": entry["entities"], "mentions": entry["mentions"],
            "pairs": entry["pairs"], "seconds": round(seconds, 1),
            "peak_rss_mb": round(peak), "graph_rss_mb": round(peak - before)}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, nargs="+", default=[20_000, 40_000])
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--one", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print(json.dumps(measure(args.one)))
        return
    results = []
    for rows in args.rows:
        done = subprocess.run([sys.executable, __file__, "--one", str(rows)], check=True,
                              capture_output=True, text=True)  # fmt: skip
        results.append(json.loads(done.stdout.strip().splitlines()[-1]))
        if not args.json:
            print(json.dumps(results[-1]), flush=True)
    if args.json:
        print(json.dumps(results))


if __name__ == "__main__":
    main()
