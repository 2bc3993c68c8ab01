"""Multi-part answers over the handbook read as a whole: each covered part under a heading in
the user's words on a line of its own, and a part that refers back to the one before (a
bridge: "the devices used for it") researched with that part's words, not as a question of
its own.

The example questions are answered in full by the calibrated grader, the default; the linear
one says the paraphrased first parts are not covered even when asked alone (the grader's
calibration, not the split: each split part gets the candidates and grades of the same
question asked alone, and its right chunk ranks first or second with a linear grade of 0.476
and 0.435 against the operating point's 0.5; docs/evaluation.md, "Multi-part").
The tests say which grader they use."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from langgraph.checkpoint.memory import InMemorySaver

from footnote.graph import planner
from footnote.graph.graph import make_graph

FIRST_WEEK = (
    "What should a new hire set up in the first week, and what does the policy say about the "
    "devices used for it?"
)
LEAKED_KEYS = (
    "Which channel takes reports of leaked keys, and how long is a service account token valid?"
)


def ask(index: Path, question: str, **context: Any) -> dict[str, Any]:
    """The turn's whole state (the plan and findings as well as the output)."""
    graph: Any = make_graph(checkpointer=InMemorySaver())
    config = {"configurable": {"thread_id": "t"}}
    graph.invoke(
        {"messages": [{"role": "user", "content": question}]},
        config,
        context={"index_dir": str(index), **context},
    )
    state: dict[str, Any] = graph.get_state(config).values
    return state


def part_answers(out: dict[str, Any]) -> list[tuple[str, str, set[str]]]:
    """Each covered part's heading line, its text and the files its citations name."""
    sources = {c["n"]: Path(c["source"]).name for c in out["citations"]}
    paragraphs = str(out["messages"][-1].content).split("\n\n")
    covered = [p for p in out["parts"] if p["covered"]]
    assert len(paragraphs) == len(out["parts"]) and covered, paragraphs
    answers = []
    for part, paragraph in zip(out["parts"], paragraphs, strict=True):
        if part["covered"]:
            heading, _, text = paragraph.partition("\n")
            answers.append((heading, text, {sources[n] for n in part["citations"]}))
    return answers


def sentences(text: str) -> list[str]:
    return [s.strip() for s in re.split(r"\[\d+\]", text) if s.strip()]


def test_a_part_that_refers_back_is_researched_with_the_part_before() -> None:
    parts = planner.split_question(FIRST_WEEK)
    assert [planner.is_bridge(p) for p in parts[1:]] == [True]
    assert not any(planner.is_bridge(p) for p in planner.split_question(LEAKED_KEYS)[1:])
    bridged = planner.bridge_question(parts[0], parts[1])
    assert "first week" in bridged and "devices used for it" in bridged


def test_the_bridge_is_searched_with_its_referent(handbook_index: Path) -> None:
    out = ask(handbook_index, FIRST_WEEK)
    plan = out["plan"]
    assert [p["strategy"] for p in plan] == ["split", "bridged"]
    assert plan[1]["question"] == "What does the policy say about the devices used for it?"
    first_query = {f["index"]: f["rounds"][0]["query"] for f in out["findings"]}[1]
    assert "first week" in first_query and "devices used for it" in first_query
    # "it" is the two-factor authentication the first part's section names: its devices.
    assert "Hardware security keys" in str(out["messages"][-1].content)


LINEAR_ABSTAINS = pytest.mark.xfail(
    strict=True,
    reason="the linear grader grades each first part's right chunk below the operating point, "
    "as it does the same question asked alone (0.476 and 0.435 against 0.5); a lower "
    "threshold answers parental-leave near misses (docs/evaluation.md, 'Multi-part')",
)


@pytest.mark.parametrize("grader", ["default", pytest.param("linear", marks=LINEAR_ABSTAINS)])
def test_the_example_questions_are_answered_part_by_part(handbook_index: Path, grader: str) -> None:
    chosen = {} if grader == "default" else {"offline_grader": grader}
    first_week = part_answers(ask(handbook_index, FIRST_WEEK, **chosen))
    assert [heading for heading, _, _ in first_week] == [
        "## What should a new hire set up in the first week?",
        "## What does the policy say about the devices used for it?",
    ]
    (_, set_up, set_up_files), (_, devices, devices_files) = first_week
    assert "two-factor authentication" in set_up and "onboarding.md" in set_up_files
    # "it" is the two-factor authentication the first part names: its devices, not laptops.
    assert "Hardware security keys" in devices and "security-policy.txt" in devices_files
    # The bridge, searched with the first part's words, does not quote its answer again.
    assert not set(sentences(set_up)) & set(sentences(devices)), (set_up, devices)

    leaked = part_answers(ask(handbook_index, LEAKED_KEYS, **chosen))
    assert [heading for heading, _, _ in leaked] == [
        "## Which channel takes reports of leaked keys?",
        "## How long is a service account token valid?",
    ]
    (_, channel, channel_files), (_, valid, valid_files) = leaked
    assert "#sec-incidents" in channel and channel_files == {"keys.md"}
    assert "one hour" in valid and "sts.md" in valid_files


def test_a_part_heading_is_a_line_of_its_own(handbook_index: Path) -> None:
    out = ask(handbook_index, LEAKED_KEYS)  # both parts covered
    for heading, text, _ in part_answers(out):
        assert heading.startswith("## ") and heading.endswith("?"), heading
        assert "?" not in text, text  # no question text glued into the answer


def test_a_question_with_one_part_has_no_heading(handbook_index: Path) -> None:
    out = ask(handbook_index, "How often do I have to change my API key?")
    answer = str(out["messages"][-1].content)
    assert len(out["plan"]) == 1 and "#" not in answer and "?" not in answer, answer
    assert Path(out["citations"][0]["source"]).name == "keys.md"


def research_rounds(finding: dict[str, Any]) -> list[tuple[str, list[tuple[str, float]]]]:
    """Each round's query and its candidates with their grades, in retrieval order."""
    return [
        (r["query"], [(c["chunk_id"], round(c["grade"], 6)) for c in r["candidates"]])
        for r in finding["rounds"]
    ]


def test_each_part_is_researched_as_the_same_question_asked_alone(handbook_index: Path) -> None:
    """A split part gets what a whole question would: the same searches, candidates and grades
    (no other part's words in its query or its grade), so it is covered exactly when the same
    question asked alone is. A bridged part is searched with its referent's words by design."""
    for question in (FIRST_WEEK, LEAKED_KEYS):
        out = ask(handbook_index, question)
        covered = {p["question"]: p["covered"] for p in out["parts"]}
        findings = {f["index"]: f for f in out["findings"]}
        for part in out["plan"]:
            if part["strategy"] != "split":
                continue
            alone = ask(handbook_index, part["question"])
            assert research_rounds(findings[part["index"]]) == research_rounds(
                alone["findings"][0]
            ), part
            assert covered[part["question"]] == bool(alone["citations"]), part


def test_sources_are_numbered_without_gaps(handbook_index: Path) -> None:
    """Two sources kept, the first not quoted: the answer cited [1] and [3] before, with no
    [2] anywhere a reader could find it."""
    out = ask(handbook_index, "How do I get a new service identity for my backend?")
    numbers = [c["n"] for c in out["citations"]]
    assert len(numbers) >= 2 and numbers == list(range(1, len(numbers) + 1))
    marks = {int(n) for n in re.findall(r"\[(\d+)\]", str(out["messages"][-1].content))}
    assert marks == set(numbers)
