"""The offline grader's two models: the linear blend and the calibrated logistic regression.

Both read only what a candidate carries at grading time: its evidence (embedding similarity
to the question, idf-weighted keyword coverage) and its place among the other candidates of
the same search. Both return grades in [0, 1] scaled so that the grader's operating point, the
threshold it was chosen with on the dev corpus, reads 0.5: the point at which a model's 0-10
grade passes from 5, and `Context.grade_threshold`'s default. Moving `grade_threshold` moves
every grader along its own curve.

The calibrated model is data (`grader.json`, plain JSON written by
`benchmarks/fit_grader.py`), never a pickle; it is checked when it loads.
"""

from __future__ import annotations

import functools
import json
import math
import re
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from footnote.graph.grader_choice import (
    DEFAULT_OFFLINE_GRADER,
    JUDGE_GRADERS,
    OfflineGrader,
    check_offline_grader,
)
from footnote.graph.kinds import is_measure, numbered, vetoed

# The linear grade is the retriever's `relevance` too, so it lives a floor down; its pieces
# are named here as well, where the grading code and its benchmarks read them.
from footnote.tools.documents import LINEAR_THRESHOLD as LINEAR_THRESHOLD
from footnote.tools.documents import OPERATING_GRADE as OPERATING_GRADE
from footnote.tools.documents import (
    Candidate,
    recentred,
    relevance,
    sigmoid,
    with_token_recall,
)
from footnote.tools.documents import linear_score as linear_score

FEATURES = (
    "dense",
    "coverage",
    "dense_margin",
    "dense_rank",
    "coverage_rank",
    "retrieval_rank",
    "agreement",
    "dense_z",
    "source_margin",
    "entity_overlap",
    "answer_type",
    "token_recall",
    "token_recall_min",
)
"""What the grader can compute per candidate, each larger when the chunk looks more relevant:
its similarity and keyword coverage; its similarity minus the best other candidate's (the gap
between it and the next); 1 / (1 + rank) by similarity, by coverage and in retrieval order
(BM25 and dense fused); and the smallest of those three (high only when the signals agree).
A fitted model uses some of them (`grader.json` names which). No heading feature: in the FAQ
corpora every section shares its page's title, so a heading match marked the page, not the
answer, and its fitted weight turned against meaningful headings (docs/evaluation.md).

Four more read the question and the chunk's text as well (`features(..., question=)`):
`dense_z`, the similarity relative to the query's own score distribution (scores mean
something only against each other: a z-score over the candidates); `source_margin`, its
similarity over the best candidate from another file (a paraphrase finds its document well
ahead of the rest); `entity_overlap`, the share of the question's names (acronyms, capitals,
identifiers, numbers) the chunk contains (a near miss shares the topic, not the name: "API
key" against the on-call rotation); and `answer_type`, 1 when the question wants a number, a
duration or a date ("how many", "how long", "when") and the chunk has one, or wants none.

The last two come with the evidence (`Evidence.token_recall`, `token_recall_min`): how well
the chunk matches the question word by word, in the embedder's contextual token vectors. A
near miss shares the topic and leaves a word unmatched ("maternity" against annual leave).
Without token vectors (a provider's embedder) they are neutral (1.0), like the others."""

TOKEN_RECALL_FEATURES = ("token_recall", "token_recall_min")
"""The features read from `Evidence.token_recall`, measured only when a grader weighs them."""

GRADER_FILE = "grader.json"


class GraderFileError(ValueError):
    """The calibrated grader's data file is missing, malformed or not for these features."""


