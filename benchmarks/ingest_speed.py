"""How fast `ingest()` is, against the bare embedder and a plain LangChain peer.

On a subset of the Python documentation HTML (Debian `python3-doc`), each in its own
process so peak memory is per phase:

    ingest    a full `ingest()` into a fresh index (parse, chunk, embed, BM25, write)
    reingest  `ingest()` again with nothing changed
    bare      `MiniLMEmbeddings.embed_array` on exactly the texts the index embedded
    peer      LangChain `FAISS.from_documents` + `BM25Retriever.from_documents` on the
              same texts with the same embeddings (in memory, nothing written)
    peer_job  the whole job the plain LangChain way on the same pages: `BSHTMLLoader`,
              `RecursiveCharacterTextSplitter(1000, 200)`, FAISS with the same embeddings,
              `BM25Retriever`: the peer the ratio target is measured against

The model is loaded before each timer starts (its load time is reported on its own), so the
phases compare the same work. Wall and CPU seconds are both reported: on a shared machine
wall time moves with other load, CPU time much less. The full docs are ~29k chunks, about
half an hour per embedding pass on two cores, so the default is the first 40 pages of
`library/` by name (~1,460 chunks). Each of the three embedding phases runs twice,
interleaved, and the faster run counts: about ten minutes in all.

    .venv/bin/python benchmarks/ingest_speed.py [--docs DIR] [--limit N] [--repeat N] [--json]
        [--phases ingest,peer_job,bare,peer,reingest]

The full ingest is timed step by step in place (read+hash, parse, chunk, tokenise, ONNX
model, pooling, write, the rest), with the share of padding in the model's input.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
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
PHASES = ("ingest", "reingest", "bare", "peer", "peer_job")


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


class StepClock:
    """Exclusive wall and CPU time per named step: entering a step pauses the one around it,
    so nested steps (the chunker counting tokens) are not counted twice."""

    def __init__(self) -> None:
        self.wall: dict[str, float] = {}
        self.cpu: dict[str, float] = {}
        self._stack: list[tuple[str, float, float]] = []

    @staticmethod
    def _now() -> tuple[float, float]:
        return time.perf_counter(), time.process_time()

    def _charge(self, name: str, wall: float, cpu: float) -> None:
        now_wall, now_cpu = self._now()
        self.wall[name] = self.wall.get(name, 0.0) + now_wall - wall
        self.cpu[name] = self.cpu.get(name, 0.0) + now_cpu - cpu

    @contextmanager
    def step(self, name: str) -> Iterator[None]:
        if self._stack:
            outer, wall, cpu = self._stack[-1]
            self._charge(outer, wall, cpu)
        self._stack.append((name, *self._now()))
        try:
            yield
        finally:
            _, wall, cpu = self._stack.pop()
            self._charge(name, wall, cpu)
            if self._stack:
                outer = self._stack.pop()[0]
                self._stack.append((outer, *self._now()))

    def wrap(self, name: str, function: Callable[..., Any]) -> Callable[..., Any]:
        def timed(*args: Any, **kwargs: Any) -> Any:
            with self.step(name):
                return function(*args, **kwargs)

        return timed


class _Proxy:
    """Times chosen methods of an object it stands in for (a tokenizer, an ONNX session)."""

    def __init__(self, target: Any, **methods: Callable[..., Any]) -> None:
        self._target = target
        self.__dict__.update(methods)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._target, name)


INGEST_STEPS = ("read_hash", "parse", "chunk", "tokenise", "model", "pool", "write", "other")


def phase_ingest(corpus: Path, index: Path) -> dict[str, Any]:
    """A full ingest with every step timed in place: read+hash, parse, chunk (splitting),
    tokenise (sizing counts and the model's encodings), model (ONNX run), pool (batching,
    pooling, normalising), write (publish: BM25, FAISS, checksums, files) and the rest."""
    from footnote.ingest import chunking, gather, pipeline, run, version
    from footnote.models.embeddings import load_embeddings

    out: dict[str, Any] = {}
    with measured(out, "model_load"):
        model = load_embeddings()
        model._load()  # the session loads on first use; the steps below wrap it
    clock = StepClock()
    tokens = {"real": 0, "padded": 0, "texts": 0}
    session, tokenizer = model._session, model._tokenizer

    def run_model(outputs: Any, feeds: dict[str, Any]) -> Any:
        mask = feeds["attention_mask"]
        tokens["real"] += int(mask.sum())
        tokens["padded"] += int(mask.size)
        with clock.step("model"):
            return session.run(outputs, feeds)

    def encode_batch(texts: Any, *args: Any) -> Any:
        tokens["texts"] += len(texts)
        with clock.step("tokenise"):
            return tokenizer.encode_batch(texts, *args)

    open_writer = run.open_writer

    def timed_backend(location: Any) -> Any:
        backend = open_writer(location)
        return _Proxy(backend, publish=clock.wrap("write", backend.publish))

    patches = [
        (gather, "parse_bytes", clock.wrap("parse", gather.parse_bytes)),
        (run, "open_writer", timed_backend),
        (chunking.Chunker, "split_document", clock.wrap("chunk", chunking.Chunker.split_document)),
        (model, "count_tokens", clock.wrap("tokenise", model.count_tokens)),
        (model, "embed_array", clock.wrap("pool", model.embed_array)),
        (model, "_session", _Proxy(session, run=run_model)),
        (model, "_tokenizer", _Proxy(tokenizer, encode_batch=encode_batch)),
    ]
    saved = [(owner, name, owner.__dict__.get(name)) for owner, name, _ in patches]
    for owner, name, replacement in patches:
        setattr(owner, name, replacement)
    try:
        with measured(out, "ingest"), clock.step("other"):
            summary = ingest_with_read_timed(pipeline, version, clock, corpus, index)
    finally:
        for owner, name, original in saved:
            if original is None:
                delattr(owner, name)
            else:
                setattr(owner, name, original)
    out["steps_s"] = {name: clock.wall.get(name, 0.0) for name in INGEST_STEPS}
    out["steps_cpu_s"] = {name: clock.cpu.get(name, 0.0) for name in INGEST_STEPS}
    out["embed_s"] = sum(out["steps_s"][n] for n in ("tokenise", "model", "pool"))
    out["embed_cpu_s"] = sum(out["steps_cpu_s"][n] for n in ("tokenise", "model", "pool"))
    out["rest_s"] = out["ingest_s"] - out["embed_s"]
    out["rest_cpu_s"] = out["ingest_cpu_s"] - out["embed_cpu_s"]
    out["tokens"] = tokens
    out["padding_share"] = 1 - tokens["real"] / max(tokens["padded"], 1)
    out.update(chunks=summary.chunks, embedded=summary.embedded_chunks, failed=summary.failed)
    return out


def ingest_with_read_timed(
    pipeline: Any, version: Any, clock: StepClock, corpus: Path, index: Path
) -> Any:
    """Run ingest with file reads and the per-file content hash charged to read_hash."""
    import hashlib

    read_bytes = Path.read_bytes
    Path.read_bytes = clock.wrap("read_hash", read_bytes)  # type: ignore[method-assign]
    version.hashlib = _Proxy(hashlib, sha256=clock.wrap("read_hash", hashlib.sha256))
    try:
        settings = None
        if os.environ.get("FOOTNOTE_BENCH_MERGE") == "1":
            from footnote.ingest.chunking import ChunkSettings

            settings = ChunkSettings(merge_sections=True)
        return pipeline.ingest([corpus], index, settings=settings)
    finally:
        Path.read_bytes = read_bytes  # type: ignore[method-assign]
        version.hashlib = hashlib


def phase_reingest(corpus: Path, index: Path) -> dict[str, Any]:
    from footnote.ingest.pipeline import ingest
    from footnote.models.embeddings import load_embeddings

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
    from footnote.models.embeddings import MiniLMEmbeddings

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

    from footnote.models.embeddings import MiniLMEmbeddings

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


def phase_peer_job(corpus: Path, index: Path) -> dict[str, Any]:
    """The whole job done the plain LangChain way on the same pages: `BSHTMLLoader`,
    `RecursiveCharacterTextSplitter(chunk_size=1000, chunk_overlap=200)` (the RAG tutorial's
    settings), `FAISS.from_documents` with the same MiniLM model, `BM25Retriever`."""
    import warnings

    from langchain_text_splitters import RecursiveCharacterTextSplitter

    with warnings.catch_warnings():  # langchain-community announces its own sunset
        warnings.simplefilter("ignore", DeprecationWarning)
        from langchain_community.document_loaders import BSHTMLLoader
        from langchain_community.retrievers import BM25Retriever
        from langchain_community.vectorstores import FAISS

    from footnote.models.embeddings import MiniLMEmbeddings

    out: dict[str, Any] = {}
    with measured(out, "model_load"):
        model = MiniLMEmbeddings()
    pages = sorted(corpus.rglob("*.html"))
    with measured(out, "peer_job_parse"):
        docs = [d for page in pages for d in BSHTMLLoader(str(page), open_encoding="utf-8").load()]
        splitter = RecursiveCharacterTextSplitter(chunk_size=1000, chunk_overlap=200)
        chunks = splitter.split_documents(docs)
    with measured(out, "peer_job_faiss"):
        FAISS.from_documents(chunks, model)
    with measured(out, "peer_job_bm25"):
        BM25Retriever.from_documents(chunks)
    parts = ("peer_job_parse", "peer_job_faiss", "peer_job_bm25")
    out["peer_job_s"] = sum(out[f"{name}_s"] for name in parts)
    out["peer_job_cpu_s"] = sum(out[f"{name}_cpu_s"] for name in parts)
    out["chunks"] = len(chunks)
    out["tokens"] = sum(min(model.count_tokens(c.page_content), 256) for c in chunks)
    return out


RUNNERS: dict[str, Callable[[Path, Path], dict[str, Any]]] = {
    "ingest": phase_ingest,
    "reingest": phase_reingest,
    "bare": phase_bare,
    "peer": phase_peer,
    "peer_job": phase_peer_job,
}


def run_phase(name: str, corpus: Path, index: Path) -> dict[str, Any]:
    """Run one phase in a fresh interpreter, so its peak RSS is its own; `process_s` and
    `process_cpu_s` are the whole process's (start, imports, model load, the work, exit)."""
    env = {**os.environ, "TOKENIZERS_PARALLELISM": "false"}
    command = [sys.executable, __file__, "--phase", name, "--corpus", str(corpus)]
    before, started = resource.getrusage(resource.RUSAGE_CHILDREN), time.perf_counter()
    result = subprocess.run(
        [*command, "--index", str(index)], env=env, capture_output=True, text=True, check=False
    )
    wall, after = time.perf_counter() - started, resource.getrusage(resource.RUSAGE_CHILDREN)
    if result.returncode != 0:
        raise SystemExit(f"phase {name} failed:\n{result.stderr}")
    out = dict(json.loads(result.stdout.splitlines()[-1]))
    out["process_s"] = wall
    out["process_cpu_s"] = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return out


