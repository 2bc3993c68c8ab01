"""The answer graph's nodes. Each LLM role has an LLM path and a deterministic offline path.

The turn (new_question, plan_turn, reply, research, generate, verify_citations) works on
`State`; one part's research (rewrite_query, call_retriever, tools, grade_documents, plan_hop,
web_search) on `PartState`, once per part, in parallel.
"""

from __future__ import annotations

import functools
import re
import uuid
from collections.abc import Collection, Sequence
from typing import Any, Literal

from langchain_core.documents import Document
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, AnyMessage, HumanMessage, SystemMessage
from langchain_core.runnables import RunnableConfig
from langgraph.config import get_config
from langgraph.runtime import Runtime
from langgraph.types import Send
from pydantic import BaseModel, Field, create_model

from footnote.graph import global_route, grounding, hops, offline, planner, prompts
from footnote.graph.citations import citation_entries, format_sources, verify
from footnote.graph.context import Context
from footnote.graph.grader import may_pass, offline_grades, reads_token_recall
from footnote.graph.models import ChatModels, Role, is_timeout
from footnote.graph.state import (
    CLEAR,
    Finding,
    GradedChunk,
    Hop,
    Part,
    PartState,
    PlannedPart,
    Round,
    State,
)
from footnote.graph.tools import SEARCH_CALLS, run_caller, search_documents
from footnote.store.types import Caller
from footnote.tools.documents import Candidate, with_token_recall
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


def trace_metadata(context: Context, state: PartState | None = None) -> dict[str, Any]:
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


class PlannedQuestion(BaseModel):
    """One sub-question to search for on its own."""

    question: str = Field(description="The sub-question, standalone (no 'it', 'that').")
    needs_second_search: bool = Field(
        default=False,
        description="True when the answer depends on something the first evidence will name "
        "(e.g. first the team that owns billing, then that team's expense approver).",
    )


class TurnPlan(BaseModel):
    """How to handle the user's latest message."""

    action: Literal["search", "reply", "clarify"] = Field(
        description="'search' the documents; 'reply' without searching (greetings, thanks, "
        "questions about this conversation); 'clarify' with one question when it is ambiguous."
    )
    reply: str = Field(default="", description="The reply or clarifying question, if not 'search'.")
    whole_corpus: bool = Field(
        default=False,
        description="For 'search': true when the message asks about the documents as a whole "
        "or a large part of them (summarize everything, what topics they cover, list every X, "
        "which documents mention X), not one specific thing.",
    )
    questions: list[PlannedQuestion] = Field(
        default_factory=list,
        description="For 'search': one entry per part of the question, in the order asked; "
        "a single question is one entry.",
    )