def features(candidates: Sequence[Candidate], question: str = "") -> list[dict[str, float]]:
    """The features of each candidate, from the candidates of one search, in their order.
    Without the question, the question-reading features are neutral (1.0)."""
    evidence = [c["evidence"] for c in candidates]
    dense = [float(e["dense"]) for e in evidence]
    coverage = [float(c["evidence"]["coverage"]) for c in candidates]
    dense_ranks = _ranks(dense)
    coverage_ranks = _ranks(coverage)
    spread = statistics.pstdev(dense) if len(dense) > 1 else 0.0
    centre = statistics.fmean(dense) if dense else 0.0
    sources = [str(c["document"].metadata.get("source", "")) for c in candidates]
    names = question_names(question)
    wants = answer_type(question)
    rows = []
    for i in range(len(candidates)):
        others = dense[:i] + dense[i + 1 :]
        elsewhere = [d for d, s in zip(dense, sources, strict=True) if s != sources[i]]
        ranked = (1 / (1 + dense_ranks[i]), 1 / (1 + coverage_ranks[i]), 1 / (1 + i))
        text = candidate_text(candidates[i])
        rows.append(
            {
                "dense": dense[i],
                "coverage": coverage[i],
                "dense_margin": dense[i] - max(others) if others else 0.0,
                "dense_rank": ranked[0],
                "coverage_rank": ranked[1],
                "retrieval_rank": ranked[2],
                "agreement": min(ranked),
                "dense_z": (dense[i] - centre) / spread if spread > 1e-9 else 0.0,
                "source_margin": dense[i] - max(elsewhere or others or [dense[i]]),
                "entity_overlap": _share_present(names, text),
                "answer_type": 1.0 if not wants or has_answer_type(wants, text) else 0.0,
                "token_recall": float(evidence[i].get("token_recall", 1.0)),
                "token_recall_min": float(evidence[i].get("token_recall_min", 1.0)),
            }
        )
    return rows


_NAME = re.compile(r"\b(?:[A-Z]{2,}\w*|\w*\d\w*|\w+[._]\w+|[A-Z][a-z]+[A-Z]\w*)\b")
"""Acronyms (API, VPN, 2FA), words with digits, dotted or underscored identifiers, CamelCase."""
_CAPITALISED = re.compile(r"(?<=[a-z,;] )[A-Z][a-z]{2,}\b")
"""A capitalised word inside a sentence: a product, a place, a person."""
_ANSWER_TYPES = (
    ("duration", re.compile(r"^\s*(how long|how often|how soon|how quickly|how far)\b", re.I)),
    ("number", re.compile(r"^\s*(how (many|much))\b", re.I)),
    ("date", re.compile(r"^\s*(when|what time|by when|what date)\b", re.I)),
)
_NUMBER_WORDS = (
    r"\b(one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|fifteen|twenty|thirty|"
    r"fifty|hundred|first|second|third|fourth|fifth|half|once|twice|daily|weekly|monthly|"
    r"yearly|annually|quarterly)\b"
)
_HAS = {
    "number": re.compile(rf"\d|{_NUMBER_WORDS}", re.I),
    "duration": re.compile(
        rf"(\d|{_NUMBER_WORDS}).{{0,20}}\b(second|minute|hour|day|week|month|year|quarter)s?\b"
        r"|\b(daily|weekly|monthly|yearly|annually|immediately|at once|before|after|within)\b",
        re.I,
    ),
    "date": re.compile(
        r"\d{1,2}:\d{2}|\b(monday|tuesday|wednesday|thursday|friday|saturday|sunday|january|"
        r"february|march|april|may|june|july|august|september|october|november|december|day|"
        r"week|month|year|daily|weekly|monthly|yearly|next|before|after|within|until|"
        r"by the end|from the)\b",
        re.I,
    ),
}


_QUESTION_OPENING = re.compile(
    r"^\s*(what|how|when|where|who|whom|whose|which|why|whether|is|are|am|was|were|do|does|"
    r"did|can|could|should|would|will|shall|may|might|must|have|has|had|tell|explain|"
    r"describe|list|show|give|find|please)\b",
    re.I,
)
KEYWORD_QUERY_WORDS = 4
"""The longest run of words read as a keyword query rather than a sentence."""


def is_keyword_query(question: str) -> bool:
    """A bare run of topic words ("parental leave"): at most KEYWORD_QUERY_WORDS words, no
    question mark and no question or request opening."""
    text = question.strip()
    return (
        0 < len(text.split()) <= KEYWORD_QUERY_WORDS
        and not text.endswith("?")
        and not _QUESTION_OPENING.match(text)
    )


def grader_for(grader: OfflineGrader, question: str) -> OfflineGrader:
    """The grader that grades this question. The calibrated model was fitted on questions
    only; a keyword query is outside what it saw, and there it answers near misses the
    linear blend does not ("parental leave" from the annual-leave section: three of eight
    keyword near misses against one, benchmarks/handbook_quality.py), so keyword queries get
    the linear blend."""
    return "linear" if grader == "calibrated" and is_keyword_query(question) else grader


def question_names(question: str) -> list[str]:
    """The names in a question a chunk that answers it would contain (lowercased). A number
    the asker measures with ("a 700 EUR pass", "50 minutes ago", "at 3am", "11:30") is their
    situation, not a name: the rule that answers it says "over 500 EUR" or "within 5
    minutes". A number that names a member of a series ("severity 2", "401 errors") stays."""
    members = {number for _, number in numbered(question)}
    found = _NAME.findall(question) + _CAPITALISED.findall(question)
    names = [n for n in found if not is_measure(n) or n in members]
    return list(dict.fromkeys(n.lower() for n in names))


