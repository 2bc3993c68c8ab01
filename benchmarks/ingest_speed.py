"""How fast `ingest()` is, against the bare embedder and a plain LangChain peer.

On a subset of the Python documentation HTML (Debian `python3-doc`), each in its own
process so peak memory is per phase:

    ingest    a full `ingest()` into a fresh index (parse, chunk, embed, BM25, write)
    reingest  `ingest()` again with nothing changed
    bare      `MiniLMEmbeddings.embed_array` on exactly the texts the index embedded
    peer      LangChain `FAISS.from_documents` + `BM25Retriever.from_documents` on the
              same texts with the same embeddings (in memory, nothing written)

The model is loaded before each timer starts (its load time is reported on its own), so the
phases compare the same work. Wall and CPU seconds are both reported: on a shared machine
wall time moves with other load, CPU time much less. The full docs are ~29k chunks, about
half an hour per embedding pass on two cores, so the default is the first 40 pages of
`library/` by name (~1,460 chunks). Each of the three embedding phases runs twice,
interleaved, and the faster run counts: about ten minutes in all.

    .venv/bin/python benchmarks/ingest_speed.py [--docs DIR] [--limit N] [--repeat N] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

DEFAULT_DOCS = Path("/usr/share/doc/python3.11/html/library")
DEFAULT_LIMIT = 40
PHASES = ("ingest", "reingest", "bare", "peer")


@contextmanager
def measured(out: dict[str, float], name: str) -> Iterator[None]:
    """Record wall and CPU (user+system, all threads) seconds of the block as name_s/_cpu_s."""
    wall, usage = time.perf_counter(), resource.getrusage(resource.RUSAGE_SELF)
    yield
    after = resource.getrusage(resource.RUSAGE_SELF)
    out[f"{name}_s"] = time.perf_counter() - wall
    out[f"{name}_cpu_s"] = (after.ru_utime - usage.ru_utime) + (after.ru_stime - usage.ru_stime)


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: kB


def phase_ingest(corpus: Path, index: Path) -> dict[str, Any]:
    from footnote.ingest.embeddings import load_embeddings
    from footnote.ingest.pipeline import ingest

    out: dict[str, Any] = {}
    with measured(out, "model_load"):
        model = load_embeddings()
    spent = {"embed_s": 0.0, "embed_cpu_s": 0.0}
    embed_array = model.embed_array

    def timed_embed(texts: Any) -> Any:
        """The model's own time inside ingest, so the rest (parse, chunk, write) is known."""
        part: dict[str, float] = {}
        with measured(part, "embed"):
            vectors = embed_array(texts)
        for key in spent:
            spent[key] += part[key]
        return vectors

    model.embed_array = timed_embed  # type: ignore[method-assign]
    try:
        with measured(out, "ingest"):
            summary = ingest([corpus], index)
    finally:
        del model.embed_array
    out.update(spent)
    out["rest_s"] = out["ingest_s"] - spent["embed_s"]
    out["rest_cpu_s"] = out["ingest_cpu_s"] - spent["embed_cpu_s"]
    out.update(chunks=summary.chunks, embedded=summary.embedded_chunks, failed=summary.failed)
    return out


def phase_reingest(corpus: Path, index: Path) -> dict[str, Any]:
    from footnote.ingest.embeddings import load_embeddings
    from footnote.ingest.pipeline import ingest

    out: dict[str, Any] = {}
    with measured(out, "model_load"):
        load_embeddings()
    with measured(out, "reingest"):
        summary = ingest([corpus], index)
    out.update(unchanged=len(summary.unchanged), embedded=summary.embedded_chunks)
    return out


def _texts(index: Path) -> list[str]:
    from footnote.store.files import load_index
    from footnote.store.text import embedding_text

    return [embedding_text(c) for c in load_index(index).chunks]


def phase_bare(corpus: Path, index: Path) -> dict[str, Any]:
    from footnote.ingest.embeddings import MiniLMEmbeddings

    out: dict[str, Any] = {}
    texts = _texts(index)
    with measured(out, "model_load"):
        model = MiniLMEmbeddings()
    with measured(out, "bare"):
        model.embed_array(texts)
    out["texts"] = len(texts)
    return out