def median_pair_ratios(r: dict[str, Any]) -> dict[str, float]:
    """Median over the interleaved pairs of ingest / whole-job peer, whole process, wall and
    CPU: each pair ran back to back, so a burst of load from elsewhere hits both or one pair."""
    pairs = list(zip(r["runs"]["ingest"], r["runs"]["peer_job"], strict=False))
    return {
        "pairs": len(pairs),
        "median_process_s": statistics.median(a["process_s"] for a, _ in pairs),
        "median_peer_process_s": statistics.median(b["process_s"] for _, b in pairs),
        "median_ratio_wall": statistics.median(a["process_s"] / b["process_s"] for a, b in pairs),
        "median_ratio_cpu": statistics.median(
            a["process_cpu_s"] / b["process_cpu_s"] for a, b in pairs
        ),
        "ratios_wall": [round(a["process_s"] / b["process_s"], 3) for a, b in pairs],
        "ratios_cpu": [round(a["process_cpu_s"] / b["process_cpu_s"], 3) for a, b in pairs],
    }


def select(docs: Path, limit: int) -> list[Path]:
    """HTML pages under docs sorted by relative path, the first `limit` (0: all)."""
    pages = sorted(p for p in docs.rglob("*.html") if p.is_file())
    return pages[:limit] if limit else pages


