"""Which offline grader a run uses: the graders' names, the default and why, and the check a
setting passes. Apart from the graders themselves (grader.py), so that what reads a setting (the
run's `Context`, the command line's parser behind `footnote --help`, the server's settings)
imports no model, numpy or LangChain code."""

from __future__ import annotations

from typing import Any, Literal

OfflineGrader = Literal["calibrated", "linear", "judge", "judge-veto", "judge-rescue"]
OFFLINE_GRADERS: tuple[OfflineGrader, ...] = (
    "calibrated",
    "linear",
    "judge",
    "judge-veto",
    "judge-rescue",
)
DEFAULT_OFFLINE_GRADER: OfflineGrader = "judge-rescue"
"""The calibrated grades, and a chunk Footnote's own judge (a cross-encoder reading the
question with the chunk) scores at or above JUDGE_RESCUE_CUT (grader.py) passes
too. The calibrated model
alone (fitted on the handbook set and pyfaq-core, checked on debfaq) is near chance at
answer-or-abstain on questions written apart from the project, by writers who saw only the
handbook: it says "not covered" for most paraphrases while search ranks the right chunk near
the top. The rescue can only turn such a "not covered" into an answer, and it passed every rule
fixed before it was measured: on the fifth sealed set 0.333 answered right against 0.208 with
near misses level, the FAQ corpora's reporting halves level or better; on the seventh, the
guard (answered right and near misses not covered, averaged: 0.496 against 0.467); the whole
suite as the default, once the hop stopped replacing a document it had found again
(graph/nodes/grading.py, hop_evidence); and a cold `footnote ask` within 3 s, the judge loading
on a thread. What it costs: it lets more near misses through on some sealed sets (0.450
against 0.600 on the seventh), and the "another kind" veto (graph/kinds.py) still stops a
chunk headed with another kind of what is asked, for every grader (docs/evaluation.md, "The
judge as a rescue" and "The hop's evidence")."""


JUDGE_GRADERS: tuple[OfflineGrader, ...] = ("judge", "judge-veto", "judge-rescue")
"""The offline graders that read the judge's logits."""


def check_offline_grader(name: Any) -> None:
    """ValueError unless `name` is one of OFFLINE_GRADERS."""
    if name not in OFFLINE_GRADERS:
        options = ", ".join(OFFLINE_GRADERS)
        raise ValueError(f"unknown offline grader {name!r}: use one of {options}")
