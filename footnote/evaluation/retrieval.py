"""`footnote eval`: measure every retrieval stage on a BEIR-layout dataset.

The corpus goes through the normal ingest pipeline (each passage written as a small Markdown
file, `# title` then text), so the numbers describe what `footnote search` and `footnote ask`
actually retrieve, chunking and keyword tokenizer included. Ingest is incremental, so a second
run reuses the cached index and embeds nothing. Metrics come from ranx, not hand-written code.

Stages are plain callables (query -> ranked chunk hits), keyed by name, so experimental
variants and peer systems can be measured by the same loop without editing this module.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
import time
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from footnote.progress import ProgressPrinter
from footnote.store.backends import is_postgres
from footnote.store.types import Caller, Hit, IndexError_
from footnote.tools.stages import STAGES

if TYPE_CHECKING:
    from footnote.ingest.pipeline import IngestSummary, Progress
    from footnote.tools.rerank import Reranker
    from footnote.tools.retrieval import Retriever

# The retrieval and ingest modules (faiss, onnxruntime, langchain) load inside the functions
# that use them: the command line builds its parser from this module and must start fast.

StageRunner = Callable[[str], Sequence[Hit]]
"""One retrieval stage under test: a query in, chunk hits out, best first."""

METRICS: tuple[str, ...] = ("recall@1", "recall@5", "recall@10", "recall@50", "mrr@10", "ndcg@10")
DEFAULT_DEPTH = 100
CACHE_DIR = ".footnote-cache"
INDEX_DIR = ".footnote-index"
EVAL_MARKER = "footnote-eval.json"
"""Written into an index this harness owns; ingest would replace any other index's corpus."""

_MARKDOWN_SYNTAX = re.compile(r"^ {0,3}(#{1,6}(\s|$)|`{3,}|~{3,}|-{3,}\s*$|={3,}\s*$)")


@dataclass
class BeirDataset:
    """A BEIR dataset: corpus passages, the queries that have judgements, and the judgements."""

    name: str
    corpus: dict[str, dict[str, str]]
    queries: dict[str, str]
    qrels: dict[str, dict[str, int]]


@dataclass
class PreparedIndex:
    """A dataset ingested into an index, with the way back from chunk sources to corpus ids."""

    dataset: BeirDataset
    index_dir: str | Path
    """A directory, or a `postgresql://` URL."""
    source_to_id: dict[str, str]
    summary: IngestSummary


@dataclass
class _StageRun:
    run: dict[str, dict[str, float]] = field(default_factory=dict)
    seconds: list[float] = field(default_factory=list)


def _read_jsonl(path: Path) -> list[dict[str, Any]]:
    with path.open(encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]


def load_beir(dataset_dir: str | Path, split: str = "test") -> BeirDataset:
    """Read corpus.jsonl, queries.jsonl and qrels/<split>.tsv; only judged queries are kept."""
    root = Path(dataset_dir)
    for needed in ("corpus.jsonl", "queries.jsonl", f"qrels/{split}.tsv"):
        if not (root / needed).is_file():
            raise FileNotFoundError(f"{root} is not a BEIR dataset: {needed} is missing")
    corpus = {
        str(row["_id"]): {"title": str(row.get("title") or ""), "text": str(row.get("text") or "")}
        for row in _read_jsonl(root / "corpus.jsonl")
    }
    qrels: dict[str, dict[str, int]] = {}
    with (root / "qrels" / f"{split}.tsv").open(encoding="utf-8") as handle:
        for number, line in enumerate(handle):
            parts = line.rstrip("\n").split("\t")
            if len(parts) < 3 or (number == 0 and parts[0] == "query-id"):
                continue
            score = int(float(parts[2]))
            if score > 0:
                qrels.setdefault(parts[0], {})[parts[1]] = score
    queries = {
        str(row["_id"]): str(row["text"])
        for row in _read_jsonl(root / "queries.jsonl")
        if str(row["_id"]) in qrels
    }
    qrels = {qid: judged for qid, judged in qrels.items() if qid in queries}
    return BeirDataset(name=root.resolve().name, corpus=corpus, queries=queries, qrels=qrels)


