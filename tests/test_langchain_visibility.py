"""What LangChain tooling sees of an answer: each search as a retriever run carrying the
chunks it found (LangSmith shows retriever spans from these callbacks), and the research
subgraph in the graph's picture."""

from __future__ import annotations

from pathlib import Path
from typing import Any
from uuid import UUID

from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.documents import Document
from langchain_core.messages import HumanMessage

from footnote.graph.context import Context
from footnote.graph.graph import make_graph

QUESTION = "How often do I have to change my API key?"


class RetrieverEvents(BaseCallbackHandler):
    def __init__(self) -> None:
        self.started: dict[UUID, str] = {}
        self.ended: dict[UUID, list[Document]] = {}
        self.names: dict[UUID, str] = {}

    def on_retriever_start(
        self, serialized: dict[str, Any] | None, query: str, *, run_id: UUID, **kwargs: Any
    ) -> None:
        self.started[run_id] = query
        self.names[run_id] = str(kwargs.get("name"))

    def on_retriever_end(self, documents: Any, *, run_id: UUID, **kwargs: Any) -> None:
        self.ended[run_id] = list(documents)


def test_each_search_of_an_answer_is_a_retriever_run_with_its_chunks(
    handbook_index: Path,
) -> None:
    events = RetrieverEvents()
    output = make_graph().invoke(
        {"messages": [HumanMessage(QUESTION)]},
        {"callbacks": [events]},
        context=Context(index_dir=str(handbook_index)),
    )

    assert events.started and set(events.ended) == set(events.started)
    assert set(events.names.values()) == {"footnote_retriever"}
    found = [d.id for documents in events.ended.values() for d in documents]
    assert found[0] == "keys.md#rotation:0"
    cited = {c["chunk_id"] for c in output["citations"]}
    assert cited <= set(found)
    first = next(iter(events.ended.values()))[0]
    assert first.metadata["source"] == "keys.md" and first.page_content


XRAY_SNAPSHOT = Path(__file__).parent / "snapshots" / "answer_graph_xray.mmd"


def test_the_research_subgraph_is_drawn_inside_the_answer_graph() -> None:
    """get_graph(xray=True), which Studio draws, shows the research loop inside `research`."""
    mermaid = make_graph().get_graph(xray=True).draw_mermaid()

    assert "subgraph research" in mermaid
    for step in ("rewrite_query", "call_retriever", "tools", "grade_documents", "plan_hop"):
        assert f"research\\3a{step}(" in mermaid, step
    assert "plan_turn -.-> research\\3a__start__;" in mermaid
    assert "research\\3a__end__ --> generate;" in mermaid
    assert mermaid == XRAY_SNAPSHOT.read_text(encoding="utf-8"), (
        f"the graph's wiring changed: review it and update {XRAY_SNAPSHOT} if intended"
    )
    assert [name for name, _ in make_graph().get_subgraphs()] == ["research"]
