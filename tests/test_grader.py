"""The offline grader: the calibrated model's data file, its checks, and its place in the graph."""

from __future__ import annotations

import json
import math
import pickle
from pathlib import Path
from typing import Any

import pytest
from langchain_core.documents import Document

from footnote.graph import grader
from footnote.graph.context import Context
from footnote.graph.grader import (
    FEATURES,
    OPERATING_GRADE,
    GraderFileError,
    linear_score,
    load_grader,
    offline_grades,
    shipped_grader,
)
from footnote.graph.graph import make_graph
from footnote.graph.prompts import NOT_COVERED
from footnote.tools.documents import Candidate, Evidence

SHIPPED = Path(grader.__file__).with_name("grader.json")
API_KEY_QUESTION = "How often do I have to change my API key?"


def candidates(*evidence: tuple[float, float]) -> list[Candidate]:
    return [
        Candidate(
            document=Document(page_content=f"chunk {i}"),
            evidence=Evidence(dense=dense, coverage=coverage),
        )
        for i, (dense, coverage) in enumerate(evidence)
    ]


def shipped_data() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(SHIPPED.read_text(encoding="utf-8"))
    return data


def test_shipped_file_is_plain_json_and_loads_without_pickle(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def no_pickle(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the grader must not be unpickled")

    monkeypatch.setattr(pickle, "load", no_pickle)
    monkeypatch.setattr(pickle, "loads", no_pickle)
    model = load_grader()
    assert model == load_grader(SHIPPED)
    assert set(model.features) <= set(FEATURES)
    assert "heading" not in model.features
    assert 0 < model.threshold < 1
    assert all(w >= 0 for w in model.weights)
    # where and how it was fitted travels with the numbers
    assert model.fit["fitted_on"] == "pyfaq-core"
    assert model.fit["checked_on"] == "debfaq"
    assert "benchmarks/fit_grader.py" in model.fit["command"]


def test_round_trip(tmp_path: Path) -> None:
    model = load_grader()
    assert model.to_json() == shipped_data()
    copy = tmp_path / "grader.json"
    copy.write_text(json.dumps(model.to_json()), encoding="utf-8")
    assert load_grader(copy) == model


@pytest.mark.parametrize(
    ("tamper", "message"),
    [
        (lambda d: d["features"].__setitem__(-1, "heading"), "must be distinct names among"),
        (lambda d: d.update(features=[d["features"][0]] * len(d["features"])), "distinct"),
        (lambda d: d.update(features=[]), "distinct"),
        (lambda d: d.update(features="dense"), "distinct"),
        (lambda d: d.update(features=[*d["features"], "agreement"]), "mean must be a list of"),
        (lambda d: d.update(weights=d["weights"][:-1]), "weights must be a list of"),
        (lambda d: d.update(mean="0.5"), "mean must be a list of"),
        (lambda d: d["scale"].__setitem__(0, 0.0), "scale must be positive"),
        (lambda d: d["weights"].__setitem__(0, -0.1), "negative weight"),
        (lambda d: d["weights"].__setitem__(1, "1"), "not a finite number"),
        (lambda d: d["mean"].__setitem__(-1, True), "not a finite number"),
        (lambda d: d.update(bias=None), "bias"),
        (lambda d: d.update(threshold=1.5), "threshold must lie"),
        (lambda d: d.update(threshold=0), "threshold must lie"),
        (lambda d: d.pop("bias"), "missing bias"),
        (lambda d: d.update(fit=[1, 2]), "fit must be an object"),
    ],
)
def test_tampered_file_is_refused(tmp_path: Path, tamper: Any, message: str) -> None:
    data = shipped_data()
    tamper(data)
    path = tmp_path / "grader.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    with pytest.raises(GraderFileError, match=message):
        load_grader(path)


@pytest.mark.parametrize("constant", ["NaN", "Infinity", "-Infinity"])
def test_non_finite_numbers_are_refused(tmp_path: Path, constant: str) -> None:
    text = json.dumps(shipped_data()).replace('"bias": ', f'"bias": {constant}, "was": ', 1)
    path = tmp_path / "grader.json"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(GraderFileError, match="not valid JSON|not a finite number"):
        load_grader(path)


@pytest.mark.parametrize("text", ["", "{", "[1, 2]", '"grader"'])
def test_malformed_file_is_refused(tmp_path: Path, text: str) -> None:
    path = tmp_path / "grader.json"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(GraderFileError, match=str(path)):
        load_grader(path)


def test_missing_file_is_refused(tmp_path: Path) -> None:
    with pytest.raises(GraderFileError, match="missing.json"):
        load_grader(tmp_path / "missing.json")


@pytest.mark.parametrize("offline_grader", ["calibrated", "linear"])
@pytest.mark.parametrize("which", [0, 2])
@pytest.mark.parametrize("field", ["dense", "coverage"])
def test_grade_is_monotone_in_the_evidence(which: int, field: str, offline_grader: Any) -> None:
    base = [(0.55, 0.5), (0.5, 0.6), (0.4, 0.3), (0.35, 0.1)]
    previous = -1.0
    for value in [i / 20 for i in range(21)]:
        evidence = list(base)
        dense, coverage = evidence[which]
        evidence[which] = (value, coverage) if field == "dense" else (dense, value)
        grade = offline_grades(candidates(*evidence), offline_grader)[which]
        assert 0.0 <= grade <= 1.0
        assert grade >= previous - 1e-12
        previous = grade


def test_the_fitted_threshold_is_the_operating_grade() -> None:
    model = shipped_grader()
    grid = [(d / 10, c / 10) for d in range(2, 9) for c in range(0, 11, 2)]
    for start in range(0, len(grid), 8):
        pool = candidates(*grid[start : start + 8])
        for p, g in zip(model.probabilities(pool), model.grades(pool), strict=True):
            assert (g >= OPERATING_GRADE) == (p >= model.threshold)
            assert math.isclose(g, OPERATING_GRADE) == math.isclose(p, model.threshold)
    assert Context().grade_threshold == OPERATING_GRADE
    assert Context().offline_grader == "linear"


def test_linear_grader_keeps_its_operating_point() -> None:
    # 0.6 x 0.5 + 0.4 x 0.2875 = 0.415, the linear blend's threshold
    at, below = offline_grades(candidates((0.5, 0.2875), (0.5, 0.28)), "linear")
    assert math.isclose(at, OPERATING_GRADE)
    assert below < OPERATING_GRADE
    assert linear_score(candidates((0.5, 0.2875))[0]) == pytest.approx(0.415)


def test_unknown_offline_grader_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown offline grader"):
        Context(offline_grader="heading")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="unknown offline grader"):
        offline_grades(candidates((0.5, 0.5)), "heading")  # type: ignore[arg-type]


def ask(question: str, index: Path, **context: Any) -> dict[str, Any]:
    """The turn's state after the run, with the graded `candidates` and kept `documents` of
    its (single) part's research, which runs as a nested graph."""
    final: dict[str, Any] = {}
    research: dict[str, Any] = {}
    graph: Any = make_graph()
    for namespace, values in graph.stream(
        {"messages": [{"role": "user", "content": question}]},
        context={"index_dir": str(index), **context},
        stream_mode="values",
        subgraphs=True,
    ):
        if namespace:
            research = values
        else:
            final = values
    assert research, "the question was researched"
    return {**final, "candidates": research["candidates"], "documents": research["documents"]}


@pytest.mark.parametrize("offline_grader", ["calibrated", "linear"])
def test_worked_example_with_each_grader(handbook_index: Path, offline_grader: str) -> None:
    out = ask(API_KEY_QUESTION, handbook_index, offline_grader=offline_grader)
    assert out["candidates"][0]["document"].metadata["source"] == "keys.md"
    assert "90 days" in out["messages"][-1].content
    assert out["citations"] and out["citations"][0]["source"] == "keys.md"
    assert out["citations"][0]["chunk_id"].startswith("keys.md#rotation")


@pytest.mark.parametrize("offline_grader", ["calibrated", "linear"])
def test_parental_leave_is_not_covered_with_each_grader(
    handbook_index: Path, offline_grader: str
) -> None:
    out = ask("What is the parental leave policy?", handbook_index, offline_grader=offline_grader)
    assert out["messages"][-1].content == NOT_COVERED
    assert out["citations"] == []


def test_graph_keeps_what_passes_the_fitted_threshold(handbook_index: Path) -> None:
    out = ask(API_KEY_QUESTION, handbook_index, offline_grader="calibrated")
    pool = out["candidates"]
    passing = [
        c["document"]
        for c, p in zip(pool, shipped_grader().probabilities(pool), strict=True)
        if p >= shipped_grader().threshold
    ]
    assert passing and out["documents"] == passing[:4]


def test_handbook_ranks_rotation_above_sts_credentials(handbook_index: Path) -> None:
    """The heading feature once ranked sts.md § Credentials above keys.md § Rotation."""
    out = ask("How often are API keys rotated?", handbook_index, offline_grader="calibrated")
    pool = out["candidates"]
    by_grade = sorted(
        zip(offline_grades(pool, "calibrated"), pool, strict=True), key=lambda pair: -pair[0]
    )
    assert by_grade[0][1]["document"].metadata["source"] == "keys.md"
