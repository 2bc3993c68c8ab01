"""The tool the answer graph's agent step calls: a search of the index, as the caller may see it.

What the tool needs comes in explicitly: the query from the model, the HyDE passage and the
question its results are graded against from the graph's state (hidden from the model), the
index from the run's context, the stage (the graph's, for an offline hop) from the state, and
the caller's groups from the authenticated user when served or the host's context when
embedded (never from the model). Its results go to the typed `candidates` field; the tool-call
traffic stays in the internal `search_calls` channel, out of the conversation.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any

from langchain.tools import ToolRuntime
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import ToolMessage
from langchain_core.tools import tool
from langgraph.config import get_config
from langgraph.prebuilt import InjectedState
from langgraph.types import Command

from footnote.graph.context import Context
from footnote.models.chat import chat_model
from footnote.store.types import Caller
from footnote.tools.langchain_retriever import CandidateSearch
from footnote.tools.search import SearchRequest

SEARCH_CALLS = "search_calls"
"""The state channel the ToolNode reads tool calls from and answers into."""


def reranker_model(context: Context) -> BaseChatModel | None:
    """The chat model the `llm` reranker asks: the context's `model`, or None (offline)."""
    if context.reranker != "llm" or not context.model:
        return None
    return chat_model(
        context.model,
        base_url=context.model_base_url,
        timeout_s=context.model_timeout_s,
        max_retries=context.model_max_retries,
    )


def _served_user() -> Any | None:
    """The authenticated user a LangGraph server injected into this run; None if embedded."""
    try:
        configurable = get_config().get("configurable") or {}
    except RuntimeError:  # called outside a run
        return None
    if "langgraph_auth_user" not in configurable:
        return None
    return configurable["langgraph_auth_user"] or {}


def _user_field(user: Any, name: str) -> Any:
    return user.get(name) if isinstance(user, Mapping) else getattr(user, name, None)


def served_caller(user: Any) -> Caller:
    """The caller a server's authenticated user is: exactly its groups (authentication
    already added `everyone`); a user without Footnote's fields is in no group."""
    groups = _user_field(user, "groups")
    if not isinstance(groups, list | tuple) or not all(isinstance(g, str) for g in groups):
        groups = ()
    return Caller.of_groups(groups, strict=True, admin=_user_field(user, "admin") is True)


def run_caller(context: Context) -> Caller:
    """Who is asking in this run, made once for its searches to carry.

    Served: the authenticated user the server injected (`footnote/server/auth.py`), never the
    request's context; a user without Footnote's fields sees nothing. Embedded: the host's
    context, the trusted party there, type-checked rather than coerced; `everyone` is added
    unless the host asks for `strict_groups`.
    """
    user = _served_user()
    if user is not None:
        return served_caller(user)
    groups, admin = context.user_groups, context.admin
    if not isinstance(admin, bool):
        raise TypeError(f"context field 'admin' must be true or false, not {admin!r}")
    if isinstance(groups, str) or not all(isinstance(g, str) for g in groups):
        raise TypeError("context field 'user_groups' must be a list of group names")
    return Caller.of_groups(groups, strict=context.strict_groups, admin=admin)


@tool
def search_documents(
    query: str,
    runtime: ToolRuntime,
    hyde_passage: Annotated[str, InjectedState("hyde_passage")] = "",
    question: Annotated[str, InjectedState("standalone_question")] = "",
    stage: Annotated[str, InjectedState("search_stage")] = "",
) -> Command:
    """Search the team's own documents (handbooks, docs, code) for passages about `query`.

    Use it for every question about the team's policies, systems or documentation. Write the
    query in the words a document would use. Returns numbered passages with their sources.
    """
    context = Context.coerce(runtime.context)
    search = CandidateSearch(
        request=SearchRequest(
            query=query,
            index_dir=context.index_dir,
            embeddings=context.embeddings,
            k=context.retrieve_k,
            # an offline hop searches through the entity graph; anything else, the stage the
            # server (or the embedding host) chose, checked against SEARCH_STAGES
            stage="graph" if stage == "graph" else context.search_stage,  # type: ignore[arg-type]
            caller=run_caller(context),
            extra_texts=[hyde_passage] if hyde_passage else [],
            reranker=context.reranker,
            chat_model=reranker_model(context),
        ),
        question=question,
    )
    search.invoke(
        query, {"run_name": "footnote_retriever", "metadata": {"index": context.index_dir}}
    )
    candidates = search.candidates
    if runtime.stream_writer is not None:
        runtime.stream_writer(
            {
                "event": "retrieved",
                "query": query,
                "candidates": len(candidates),
                "hyde": bool(hyde_passage),
            }
        )
    found = ", ".join(c["document"].metadata["chunk_id"] for c in candidates)
    reply = ToolMessage(
        f"{len(candidates)} passages found: {found}" if candidates else "No passages found.",
        tool_call_id=runtime.tool_call_id or "",
        name="search_documents",
    )
    return Command(update={"candidates": candidates, SEARCH_CALLS: [reply]})