class AnswerNodes:
    """Node functions bound to an optional chat model; without one they run offline."""

    def __init__(self, chat_model: BaseChatModel | None = None) -> None:
        self.models = ChatModels(chat_model)

    def chat_model(self, context: Context, role: Role = "internal") -> BaseChatModel | None:
        """The model for this run: the one given to the factory, else the context's string."""
        return self.models.get(context, role)

    # ------------------------------------------------------------------ the turn

    def new_question(self, state: State, runtime: Runtime[Context]) -> dict[str, Any]:
        """Start a turn: check the settings, take the latest human message and forget the
        previous turn's work (its citations stay at hand for "what did you cite?")."""
        context = Context.coerce(runtime.context)  # wrong types or ranges fail here, named
        context.refuse_configurable(get_config().get("configurable"))
        questions = human_questions(state.messages)
        return {
            "question": questions[-1] if questions else "",
            "standalone_question": "",
            "turn": "",
            "reply": "",
            "plan": [],
            "findings": CLEAR,
            "previous_citations": state.citations,
            "documents": CLEAR,
            "citations": [],
            "parts": [],
            "footnote_invalid_citations": [],
            "footnote_unsupported_claims": [],
            "footnote_searches": 0,
            "footnote_model_calls": 0,
            "footnote_communities": [],
            "footnote_hops": [],
            "footnote_notices": CLEAR,
            "footnote_route": [CLEAR, "new_question"],
        }

    def plan_turn(self, state: State, runtime: Runtime[Context]) -> dict[str, Any]:
        """Decide whether to search, and for what: the model's plan (structured output), or
        offline the planner's rules. A follow-up is made standalone first."""
        context = Context.coerce(runtime.context)
        model = self.chat_model(context) if context.max_model_calls_per_turn > 0 else None
        earlier = human_questions(state.messages)[:-1]
        notices: list[str] = []
        calls = 0
        standalone, strategy = state.question, "as_asked"
        if model is not None and earlier:  # rewriting a follow-up is not planning: always
            standalone = (
                self._ask(
                    model,
                    prompts.REWRITE_PROMPT.format(
                        conversation=conversation_text(state.messages[:-1]), question=state.question
                    ),
                    "rewrite_query",
                )
                .strip()
                .strip('"')
                or state.question
            )
            strategy, calls = "llm_rewrite", calls + 1
        decided: TurnPlan | None = None
        if model is not None and context.planner == "model":
            decided, notice = self._model_plan(context, state, standalone)
            calls += 1
            if decided is None:
                notices.append(notice)
            elif not self._may_skip_search(decided, state, earlier, context.max_parts):
                notices.append(
                    f"The model planned to {decided.action} without searching; Footnote "
                    "searched, as the message asks about the documents."
                )
                decided = None
        elif self.chat_model(context) is not None and context.max_model_calls_per_turn == 0:
            notices.append("The model-call budget is 0: this turn was planned offline.")
        if decided is None:
            turn, reply, plan = self._offline_plan(context, state, earlier)
            if turn == "search" and len(plan) == 1 and strategy == "llm_rewrite":
                plan = [(standalone, strategy, 0)]
            if self.chat_model(context) is None:  # offline: one hop through the entity graph
                plan = [(question, how, 1) for question, how, _ in plan]
        else:
            turn, reply = decided.action, decided.reply.strip()
            asked = [q for q in decided.questions if q.question.strip()]
            plan = [
                (q.question.strip(), strategy if len(asked) == 1 else "planned",
                 1 if q.needs_second_search else 0)
                for q in asked[: context.max_parts]
            ] or [(standalone, strategy, 0)]  # fmt: skip
            if turn != "search" and not reply:
                turn = "search"  # a reply with nothing to say is no reply: search instead
            if turn == "search" and decided.whole_corpus:
                turn, plan = "global", [(standalone, "global", 0)]
        standalone = plan[0][0] if len(plan) == 1 else state.question
        parts = self._budget(context, plan, calls) if turn in ("search", "global") else []
        if turn == "search" and any(p["max_searches"] == 0 for p in parts):
            skipped = sum(p["max_searches"] == 0 for p in parts)
            notices.append(
                f"Search budget spent: {skipped} part(s) of the question were not searched "
                f"(max_searches_per_turn = {context.max_searches_per_turn})."
            )
        runtime.stream_writer(
            {"event": "planned", "turn": turn, "parts": [p["question"] for p in parts]}
        )
        return {
            "turn": turn,
            "reply": reply,
            "plan": parts,
            "standalone_question": standalone,
            "footnote_model_calls": calls,
            "footnote_notices": notices,
            "footnote_route": [f"plan_turn:{turn}:{len(parts)}"],
        }

    @staticmethod
    def _may_skip_search(plan: TurnPlan, state: State, earlier: list[str], max_parts: int) -> bool:
        """A model's plan may skip the search only for a turn the offline rules also see as
        conversational (a reply), or with one clarifying question about a single question (a
        question in several parts says what it asks): a weak model otherwise "replies" to
        real questions from its own knowledge."""
        if plan.action == "search":
            return True
        if plan.action == "clarify":
            reply = plan.reply.strip()
            return (
                reply.endswith("?")
                and reply.count("?") == 1
                and len(reply) <= 300
                and len(planner.split_question(state.question, max_parts=max_parts)) == 1
            )
        previous = [m for m in state.messages[:-1] if isinstance(m, AIMessage) and not m.tool_calls]
        return (
            planner.conversational_reply(
                state.question,
                earlier[-1] if earlier else "",
                text_of(previous[-1]) if previous else "",
                state.previous_citations,
            )
            is not None
        )

    def _model_plan(
        self, context: Context, state: State, standalone: str
    ) -> tuple[TurnPlan | None, str]:
        """The model's plan, or None and why it could not be used."""
        prompt = prompts.PLAN_PROMPT.format(
            conversation=conversation_text(state.messages[:-1]) or "(none)",
            question=standalone,
            max_parts=context.max_parts,
        )
        try:
            plan, _ = self.models.structured(
                context, TurnPlan, prompt, internal_call("plan_turn", trace_metadata(context))
            )
        except Exception as exc:  # an unusable plan must not end the run: plan by the rules
            if is_timeout(exc):
                raise
            return None, f"Planning fell back to the rules ({type(exc).__name__})."
        return plan, ""

    @staticmethod
    def _offline_plan(
        context: Context, state: State, earlier: list[str]
    ) -> tuple[str, str, list[tuple[str, str, int]]]:
        previous = [m for m in state.messages[:-1] if isinstance(m, AIMessage) and not m.tool_calls]
        reply = planner.conversational_reply(
            state.question,
            earlier[-1] if earlier else "",
            text_of(previous[-1]) if previous else "",
            state.previous_citations,
        )
        if reply is not None:
            return "reply", reply, []
        if planner.is_global_question(state.question):
            return "global", "", [(state.question, "global", 0)]
        parts = planner.split_question(state.question, max_parts=context.max_parts)
        if len(parts) == 1:
            question, strategy = planner.condense_question(state.question, earlier)
            return "search", "", [(question, strategy, 0)]
        strategies = ["bridged" if i and planner.is_bridge(p) else "split" for i, p in
                      enumerate(parts)]  # fmt: skip
        return "search", "", [(part, how, 0) for part, how in zip(parts, strategies, strict=True)]

    @staticmethod
    def _budget(
        context: Context, plan: list[tuple[str, str, int]], calls_used: int
    ) -> list[PlannedPart]:
        """Each part's share of the turn's searches and model calls. Parts share the budget
        evenly, earlier parts first; a part with no search left is reported not covered. A
        bridged part is first searched with the words of the part before it."""
        n = len(plan)
        searches, calls = context.max_searches_per_turn, context.max_model_calls_per_turn
        calls_left = max(0, calls - calls_used)
        return [
            {
                "index": i,
                "question": question,
                "strategy": strategy,
                "hops": hops,
                "max_searches": searches // n + (1 if i < searches % n else 0),
                "max_model_calls": calls_left // n + (1 if i < calls_left % n else 0),
                "research": planner.bridge_question(plan[i - 1][0], question)
                if strategy == "bridged"
                else question,
            }
            for i, (question, strategy, hops) in enumerate(plan)
        ]

    def reply(self, state: State, runtime: Runtime[Context]) -> dict[str, Any]:
        """A turn that needs no documents: the planned reply, no search, no citations."""
        message = AIMessage(content=state.reply, id=f"answer-{uuid.uuid4().hex[:12]}")
        runtime.stream_writer({"event": "answer", "text": state.reply})
        return {"messages": [message], "footnote_route": [f"reply:{state.turn}"]}

    def research_node(self, research: Any) -> Any:
        """The node that runs one part's research graph (`research`, compiled in graph.py).

        It is called through `Send` once per part, in parallel. The research graph runs as a
        nested graph whose progress events are passed on to this run's own stream, so callers
        see them without streaming subgraphs.
        """

        def research_part(part: dict[str, Any], runtime: Runtime[Context]) -> dict[str, Any]:
            final: dict[str, Any] = {}
            for mode, payload in research.stream(
                part, context=runtime.context, stream_mode=["custom", "values"]
            ):
                if mode == "custom":
                    if part.get("of", 1) > 1:
                        payload = {**payload, "part": part["index"]}
                    runtime.stream_writer(payload)
                else:
                    final = payload
            finding: Finding = {
                "index": part["index"],
                "question": part["question"],
                "documents": list(final.get("documents", [])),
                "searches": final.get("searches", 0),
                "model_calls": final.get("model_calls", 0),
                "rounds": list(final.get("rounds", [])),
                "hop_entities": list(final.get("hop_entities", [])),
                "hop_query": str(final.get("hop_query", "")),
                "first_evidence": int(final.get("first_evidence", 0)),
            }
            return {
                "findings": [finding],
                "footnote_route": list(final.get("route", [])),
                "footnote_notices": list(dict.fromkeys(final.get("notices", []))),  # once each
            }

        return research_part

    def global_answer(self, state: State, runtime: Runtime[Context]) -> dict[str, Any]:
        """A question about the whole corpus: map-reduce over the entity graph's communities
        (graph/global_route.py), every sentence checked against its sources."""
        context = Context.coerce(runtime.context)
        model = self.chat_model(context, "answer")
        return global_route.GlobalAnswer(context, state, model).run(runtime.stream_writer)

    # ------------------------------------------------------------------ one part's research

    def _part_model(
        self, context: Context, state: PartState, role: Role = "internal"
    ) -> BaseChatModel | None:
        """The model for a part's next call, or None when offline or the part's share of the
        model-call budget is spent (the part then continues offline)."""
        model = self.chat_model(context, role)
        if model is None or state.model_calls >= state.max_model_calls:
            return None
        return model

    @staticmethod
    def _budget_notice(state: PartState) -> list[str]:
        return [
            f'Model-call budget spent while researching "{state.question}": continued offline '
            "(max_model_calls_per_turn)."
        ]

    def rewrite_query(self, state: PartState, runtime: Runtime[Context]) -> dict[str, Any]:
        """Write the search query for this attempt: the part's question first, a different
        query on a retry."""
        context = Context.coerce(runtime.context)
        model = self._part_model(context, state)
        notices: list[str] = []
        calls = 0
        hyde = ""
        if state.attempts == 0:
            query, strategy = state.first_query or state.question, state.first_strategy
        elif model is not None:
            query = self._ask(
                model,
                prompts.RETRY_PROMPT.format(query=state.query, question=state.question),
                "rewrite_query",
            )
            strategy, calls = "llm_retry", 1
        else:
            if self.chat_model(context) is not None:
                notices += self._budget_notice(state)
            query, strategy = offline.retry_query(state.query, state.candidates), "prf"
        if context.hyde:
            if self.chat_model(context) is None:
                if state.attempts == 0:
                    notices.append("HyDE needs a chat model; it is unavailable offline.")
            elif state.model_calls + calls < state.max_model_calls:
                hyde = self._ask(
                    model or self.models.get(context),  # type: ignore[arg-type]
                    prompts.HYDE_PROMPT.format(question=state.question),
                    "hyde",
                )
                strategy, calls = strategy + "+hyde", calls + 1
        query = query.strip().strip('"') or state.question
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
            "standalone_question": state.question,
            "hyde_passage": hyde,
            "strategy": strategy,
            "model_calls": state.model_calls + calls,
            "notices": notices,
            "route": [f"rewrite_query:{strategy}"],
        }

    def call_retriever(self, state: PartState, runtime: Runtime[Context]) -> dict[str, Any]:
        """The agent step: a model chooses its search calls; offline, one call with the query.

        The graph only gets here when it must search, so the model is asked for the tool by
        name where it accepts that. A model that still makes no call gets the same fallback
        search as the offline path, and the route, a notice and the trace say so.
        """
        context = Context.coerce(runtime.context)
        if self._part_model(context, state) is None:
            update = self._search_update(state, _search_call(state.query), "call_retriever")
            if self.chat_model(context) is not None:
                update["notices"] = self._budget_notice(state)
            return update
        prompt = prompts.AGENT_PROMPT.format(question=state.standalone_question, query=state.query)
        response, how = self.models.call_tool(
            context,
            search_documents,
            [SystemMessage(prompt)],
            internal_call("call_retriever", trace_metadata(context, state)),
        )
        calls = state.model_calls + 1
        if isinstance(response, AIMessage) and response.tool_calls:
            if all(_usable_query(call.get("args", {})) for call in response.tool_calls):
                # The part's search budget bounds the calls one reply may make.
                allowed = max(1, state.max_searches - state.searches)
                if len(response.tool_calls) > allowed:
                    response = response.model_copy(
                        update={"tool_calls": response.tool_calls[:allowed]}
                    )
                return {**self._search_update(state, response, "call_retriever"),
                        "model_calls": calls}  # fmt: skip
            # A forced call from a small model can carry an empty or non-text query.
            return {**self._fallback_search(
                state, runtime, "model's search call had no usable query",
                "The model's search call had no usable query",
            ), "model_calls": calls}  # fmt: skip
        asked = {
            "named": "asked for it by name",
            "offered": "offered the tool",
            "refused": "the server refuses tools",
        }[how]
        return {**self._fallback_search(
            state, runtime, f"model made no tool call ({asked})",
            f"The model made no search call ({asked})",
        ), "model_calls": calls}  # fmt: skip

    def _fallback_search(
        self, state: PartState, runtime: Runtime[Context], why: str, told: str
    ) -> dict[str, Any]:
        """The graph's own search with the rewritten query; `why` goes to the trace, `told`
        opens the notice."""
        runtime.stream_writer({"event": "fallback_search", "query": state.query})
        update = self._search_update(
            state, _search_call(state.query, fallback=why), "call_retriever:fallback_search"
        )
        update["notices"] = [f"{told}; Footnote searched with the rewritten query itself."]
        return update

    @staticmethod
    def _search_update(state: PartState, call: AIMessage, step: str) -> dict[str, Any]:
        return {
            SEARCH_CALLS: [CLEAR, call],
            "candidates": CLEAR,
            "searches": state.searches + len(call.tool_calls),
            "route": [step],
        }

    def plan_hop(self, state: PartState, runtime: Runtime[Context]) -> dict[str, Any]:
        """Multi-hop: shown the evidence so far and the documents the entity graph links it
        to, the model may search once more for what it names ("the team that owns billing"
        -> that team's approver). Offline, the graph plans the hop (graph/hops.py)."""
        context = Context.coerce(runtime.context)
        model = self._part_model(context, state)
        if model is None:
            return self._graph_hop(context, state, runtime)
        linked = self._hop_plan(context, state)
        prompt = prompts.HOP_PROMPT.format(
            question=state.question, sources=format_sources(state.documents)
        )
        if linked is not None and linked.entities:
            prompt += prompts.HOP_NEIGHBOURS.format(entities="; ".join(linked.entities))
        response = model.bind_tools([search_documents]).invoke(
            [SystemMessage(prompt)], config=internal_call("plan_hop", trace_metadata(context))
        )
        update: dict[str, Any] = {"hops": state.hops - 1, "model_calls": state.model_calls + 1}
        if (
            isinstance(response, AIMessage)
            and response.tool_calls
            and all(_usable_query(call.get("args", {})) for call in response.tool_calls)
        ):
            response = response.model_copy(update={"tool_calls": response.tool_calls[:1]})
            query = response.tool_calls[0]["args"]["query"]
            runtime.stream_writer({"event": "rewriting", "query": query, "strategy": "hop",
                                   "attempt": state.attempts + 1})  # fmt: skip
            update.update(self._search_update(state, response, "plan_hop:search"))
            update["strategy"] = "hop"
            update["query"] = query
            return update
        update["route"] = ["plan_hop:done"]
        return update

    @staticmethod
    def _hop_plan(context: Context, state: PartState) -> hops.HopPlan | None:
        """The graph's hop from the part's evidence, for this run's caller."""
        groups, admin = run_caller(context)
        retriever = get_retriever(context.index_dir, context.embeddings)
        caller = Caller(groups=frozenset(groups), admin=admin)
        return hops.plan_hop(retriever, caller, state.question, state.documents)

    def _graph_hop(
        self, context: Context, state: PartState, runtime: Runtime[Context]
    ) -> dict[str, Any]:
        """The offline hop: one more search, through the graph stage, for the bridge entities
        the first evidence (or the question) names and what it left open; within the part's
        rounds and searches."""
        if state.attempts >= context.max_retrieval_attempts or state.searches >= state.max_searches:
            return {"hops": 0, "route": ["plan_hop:budget"]}
        plan = self._hop_plan(context, state)
        if plan is None:
            return {"hops": 0, "route": ["plan_hop:done"]}
        runtime.stream_writer(
            {"event": "rewriting", "query": plan.query, "strategy": "hop",
             "attempt": state.attempts + 1, "entities": plan.entities}
        )  # fmt: skip
        return {
            **self._search_update(state, _search_call(plan.query), "plan_hop:graph"),
            "hops": state.hops - 1,
            "strategy": "hop",
            "query": plan.query,
            "standalone_question": plan.query,  # the hop's chunks answer the hop's query
            "search_stage": "graph",
            "hop_entities": plan.entities,
            "hop_query": plan.query,
            "first_evidence": len(state.documents),
        }

    def grade_documents(self, state: PartState, runtime: Runtime[Context]) -> dict[str, Any]:
        """Score each retrieved chunk on its own and keep those above the threshold."""
        context = Context.coerce(runtime.context)
        candidates = state.candidates
        use_model = self._part_model(context, state) is not None
        grades, notice, method = self._grade(context, state.question, candidates, use_model)
        notices = [notice] if notice else []
        if not use_model and self.chat_model(context) is not None:
            notices += self._budget_notice(state)
        # Grades filter; they reorder only when a model gave them. The offline grade is a
        # coarser signal than the retrieval ranking it would otherwise overrule.
        order = list(range(len(candidates)))
        if use_model:
            order = sorted(order, key=lambda i: -grades[i])
        kept = [candidates[i]["document"] for i in order if grades[i] >= context.grade_threshold][
            : context.keep_k
        ]
        graph_hop = state.strategy == "hop" and state.search_stage == "graph"
        if graph_hop:  # the graph's hop is for the documents the first evidence lacked
            had = {d.metadata.get("source") for d in state.documents}
            kept = [d for d in kept if d.metadata.get("source") not in had]
        trace = _round_trace(state, context, candidates, grades, {d.id for d in kept}, method)
        hop_update: dict[str, Any] = {}
        if graph_hop:
            trace["entities"] = list(state.hop_entities)
            hop_update = {"search_stage": ""}
        if state.strategy == "hop":  # a hop adds to what the first search found
            seen = {d.id for d in state.documents}
            kept = [*state.documents, *(d for d in kept if d.id not in seen)]
        runtime.stream_writer(
            {
                "event": "graded",
                "relevant": len(kept),
                "candidates": len(candidates),
                "method": method,
                "attempt": state.attempts + 1,
            }
        )
        attempts = state.attempts + 1
        if (
            not kept
            and attempts < context.max_retrieval_attempts
            and state.searches >= state.max_searches
        ):
            notices.append(
                f'Search budget spent: "{state.question}" was searched {state.searches} '
                "time(s) (max_searches_per_turn)."
            )
        return {
            SEARCH_CALLS: CLEAR,
            "documents": [CLEAR, *kept],
            "attempts": attempts,
            "model_calls": state.model_calls + (1 if use_model and candidates else 0),
            "notices": notices,
            "route": [f"grade_documents:{len(kept)}/{len(candidates)}"],
            "rounds": [trace],
            **hop_update,
        }

    def _grade(
        self, context: Context, question: str, candidates: Sequence[Candidate], use_model: bool
    ) -> tuple[list[float], str | None, str]:
        """Grades in [0, 1], a notice when the model's grades could not be used, and how they
        were made (a structured-output method, or "offline")."""
        if not use_model or not candidates:
            return self._offline_grades(context, question, candidates), None, "offline"
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
                self._offline_grades(context, question, candidates),
                f"Grading fell back to retrieval evidence ({type(exc).__name__}).",
                "offline",
            )
        if not result.scores or len(result.scores) != len(candidates):
            notice = "Grading fell back to retrieval evidence (malformed grades)."
            return self._offline_grades(context, question, candidates), notice, "offline"
        return [max(0.0, min(1.0, s / 10)) for s in result.scores], None, method

    @staticmethod
    def _offline_grades(
        context: Context, question: str, candidates: Sequence[Candidate]
    ) -> list[float]:
        """The offline grader's grades, made only when they are used: a model's grades need
        none, and the calibrated grader's token recall costs a forward pass per chunk."""
        if reads_token_recall(context.offline_grader, question):
            candidates = with_token_recall(
                list(candidates),
                question,
                context.index_dir,
                context.embeddings,
                measure=may_pass(candidates, question, context.grade_threshold),
            )
        return offline_grades(candidates, context.offline_grader, question, context.grade_threshold)

    def web_search(self, state: PartState, runtime: Runtime[Context]) -> dict[str, Any]:
        """Last resort when the index cannot answer: Tavily results as labelled web sources."""
        context = Context.coerce(runtime.context)
        reason = web_search_available()
        if reason:
            return {"notices": [reason], "route": ["web_search:off"]}
        runtime.stream_writer({"event": "web_search", "query": state.query})
        try:
            docs = search_web(state.question, max_results=context.keep_k)
        except WebSearchError as exc:
            return {"notices": [str(exc)], "route": ["web_search:failed"]}
        return {"documents": [CLEAR, *docs], "route": [f"web_search:{len(docs)}"]}

    # ------------------------------------------------------------------ the answer

    def generate(self, state: State, runtime: Runtime[Context]) -> dict[str, Any]:
        """One answer for the turn: each covered part answered from its own evidence, each
        uncovered part named plainly. Sources are numbered once across the parts.

        Every sentence of a part's draft is accounted for before anything reaches the user
        (`grounding.py`): kept with the source that supports it, or removed and reported. A
        part left with no cited sentence is named not covered, with nothing else under it.
        """
        context = Context.coerce(runtime.context)
        findings = {f["index"]: f for f in state.findings}
        documents: list[Document] = []
        numbers: dict[str | None, int] = {}
        for part in state.plan:
            for doc in findings.get(part["index"], _NO_FINDING)["documents"]:
                if doc.id is None or doc.id not in numbers:
                    documents.append(doc)
                    numbers[doc.id] = len(documents)
        model = self.chat_model(context, "answer")
        calls_left = (
            context.max_model_calls_per_turn
            - state.footnote_model_calls
            - sum(f["model_calls"] for f in findings.values())
        )
        answer_calls = 0
        paragraphs: list[str] = []
        removed: list[dict[str, Any]] = []
        recited: list[dict[str, Any]] = []
        invalid: list[int] = []
        said: set[str] = set()  # what the parts answered so far quoted
        for part in state.plan:
            docs = findings.get(part["index"], _NO_FINDING)["documents"]
            text = ""
            if docs:
                use_model = model is not None and answer_calls < calls_left
                bridged = part["strategy"] == "bridged"
                draft = self._answer_part(
                    context,
                    part["research"],
                    docs,
                    model if use_model else None,
                    findings.get(part["index"], _NO_FINDING),
                    said if bridged else (),
                )
                answer_calls += 1 if use_model else 0
                checked = self._ground(draft, docs, context)
                said |= offline.quoted_sentences(checked.text)
                global_numbers = [numbers[d.id] if d.id is not None else 0 for d in docs]
                text = _renumber(checked.text, global_numbers)
                removed += [_renumbered(c, global_numbers) for c in checked.removed]
                recited += [_renumbered(c, global_numbers, ("was", "now")) for c in checked.recited]
                invalid += [n for n in checked.invalid if n not in invalid]
            if len(state.plan) == 1:
                paragraphs.append(text or prompts.NOT_COVERED)
            else:
                paragraphs.append(
                    f"{prompts.PART_HEADING.format(question=part['question'])}\n{text}" if text
                    else prompts.NOT_COVERED_PART.format(question=part["question"])
                )  # fmt: skip
        answer = "\n\n".join(paragraphs) or prompts.NOT_COVERED
        runtime.stream_writer({"event": "answer", "text": answer})
        notices = []
        if invalid:
            notices.append(
                f"Removed citation(s) {', '.join(f'[{n}]' for n in invalid)}: no such source."
            )
        if removed:
            notices.append(
                f"Removed {len(removed)} claim(s) that the sources do not support: "
                + "; ".join(f'"{_shortened(c["claim"])}"' for c in removed)
            )
        if recited:
            notices.append(
                f"Cited {len(recited)} sentence(s) with the source that supports them (their "
                "citation was missing or named another source)."
            )
        if model is not None and answer_calls < sum(
            bool(findings.get(p["index"], _NO_FINDING)["documents"]) for p in state.plan
        ):
            notices.append("Model-call budget spent: some parts were answered extractively.")
        message = AIMessage(content=answer, id=f"answer-{uuid.uuid4().hex[:12]}")
        return {
            "messages": [message],
            "documents": [CLEAR, *documents],
            "footnote_hops": _hops(state.plan, findings),
            "footnote_invalid_citations": invalid,
            "footnote_unsupported_claims": removed,
            "footnote_searches": sum(f["searches"] for f in findings.values()),
            "footnote_model_calls": state.footnote_model_calls
            + sum(f["model_calls"] for f in findings.values())
            + answer_calls,
            "footnote_notices": notices,
            "footnote_route": ["generate"],
        }

    @staticmethod
    def _ground(draft: str, docs: Sequence[Document], context: Context) -> grounding.Grounded:
        """The draft with every sentence accounted for, against the index's embeddings and
        keyword statistics (web sources too: the index was searched before the web was)."""
        if not draft.strip():
            return grounding.Grounded(text="")
        retriever = get_retriever(context.index_dir, context.embeddings)
        return grounding.ground(
            draft, docs, embed=retriever.embeddings.embed_array, idf=retriever.idf_weights
        )

    def _answer_part(
        self,
        context: Context,
        question: str,
        docs: Sequence[Document],
        model: BaseChatModel | None,
        finding: Finding | None = None,
        said: Collection[str] = (),
    ) -> str:
        """One part's answer from its own sources, numbered from 1; offline, a part that hopped
        answers from both steps (hops.hop_answer). A bridged part is answered as it was
        researched, with the words of the part it refers to; offline it leaves out what that
        part's answer already quoted (`said`), which those words would otherwise draw again."""
        if model is not None:
            response = model.invoke(
                [
                    SystemMessage(context.system_prompt),
                    HumanMessage(
                        prompts.SOURCES_TEMPLATE.format(
                            sources=format_sources(docs), question=question
                        )
                    ),
                ],
                # Not streamed: the draft reaches the user only once every sentence of it
                # is accounted for (generate), as the checked message.
                config={
                    "tags": ["nostream"],
                    "run_name": "generate",
                    "metadata": {**trace_metadata(context), "sources": len(docs)},
                },
            )
            text = text_of(response)
            return "" if text.strip() == prompts.NOT_COVERED else text
        embeddings = get_retriever(context.index_dir, context.embeddings).embeddings
        finding = finding or _NO_FINDING
        first = finding.get("first_evidence", len(docs))
        if finding.get("hop_query") and 0 < first < len(docs):
            bridge = finding.get("hop_entities", [])
            return hops.hop_answer(question, docs, first, bridge, embeddings)
        return offline.extractive_answer(question, docs, embeddings, said=said)

    def verify_citations(self, state: State, runtime: Runtime[Context]) -> dict[str, Any]:
        """List the answer's citations and each part's coverage. The answer was checked
        sentence by sentence when it was made (generate); a citation that still names no
        source is dropped here, so nothing but a given source is ever listed."""
        answer = state.messages[-1]
        cleaned, valid, invalid = verify(text_of(answer), state.documents)
        update: dict[str, Any] = {
            "citations": citation_entries(valid, state.documents),
            "parts": self._parts(state, valid),
            "footnote_invalid_citations": list(
                dict.fromkeys([*state.footnote_invalid_citations, *invalid])
            ),
            "footnote_route": ["verify_citations"],
        }
        if cleaned != text_of(answer):
            update["messages"] = [AIMessage(content=cleaned, id=answer.id)]
        return update

    @staticmethod
    def _parts(state: State, cited: Sequence[int]) -> list[Part]:
        """Each planned part with the cited numbers of its own sources; covered when the
        answer cites at least one of them."""
        findings = {f["index"]: f for f in state.findings}
        number = {doc.id: n for n, doc in enumerate(state.documents, 1)}
        parts: list[Part] = []
        for part in state.plan:
            own = {number.get(d.id) for d in findings.get(part["index"], _NO_FINDING)["documents"]}
            citations = [n for n in cited if n in own]
            parts.append(
                {"question": part["question"], "covered": bool(citations), "citations": citations}
            )
        return parts

    def _ask(self, model: BaseChatModel, prompt: str, name: str) -> str:
        response = model.invoke([HumanMessage(prompt)], config=internal_call(name))
        return text_of(response).strip()