def best_of(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Fastest time of each measure over the runs (other load only ever adds), largest RSS."""
    best = dict(runs[0])
    if "ingest_s" in best:  # the step breakdown is the fastest run's own, not mixed
        fastest = min(runs, key=lambda run: run["ingest_s"])
        best.update(steps_s=fastest["steps_s"], steps_cpu_s=fastest["steps_cpu_s"])
    for run in runs[1:]:
        for key, value in run.items():
            if key.endswith("_s") and not isinstance(value, dict):
                best[key] = min(best[key], value)
            elif key == "rss_mb":
                best[key] = max(best[key], value)
    best["peak_rss_mb"] = best.pop("rss_mb")
    return best


def benchmark(docs: Path, limit: int, repeat: int, phases: list[str]) -> dict[str, Any]:
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
        runs: dict[str, list[dict[str, Any]]] = {name: [] for name in phases}
        # Interleaved repeats: a burst of load from elsewhere hits one run, not one phase.
        for attempt in range(repeat):
            fresh = index if attempt == repeat - 1 else work / f"index-{attempt}"
            for name in ("ingest", "peer_job", "bare", "peer"):
                if name in phases:
                    runs[name].append(run_phase(name, corpus, fresh))
        if "reingest" in phases:
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
    ingest = r["ingest"]
    out = {
        "chunks_per_s": ingest["chunks"] / ingest["ingest_s"],
        "mb_per_s": r["mb"] / ingest["ingest_s"],
    }
    if "peer_job" in r:
        out.update(median_pair_ratios(r))
        out["vs_peer_job"] = ingest["ingest_s"] / r["peer_job"]["peer_job_s"]
        out["vs_peer_job_cpu"] = ingest["ingest_cpu_s"] / r["peer_job"]["peer_job_cpu_s"]
    if "bare" in r:
        bare = r["bare"]
        out["overhead"] = ingest["ingest_s"] / bare["bare_s"] - 1
        out["overhead_cpu"] = ingest["ingest_cpu_s"] / bare["bare_cpu_s"] - 1
        out["rest_share"] = ingest["rest_cpu_s"] / bare["bare_cpu_s"]
    if "peer" in r:
        out["vs_peer"] = ingest["ingest_s"] / r["peer"]["peer_s"]
        out["vs_peer_cpu"] = ingest["ingest_cpu_s"] / r["peer"]["peer_cpu_s"]
    if "reingest" in r:
        again = r["reingest"]
        out["reingest_speedup"] = ingest["ingest_s"] / again["reingest_s"]
        out["reingest_speedup_cli"] = (ingest["ingest_s"] + ingest["model_load_s"]) / (
            again["reingest_s"] + again["model_load_s"]
        )
    return out


def markdown(r: dict[str, Any]) -> str:
    d = derived(r)
    ingest = r["ingest"]
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
        ("… of which embedding (tokenise, model, pool)",
         f"{ingest['embed_s']:.1f} s wall, {ingest['embed_cpu_s']:.1f} s CPU"),
        ("… of which the rest (read, parse, chunk, BM25, write)",
         f"{ingest['rest_s']:.1f} s wall, {ingest['rest_cpu_s']:.1f} s CPU"),
        ("Throughput", f"{d['chunks_per_s']:.1f} chunks/s, {d['mb_per_s']:.3f} MB/s"),
    ]  # fmt: skip
    if "peer_job" in r:
        job = r["peer_job"]
        rows += [
            ("LangChain peer, whole job (BSHTMLLoader, 1000-char splitter, FAISS, BM25)",
             f"{job['peer_job_s']:.1f} s wall (parse+split {job['peer_job_parse_s']:.1f}, "
             f"embed+FAISS {job['peer_job_faiss_s']:.1f}, BM25 {job['peer_job_bm25_s']:.2f}), "
             f"{job['peer_job_cpu_s']:.1f} s CPU; {job['chunks']} chunks, "
             f"{job['tokens']:,} tokens embedded; peak RSS {job['peak_rss_mb']:.0f} MB"),
            ("Ingest time / whole-job peer time",
             f"{d['vs_peer_job']:.2f} wall, {d['vs_peer_job_cpu']:.2f} CPU (target ≤ 1)"),
            (f"Whole process, median of {d['pairs']} interleaved pairs",
             f"ours {d['median_process_s']:.1f} s, peer {d['median_peer_process_s']:.1f} s; "
             f"ratio {d['median_ratio_wall']:.2f} wall, {d['median_ratio_cpu']:.2f} CPU "
             f"(pairs: wall {d['ratios_wall']}, CPU {d['ratios_cpu']})"),
            ("Ours: chunks, tokens embedded",
             f"{ingest['chunks']} chunks, {ingest['tokens']['real']:,} tokens"),
        ]  # fmt: skip
    if "bare" in r:
        bare = r["bare"]
        rows += [
            ("Bare embedder (our chunks)", f"{bare['bare_s']:.1f} s wall, "
             f"{bare['bare_cpu_s']:.1f} s CPU; peak RSS {bare['peak_rss_mb']:.0f} MB"),
            ("Overhead over bare embedder", f"{d['overhead']:+.1%} wall, "
             f"{d['overhead_cpu']:+.1%} CPU"),
        ]  # fmt: skip
    if "peer" in r:
        peer = r["peer"]
        rows += [
            ("LangChain peer on our chunk texts (FAISS + BM25Retriever)",
             f"{peer['peer_s']:.1f} s wall ({peer['peer_faiss_s']:.1f} + "
             f"{peer['peer_bm25_s']:.2f}), {peer['peer_cpu_s']:.1f} s CPU"),
            ("Ingest time / peer time on our chunks",
             f"{d['vs_peer']:.2f} wall, {d['vs_peer_cpu']:.2f} CPU"),
        ]  # fmt: skip
    if "reingest" in r:
        again = r["reingest"]
        rows += [
            ("No-change re-ingest", f"{again['reingest_s']:.2f} s "
             f"(+ {again['model_load_s']:.2f} s model load)"),
            ("Full / no-change re-ingest", f"{d['reingest_speedup']:.0f}x; "
             f"{d['reingest_speedup_cli']:.0f}x with model load"),
        ]  # fmt: skip
    lines = ["| Measure | Result |", "|---|---|"]
    lines += [f"| {name} | {value} |" for name, value in rows]
    lines += ["", "| Ingest step | wall s | CPU s | share of wall |", "|---|---:|---:|---:|"]
    for name in INGEST_STEPS:
        wall, cpu = ingest["steps_s"][name], ingest["steps_cpu_s"][name]
        lines.append(f"| {name} | {wall:.1f} | {cpu:.1f} | {wall / ingest['ingest_s']:.1%} |")
    tokens = ingest["tokens"]
    lines.append(
        f"| (padding) | {tokens['padded'] - tokens['real']:,} of {tokens['padded']:,} token "
        f"slots | | {ingest['padding_share']:.1%} of model input |"
    )
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
    parser.add_argument(
        "--phases",
        default=",".join(PHASES),
        help="comma-separated phases to run (default: all); ingest always runs",
    )
    parser.add_argument("--json", action="store_true", help="print the raw numbers as JSON")
    parser.add_argument(
        "--merge-sections",
        action="store_true",
        help="ingest with ChunkSettings(merge_sections=True) (small sections joined)",
    )
    parser.add_argument("--phase", choices=PHASES, help=argparse.SUPPRESS)
    parser.add_argument("--corpus", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--index", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)

    if args.phase:
        out = RUNNERS[args.phase](args.corpus, args.index)
        out["rss_mb"] = peak_rss_mb()
        print(json.dumps(out))
        return 0
    if args.merge_sections:
        os.environ["FOOTNOTE_BENCH_MERGE"] = "1"  # the phase processes inherit it
    phases = sorted({"ingest", *args.phases.split(",")} & set(PHASES))
    result = benchmark(args.docs, args.limit, max(1, args.repeat), phases)
    if args.json:
        print(json.dumps({**result, **derived(result)}, indent=2))
    else:
        print(markdown(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
