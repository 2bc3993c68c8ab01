"""The answer graph's nodes. Each LLM role has an LLM path and a deterministic offline path."""

from __future__ import annotations

import functools
import uuid
from collections.abc import Sequence
from typing import Any, Literal

from langchain_core.documents import Document
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, AnyMessage, HumanMessage, SystemMessage
from langchain_core.runnables import RunnableConfig
from langgraph.runtime import Runtime
from pydantic import BaseModel, Field, create_model

from footnote.graph import offline, prompts, support
from footnote.graph.citations import citation_entries, format_sources, verify
from footnote.graph.context import Context
from footnote.graph.grader import offline_grades
from footnote.graph.models import ChatModels, Role, is_timeout
from footnote.graph.state import CLEAR, State
from footnote.graph.tools import SEARCH_CALLS, search_documents
from footnote.tools.documents import Candidate
from footnote.tools.retrieval import get_retriever
from footnote.tools.sources import escape_source_text
from footnote.tools.web import WebSearchError, search_web, web_search_available


def internal_call(name: str, metadata: dict[str, Any] | None = None) -> RunnableConfig:
    """Config for LLM calls whose tokens are not the answer: they must not stream to the user."""
    return {
        "tags": ["nostream", "footnote:internal"],
        "run_name": name,
        "metadata": metadata or {},
    }


class SourceGrades(BaseModel):
    """Relevance of each numbered source to the question."""

    scores: list[int] = Field(
        description="One score from 0 to 10 per source, in the order the sources are numbered."
    )


@functools.lru_cache(maxsize=64)
def grades_for(count: int) -> type[SourceGrades]:
    """SourceGrades with exactly `count` scores of 0-10 in its schema. A server that turns
    the schema into a grammar (llama.cpp) then cannot return the wrong number of grades,
    which a small model otherwise often does. Scores out of range are clamped, not refused."""
    return create_model(
        "SourceGrades",
        __base__=SourceGrades,
        __doc__=SourceGrades.__doc__,
        scores=(
            list[int],
            Field(
                min_length=count,
                max_length=count,
                description=f"Exactly {count} scores from 0 to 10, one per source, in the "
                "order the sources are numbered.",
            ),
        ),
    )


def trace_metadata(context: Context, state: State | None = None) -> dict[str, Any]:
    """What a LangSmith trace should show about a call: which index, model and attempt."""
    meta: dict[str, Any] = {"index": context.index_dir, "model": context.model or "offline"}
    if state is not None:
        meta["attempt"] = state.attempts + 1
    return meta


def text_of(message: AnyMessage) -> str:
    content = message.content
    if isinstance(content, str):
        return content
    return " ".join(
        part.get("text", "") if isinstance(part, dict) else str(part) for part in content
    )


def human_questions(messages: Sequence[AnyMessage]) -> list[str]:
    return [text_of(m) for m in messages if isinstance(m, HumanMessage)]


def conversation_text(messages: Sequence[AnyMessage], turns: int = 6) -> str:
    """The visible conversation (questions and answers, no tool traffic) for rewriting."""
    visible = [
        m
        for m in messages
        if isinstance(m, HumanMessage) or (isinstance(m, AIMessage) and not m.tool_calls)
    ]
    # An earlier answer can quote its sources: it is escaped like them, so a quoted line
    # cannot read as another turn or a role.
    return "\n".join(
        f"User: {text_of(m)}"
        if isinstance(m, HumanMessage)
        else f"Assistant: {escape_source_text(text_of(m))}"
        for m in visible[-turns:]
    )