ANSWER_FRAME = re.compile(r"\bhow (?:long|often|soon|quickly|far|many|much)\b", re.I)
"""A question's answer-type frame ("how long", "how many")."""


def without_frame(question: str) -> str:
    """The question without its answer-type frame ("how long", "how many"): those words say
    what kind of answer is wanted, in any words ("valid for one hour"), not what it is
    about, so they are never missing from the evidence."""
    return ANSWER_FRAME.sub(" ", question)


def answer_type(question: str) -> str:
    """What kind of fact the question asks for: number, duration, date, or "" (any)."""
    return next((kind for kind, cue in _ANSWER_TYPES if cue.search(question)), "")


def has_answer_type(kind: str, text: str) -> bool:
    return bool(_HAS[kind].search(text))


def candidate_text(candidate: Candidate) -> str:
    document = candidate["document"]
    meta = document.metadata
    return f"{meta.get('title') or ''} {meta.get('section') or ''} {document.page_content}"


def _share_present(names: Sequence[str], text: str) -> float:
    if not names:
        return 1.0
    lowered = text.lower()
    return sum(bool(re.search(rf"(?<!\w){re.escape(n)}(?!\w)", lowered)) for n in names) / len(
        names
    )


def _ranks(values: Sequence[float]) -> list[int]:
    """0-based rank of each value, highest first; equal values share the better rank."""
    return [sum(other > v for other in values) for v in values]


@dataclass(frozen=True)
class CalibratedGrader:
    """Standardised features, a linear score, a sigmoid: P(the chunk answers the question).
    `threshold` is the operating point on that probability."""

    features: tuple[str, ...]
    mean: tuple[float, ...]
    scale: tuple[float, ...]
    weights: tuple[float, ...]
    bias: float
    threshold: float
    fit: Mapping[str, Any]
    require_names: bool = False
    """A chunk that contains none of the question's names (`question_names`) cannot pass: a
    near miss shares the topic, not the name ("my API key" against the on-call rotation)."""

    def probability(self, row: Mapping[str, float]) -> float:
        if self.require_names and row.get("entity_overlap", 1.0) == 0.0:
            return 0.0
        z = self.bias + sum(
            w * (float(row[f]) - m) / s
            for f, m, s, w in zip(self.features, self.mean, self.scale, self.weights, strict=True)
        )
        return sigmoid(z)

    def probabilities(self, candidates: Sequence[Candidate], question: str = "") -> list[float]:
        return [self.probability(row) for row in features(candidates, question)]

    def grades(self, candidates: Sequence[Candidate], question: str = "") -> list[float]:
        """The probabilities scaled so that the operating point reads OPERATING_GRADE."""
        return [recentred(p, self.threshold) for p in self.probabilities(candidates, question)]

    def to_json(self) -> dict[str, Any]:
        return {
            "features": list(self.features),
            "mean": list(self.mean),
            "scale": list(self.scale),
            "weights": list(self.weights),
            "bias": self.bias,
            "threshold": self.threshold,
            "require_names": self.require_names,
            "fit": dict(self.fit),
        }

    @classmethod
    def from_json(cls, data: Any, where: str = "grader data") -> CalibratedGrader:
        """Check and build; anything else than the expected shape is a GraderFileError."""
        if not isinstance(data, dict):
            raise GraderFileError(f"{where}: expected a JSON object")
        missing = [k for k in ("features", "mean", "scale", "weights", "bias", "threshold")
                   if k not in data]  # fmt: skip
        if missing:
            raise GraderFileError(f"{where}: missing {', '.join(missing)}")
        names = data["features"]
        if (
            not isinstance(names, list)
            or not names
            or not all(isinstance(n, str) and n in FEATURES for n in names)
            or len(set(names)) != len(names)
        ):
            raise GraderFileError(
                f"{where}: features {names!r} must be distinct names among the ones this "
                f"version computes {list(FEATURES)!r}; refit with benchmarks/fit_grader.py"
            )
        vectors = {}
        for key in ("mean", "scale", "weights"):
            values = data[key]
            if not isinstance(values, list) or len(values) != len(names):
                raise GraderFileError(
                    f"{where}: {key} must be a list of {len(names)} numbers, one per feature"
                )
            vectors[key] = tuple(_finite(v, f"{where}: {key}") for v in values)
        if any(s <= 0 for s in vectors["scale"]):
            raise GraderFileError(f"{where}: every scale must be positive")
        if any(w < 0 for w in vectors["weights"]):
            raise GraderFileError(
                f"{where}: a negative weight would make the grade fall as the evidence rises"
            )
        threshold = _finite(data["threshold"], f"{where}: threshold")
        if not 0 < threshold < 1:
            raise GraderFileError(f"{where}: threshold must lie strictly between 0 and 1")
        fit = data.get("fit", {})
        if not isinstance(fit, dict):
            raise GraderFileError(f"{where}: fit must be an object")
        require_names = data.get("require_names", False)
        if not isinstance(require_names, bool):
            raise GraderFileError(f"{where}: require_names must be true or false")
        return cls(
            features=tuple(names),
            mean=vectors["mean"],
            scale=vectors["scale"],
            weights=vectors["weights"],
            bias=_finite(data["bias"], f"{where}: bias"),
            threshold=threshold,
            fit=fit,
            require_names=require_names,
        )


