"""Chunk contexts written by a chat model: Anthropic's contextual retrieval, cached.

For each new or changed chunk the model reads its document (the whole document when it fits
`max_document_chars`, else the document's outline and the chunk's neighbours) and the chunk,
and writes a short note situating the chunk, which is embedded and keyword-indexed with it
(`store.text.embedding_text`) and never quoted.

Each context is kept in the index's embedding cache under its own key (the model, the
document's content hash and the chunk text), checksummed and pruned like the vectors, and
stored as soon as its document is done: re-ingest, `sync` and a run resumed after a kill
never ask again for an unchanged chunk.

The document comes first and is the same for every chunk of it, so a provider's prompt
cache serves it: Anthropic's `cache_control` marks it, OpenAI-compatible servers cache an
identical prefix by themselves and are also sent `prompt_cache_key` (the document's hash)
to route its requests together. Requests go `concurrency` at a time, each retried on rate
limits and transient failures (honouring Retry-After) with a per-request timeout, like
provider embeddings; a request that still fails stops the run (`ContextFailed`) before
anything is published.
"""

from __future__ import annotations

import hashlib
import os
import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from footnote.models.embeddings import (
    ProviderSettings,
    failure_reason,
    is_transient,
    pause_before_retry,
)
from footnote.store.embedding_cache import EmbeddingCache
from footnote.store.types import IndexError_

INSTRUCTIONS = (
    "You write search context. Given a document and one chunk of it, reply with one or two "
    "short sentences (at most 60 words) that situate the chunk within the document, naming "
    "what it is about, to improve search retrieval of the chunk. Reply with the context only."
)
DOCUMENT = "<document>\n{document}\n</document>"
CHUNK = "Here is the chunk to situate within the document:\n<chunk>\n{chunk}\n</chunk>"
MAX_DOCUMENT_CHARS = 60_000
"""About 15,000 tokens: a longer document is sent as its outline and the chunk's neighbours
($FOOTNOTE_CONTEXT_DOCUMENT_CHARS for a model that reads less)."""
MAX_CONTEXT_CHARS = 600
COST_ENV = "FOOTNOTE_CONTEXT_COST"
"""`INPUT,OUTPUT[,CACHE_READ[,CACHE_WRITE]]`: dollars per million tokens, so ingest can
report a cost (Anthropic charges a cache write above its input price)."""


class ContextFailed(IndexError_):
    """A context request failed after its retries: the run stops, the live index is kept."""


@dataclass
class ContextUsage:
    """What writing contexts cost this run, reported by ingest (`--json` too)."""

    requests: int = 0
    cached_contexts: int = 0
    """Chunks whose context came from the cache: no request."""
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    """Input tokens the provider's prompt cache served (cheaper, where it says so)."""
    cache_write_tokens: int = 0
    """Input tokens written to the provider's prompt cache (Anthropic reports them)."""

    def cost_usd(self) -> float | None:
        """From $FOOTNOTE_CONTEXT_COST; None when prices are not given."""
        prices = [p for p in os.environ.get(COST_ENV, "").split(",") if p.strip()]
        if len(prices) < 2:
            return None
        input_price, output_price = float(prices[0]), float(prices[1])
        cached_price = float(prices[2]) if len(prices) > 2 else input_price
        write_price = float(prices[3]) if len(prices) > 3 else input_price
        fresh = self.input_tokens - self.cache_read_tokens - self.cache_write_tokens
        total = (
            fresh * input_price
            + self.cache_read_tokens * cached_price
            + self.cache_write_tokens * write_price
            + self.output_tokens * output_price
        )
        return round(total / 1e6, 6)

    def to_dict(self) -> dict[str, Any]:
        return {
            "requests": self.requests,
            "cached_contexts": self.cached_contexts,
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "cache_read_tokens": self.cache_read_tokens,
            "cache_write_tokens": self.cache_write_tokens,
            "cost_usd": self.cost_usd(),
        }


def context_key(model: str, document_sha256: str, chunk_text: str) -> bytes:
    """The cache key of one chunk's context: never equal to a vector's key (`cache_key`)."""
    raw = f"context\x00{model}\x00{document_sha256}\x00{chunk_text}"
    return hashlib.sha256(raw.encode("utf-8", "surrogatepass")).digest()