def phase_peer(corpus: Path, index: Path) -> dict[str, Any]:
    import warnings

    from langchain_core.documents import Document

    with warnings.catch_warnings():  # langchain-community announces its own sunset
        warnings.simplefilter("ignore", DeprecationWarning)
        from langchain_community.retrievers import BM25Retriever
        from langchain_community.vectorstores import FAISS

    from footnote.ingest.embeddings import MiniLMEmbeddings

    out: dict[str, Any] = {}
    docs = [Document(page_content=text) for text in _texts(index)]
    with measured(out, "model_load"):
        model = MiniLMEmbeddings()
    with measured(out, "peer_faiss"):
        FAISS.from_documents(docs, model)
    with measured(out, "peer_bm25"):
        BM25Retriever.from_documents(docs)
    out["peer_s"] = out["peer_faiss_s"] + out["peer_bm25_s"]
    out["peer_cpu_s"] = out["peer_faiss_cpu_s"] + out["peer_bm25_cpu_s"]
    return out


RUNNERS: dict[str, Callable[[Path, Path], dict[str, Any]]] = {
    "ingest": phase_ingest,
    "reingest": phase_reingest,
    "bare": phase_bare,
    "peer": phase_peer,
}


def run_phase(name: str, corpus: Path, index: Path) -> dict[str, Any]:
    """Run one phase in a fresh interpreter, so its peak RSS is its own."""
    env = {**os.environ, "TOKENIZERS_PARALLELISM": "false"}
    command = [sys.executable, __file__, "--phase", name, "--corpus", str(corpus)]
    result = subprocess.run(
        [*command, "--index", str(index)], env=env, capture_output=True, text=True, check=False
    )
    if result.returncode != 0:
        raise SystemExit(f"phase {name} failed:\n{result.stderr}")
    return dict(json.loads(result.stdout.splitlines()[-1]))


def select(docs: Path, limit: int) -> list[Path]:
    """HTML pages under docs sorted by relative path, the first `limit` (0: all)."""
    pages = sorted(p for p in docs.rglob("*.html") if p.is_file())
    return pages[:limit] if limit else pages