def _finite(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise GraderFileError(f"{where}: {value!r} is not a finite number")
    return float(value)


def load_grader(path: str | Path | None = None) -> CalibratedGrader:
    """The calibrated grader from `path`, else the one shipped in the package (JSON only)."""
    if path is None:
        text = resources.files("footnote.graph").joinpath(GRADER_FILE).read_text("utf-8")
        where = f"footnote/graph/{GRADER_FILE}"
    else:
        try:
            text = Path(path).read_text(encoding="utf-8")
        except OSError as exc:
            raise GraderFileError(f"{path}: {exc}") from exc
        where = str(path)
    try:
        data = json.loads(text, parse_constant=_refuse_constant)
    except (json.JSONDecodeError, GraderFileError) as exc:
        raise GraderFileError(f"{where}: not valid JSON ({exc})") from exc
    return CalibratedGrader.from_json(data, where)


def _refuse_constant(name: str) -> float:
    raise GraderFileError(f"{name} is not a finite number")


@functools.lru_cache(maxsize=1)
def shipped_grader() -> CalibratedGrader:
    return load_grader()


def offline_grades(
    candidates: Sequence[Candidate],
    grader: OfflineGrader = DEFAULT_OFFLINE_GRADER,
    question: str = "",
    threshold: float = OPERATING_GRADE,
) -> list[float]:
    """Each candidate's offline grade in [0, 1]; OPERATING_GRADE is the operating point.

    The calibrated model was fitted to one decision: whether the search answered the
    question (its best candidate passes). Once one of its grades reaches `threshold`, the
    question is answered, and each chunk's grade is the higher of the calibrated and the
    linear one: which chunks to quote is the linear blend's per-chunk call, which keeps the
    gold section beside the first more often (docs/evaluation.md). When none passes, the
    calibrated grades stand, and the part is not covered.

    Whichever grader, a chunk whose headings name another kind of what the question asks
    about ("Annual leave" for "parental leave", graph/kinds.py) gets 0: similarity cannot
    tell that near miss from a paraphrase, and the headings can."""
    check_offline_grader(grader)
    grades = _model_grades(candidates, grader, question, threshold)
    other_kind = vetoed(question, candidates)
    return [0.0 if other else grade for grade, other in zip(grades, other_kind, strict=True)]


def _model_grades(
    candidates: Sequence[Candidate], grader: OfflineGrader, question: str, threshold: float
) -> list[float]:
    if grader == "judge":
        return judge_grades(candidates, question)
    if grader == "judge-rescue":
        return judge_rescued(candidates, question, threshold)
    allowed = [True] * len(candidates)
    if grader == "judge-veto":
        allowed = [logit >= JUDGE_VETO_CUT for logit in judge_logits(candidates, question)]
    linear = [relevance(c) if ok else 0.0 for c, ok in zip(candidates, allowed, strict=True)]
    if grader_for(grader, question) == "linear":
        return linear
    calibrated = [
        g if ok else 0.0
        for g, ok in zip(shipped_grader().grades(candidates, question), allowed, strict=True)
    ]
    if not any(g >= threshold for g in calibrated):
        return calibrated
    return [max(c, g) for c, g in zip(calibrated, linear, strict=True)]


JUDGE_THRESHOLD = 2.232
"""The judge's logit at the operating point (grade 0.5): fitted for the shipped file on the
fitting halves of the handbook set, pyfaq-core and debfaq by `benchmarks/fit_judge.py`,
reported on the other halves (docs/evaluation.md, "A fourth training run")."""


JUDGE_VETO_CUT = -2.5
"""The "judge-veto" grader's cut on the judge's logit: a chunk below it cannot pass, whatever
the calibrated grade. Fitted on the first three handbook sets written apart, pooled
(`benchmarks/fit_judge.py`, the apart veto), and reported on the fourth and the FAQ corpora's
reporting halves (docs/evaluation.md, "A fourth training run")."""


JUDGE_RESCUE_CUT = 0.0
"""The "judge-rescue" grader's cut on the judge's logit: a chunk at or above it passes even
where the calibrated grade does not. Fitted on the four handbook sets written apart so far,
pooled (`benchmarks/fit_judge.py`, the rescue), and reported on the fifth and the FAQ corpora's
reporting halves (docs/evaluation.md, "The judge as a rescue")."""


def judge_rescued(candidates: Sequence[Candidate], question: str, threshold: float) -> list[float]:
    """The default's grades, with each chunk the judge scores at or above JUDGE_RESCUE_CUT
    raised to the operating point. On the questions written apart the default says "not
    covered" for paraphrases whose chunk it found (the words differ: "change" for "rotated"),
    and the judge, which reads the question with the chunk, scores those chunks high; a rescue
    can only turn "not covered" into an answer, never the reverse."""
    grades = _model_grades(candidates, "calibrated", question, threshold)
    logits = judge_logits(candidates, question)
    return [
        max(grade, threshold) if logit >= JUDGE_RESCUE_CUT else grade
        for grade, logit in zip(grades, logits, strict=True)
    ]


def prepare_offline_grader(grader: OfflineGrader) -> None:
    """Start loading what `grader` will read, for a run about to start (a cold `footnote
    ask`): the judge loads on its own thread while the process imports and searches."""
    if grader in JUDGE_GRADERS:
        from footnote.models.judge import load_judge_early

        load_judge_early()


def judge_logits(candidates: Sequence[Candidate], question: str) -> list[float]:
    """The judge's logit for each candidate (Footnote's cross-encoder, models/judge.py), which
    reads the question with the chunk's heading path and text, so a near miss that shares
    every topic word with the chunk but asks about something else scores low."""
    from footnote.models.judge import load_judge
    from footnote.tools.documents import embedding_text_of

    if not candidates:
        return []
    texts = [embedding_text_of(c["document"]) for c in candidates]
    return [float(logit) for logit in load_judge().score(question, texts)]


def judge_grades(candidates: Sequence[Candidate], question: str) -> list[float]:
    """Each candidate's grade from the judge alone. The logit is log-odds already: its sigmoid
    around JUDGE_THRESHOLD puts the operating point at 0.5, like the other graders."""
    return [sigmoid(logit - JUDGE_THRESHOLD) for logit in judge_logits(candidates, question)]


def measured_offline_grades(
    candidates: Sequence[Candidate],
    grader: OfflineGrader,
    question: str,
    index_dir: str,
    embeddings: str = "",
    threshold: float = OPERATING_GRADE,
) -> list[float]:
    """`offline_grades` with token recall measured first where the grader reads it, as the
    answer graph grades (nodes/grading.py): the forward pass per chunk is made only for the
    chunks that could pass with perfect recall."""
    if candidates and reads_token_recall(grader, question):
        candidates = with_token_recall(
            list(candidates),
            question,
            index_dir,
            embeddings,
            measure=may_pass(candidates, question, threshold),
        )
    return offline_grades(candidates, grader, question, threshold)


def may_pass(candidates: Sequence[Candidate], question: str, threshold: float) -> list[bool]:
    """Which candidates the calibrated grader could pass if their words matched perfectly
    (token recall 1, its neutral value): the only ones whose token recall is worth measuring,
    since the grade can only fall as the recall does (its weights are never negative)."""
    return [g >= threshold for g in shipped_grader().grades(candidates, question)]


def reads_token_recall(grader: OfflineGrader, question: str = "") -> bool:
    """Whether the grader weighs the `token_recall` evidence for this question, which costs a
    forward pass per chunk to measure (tools.documents.with_token_recall)."""
    if grader_for(grader, question) in ("linear", "judge"):
        return False
    model = shipped_grader()
    weights = zip(model.features, model.weights, strict=True)
    return any(w > 0 and f in TOKEN_RECALL_FEATURES for f, w in weights)