class AnswerNodes:
    """Node functions bound to an optional chat model; without one they run offline."""

    def __init__(self, chat_model: BaseChatModel | None = None) -> None:
        self.models = ChatModels(chat_model)

    def chat_model(self, context: Context, role: Role = "internal") -> BaseChatModel | None:
        """The model for this run: the one given to the factory, else the context's string."""
        return self.models.get(context, role)

    def new_question(self, state: State, runtime: Runtime[Context]) -> dict[str, Any]:
        """Start a turn: take the latest human message and forget the previous turn's work."""
        questions = human_questions(state.messages)
        return {
            "question": questions[-1] if questions else "",
            "standalone_question": "",
            "query": "",
            "hyde_passage": "",
            "attempts": 0,
            "documents": CLEAR,
            "candidates": CLEAR,
            SEARCH_CALLS: CLEAR,
            "citations": [],
            "invalid_citations": [],
            "unsupported_claims": [],
            "notices": CLEAR,
            "route": [CLEAR, "new_question"],
        }

    def rewrite_query(self, state: State, runtime: Runtime[Context]) -> dict[str, Any]:
        """Write the search query for this attempt: standalone first, different on a retry."""
        context = Context.coerce(runtime.context)
        model = self.chat_model(context)
        earlier = human_questions(state.messages)[:-1]
        notices: list[str] = []
        hyde = ""
        if state.attempts == 0:
            if model is not None and earlier:
                query = self._ask(
                    model,
                    prompts.REWRITE_PROMPT.format(
                        conversation=conversation_text(state.messages[:-1]),
                        question=state.question,
                    ),
                    "rewrite_query",
                )
                strategy = "llm_rewrite"
            else:
                query, strategy = offline.condense_question(state.question, earlier)
        elif model is not None:
            query = self._ask(
                model,
                prompts.RETRY_PROMPT.format(query=state.query, question=state.question),
                "rewrite_query",
            )
            strategy = "llm_retry"
        else:
            query, strategy = offline.retry_query(state.query, state.candidates), "prf"
        if context.hyde:
            if model is None:
                if state.attempts == 0:
                    notices.append("HyDE needs a chat model; it is unavailable offline.")
            else:
                hyde = self._ask(model, prompts.HYDE_PROMPT.format(question=state.question), "hyde")
                strategy += "+hyde"
        query = query.strip().strip('"') or state.question
        standalone = state.standalone_question or query
        runtime.stream_writer(
            {
                "event": "rewriting",
                "attempt": state.attempts + 1,
                "query": query,
                "strategy": strategy,
            }
        )
        return {
            "query": query,
            "standalone_question": standalone,
            "hyde_passage": hyde,
            "strategy": strategy,
            "notices": notices,
            "route": [f"rewrite_query:{strategy}"],
        }

    def call_retriever(self, state: State, runtime: Runtime[Context]) -> dict[str, Any]:
        """The agent step: a model chooses its search calls; offline, one call with the query.

        The graph only gets here when it must search, so the model is asked for the tool by
        name where it accepts that. A model that still makes no call gets the same fallback
        search as the offline path, and the route, a notice and the trace say so.
        """
        context = Context.coerce(runtime.context)
        if self.chat_model(context) is None:
            return self._search_update(_search_call(state.query), "call_retriever")
        prompt = prompts.AGENT_PROMPT.format(question=state.standalone_question, query=state.query)
        response, how = self.models.call_tool(
            context,
            search_documents,
            [SystemMessage(prompt)],
            internal_call("call_retriever", trace_metadata(context, state)),
        )
        if isinstance(response, AIMessage) and response.tool_calls:
            if all(_usable_query(call.get("args", {})) for call in response.tool_calls):
                return self._search_update(response, "call_retriever")
            # A forced call from a small model can carry an empty or non-text query.
            return self._fallback_search(
                state, runtime, "model's search call had no usable query",
                "The model's search call had no usable query",
            )  # fmt: skip
        asked = {
            "named": "asked for it by name",
            "offered": "offered the tool",
            "refused": "the server refuses tools",
        }[how]
        return self._fallback_search(
            state, runtime, f"model made no tool call ({asked})",
            f"The model made no search call ({asked})",
        )  # fmt: skip

    def _fallback_search(
        self, state: State, runtime: Runtime[Context], why: str, told: str
    ) -> dict[str, Any]:
        """The graph's own search with the rewritten query; `why` goes to the trace, `told`
        opens the notice."""
        runtime.stream_writer({"event": "fallback_search", "query": state.query})
        update = self._search_update(
            _search_call(state.query, fallback=why), "call_retriever:fallback_search"
        )
        update["notices"] = [f"{told}; Footnote searched with the rewritten query itself."]
        return update

    @staticmethod
    def _search_update(call: AIMessage, step: str) -> dict[str, Any]:
        return {SEARCH_CALLS: [CLEAR, call], "candidates": CLEAR, "route": [step]}

    def grade_documents(self, state: State, runtime: Runtime[Context]) -> dict[str, Any]:
        """Score each retrieved chunk on its own and keep those above the threshold."""
        context = Context.coerce(runtime.context)
        candidates = state.candidates
        grades, notice, method = self._grade(context, state.standalone_question, candidates)
        # Grades filter; they reorder only when a model gave them. The offline grade is a
        # coarser signal than the retrieval ranking it would otherwise overrule.
        order = list(range(len(candidates)))
        if self.chat_model(context) is not None:
            order = sorted(order, key=lambda i: -grades[i])
        kept = [candidates[i]["document"] for i in order if grades[i] >= context.grade_threshold][
            : context.keep_k
        ]
        runtime.stream_writer(
            {
                "event": "graded",
                "relevant": len(kept),
                "candidates": len(candidates),
                "method": method,
                "attempt": state.attempts + 1,
            }
        )
        return {
            SEARCH_CALLS: CLEAR,
            "documents": [CLEAR, *kept],
            "attempts": state.attempts + 1,
            "notices": [notice] if notice else [],
            "route": [f"grade_documents:{len(kept)}/{len(candidates)}"],
        }

    def _grade(
        self, context: Context, question: str, candidates: Sequence[Candidate]
    ) -> tuple[list[float], str | None, str]:
        """Grades in [0, 1], a notice when the model's grades could not be used, and how they
        were made (a structured-output method, or "offline")."""
        fallback = offline_grades(candidates, context.offline_grader)
        if self.chat_model(context) is None or not candidates:
            return fallback, None, "offline"
        docs = [c["document"] for c in candidates]
        try:
            result, method = self.models.structured(
                context,
                grades_for(len(candidates)),
                prompts.GRADE_PROMPT.format(question=question, sources=format_sources(docs)),
                internal_call("grade_documents", trace_metadata(context)),
            )
        except Exception as exc:  # a failed grade must not end the run: fall back to evidence
            if is_timeout(exc):
                raise  # a hung server: waiting again for the answer would not help
            return (
                fallback,
                f"Grading fell back to retrieval evidence ({type(exc).__name__}).",
                "offline",
            )
        if not result.scores or len(result.scores) != len(candidates):
            notice = "Grading fell back to retrieval evidence (malformed grades)."
            return fallback, notice, "offline"
        return [max(0.0, min(1.0, s / 10)) for s in result.scores], None, method

    def web_search(self, state: State, runtime: Runtime[Context]) -> dict[str, Any]:
        """Last resort when the index cannot answer: Tavily results as labelled web sources."""
        context = Context.coerce(runtime.context)
        reason = web_search_available()
        if reason:
            return {"notices": [reason], "route": ["web_search:off"]}
        runtime.stream_writer({"event": "web_search", "query": state.query})
        try:
            docs = search_web(
                state.standalone_question or state.question, max_results=context.keep_k
            )
        except WebSearchError as exc:
            return {"notices": [str(exc)], "route": ["web_search:failed"]}
        return {"documents": [CLEAR, *docs], "route": [f"web_search:{len(docs)}"]}

    def generate(self, state: State, runtime: Runtime[Context]) -> dict[str, Any]:
        """Answer from the numbered sources, or say plainly that they do not cover it."""
        context = Context.coerce(runtime.context)
        docs = state.documents
        model = self.chat_model(context, "answer")
        if not docs:
            answer = prompts.NOT_COVERED
        elif model is not None:
            response = model.invoke(
                [
                    SystemMessage(context.system_prompt),
                    HumanMessage(
                        prompts.SOURCES_TEMPLATE.format(
                            sources=format_sources(docs), question=state.standalone_question
                        )
                    ),
                ],
                config={
                    "run_name": "generate",
                    "metadata": {**trace_metadata(context, state), "sources": len(docs)},
                },
            )
            answer = text_of(response)
        else:
            embeddings = get_retriever(context.index_dir, context.embeddings).embeddings
            answer = offline.extractive_answer(state.standalone_question, docs, embeddings)
            answer = answer or prompts.NOT_COVERED
            runtime.stream_writer({"event": "answer", "text": answer})
        message = AIMessage(content=answer, id=f"answer-{uuid.uuid4().hex[:12]}")
        return {"messages": [message], "route": ["generate"]}

    def verify_citations(self, state: State, runtime: Runtime[Context]) -> dict[str, Any]:
        """Drop citations that name no given source, then the cited sentences their sources
        do not support (`support.py`); list the valid citations for the caller."""
        answer = state.messages[-1]
        if prompts.NOT_COVERED in text_of(answer) and not _has_citation(text_of(answer)):
            return {
                "citations": [],
                "invalid_citations": [],
                "unsupported_claims": [],
                "route": ["verify_citations"],
            }
        cleaned, valid, invalid = verify(text_of(answer), state.documents)
        notices = []
        if invalid:
            notices.append(
                f"Removed citation(s) {', '.join(f'[{n}]' for n in invalid)}: no such source."
            )
        checks = self._check_support(cleaned, state.documents, Context.coerce(runtime.context))
        unsupported = [c.to_dict() for c in checks if not c.supported]
        if unsupported:
            cleaned = support.remove_claims(cleaned, checks) or prompts.NOT_COVERED
            _, valid, _ = verify(cleaned, state.documents)
            notices.append(
                f"Removed {len(unsupported)} claim(s) that the sources they cite do not support."
            )
        update: dict[str, Any] = {
            "citations": citation_entries(valid, state.documents),
            "invalid_citations": invalid,
            "unsupported_claims": unsupported,
            "route": ["verify_citations"],
        }
        if notices:
            update["notices"] = notices
        if cleaned != text_of(answer):
            update["messages"] = [AIMessage(content=cleaned, id=answer.id)]
        return update

    @staticmethod
    def _check_support(
        answer: str, documents: Sequence[Document], context: Context
    ) -> list[support.ClaimCheck]:
        """The support check with the index's embeddings and keyword statistics (web sources
        too: the index was searched before the web was). Quotes, every claim of an extractive
        answer, are confirmed without computing either."""
        if not support.cited_claims(answer):
            return []
        retriever = get_retriever(context.index_dir, context.embeddings)
        return support.check_claims(
            answer, documents, embed=retriever.embeddings.embed_array, idf=retriever.idf_weights
        )

    def _ask(self, model: BaseChatModel, prompt: str, name: str) -> str:
        response = model.invoke([HumanMessage(prompt)], config=internal_call(name))
        return text_of(response).strip()


def route_after_grading(
    state: State, runtime: Runtime[Context]
) -> Literal["generate", "rewrite_query", "web_search"]:
    """Enough evidence: answer. Too little: look again while the budget lasts, then the web."""
    context = Context.coerce(runtime.context)
    if state.documents:
        return "generate"
    if state.attempts < max(1, context.max_retrieval_attempts):
        return "rewrite_query"
    if context.web_search:
        return "web_search"
    return "generate"


def _search_call(query: str, fallback: str = "") -> AIMessage:
    """A search_documents call made by the graph itself; `fallback` says why, for the trace."""
    return AIMessage(
        content="",
        tool_calls=[
            {
                "name": search_documents.name,
                "args": {"query": query},
                "id": f"call_{uuid.uuid4().hex[:12]}",
                "type": "tool_call",
            }
        ],
        response_metadata={"footnote_fallback_search": fallback} if fallback else {},
    )


def _usable_query(args: Any) -> bool:
    """A search call's arguments name a query with at least one word in it."""
    query = args.get("query") if isinstance(args, dict) else None
    return isinstance(query, str) and any(ch.isalnum() for ch in query)


def _has_citation(text: str) -> bool:
    return bool(verify(text, [])[2])