def document_view(
    title: str, texts: Sequence[str], sections: Sequence[str], index: int, limit: int
) -> str:
    """What the model reads of the document for chunk `index`: all of it when it fits
    `limit`, else its outline (title and section paths) and the chunk's neighbours. The
    whole-document view is the same for every chunk, so a prompt cache can serve it."""
    whole = "\n\n".join([f"# {title}", *texts])
    if len(whole) <= limit:
        return whole
    outline = "\n".join(["Outline:", f"# {title}", *dict.fromkeys(s for s in sections if s)])
    near = [texts[j] for j in (index - 1, index + 1) if 0 <= j < len(texts)]
    return "\n\n".join([outline[: limit // 2], "Neighbouring text:", *near])[:limit]


class ModelContexts:
    """Writes (or finds in the cache) the context of each chunk of a document."""

    def __init__(
        self,
        spec: str,
        cache: EmbeddingCache,
        *,
        settings: ProviderSettings | None = None,
        max_document_chars: int | None = None,
        chat: Any = None,
    ) -> None:
        self.spec = spec
        self.cache = cache
        self.settings = settings or ProviderSettings.from_env()
        self.max_document_chars = max_document_chars or int(
            os.environ.get("FOOTNOTE_CONTEXT_DOCUMENT_CHARS") or MAX_DOCUMENT_CHARS
        )
        self.usage = ContextUsage()
        self._counting = threading.Lock()  # requests finish on several threads
        self._chat = chat
        self._anthropic = spec.startswith(("anthropic:", "anthropic/"))

    def _model(self) -> Any:
        """Started on first need: an ingest that finds every context cached starts none."""
        if self._chat is None:
            from footnote.models.providers import init_chat

            self._chat = init_chat(
                self.spec, timeout=self.settings.timeout_s, max_retries=0, temperature=0
            )
        return self._chat

    def contexts(
        self, document_sha256: str, title: str, texts: Sequence[str], sections: Sequence[str]
    ) -> list[str | None]:
        """One context per chunk text, from the cache or the model; new ones are cached
        before this returns, so a run killed after it asks for none of them again."""
        keys = [context_key(self.spec, document_sha256, text) for text in texts]
        found = self.cache.get_raw(keys)
        missing = [i for i, key in enumerate(keys) if key not in found]
        self.usage.cached_contexts += len(texts) - len(missing)
        if missing:

            def ask(i: int) -> str:
                view = document_view(title, texts, sections, i, self.max_document_chars)
                return self._request(view, texts[i], document_sha256)

            # The first is asked alone: once it is answered the provider's cache holds the
            # document, and the others, sent together, read it rather than each writing it.
            written = [ask(missing[0])]
            workers = max(1, min(self.settings.concurrency, len(missing) - 1))
            with ThreadPoolExecutor(workers) as pool:
                written.extend(pool.map(ask, missing[1:]))
            self.cache.put_raw(
                [keys[i] for i in missing], [text.encode("utf-8") for text in written]
            )
            found.update(
                (keys[i], text.encode("utf-8")) for i, text in zip(missing, written, strict=True)
            )
        out: list[str | None] = []
        for key in keys:
            text = found[key].decode("utf-8", "replace").strip()
            out.append(" ".join(text.split())[:MAX_CONTEXT_CHARS] or None)
        return out

    def _messages(self, view: str, chunk: str) -> list[Any]:
        """The document first, as the cacheable prefix; the chunk after it."""
        from langchain_core.messages import HumanMessage, SystemMessage

        document = DOCUMENT.format(document=view)
        question = CHUNK.format(chunk=chunk)
        if self._anthropic:
            return [
                SystemMessage(INSTRUCTIONS),
                HumanMessage(
                    [
                        {"type": "text", "text": document, "cache_control": {"type": "ephemeral"}},
                        {"type": "text", "text": question},
                    ]
                ),
            ]
        return [SystemMessage(INSTRUCTIONS), HumanMessage(f"{document}\n\n{question}")]

    def _request(self, view: str, chunk: str, document_sha256: str) -> str:
        """One context, retried like a provider embedding request."""
        model = self._model()
        options: dict[str, Any] = {}
        if not self._anthropic:
            options["extra_body"] = {"prompt_cache_key": f"footnote-{document_sha256[:32]}"}
        messages = self._messages(view, chunk)
        settings = self.settings
        for attempt in range(settings.retries + 1):
            try:
                reply = model.invoke(messages, **options)
            except Exception as exc:
                if not is_transient(exc) or attempt == settings.retries:
                    tries = f" after {attempt + 1} tries" if attempt else ""
                    raise ContextFailed(
                        f"context model {self.spec}: a request failed{tries}: "
                        f"{failure_reason(exc)}; the index was not changed"
                    ) from exc
                pause_before_retry(exc, attempt, settings)
                continue
            self._count(reply)
            return str(reply.content if isinstance(reply.content, str) else reply.text())
        raise AssertionError("unreachable")  # the loop returns or raises

    def _count(self, reply: Any) -> None:
        usage = getattr(reply, "usage_metadata", None) or {}
        details = usage.get("input_token_details") or {}
        with self._counting:
            self.usage.requests += 1
            self.usage.input_tokens += int(usage.get("input_tokens") or 0)
            self.usage.output_tokens += int(usage.get("output_tokens") or 0)
            self.usage.cache_read_tokens += int(details.get("cache_read") or 0)
            self.usage.cache_write_tokens += int(details.get("cache_creation") or 0)
