"""Tavily web search, the fallback when the local index cannot answer."""

from __future__ import annotations

import os

from langchain_core.documents import Document


class WebSearchError(Exception):
    """Web search failed in a way the user should hear about (bad key, unreachable)."""


def web_search_available() -> str | None:
    """None when web search can run, else the one-line reason it is off."""
    if not os.environ.get("TAVILY_API_KEY", "").strip():
        return "Web search is off: set TAVILY_API_KEY to enable it."
    return None


def search_web(query: str, *, max_results: int = 5, timeout: float = 15.0) -> list[Document]:
    """Search the web with Tavily; results become documents labelled as web pages.

    Posts to $TAVILY_API_BASE_URL/search (default https://api.tavily.com) with the key as a
    bearer token. Without a key it refuses: tavily-python would otherwise search keyless.
    """
    from tavily import TavilyClient
    from tavily.errors import InvalidAPIKeyError, UsageLimitExceededError

    reason = web_search_available()
    if reason:
        raise WebSearchError(reason)
    base_url = os.environ.get("TAVILY_API_BASE_URL", "").strip().rstrip("/") or None
    try:
        with TavilyClient(
            api_key=os.environ["TAVILY_API_KEY"].strip(), api_base_url=base_url
        ) as client:
            response = client.search(query, max_results=max_results, timeout=timeout)
    except InvalidAPIKeyError as exc:
        raise WebSearchError(
            "Tavily rejected the API key (HTTP 401): check TAVILY_API_KEY"
        ) from exc
    except UsageLimitExceededError as exc:
        raise WebSearchError(
            f"Tavily usage limit reached (HTTP 429): {str(exc) or 'try again later'}"
        ) from exc
    except Exception as exc:  # network, timeout, 5xx: one clear line, not a traceback
        raise WebSearchError(f"web search failed: {type(exc).__name__}: {exc}") from exc
    docs = []
    for rank, result in enumerate(response.get("results", [])):
        url = result.get("url", "")
        docs.append(
            Document(
                id=f"web:{url}",
                page_content=result.get("content") or "",
                metadata={
                    "chunk_id": f"web:{url}",
                    "source": url,
                    "title": result.get("title") or url,
                    "section": result.get("title") or "",
                    "page": None,
                    "lines": None,
                    "url": url,
                    "kind": "web",
                    "score": float(result.get("score") or 0.0),
                    "dense": float(result.get("score") or 0.0),
                    "coverage": 1.0,
                    "rank": rank,
                },
            )
        )
    return docs