def passage_filename(doc_id: str) -> str:
    """A safe, stable, readable file name per corpus id; the hash keeps distinct ids distinct."""
    readable = re.sub(r"[^A-Za-z0-9_-]+", "-", doc_id).strip("-")[:80] or "doc"
    digest = hashlib.sha1(doc_id.encode("utf-8")).hexdigest()[:10]
    return f"{readable}-{digest}.md"


def render_passage(doc_id: str, title: str, text: str) -> str:
    """Title as the one heading, then the text; lines Markdown would read as structure
    (a `# comment` in code, a fence, a rule) are indented so the passage stays one section."""
    heading = " ".join(title.split()) or doc_id
    body = "\n".join(
        f"    {line}" if _MARKDOWN_SYNTAX.match(line) else line for line in text.splitlines()
    )
    return f"# {heading}\n\n{body.strip()}\n"


def write_passages(dataset: BeirDataset, docs_dir: Path) -> dict[str, str]:
    """Mirror the corpus as Markdown files, touching only what changed; returns source -> id."""
    docs_dir.mkdir(parents=True, exist_ok=True)
    source_to_id: dict[str, str] = {}
    for doc_id, doc in dataset.corpus.items():
        name = passage_filename(doc_id)
        source_to_id[name] = doc_id
        path = docs_dir / name
        content = render_passage(doc_id, doc["title"], doc["text"])
        if not path.is_file() or path.read_text(encoding="utf-8") != content:
            path.write_text(content, encoding="utf-8")
    for stale in docs_dir.glob("*.md"):
        if stale.name not in source_to_id:
            stale.unlink()
    return source_to_id


def _check_owned(index: str | Path, dataset_dir: Path, passages: set[str]) -> None:
    """Refuse to ingest into an index this harness did not create: it would lose its corpus.

    A directory carries a marker file; a database index is ours when it is empty or holds
    nothing but this dataset's passage files.
    """
    from footnote.store.backends import open_writer

    if is_postgres(index):
        previous = open_writer(index).previous()
        if previous is not None and not set(previous.files) <= passages:
            raise IndexError_(
                f"{index} holds documents that are not this benchmark's passages; evaluating "
                "into it would replace them. Choose another ?index= name"
            )
        return
    index_dir = Path(index)
    marker = index_dir / EVAL_MARKER
    if os.path.lexists(index_dir / "CURRENT") and not marker.is_file():
        raise IndexError_(
            f"{index_dir} holds an index that `footnote eval` did not build; evaluating into it "
            "would replace its documents with the benchmark corpus. Choose another --index"
        )
    index_dir.mkdir(parents=True, exist_ok=True)
    marker.write_text(json.dumps({"dataset": str(dataset_dir.resolve())}) + "\n", "utf-8")


def _forget_other_roots(index: str | Path, docs_dir: Path) -> None:
    """The index holds this dataset's passages and nothing else: a dataset reached by
    another path (copied with its index, or through a symlink) would otherwise be added as a
    second root beside the first, its passages twice. The other roots are removed first; the
    embedding cache spares re-embedding what they held."""
    from footnote.ingest.corpus import remove
    from footnote.ingest.roots import read_roots, root_for
    from footnote.store.backends import open_writer

    live = open_writer(index).previous()
    ours = root_for(docs_dir).id
    others = [r.id for r in read_roots(live.manifest if live else None) if r.id != ours]
    if others:
        remove(index, others)


def eval_workspace(dataset_dir: str | Path) -> Path:
    """Where `footnote eval` keeps a dataset's passages and index: one folder per dataset path
    in the user's state folder, so evaluating a dataset that lives in a checkout
    (tests/fixtures/beir_tiny) writes nothing into the checkout."""
    from footnote.store.private import state_dir

    root = Path(dataset_dir).resolve()
    digest = hashlib.sha256(str(root).encode("utf-8")).hexdigest()[:12]
    return state_dir() / "eval" / f"{root.name}-{digest}"


