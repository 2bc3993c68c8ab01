"""Run-time configuration of the answer graph; Studio renders each field with its description."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from footnote.graph import prompts
from footnote.graph.grader_choice import (
    DEFAULT_OFFLINE_GRADER,
    OfflineGrader,
    check_offline_grader,
)
from footnote.models.providers import ProviderProblem
from footnote.store.backends import resolve_index
from footnote.tools.rerank import check_reranker


@dataclass(kw_only=True)
class Context:
    """How Footnote answers: which models, which index, how hard to look, who is asking."""

    model: str = field(
        default="",
        metadata={
            "description": "Chat model as 'provider:model' for init_chat_model (e.g. "
            "'openai:gpt-4.1-mini', 'anthropic:claude-sonnet-4-5', 'ollama:llama3.1'). "
            "Empty: the embedded default, which answers extractively without an LLM."
        },
    )
    model_base_url: str = field(
        default="",
        metadata={
            "description": "Base URL of an OpenAI-compatible server (vLLM, llama.cpp, LM "
            "Studio) for an 'openai:...' model. Empty: the provider's own endpoint."
        },
    )
    model_timeout_s: float = field(
        default=120.0,
        metadata={
            "description": "Seconds the model server may stay silent before the call fails "
            "(not retried: a hung server ends with an error after this long). The answer "
            "streams, so this bounds the wait for each token, not the whole answer; an "
            "internal call (grading, rewriting) must finish within it. Raise it for a large "
            "model on CPU, where reading a long prompt alone can take minutes."
        },
    )
    model_max_retries: int = field(
        default=2,
        metadata={
            "description": "Retries (with backoff) on rate limits and transient server errors; "
            "never on timeouts or requests the server rejected as malformed."
        },
    )
    max_answer_tokens: int = field(
        default=512,
        metadata={
            "description": "Most tokens the answer may use, sent to the server (max_tokens for "
            "an OpenAI-compatible base URL). 0: no limit."
        },
    )
    max_internal_tokens: int = field(
        default=256,
        metadata={
            "description": "Most tokens each internal call (rewrite, HyDE, agent step, "
            "grading) may use. 0: no limit."
        },
    )
    embeddings: str = field(
        default="",
        metadata={
            "description": "Embeddings as 'provider:model' for init_embeddings; must match "
            "the index. Empty: the model the index was built with."
        },
    )
    index_dir: str = field(
        default_factory=resolve_index,
        metadata={
            "description": "Index directory built by `footnote ingest`. Defaults to "
            "$FOOTNOTE_INDEX, else .footnote/index."
        },
    )
    retrieve_k: int = field(
        default=8, metadata={"description": "Chunks retrieved per search before grading."}
    )
    keep_k: int = field(
        default=4, metadata={"description": "Most relevant chunks kept as numbered sources."}
    )
    hyde: bool = field(
        default=False,
        metadata={
            "description": "Write a hypothetical answer passage and search with its embedding "
            "too (HyDE). Needs a chat model."
        },
    )
    grade_threshold: float = field(
        default=0.5,
        metadata={
            "description": "Grade in [0, 1] a chunk needs to be kept. A model's 0-10 grades "
            "count as tenths (they pass from 5); the offline grades are scaled so that 0.5 is "
            "their operating point, where about 5% of answerable questions are wrongly "
            "abstained on (chosen on pyfaq-core, checked on debfaq: docs/evaluation.md). "
            "Higher abstains more often."
        },
    )
    offline_grader: OfflineGrader = field(
        default=DEFAULT_OFFLINE_GRADER,
        metadata={
            "description": "How chunks are graded without a model (and when a model's grades "
            "are unusable): 'calibrated' (similarity, keyword coverage and the "
            "question's weakest word matched word by word, with a veto on chunks that lack "
            "the question's names, fitted on the handbook set and pyfaq-core; "
            "footnote/graph/grader.json; keyword queries get the linear blend), 'linear' "
            "(0.6 x similarity + 0.4 x keyword coverage), 'judge' (Footnote's own "
            "cross-encoder reads the question with each chunk), 'judge-veto' (the calibrated "
            "grades, and a chunk the judge scores under its cut cannot pass) or 'judge-rescue' "
            "(the default: the calibrated grades, and a chunk the judge scores over its cut "
            "passes). "
            "Whichever grader, a chunk headed with another kind of what the question asks "
            "about ('Annual leave' for parental leave) cannot pass. The rescue answers more "
            "paraphrases than the calibrated one and lets more near misses through; the linear "
            "one abstains more when the corpus lacks the answer; the judge alone refuses more "
            "near misses and abstains wrongly more often (docs/evaluation.md)."
        },
    )
    max_retrieval_attempts: int = field(
        default=2,
        metadata={
            "description": "Retrieval rounds per question, the first included; weak evidence "
            "triggers a rewritten query until this budget is spent."
        },
    )
    web_search: bool = field(
        default=False,
        metadata={
            "description": "Fall back to Tavily web search when the index cannot answer "
            "(needs TAVILY_API_KEY)."
        },
    )
    user_groups: list[str] = field(
        default_factory=lambda: ["everyone"],
        metadata={
            "description": "Access groups of the person asking; only chunks shared with one of "
            "them are searched. Set by the caller, never by the model."
        },
    )
    strict_groups: bool = field(
        default=False,
        metadata={
            "description": "Search exactly user_groups, without adding 'everyone' (which is "
            "otherwise always added). Embedded and command line only: a served caller's groups "
            "come from their credentials."
        },
    )
    admin: bool = field(
        default=False,
        metadata={
            "description": "See every chunk, including those with missing or malformed access "
            "data. For operators only."
        },
    )
    reranker: str = field(
        default="none",
        metadata={
            "description": "Reorders the search's top 20 before grading: 'none', 'sentence' "
            "(offline, best-matching sentence by embedding), 'judge' (offline, Footnote's own "
            "cross-encoder), 'llm' (the chat model of `model` scores them) or 'crossencoder:PATH' "
            "(a local sentence-transformers CrossEncoder; "
            "the `crossencoder` extra)."
        },
    )
    search_stage: str = field(
        default="pipeline",
        metadata={
            "description": "Which ranking the research's searches use: 'pipeline' (the default "
            "fusion) or 'graph' (the pipeline re-ranked by a walk over the index's entity "
            "graph, for questions whose answer spans documents; tools/graph_search.py). "
            "Served, the operator sets it (FOOTNOTE_SEARCH_STAGE)."
        },
    )
    planner: str = field(
        default="model",
        metadata={
            "description": "Who plans a turn (whether to search, into which parts to split the "
            "question, when to search again): 'model' (the chat model, by structured output; "
            "the rules when there is none or its plan is unusable) or 'rules' (the offline "
            "planner's readable rules, also with a model)."
        },
    )
    max_searches_per_turn: int = field(
        default=6,
        metadata={
            "description": "Most searches of the index one turn may make, over all its parts "
            "and rounds. Parts share it; a part left without a search is reported as not "
            "covered, and the answer says the budget was spent."
        },
    )
    max_model_calls_per_turn: int = field(
        default=24,
        metadata={
            "description": "Most chat-model calls one turn may make (planning, rewriting, "
            "searching, grading, answering). When a part's share is spent it continues "
            "offline (rule-based grading and retries) and the answer says so."
        },
    )
    max_parts: int = field(
        default=4,
        metadata={
            "description": "Most sub-questions one question is split into; the rest are "
            "reported as not searched."
        },
    )
    max_communities: int = field(
        default=8,
        metadata={
            "description": "Most communities of the entity graph a question about the whole "
            "corpus (the global route) is answered from, most relevant first."
        },
    )
    max_global_sentences: int = field(
        default=12,
        metadata={
            "description": "Most cited sentences an offline answer on the global route "
            "gives, over all its communities (one or two each)."
        },
    )
    system_prompt: str = field(
        default=prompts.ANSWER_SYSTEM_PROMPT,
        metadata={"description": "Instructions for the answering model (LLM path)."},
    )

    @classmethod
    def known_fields(cls, value: Any) -> dict[str, Any]:
        """The fields Footnote knows, read from a dict or any object (a parent graph's own
        context dataclass or model); everything else is ignored."""
        if value is None:
            return {}
        names = [f.name for f in fields(cls)]
        if isinstance(value, Mapping):
            return {name: value[name] for name in names if name in value}
        return {name: getattr(value, name) for name in names if hasattr(value, name)}

    def __post_init__(self) -> None:
        for name, kind in _FIELD_TYPES.items():
            _check_type(name, getattr(self, name), kind)
        if not isinstance(self.embeddings, str):  # embedded: any LangChain Embeddings object
            self._check_embeddings_object()
        for name, low, high in _RANGES:
            value = getattr(self, name)
            if value < low or (high is not None and value > high):
                bound = f"between {low} and {high}" if high is not None else f"at least {low}"
                raise ContextError(f"context field {name!r} must be {bound}, not {value!r}")
        if self.search_stage not in SEARCH_STAGES:
            stages = ", ".join(SEARCH_STAGES)
            raise ContextError(f"context field 'search_stage' must be one of {stages}, not "
                               f"{self.search_stage!r}")  # fmt: skip
        if self.planner not in ("model", "rules"):
            raise ContextError(f"context field 'planner' must be 'model' or 'rules', not "
                               f"{self.planner!r}")  # fmt: skip
        check_reranker(self.reranker)
        check_offline_grader(self.offline_grader)

    def _check_embeddings_object(self) -> None:
        # imported here: the check reads LangChain's Embeddings class, which a string setting
        # (and the command line's parser, which reads these fields) never needs
        from footnote.models.embedding_choice import check_setting

        try:
            check_setting(self.embeddings)
        except ProviderProblem as exc:
            raise ContextError(f"context field 'embeddings': {exc}") from None

    def refuse_configurable(self, configurable: Mapping[str, Any] | None) -> None:
        """Footnote's settings come from `context`; the same names in `config["configurable"]`
        with other values would be silently ignored, so an embedding caller is told instead.
        (A LangGraph server mirrors a run's context into `configurable`: served runs are not
        checked; a value the context already has, as `answer_tool` passes on, is no news.)"""
        configurable = configurable or {}
        if "langgraph_auth_user" in configurable:
            return
        misplaced = sorted(
            f.name
            for f in fields(self)
            if f.name in configurable and configurable[f.name] != getattr(self, f.name)
        )
        if misplaced:
            raise ContextError(
                f"Footnote reads its settings from the run's context, not "
                f"config['configurable']: pass {', '.join(map(repr, misplaced))} as "
                f"graph.invoke(..., context={{...}})"
            )

    @classmethod
    def coerce(cls, value: Any) -> Context:
        """Read a Footnote context from what a run was given: a Context, None, a dict, or a
        parent graph's own context object."""
        if isinstance(value, cls):
            return value
        return cls(**cls.known_fields(value))


