"""The answer: each part answered from its graded chunks (a model's draft grounded, or
extracted offline), numbered sources, and the citations checked against them.
"""

from __future__ import annotations

import uuid
from collections.abc import Collection, Sequence
from typing import Any

from langchain_core.documents import Document
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage
from langgraph.runtime import Runtime

from footnote.graph import grounding, hops, offline, prompts
from footnote.graph.citations import (
    citation_entries,
    format_sources,
    in_order_of_use,
    renumbered,
    verify,
)
from footnote.graph.context import Context
from footnote.graph.nodes.base import ModelNodes
from footnote.graph.nodes.messages import text_of, trace_metadata
from footnote.graph.state import (
    CLEAR,
    Finding,
    Hop,
    Part,
    PlannedPart,
    State,
)
from footnote.tools.retrieval import get_retriever

_NO_FINDING: Finding = {"index": -1, "question": "", "documents": [], "searches": 0,
                        "model_calls": 0, "rounds": []}  # fmt: skip
"""What a part that was never researched found: nothing."""


def _hops(plan: Sequence[PlannedPart], findings: dict[int, Finding]) -> list[Hop]:
    """The parts whose hop through the entity graph found documents (added to the evidence,
    or found again in it), for the answer."""
    out: list[Hop] = []
    for part in plan:
        finding = findings.get(part["index"], _NO_FINDING)
        if finding.get("hop_query") and finding.get("hop_sources"):
            out.append({"part": part["index"], "entities": list(finding.get("hop_entities", [])),
                        "query": finding.get("hop_query", ""),
                        "sources": list(finding.get("hop_sources", []))})  # fmt: skip
    return out


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
    """A part's answer cites its own sources from 1; the turn numbers them across parts.
    Brackets in quoted code (`argv[1]`) are code, not citations, and stay as they are."""
    return renumbered(text, lambda n: numbers[n - 1] if 1 <= n <= len(numbers) else n)


class AnswerNodes(ModelNodes):
    """The nodes that write and check the answer (on `State`)."""

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
        answer, documents, in_order = in_order_of_use(answer, documents)
        removed = [_renumbered(c, in_order) for c in removed]
        recited = [_renumbered(c, in_order, ("was", "now")) for c in recited]
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
