"""The turn: a new question, its plan (search or not, one part or several, the whole
corpus), the reply that needs no search, the research of each part in parallel, and the
global route's answer.
"""

from __future__ import annotations

import uuid
from typing import Any

from langchain_core.messages import AIMessage
from langgraph.config import get_config
from langgraph.runtime import Runtime

from footnote.graph import global_route, planner, prompts
from footnote.graph.context import Context
from footnote.graph.model_calls import is_timeout
from footnote.graph.nodes.base import ModelNodes
from footnote.graph.nodes.messages import (
    conversation_text,
    human_questions,
    internal_call,
    text_of,
    trace_metadata,
)
from footnote.graph.nodes.schemas import TurnPlan
from footnote.graph.state import (
    CLEAR,
    Finding,
    PlannedPart,
    State,
)


class TurnNodes(ModelNodes):
    """The turn's nodes (on `State`)."""

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
                "hop_sources": list(final.get("hop_sources", [])),
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