def best_of(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Fastest time of each measure over the runs (other load only ever adds), largest RSS."""
    best = dict(runs[0])
    for run in runs[1:]:
        for key, value in run.items():
            if key.endswith("_s"):
                best[key] = min(best[key], value)
            elif key == "rss_mb":
                best[key] = max(best[key], value)
    best["peak_rss_mb"] = best.pop("rss_mb")
    return best


def benchmark(docs: Path, limit: int, repeat: int) -> dict[str, Any]:
    pages = select(docs, limit)
    if not pages:
        raise SystemExit(f"no .html files under {docs}")
    work = Path(tempfile.mkdtemp(prefix="footnote-ingest-speed-"))
    try:
        corpus, index = work / "corpus", work / "index"
        for page in pages:
            target = corpus / page.relative_to(docs)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(page, target)
        result: dict[str, Any] = {
            "docs": str(docs),
            "limit": limit,
            "first_file": pages[0].relative_to(docs).as_posix(),
            "last_file": pages[-1].relative_to(docs).as_posix(),
            "files": len(pages),
            "mb": sum(p.stat().st_size for p in pages) / 1e6,
            "cpus": os.cpu_count(),
            "load_before": os.getloadavg()[0],
        }
        runs: dict[str, list[dict[str, Any]]] = {name: [] for name in PHASES}
        # Interleaved repeats: a burst of load from elsewhere hits one run, not one phase.
        for attempt in range(repeat):
            fresh = index if attempt == repeat - 1 else work / f"index-{attempt}"
            runs["ingest"].append(run_phase("ingest", corpus, fresh))
            runs["bare"].append(run_phase("bare", corpus, fresh))
            runs["peer"].append(run_phase("peer", corpus, fresh))
        runs["reingest"].append(run_phase("reingest", corpus, index))
        for name, measured_runs in runs.items():
            result[name] = best_of(measured_runs)
        result["repeat"] = repeat
        result["runs"] = runs
        result["load_after"] = os.getloadavg()[0]
        return result
    finally:
        shutil.rmtree(work, ignore_errors=True)


def derived(r: dict[str, Any]) -> dict[str, float]:
    ingest, bare, peer, again = r["ingest"], r["bare"], r["peer"], r["reingest"]
    return {
        "chunks_per_s": ingest["chunks"] / ingest["ingest_s"],
        "mb_per_s": r["mb"] / ingest["ingest_s"],
        "overhead": ingest["ingest_s"] / bare["bare_s"] - 1,
        "overhead_cpu": ingest["ingest_cpu_s"] / bare["bare_cpu_s"] - 1,
        "rest_share": ingest["rest_cpu_s"] / bare["bare_cpu_s"],
        "vs_peer": ingest["ingest_s"] / peer["peer_s"],
        "vs_peer_cpu": ingest["ingest_cpu_s"] / peer["peer_cpu_s"],
        "reingest_speedup": ingest["ingest_s"] / again["reingest_s"],
        "reingest_speedup_cli": (ingest["ingest_s"] + ingest["model_load_s"])
        / (again["reingest_s"] + again["model_load_s"]),
    }


def markdown(r: dict[str, Any]) -> str:
    d = derived(r)
    ingest, bare, peer, again = r["ingest"], r["bare"], r["peer"], r["reingest"]
    subset = f"first {r['files']} pages" if r["limit"] else f"all {r['files']} pages"
    rows = [
        ("Corpus", f"{r['docs']}: {subset} ({r['first_file']} … {r['last_file']})"),
        ("Files / chunks / MB", f"{r['files']} / {ingest['chunks']} / {r['mb']:.2f}"),
        ("Machine", f"{r['cpus']} CPUs; load average {r['load_before']:.1f} before, "
                    f"{r['load_after']:.1f} after"),
        ("Timing", f"best of {r['repeat']} interleaved runs per phase (re-ingest: one run)"),
        ("Model load (each phase)", f"{ingest['model_load_s']:.2f} s"),
        ("Full ingest", f"{ingest['ingest_s']:.1f} s wall, {ingest['ingest_cpu_s']:.1f} s CPU; "
                        f"peak RSS {ingest['peak_rss_mb']:.0f} MB"),
        ("… of which embedding", f"{ingest['embed_s']:.1f} s wall, "
                                 f"{ingest['embed_cpu_s']:.1f} s CPU"),
        ("… of which the rest (parse, chunk, hash, BM25, write)",
         f"{ingest['rest_s']:.1f} s wall, {ingest['rest_cpu_s']:.1f} s CPU "
         f"({d['rest_share']:.1%} of the bare embedder's CPU time)"),
        ("Throughput", f"{d['chunks_per_s']:.1f} chunks/s, {d['mb_per_s']:.3f} MB/s"),
        ("Bare embedder", f"{bare['bare_s']:.1f} s wall, {bare['bare_cpu_s']:.1f} s CPU; "
                          f"peak RSS {bare['peak_rss_mb']:.0f} MB"),
        ("Overhead over bare embedder", f"{d['overhead']:+.1%} wall, "
                                        f"{d['overhead_cpu']:+.1%} CPU (target < 10%)"),
        ("LangChain peer (FAISS + BM25Retriever)",
         f"{peer['peer_s']:.1f} s wall ({peer['peer_faiss_s']:.1f} + {peer['peer_bm25_s']:.2f}), "
         f"{peer['peer_cpu_s']:.1f} s CPU; peak RSS {peer['peak_rss_mb']:.0f} MB"),
        ("Ingest time / peer time", f"{d['vs_peer']:.2f} wall, {d['vs_peer_cpu']:.2f} CPU "
                                    "(target ≤ 1)"),
        ("No-change re-ingest", f"{again['reingest_s']:.2f} s "
                                f"(+ {again['model_load_s']:.2f} s model load); "
                                f"peak RSS {again['peak_rss_mb']:.0f} MB"),
        ("Full / no-change re-ingest", f"{d['reingest_speedup']:.0f}x; "
                                       f"{d['reingest_speedup_cli']:.0f}x with model load "
                                       "(target ≥ 50x)"),
    ]  # fmt: skip
    lines = ["| Measure | Result |", "|---|---|"]
    lines += [f"| {name} | {value} |" for name, value in rows]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--docs", type=Path, default=DEFAULT_DOCS, help="HTML tree to ingest")
    parser.add_argument(
        "--limit", type=int, default=DEFAULT_LIMIT, help="first N pages by path; 0 for all"
    )
    parser.add_argument(
        "--repeat", type=int, default=2, help="runs of each embedding phase; the best counts"
    )
    parser.add_argument("--json", action="store_true", help="print the raw numbers as JSON")
    parser.add_argument("--phase", choices=PHASES, help=argparse.SUPPRESS)
    parser.add_argument("--corpus", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--index", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)

    if args.phase:
        out = RUNNERS[args.phase](args.corpus, args.index)
        out["rss_mb"] = peak_rss_mb()
        print(json.dumps(out))
        return 0
    result = benchmark(args.docs, args.limit, max(1, args.repeat))
    if args.json:
        print(json.dumps({**result, **derived(result)}, indent=2))
    else:
        print(markdown(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
