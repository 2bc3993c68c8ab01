"""The judge (models/judge.py): Footnote's own cross-encoder, shipped as an ONNX file.

Its file is untrusted until checked (size and sha256 against MANIFEST.json; a tampered,
truncated or renamed file is refused with one clear error), it runs without torch, its scores
are deterministic, and the `judge` reranker orders candidates by its logits.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from footnote.models.judge import JUDGE_DIR, Judge, JudgeModelError, load_judge, verified_model

QUESTION = "How often do I have to change my API key?"
ROTATION = (
    "Security > API keys\nAPI keys must be rotated every 90 days. Create the new key first, "
    "then revoke the old one."
)
LEAVE = "Leave > Annual leave\nEvery employee has 25 days of annual leave per calendar year."


@pytest.fixture
def judge_copy(tmp_path: Path) -> Path:
    """A copy of the shipped judge's folder that a test may damage."""
    folder = tmp_path / "judge"
    shutil.copytree(JUDGE_DIR, folder)
    return folder


def test_the_shipped_model_matches_its_manifest() -> None:
    data, manifest = verified_model(JUDGE_DIR)
    assert manifest["file"] == "model.onnx" and len(data) == manifest["size"]
    for field in ("base_model", "licence", "training_data", "training_run", "quantisation_check"):
        assert manifest.get(field), f"MANIFEST.json says nothing of {field}"