_NO_FINDING: Finding = {"index": -1, "question": "", "documents": [], "searches": 0,
                        "model_calls": 0, "rounds": []}  # fmt: skip


def _hops(plan: Sequence[PlannedPart], findings: dict[int, Finding]) -> list[Hop]:
    """The parts whose hop through the entity graph added documents, for the answer."""
    out: list[Hop] = []
    for part in plan:
        finding = findings.get(part["index"], _NO_FINDING)
        first = finding.get("first_evidence", 0)
        if finding.get("hop_query") and 0 < first < len(finding["documents"]):
            added = [str(d.metadata.get("source", "")) for d in finding["documents"][first:]]
            out.append({"part": part["index"], "entities": list(finding.get("hop_entities", [])),
                        "query": finding.get("hop_query", ""),
                        "sources": list(dict.fromkeys(added))})  # fmt: skip
    return out


def _round_trace(
    state: PartState,
    context: Context,
    candidates: Sequence[Candidate],
    grades: Sequence[float],
    kept: set[str | None],
    method: str,
) -> Round:
    """What "why this answer" shows of one grading round: each candidate's evidence, grade
    and fate, without its text."""
    rows: list[GradedChunk] = []
    for candidate, grade in zip(candidates, grades, strict=True):
        document = candidate["document"]
        metadata = document.metadata
        is_kept = document.id in kept
        rows.append(
            {
                "chunk_id": str(document.id or metadata.get("chunk_id", "")),
                "source": str(metadata.get("source", "")),
                "section": str(metadata.get("section", "")),
                "dense": float(candidate["evidence"]["dense"]),
                "coverage": float(candidate["evidence"]["coverage"]),
                "grade": float(grade),
                "kept": is_kept,
                "reason": "kept"
                if is_kept
                else "below threshold"
                if grade < context.grade_threshold
                else "beyond keep_k",
            }
        )
    return {
        "query": state.query,
        "strategy": state.strategy,
        "method": method,
        "threshold": context.grade_threshold,
        "keep_k": context.keep_k,
        "candidates": rows,
    }