SEARCH_STAGES = ("pipeline", "graph")
"""The rankings a turn's research may use (tools/stages.py names every stage)."""


class ContextError(TypeError, ValueError):
    """A context value of the wrong type or out of range; the message names the field."""


_FIELD_TYPES: dict[str, type] = {
    "model": str,
    "model_base_url": str,
    "model_timeout_s": float,
    "model_max_retries": int,
    "max_answer_tokens": int,
    "max_internal_tokens": int,
    "index_dir": str,
    "retrieve_k": int,
    "keep_k": int,
    "hyde": bool,
    "grade_threshold": float,
    "offline_grader": str,
    "max_retrieval_attempts": int,
    "web_search": bool,
    "user_groups": list,
    "strict_groups": bool,
    "admin": bool,
    "reranker": str,
    "search_stage": str,
    "planner": str,
    "max_searches_per_turn": int,
    "max_model_calls_per_turn": int,
    "max_parts": int,
    "max_communities": int,
    "max_global_sentences": int,
    "system_prompt": str,
}
"""The JSON type each field must have: checked, never coerced ("5" is not 5)."""

_RANGES: list[tuple[str, float, float | None]] = [
    ("model_timeout_s", 0.001, None),
    ("model_max_retries", 0, None),
    ("max_answer_tokens", 0, None),
    ("max_internal_tokens", 0, None),
    ("retrieve_k", 1, None),
    ("keep_k", 1, None),
    ("grade_threshold", 0.0, 1.0),
    ("max_retrieval_attempts", 1, None),
    ("max_searches_per_turn", 0, None),
    ("max_model_calls_per_turn", 0, None),
    ("max_parts", 1, None),
    ("max_communities", 1, None),
    ("max_global_sentences", 1, None),
]

