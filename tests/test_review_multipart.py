"""A question in several parts with a part the documents do not cover reaches the review list,
as every "not covered" answer does, naming the part that was not covered."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from langgraph.checkpoint.memory import InMemorySaver

from footnote.feedback.records import FeedbackStore, Filters, export_beir
from footnote.feedback.why import answer_record
from footnote.graph.graph import make_graph

PARTLY_COVERED = "What is the parental leave policy and how do I rotate an API key?"
UNCOVERED_PART = "What is the parental leave policy?"


def recorded_answer(index: Path, question: str) -> dict[str, Any]:
    """The answer to `question` as the server reads it back from the thread's history."""
    graph: Any = make_graph(checkpointer=InMemorySaver())
    config = {"configurable": {"thread_id": "t"}, "metadata": {"run_id": "r1"}}
    out = graph.invoke(
        {"messages": [{"role": "user", "content": question}]},
        config,
        context={"index_dir": str(index)},
    )
    history = [
        {
            "values": json.loads(json.dumps(s.values, default=lambda o: o.model_dump())),
            "next": list(s.next),
            "metadata": dict(s.metadata),
        }
        for s in graph.get_state_history(config)
    ]
    return answer_record(history, "t", out["messages"][-1].id)


def test_a_multi_part_answer_with_an_uncovered_part_is_reviewed(
    handbook_index: Path, tmp_path: Path
) -> None:
    record = recorded_answer(handbook_index, PARTLY_COVERED)
    assert record["citations"], "the covered part is answered and cited"
    assert record["not_covered"] is True
    assert record["uncovered_parts"] == [UNCOVERED_PART]

    store = FeedbackStore(str(tmp_path / "feedback.sqlite3"))
    store.record(user="alice", answer=record, rating=None)  # as the page records it, unrated
    review = store.search(Filters(user=None, review=True))
    assert [row.message_id for row in review] == [record["message_id"]]
    assert review[0].public()["uncovered_parts"] == [UNCOVERED_PART]

    marked = store.update(review[0].id, {"should_cover": True, "reviewed_by": "root"})
    export_beir([marked], tmp_path / "export")
    gaps = (tmp_path / "export" / "gaps.jsonl").read_text().splitlines()
    assert [json.loads(line)["text"] for line in gaps] == [UNCOVERED_PART]


def test_a_fully_covered_multi_part_answer_is_not_reviewed(handbook_index: Path) -> None:
    record = recorded_answer(
        handbook_index, "How do I rotate an API key, and how long is an STS token valid?"
    )
    assert len(record["why"]["parts"]) == 2
    assert all(part["covered"] for part in record["why"]["parts"])
    assert record["not_covered"] is False and record["uncovered_parts"] == []


def test_a_single_uncovered_question_names_itself(handbook_index: Path) -> None:
    record = recorded_answer(handbook_index, UNCOVERED_PART)
    assert record["not_covered"] is True and not record["citations"]
    assert record["uncovered_parts"] == [UNCOVERED_PART]