def prepare_index(
    dataset_dir: str | Path,
    index_dir: str | Path | None = None,
    *,
    progress: Progress | None = None,
    workspace: str | Path | None = None,
) -> PreparedIndex:
    """Load the dataset and bring its index up to date (a no-op re-hash when nothing changed).

    The passages and the index go under `workspace` (default: the dataset folder itself)."""
    root = Path(dataset_dir)
    dataset = load_beir(root)
    work = Path(workspace) if workspace else root
    target: str | Path = work / INDEX_DIR
    if index_dir:
        target = str(index_dir) if is_postgres(index_dir) else Path(index_dir)
    _check_owned(target, root, {passage_filename(doc_id) for doc_id in dataset.corpus})
    docs_dir = work / CACHE_DIR / "docs"
    source_to_id = write_passages(dataset, docs_dir)
    (work / CACHE_DIR / "sources.json").write_text(
        json.dumps(source_to_id, indent=1, sort_keys=True, ensure_ascii=False) + "\n", "utf-8"
    )
    from footnote.ingest.pipeline import ingest

    _forget_other_roots(target, docs_dir)
    summary = ingest([docs_dir], target, progress=progress)
    return PreparedIndex(
        dataset=dataset, index_dir=target, source_to_id=source_to_id, summary=summary
    )


def default_runners(
    retriever: Retriever[Any],
    stages: Sequence[str] = STAGES,
    k: int = DEFAULT_DEPTH,
    reranker: Reranker | None = None,
) -> dict[str, StageRunner]:
    """Footnote's own stages, searched as an admin with no filters (every chunk is eligible);
    `reranker` reorders the pipeline stage as `--reranker` does for `footnote ask`."""
    from footnote.tools.search import run_stage

    mask = retriever.mask(Caller.operator())
    unknown = [s for s in stages if s not in STAGES]
    if unknown:
        raise ValueError(f"unknown stage(s) {unknown}; known: {', '.join(STAGES)}")

    def runner(stage: Any) -> StageRunner:
        return lambda query: run_stage(retriever, query, k, mask, stage, reranker=reranker)

    return {stage: runner(stage) for stage in stages}


def rank_documents(
    hits: Sequence[Hit], source_to_id: Mapping[str, str], k: int = DEFAULT_DEPTH
) -> dict[str, float]:
    """Chunk ranking -> document ranking: a document ranks where its best chunk ranks.

    Scores are rank-derived (strictly decreasing), so stages with incomparable raw scores
    are judged on order alone, which is all the metrics read.
    """
    ranked: dict[str, float] = {}
    for hit in hits[:k]:
        doc_id = source_to_id.get(hit.chunk.source)
        if doc_id is not None and doc_id not in ranked:
            ranked[doc_id] = float(k - len(ranked))
    return ranked