def test_a_tampered_model_is_refused(judge_copy: Path) -> None:
    model = judge_copy / "model.onnx"
    data = bytearray(model.read_bytes())
    data[len(data) // 2] ^= 0xFF  # one flipped byte, size unchanged
    model.write_bytes(bytes(data))
    with pytest.raises(JudgeModelError, match="does not match the checksum"):
        Judge(judge_copy)


def test_a_truncated_model_is_refused(judge_copy: Path) -> None:
    model = judge_copy / "model.onnx"
    model.write_bytes(model.read_bytes()[:1000])
    with pytest.raises(JudgeModelError, match="tampered with or truncated"):
        Judge(judge_copy)


@pytest.mark.parametrize(
    "change",
    [
        {"file": "../model.onnx"},
        {"file": "/etc/passwd"},
        {"sha256": "not-a-digest"},
        {"max_length": 100000},
        {"size": "12"},
    ],
)
def test_a_manifest_that_points_elsewhere_or_is_malformed_is_refused(
    judge_copy: Path, change: dict[str, object]
) -> None:
    manifest_path = judge_copy / "MANIFEST.json"
    manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
    manifest_path.write_text(json.dumps(manifest | change), encoding="utf-8")
    with pytest.raises(JudgeModelError, match="malformed"):
        Judge(judge_copy)


def test_a_missing_manifest_is_refused(judge_copy: Path) -> None:
    (judge_copy / "MANIFEST.json").unlink()
    with pytest.raises(JudgeModelError, match="cannot read the judge's manifest"):
        Judge(judge_copy)


def test_the_judge_runs_without_torch() -> None:
    """In a fresh interpreter where importing torch fails, the judge loads and scores."""
    script = (
        "import sys\n"
        "sys.modules['torch'] = None  # any `import torch` now raises ImportError\n"
        "from footnote.models.judge import load_judge\n"
        f"scores = load_judge().score({QUESTION!r}, [{ROTATION!r}, {LEAVE!r}])\n"
        "assert scores[0] > scores[1], scores\n"
        "assert sys.modules['torch'] is None\n"
        "print('ok')\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"


def test_scores_are_deterministic_and_do_not_depend_on_the_batch() -> None:
    judge = load_judge()
    passages = [ROTATION, LEAVE] * 20  # 40 pairs: more than one batch
    first, second = judge.score(QUESTION, passages), judge.score(QUESTION, passages)
    assert first.dtype == np.float32 and first.shape == (40,)
    assert np.array_equal(first, second)
    alone = judge.score(QUESTION, [ROTATION])[0]
    assert abs(float(alone) - float(first[0])) < 1e-3  # padding beside it changes nothing


class RecordingSession:
    """Wraps an onnxruntime session and records how many pairs each run was given."""

    def __init__(self, session: Any) -> None:
        self.session = session
        self.batch_sizes: list[int] = []

    def run(self, names: list[str], feed: dict[str, np.ndarray]) -> Any:
        self.batch_sizes.append(len(feed["input_ids"]))
        return self.session.run(names, feed)


def relabelled(folder: Path, weights: str) -> Judge:
    """The judge in `folder` with its manifest's `weights` set (the file is unchanged)."""
    manifest_path = folder / "MANIFEST.json"
    manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
    manifest_path.write_text(json.dumps(manifest | {"weights": weights}), encoding="utf-8")
    return Judge(folder)


def test_an_int8_judge_scores_one_pair_per_run(judge_copy: Path, tmp_path: Path) -> None:
    """An int8 file quantises activations with one scale for the whole input, so in a batch a
    pair's logit would move with its neighbours: such a file is run one pair at a time. (Both
    judges here hold the shipped file, labelled int8 and fp32, so only the batching differs.)"""
    quantised = relabelled(judge_copy, "int8 (dynamic quantisation, per channel)")
    full = relabelled(shutil.copytree(JUDGE_DIR, tmp_path / "fp32"), "fp32")
    quantised._session = recorder = RecordingSession(quantised._session)
    full._session = batched = RecordingSession(full._session)
    passages = [ROTATION, LEAVE] * 20
    scores = quantised.score(QUESTION, passages)
    assert recorder.batch_sizes == [1] * 40
    alone = [full.score(QUESTION, [passage])[0] for passage in passages[:2]]
    assert np.array_equal(scores[:2], np.array(alone, dtype=np.float32))
    batched.batch_sizes.clear()
    full.score(QUESTION, passages)
    assert batched.batch_sizes == [16, 16, 8]


def test_the_judge_prefers_the_answer_to_a_paraphrase() -> None:
    """The worked example's words are not the document's (change vs rotated)."""
    scores = load_judge().score(QUESTION, [ROTATION, LEAVE])
    assert scores[0] > scores[1]


def test_the_judge_reranker_orders_the_candidates_by_the_judges_logits(
    handbook_index: Path,
) -> None:
    """Opt-in (`--reranker judge`): each hit's score is the judge's logit for the question
    and that chunk's heading path and text, highest first. It is not the default: on the
    worked example it ranks keys.md's rotation section fourth (docs/evaluation.md, "The
    judge"), where the default search ranks keys.md first."""
    from footnote.store.text import heading_prefix
    from footnote.store.types import Caller
    from footnote.tools.search import SearchRequest, search

    hits = search(SearchRequest(query=QUESTION, index_dir=handbook_index, k=8,
                                caller=Caller.operator(), reranker="judge"))  # fmt: skip
    assert len(hits) == 8
    passages = [f"{heading_prefix(h.chunk.title, h.chunk.section)}\n{h.chunk.text}" for h in hits]
    logits = load_judge().score(QUESTION, passages)
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)
    assert np.allclose([h.score for h in hits], logits, atol=1e-4)


def test_a_damaged_judge_gives_one_clear_error_from_the_reranker(
    judge_copy: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from footnote.models import judge as judge_module
    from footnote.models.embeddings import load_embeddings
    from footnote.tools.rerank import RerankerError, make_reranker

    (judge_copy / "model.onnx").write_bytes(b"not a model")
    judge_module._shipped_judge.cache_clear()
    monkeypatch.setattr(judge_module, "JUDGE_DIR", judge_copy)
    try:
        with pytest.raises(RerankerError, match="does not match the checksum"):
            make_reranker("judge", load_embeddings(""))
    finally:
        judge_module._shipped_judge.cache_clear()


def test_the_judge_grader_puts_its_fitted_threshold_at_the_operating_point(
    handbook_index: Path,
) -> None:
    """`offline_grader="judge"`: each candidate's grade is the sigmoid of its logit less
    JUDGE_THRESHOLD, so a grade passes 0.5 exactly when the judge's logit passes the
    threshold fitted on the fitting halves; the grader needs no token recall."""
    import math

    from footnote.graph.grader import (
        JUDGE_THRESHOLD,
        OPERATING_GRADE,
        offline_grades,
        reads_token_recall,
    )
    from footnote.store.types import Caller
    from footnote.tools.documents import embedding_text_of, retrieve_candidates
    from footnote.tools.search import SearchRequest

    request = SearchRequest(query=QUESTION, index_dir=handbook_index, k=8,
                            caller=Caller.operator())  # fmt: skip
    candidates = retrieve_candidates(request, question=QUESTION)
    grades = offline_grades(candidates, "judge", QUESTION)
    logits = load_judge().score(QUESTION, [embedding_text_of(c["document"]) for c in candidates])
    assert len(grades) == len(candidates) == 8
    for grade, logit in zip(grades, logits, strict=True):
        assert math.isclose(grade, 1 / (1 + math.exp(JUDGE_THRESHOLD - float(logit))), rel_tol=1e-6)
        assert (grade >= OPERATING_GRADE) == (float(logit) >= JUDGE_THRESHOLD)
    assert offline_grades([], "judge", QUESTION) == []
    assert not reads_token_recall("judge", QUESTION)


def test_a_judge_loaded_early_is_built_once_and_handed_to_the_grader(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """load_judge_early starts the load on a thread; a load_judge() that arrives meanwhile
    waits for that load and gets the same judge, never a second 90 MB session."""
    import threading

    from footnote.models import judge as judge_module

    built: list[object] = []
    started, release = threading.Event(), threading.Event()

    class SlowJudge:
        def __init__(self) -> None:
            started.set()
            release.wait(5)  # still loading when the grader asks
            built.append(self)

    monkeypatch.setattr(judge_module, "Judge", SlowJudge)
    judge_module._shipped_judge.cache_clear()
    try:
        judge_module.load_judge_early()
        assert started.wait(5)
        threading.Timer(0.2, release.set).start()
        judge = load_judge()
        assert judge is built[0] and len(built) == 1
        assert load_judge() is judge
    finally:
        judge_module._shipped_judge.cache_clear()


def test_a_damaged_judge_loaded_early_is_reported_by_the_load_that_needs_it(
    judge_copy: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The early load keeps quiet about a damaged file (it runs on a thread no one reads); the
    grader's own load meets the same file and gives the clear error."""
    import threading

    from footnote.models import judge as judge_module

    (judge_copy / "model.onnx").write_bytes(b"not a model")
    monkeypatch.setattr(judge_module, "JUDGE_DIR", judge_copy)
    judge_module._shipped_judge.cache_clear()
    try:
        judge_module.load_judge_early()
        for thread in threading.enumerate():
            if thread.name == "footnote-judge-load":
                thread.join(10)
        with pytest.raises(JudgeModelError, match="does not match the checksum"):
            load_judge()
    finally:
        judge_module._shipped_judge.cache_clear()
