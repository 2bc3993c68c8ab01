"""Pluggable rerankers for the top candidates of a first-stage retrieval.

    none                    keep the first-stage order
    sentence                LLM-free: the best-matching sentence of each chunk, by embedding
    judge                   LLM-free: Footnote's own cross-encoder (models/judge.py), shipped
                            with the package and run on onnxruntime
    llm                     the configured chat model scores all candidates in one call
    crossencoder:PATH       a sentence-transformers CrossEncoder from a local path (extra)

No third-party cross-encoder ships inside a PyPI package; the judge is Footnote's own, trained
by training/judge/. Importing this module is cheap: each reranker loads what it needs when it
is built.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from footnote.store.text import heading_prefix, split_sentences
from footnote.store.types import Hit
from footnote.tools.sources import UNTRUSTED_SOURCES, source_blocks

if TYPE_CHECKING:
    import numpy as np
    from langchain_core.language_models import BaseChatModel

    from footnote.models.embeddings import IndexEmbeddings

Reranker = Callable[[str, list[Hit]], list[Hit]]
RERANKERS = ("none", "sentence", "judge", "llm", "crossencoder:PATH")
"""What `--reranker` and the context's `reranker` accept."""


class RerankerError(ValueError):
    """A reranker that cannot be built as asked; the message says what to do."""


def check_reranker(spec: str) -> str:
    """The spec itself when it names a reranker; otherwise a RerankerError listing them."""
    if spec in ("none", "sentence", "judge", "llm"):
        return spec
    if spec.startswith("crossencoder:") and spec.split(":", 1)[1].strip():
        return spec
    if spec in ("crossencoder", "crossencoder:") or spec.startswith("crossencoder:"):
        raise RerankerError(
            "the crossencoder reranker needs a local model folder: crossencoder:PATH"
        )
    raise RerankerError(f"unknown reranker {spec!r}: use one of {', '.join(RERANKERS)}")


def _reorder(hits: list[Hit], scores: Sequence[float] | np.ndarray) -> list[Hit]:
    import numpy as np

    order = np.argsort(-np.asarray(scores, dtype=np.float64), kind="stable")
    return [Hit(hits[i].chunk, float(scores[i]), hits[i].row) for i in order]


def sentence_reranker(embeddings: IndexEmbeddings, *, weight: float = 0.5) -> Reranker:
    """Score = mix of the chunk's first-stage rank and its best sentence's similarity.

    A long chunk matches many queries a little; its best sentence says whether it answers
    this one. The first-stage rank is kept as a prior so one lucky sentence cannot win alone.
    """
    import numpy as np

    def rerank(query: str, hits: list[Hit]) -> list[Hit]:
        if not hits:
            return hits
        owners: list[int] = []
        texts: list[str] = []
        for i, hit in enumerate(hits):
            prefix = heading_prefix(hit.chunk.title, hit.chunk.section)
            for sentence in split_sentences(hit.chunk.text)[:12] or [hit.chunk.text]:
                owners.append(i)
                texts.append(f"{prefix}: {sentence}")
        similarity = embeddings.embed_array(texts) @ embeddings.embed_array([query])[0]
        best = np.full(len(hits), -1.0)
        for owner, value in zip(owners, similarity, strict=True):
            best[owner] = max(best[owner], float(value))
        prior = 1.0 / (1.0 + np.arange(len(hits)) / 10.0)
        return _reorder(hits, weight * best + (1 - weight) * prior)

    return rerank


def judge_reranker() -> Reranker:
    """The judge reads the question with each candidate (its heading path, then its text) and
    orders them by its logit; ties keep the first-stage order."""
    from footnote.models.judge import JudgeModelError, load_judge

    try:
        judge = load_judge()
    except JudgeModelError as exc:
        raise RerankerError(str(exc)) from None

    def rerank(query: str, hits: list[Hit]) -> list[Hit]:
        if not hits:
            return hits
        passages = [
            f"{heading_prefix(h.chunk.title, h.chunk.section)}\n{h.chunk.text}" for h in hits
        ]
        scores = judge.score(query, passages)
        return _reorder(hits, [float(s) - i * 1e-6 for i, s in enumerate(scores)])

    return rerank


def crossencoder_reranker(path: str) -> Reranker:
    """A cross-encoder from a local folder (the `crossencoder` extra, which brings torch)."""
    try:
        from sentence_transformers import CrossEncoder
    except ImportError as exc:  # the extra is optional
        from footnote.models.providers import install_hint

        raise RerankerError(
            f"the crossencoder reranker needs sentence-transformers: {install_hint('crossencoder')}"
        ) from exc
    if not Path(path).is_dir():
        raise RerankerError(f"no cross-encoder model folder at {path!r} (crossencoder:PATH)")
    model = CrossEncoder(path, local_files_only=True)

    def rerank(query: str, hits: list[Hit]) -> list[Hit]:
        if not hits:
            return hits
        scores = model.predict([(query, h.chunk.text) for h in hits])
        return _reorder(hits, [float(s) for s in scores])

    return rerank


def llm_reranker(model: BaseChatModel) -> Reranker:
    """The chat model scores every candidate in one structured call; order kept on failure."""
    from pydantic import BaseModel, Field

    class CandidateScores(BaseModel):
        """How well each numbered passage answers the query."""

        scores: list[int] = Field(description="One score 0-10 per passage, in order.")

    def rerank(query: str, hits: list[Hit]) -> list[Hit]:
        if not hits:
            return hits
        passages = source_blocks(
            [
                (f"{h.chunk.source} § {h.chunk.section}", " ".join(h.chunk.text.split())[:600])
                for h in hits
            ]
        )
        prompt = (
            "Score how well each passage answers the query, 0 (unrelated) to 10 (answers it). "
            f"Score every source.\n\n{UNTRUSTED_SOURCES}\n\nQuery: {query}\n\n{passages}"
        )
        try:
            result: Any = model.with_structured_output(CandidateScores).invoke(
                prompt, config={"tags": ["nostream"], "run_name": "rerank"}
            )
            scores = list(result.scores)
        except Exception:  # a bad structured reply must not lose the candidates
            return hits
        if len(scores) != len(hits):
            return hits
        # Ties keep first-stage order: the sort is stable and scores are integers.
        return _reorder(hits, [s - i * 1e-6 for i, s in enumerate(scores)])

    return rerank


def make_reranker(
    spec: str, embeddings: IndexEmbeddings, chat_model: BaseChatModel | None = None
) -> Reranker | None:
    """Build a reranker from its spec; `none` gives None (keep the first-stage order)."""
    spec = check_reranker(spec)
    if spec == "none":
        return None
    if spec == "sentence":
        return sentence_reranker(embeddings)
    if spec == "judge":
        return judge_reranker()
    if spec == "llm":
        if chat_model is None:
            raise RerankerError("the llm reranker needs a chat model: set --model (or `model`)")
        return llm_reranker(chat_model)
    return crossencoder_reranker(spec.split(":", 1)[1])