def _ranx_scores(
    qrels: dict[str, dict[str, int]], run: dict[str, dict[str, float]], metrics: Sequence[str]
) -> dict[str, float]:
    from ranx import Qrels, Run, evaluate

    answered = {qid: docs for qid, docs in run.items() if docs}
    if not answered:  # ranx cannot hold an empty run; nothing retrieved scores zero
        return dict.fromkeys(metrics, 0.0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        # make_comparable: queries a stage returned nothing for count as misses.
        scores = evaluate(Qrels(qrels), Run(answered), list(metrics), make_comparable=True)
    if isinstance(scores, dict):
        return {name: float(value) for name, value in scores.items()}
    return {metrics[0]: float(scores)}


def evaluate_stages(
    dataset_dir: str | Path,
    index_dir: str | Path | None = None,
    stages: Sequence[str] | None = None,
    k: int = DEFAULT_DEPTH,
    *,
    runners: Mapping[str, StageRunner] | None = None,
    prepared: PreparedIndex | None = None,
    limit_queries: int | None = None,
    curve_depth: int = 0,
    progress: bool = True,
    reranker: str = "none",
    chat_model: Any = None,
    workspace: str | Path | None = None,
) -> dict[str, Any]:
    """Ingest (cached; under `workspace`, see `prepare_index`), run every stage on every
    query, score with ranx.

    `stages` names what to measure (default: all of `tools.retrieval.STAGES`, then any extra
    `runners`); a name found in `runners` uses that callable, any other must be a built-in
    stage. With `curve_depth` > 0 the result also holds recall@1..curve_depth per stage.
    `reranker` (and the `chat_model` the llm reranker asks) reorders the pipeline stage.
    """
    report = ProgressPrinter(quiet=not progress)
    if prepared is None:
        prepared = prepare_index(dataset_dir, index_dir, progress=report, workspace=workspace)
    runners = dict(runners or {})
    names = list(stages) if stages else [*STAGES, *(n for n in runners if n not in STAGES)]
    builtin = [n for n in names if n not in runners]
    if builtin:
        from footnote.tools.rerank import make_reranker
        from footnote.tools.retrieval import get_retriever

        retriever = get_retriever(prepared.index_dir)
        pipeline_reranker = make_reranker(reranker, retriever.embeddings, chat_model)
        runners.update(default_runners(retriever, builtin, k, pipeline_reranker))
    dataset = prepared.dataset
    queries = list(dataset.queries.items())[:limit_queries]
    qrels = {qid: dataset.qrels[qid] for qid, _ in queries}
    results: dict[str, _StageRun] = {}
    for name in names:
        runner = runners[name]
        measured = results[name] = _StageRun()
        if queries:
            runner(queries[0][1])  # warm-up, so a lazy model load is not counted as latency
        for done, (qid, query) in enumerate(queries, 1):
            started = time.perf_counter()
            hits = runner(query)
            measured.seconds.append(time.perf_counter() - started)
            measured.run[qid] = rank_documents(hits, prepared.source_to_id, k)
            report(name, done, len(queries))

    out: dict[str, Any] = {
        "dataset": dataset.name,
        "queries": len(queries),
        "corpus": len(dataset.corpus),
        "index": {
            "path": str(prepared.index_dir),
            "chunks": prepared.summary.chunks,
            "embedded_chunks": prepared.summary.embedded_chunks,
            "failed": len(prepared.summary.failed),
        },
        "stages": {},
    }
    curves: dict[str, list[float]] = {}
    for name, measured in results.items():
        scores = (
            _ranx_scores(qrels, measured.run, METRICS) if queries else dict.fromkeys(METRICS, 0.0)
        )
        latency = 1000 * sum(measured.seconds) / max(1, len(measured.seconds))
        out["stages"][name] = {**scores, "latency_ms": round(latency, 3)}
        if curve_depth > 0 and queries:
            cutoffs = [f"recall@{i}" for i in range(1, curve_depth + 1)]
            at = _ranx_scores(qrels, measured.run, cutoffs)
            curves[name] = [at[c] for c in cutoffs]
    if curve_depth > 0:
        out["recall_curves"] = curves
    return out


def markdown_table(result: Mapping[str, Any]) -> str:
    """The result as a Markdown table, one row per stage."""
    header = "| stage | R@1 | R@5 | R@10 | R@50 | MRR@10 | nDCG@10 | ms/query |"
    lines = [
        f"{result['dataset']}: {result['queries']} queries, {result['corpus']} passages",
        "",
        header,
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name, scores in result["stages"].items():
        cells = " | ".join(f"{scores[m]:.3f}" for m in METRICS)
        lines.append(f"| {name} | {cells} | {scores['latency_ms']:.1f} |")
    return "\n".join(lines)


def plot_recall(curves: Mapping[str, Sequence[float]], path: str | Path, title: str) -> None:
    """Recall@k for k = 1..N, one line per stage, saved as an image (no display needed)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(figsize=(7, 4.5))
    for name, values in curves.items():
        axes.plot(range(1, len(values) + 1), values, label=name)
    axes.set_xscale("log")
    axes.set_xlabel("k (retrieved passages)")
    axes.set_ylabel("recall@k")
    axes.set_ylim(0, 1)
    axes.set_title(title)
    axes.grid(True, which="both", alpha=0.3)
    axes.legend()
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)


def print_result(result: dict[str, Any], *, as_json: bool, plot: str | None) -> None:
    """Shared output for the CLI and benchmark scripts: JSON or a table, and the plot."""
    curves = result.pop("recall_curves", None)
    if plot and curves:
        plot_recall(curves, plot, f"{result['dataset']}: recall@k")
    if as_json:
        print(json.dumps(_finite(result), indent=2))
    else:
        print(markdown_table(result))


def _finite(value: Any) -> Any:
    """JSON has no NaN; a metric ranx cannot compute is reported as null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    return value