_TYPE_WORDS = {str: "a string", int: "an integer", float: "a number", bool: "true or false",
               list: "a list"}  # fmt: skip
_FIELD_WORDS = {"user_groups": "a list of group names"}
"""Where a field's expected value says more than its JSON type."""


def _check_type(name: str, value: Any, kind: type) -> None:
    if kind is float:
        ok = isinstance(value, int | float) and not isinstance(value, bool)
    elif kind is int:
        ok = isinstance(value, int) and not isinstance(value, bool)
    else:
        ok = isinstance(value, kind)
    if not ok:
        words = _FIELD_WORDS.get(name, _TYPE_WORDS[kind])
        raise ContextError(
            f"context field {name!r} must be {words}, not {value!r} ({type(value).__name__})"
        )


@dataclass(frozen=True)
class Setting:
    """One `Context` field as `footnote settings` and docs/settings.md show it: the text is the
    field's own description, so Studio's form, the command line and the docs cannot drift."""

    name: str
    kind: str
    default: str
    allowed: str
    description: str


_DEFAULT_WORDS = {
    "index_dir": "$FOOTNOTE_INDEX, else .footnote/index",
    "system_prompt": "the built-in answer prompt (graph/prompts.py)",
}
"""Defaults that depend on the environment or are too long for one line."""


def settings_reference() -> list[Setting]:
    """Every `Context` field in declaration order, with its JSON type, default and range."""
    ranges = {name: (low, high) for name, low, high in _RANGES}
    settings = []
    for f in fields(Context):
        kind = _FIELD_TYPES.get(f.name, str)
        if f.name in _DEFAULT_WORDS:
            default = _DEFAULT_WORDS[f.name]
        else:
            value = f.default_factory() if callable(f.default_factory) else f.default
            default = json.dumps(value)
        low, high = ranges.get(f.name, (None, None))
        allowed = "" if low is None else f"{low} to {high}" if high is not None else f">= {low}"
        settings.append(
            Setting(
                name=f.name,
                kind=_FIELD_WORDS.get(f.name, _TYPE_WORDS[kind]),
                default=default,
                allowed=allowed,
                description=f.metadata["description"],
            )
        )
    return settings