def _renumbered(
    entry: dict[str, Any], numbers: Sequence[int], keys: Sequence[str] = ("citations",)
) -> dict[str, Any]:
    """A report entry of one part with its citation numbers as the turn numbers them."""
    return {
        **entry,
        **{k: [numbers[n - 1] for n in entry[k] if 1 <= n <= len(numbers)] for k in keys},
    }


def _shortened(claim: str, limit: int = 80) -> str:
    return claim if len(claim) <= limit else claim[: limit - 1].rstrip() + "…"


def _renumber(text: str, numbers: Sequence[int]) -> str:
    """A part's answer cites its own sources from 1; the turn numbers them across parts."""

    def swap(match: re.Match[str]) -> str:
        n = int(match.group(1))
        return f"[{numbers[n - 1]}]" if 1 <= n <= len(numbers) else match.group(0)

    return re.sub(r"\[(\d+)\]", swap, text)


def route_after_planning(
    state: State,
) -> list[Send] | Literal["reply", "generate", "global_answer"]:
    """No search needed: reply. A question about the whole corpus: the global route.
    Otherwise research every part that has searches left, in parallel; a plan with none
    left goes straight to the (uncovered) answer."""
    if state.turn in ("reply", "clarify"):
        return "reply"
    if state.turn == "global":
        return "global_answer"
    sends = [
        Send(
            "research",
            {
                "index": part["index"],
                "of": len(state.plan),
                "question": part["question"],
                "standalone_question": part["question"],
                "first_query": part["research"],
                "first_strategy": part["strategy"],
                "hops": part["hops"],
                "max_searches": part["max_searches"],
                "max_model_calls": part["max_model_calls"],
            },
        )
        for part in state.plan
        if part["max_searches"] > 0
    ]
    return sends or "generate"


def route_after_grading(
    state: PartState, runtime: Runtime[Context]
) -> Literal["plan_hop", "rewrite_query", "web_search", "__end__"]:
    """Enough evidence: done, or one more hop when the plan allows it. Too little: look again
    while both budgets last (rounds per part, the part's share of searches), then the web."""
    context = Context.coerce(runtime.context)
    if state.documents:
        return "plan_hop" if state.hops > 0 and state.searches < state.max_searches else "__end__"
    if state.attempts < max(1, context.max_retrieval_attempts) and (
        state.searches < state.max_searches
    ):
        return "rewrite_query"
    if context.web_search:
        return "web_search"
    return "__end__"


def route_after_hop(state: PartState) -> Literal["tools", "__end__"]:
    """A hop that made a search call goes to the tool; otherwise the part is done."""
    calls = state.search_calls
    made_call = bool(calls) and isinstance(calls[-1], AIMessage) and bool(calls[-1].tool_calls)
    return "tools" if made_call else "__end__"


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
