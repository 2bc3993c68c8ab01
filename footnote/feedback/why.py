"""How an answer was made, read from the run's own checkpoints (a thread's history).

Pure functions of the history the LangGraph server returns (`POST /threads/{id}/history`,
newest first): no graph, no index. The answer graph records its steps (the why's `path`, and
from them its `route`), notices, each part's findings (kept documents, searches, and a trace of
each retrieval round: query, candidates with their grading evidence, grade and fate), and the
citation checks; this module picks one answer's run out of the history and lays those out.
Runs of the older, single-part graph graded in the root graph, so their rounds are read from
its checkpoints instead.
Fields are read by name and defensively: a missing or renamed field is left out, never an
error, so the "why" survives changes to the state.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from footnote.feedback.records import uncovered_parts
from footnote.graph.prompts import NOT_COVERED
from footnote.graph.state import planned_route

MAX_HISTORY = 500
"""Checkpoints read per thread: about fifty questions back."""


class AnswerNotFound(LookupError):
    """No finished answer with that message id in the history the caller may read."""


def field(values: Mapping[str, Any], name: str, default: Any = None) -> Any:
    """`values[name]`, Footnote's own output key for it (`footnote_name`), or a namespaced
    key that ends with it (`footnote:name`, `_name`)."""
    for key in (name, f"footnote_{name}"):
        if key in values:
            return values[key]
    for key, value in values.items():
        if isinstance(key, str) and key.rsplit(":", 1)[-1].rsplit(".", 1)[-1].lstrip("_") == name:
            return value
    return default


def text_of(message: Mapping[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p if isinstance(p, str) else str(p.get("text", "")) for p in content)
    return ""


def _messages(values: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    found = field(values, "messages", [])
    return [m for m in found if isinstance(m, Mapping)] if isinstance(found, list) else []


def _final(snapshot: Mapping[str, Any], message_id: str) -> bool:
    messages = _messages(snapshot.get("values") or {})
    return (
        not snapshot.get("next")
        and bool(messages)
        and messages[-1].get("type") == "ai"
        and messages[-1].get("id") == message_id
    )


def _document(candidate: Any) -> Mapping[str, Any]:
    if not isinstance(candidate, Mapping):
        return {}
    document = candidate.get("document", candidate)
    return document if isinstance(document, Mapping) else {}


def _chunk_id(document: Mapping[str, Any]) -> str:
    metadata = document.get("metadata") or {}
    return str(document.get("id") or metadata.get("chunk_id") or "")


def _described(candidate: Any, kept: set[str]) -> dict[str, Any]:
    document = _document(candidate)
    metadata = document.get("metadata") or {}
    chunk_id = _chunk_id(document)
    evidence = candidate.get("evidence") if isinstance(candidate, Mapping) else None
    row: dict[str, Any] = {
        "chunk_id": chunk_id,
        "source": str(metadata.get("source", "")),
        "section": str(metadata.get("section", "")),
        "kept": chunk_id in kept,
    }
    if isinstance(evidence, Mapping):
        row["evidence"] = {k: v for k, v in evidence.items() if isinstance(v, (int, float))}
    for name in ("grade", "score"):
        value = candidate.get(name) if isinstance(candidate, Mapping) else None
        if isinstance(value, (int, float)):
            row[name] = value
    return row


def _kept_ids(values: Mapping[str, Any]) -> set[str]:
    documents = field(values, "documents", [])
    return (
        {_chunk_id(d) for d in documents if isinstance(d, Mapping)}
        if isinstance(documents, list)
        else set()
    )


def _rounds(run: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """One entry per grading round: the query it searched and each candidate, kept or not."""
    rounds = []
    for i, snapshot in enumerate(run):
        if "grade_documents" not in (snapshot.get("next") or []):
            continue
        values = snapshot.get("values") or {}
        after = run[i + 1].get("values") or {} if i + 1 < len(run) else {}
        kept = _kept_ids(after)
        candidates = field(values, "candidates", [])
        rounds.append(
            {
                "query": str(field(values, "query", "")),
                "strategy": str(field(values, "strategy", "")),
                "candidates": [
                    _described(c, kept)
                    for c in (candidates if isinstance(candidates, list) else [])
                ],
            }
        )
    return rounds


def _findings(values: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The turn's researched parts (agentic graphs), in plan order; [] for older runs."""
    found = field(values, "findings", [])
    items = [f for f in found if isinstance(f, Mapping)] if isinstance(found, list) else []
    return sorted(items, key=lambda f: f.get("index", 0) if isinstance(f.get("index"), int) else 0)


def _traced(candidate: Any) -> dict[str, Any]:
    """A graded chunk from a part's round trace, shaped like `_described`'s rows."""
    if not isinstance(candidate, Mapping):
        return {}
    row: dict[str, Any] = {
        "chunk_id": str(candidate.get("chunk_id", "")),
        "source": str(candidate.get("source", "")),
        "section": str(candidate.get("section", "")),
        "kept": bool(candidate.get("kept")),
        "evidence": {
            k: v for k in ("dense", "coverage") if isinstance(v := candidate.get(k), (int, float))
        },
    }
    if isinstance(candidate.get("grade"), (int, float)):
        row["grade"] = candidate["grade"]
    if isinstance(candidate.get("reason"), str):
        row["reason"] = candidate["reason"]
    return row


def _part_rounds(findings: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """One entry per grading round of every part, each naming its part and the part's question."""
    rounds = []
    for finding in findings:
        traced = finding.get("rounds")
        for round_ in traced if isinstance(traced, list) else []:
            if not isinstance(round_, Mapping):
                continue
            candidates = round_.get("candidates")
            entry: dict[str, Any] = {
                "part": finding.get("index", 0),
                "part_question": str(finding.get("question", "")),
                "query": str(round_.get("query", "")),
                "strategy": str(round_.get("strategy", "")),
                "candidates": [
                    _traced(c) for c in (candidates if isinstance(candidates, list) else [])
                ],
            }
            for name in ("method", "threshold", "keep_k"):
                if name in round_:
                    entry[name] = round_[name]
            entities = round_.get("entities")
            if isinstance(entities, list):  # a hop through the entity graph
                entry["entities"] = [str(e) for e in entities]
            rounds.append(entry)
    return rounds


def _research(findings: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """What each part spent: its question, searches and model calls, chunks kept, and the
    entities a hop through the entity graph went through (when one added documents)."""
    research = []
    for f in findings:
        entry: dict[str, Any] = {
            "part": f.get("index", 0),
            "question": str(f.get("question", "")),
            "searches": f.get("searches", 0),
            "model_calls": f.get("model_calls", 0),
            "kept": len(f.get("documents") or []),
        }
        entities = f.get("hop_entities")
        if isinstance(entities, list) and entities:
            entry["entities"] = [str(e) for e in entities]
        research.append(entry)
    return research


def _passages(
    run: Sequence[Mapping[str, Any]], findings: Sequence[Mapping[str, Any]] = ()
) -> dict[str, dict[str, str]]:
    """Every chunk the run saw whose text the checkpoints hold (candidates and kept documents
    of older runs; each part's kept documents of agentic ones): the export's corpus."""
    passages: dict[str, dict[str, str]] = {}
    groups: list[Any] = [*(f.get("documents") for f in findings)]
    for snapshot in run:
        values = snapshot.get("values") or {}
        groups += [field(values, key, []) for key in ("candidates", "documents")]
    for items in groups:
        for item in items if isinstance(items, list) else []:
            document = _document(item)
            chunk_id = _chunk_id(document)
            metadata = document.get("metadata") or {}
            if chunk_id and metadata.get("kind", "document") == "document":
                title = " > ".join(p for p in (metadata.get("title"), metadata.get("section")) if p)
                passages[chunk_id] = {
                    "title": str(title),
                    "text": str(document.get("page_content", "")),
                }
    return passages


def _written_by_a_client(history: Sequence[Mapping[str, Any]], final: Mapping[str, Any]) -> bool:
    """Whether a checkpoint at or before `final` (history is newest first) is a client's
    state write rather than a run's step or input."""
    older = list(history)[list(history).index(final) :]
    return any((s.get("metadata") or {}).get("source") not in ("loop", "input") for s in older)


def is_not_covered(answer: str, citations: Sequence[Any]) -> bool:
    """The graph's honest "cannot answer" (the same test as the chat page's)."""
    return not citations and NOT_COVERED in answer


def answer_record(
    history: Sequence[Mapping[str, Any]], thread_id: str, message_id: str
) -> dict[str, Any]:
    """The answer `message_id` of this thread as the run left it, with its why and passages.

    Only what runs wrote is the server's record: a thread whose state a client wrote
    (`POST /threads/{id}/state`, a checkpoint of source `update`) before this answer could
    pass off a forged answer, citations or passages as a run's, so its answers are not found."""
    final = next((s for s in history if _final(s, message_id)), None)
    if final is None:
        raise AnswerNotFound(message_id)
    metadata = final.get("metadata") or {}
    run_id = str(metadata.get("run_id") or "")
    if metadata.get("source") != "loop" or not run_id or _written_by_a_client(history, final):
        raise AnswerNotFound(message_id)
    run = [s for s in history if run_id and (s.get("metadata") or {}).get("run_id") == run_id]
    run.sort(key=lambda s: (s.get("metadata") or {}).get("step", 0))
    values = final.get("values") or {}
    messages = _messages(values)
    questions = [m for m in messages if m.get("type") == "human"]
    citations = [c for c in field(values, "citations", []) or [] if isinstance(c, Mapping)]
    answer = text_of(messages[-1])
    findings = _findings(values)
    path = [str(step) for step in field(values, "route", []) or []]
    why: dict[str, Any] = {
        "question": str(field(values, "question", ""))
        or (text_of(questions[-1]) if questions else ""),
        "standalone_question": str(field(values, "standalone_question", "")),
        "route": planned_route(path),
        "path": path,
        "notices": [str(n) for n in field(values, "notices", []) or []],
        # Agentic graphs grade inside a subgraph whose checkpoints the thread's history lacks:
        # its parts carry their rounds out. Older runs graded in the root graph.
        "rounds": _part_rounds(findings) if findings else _rounds(run),
        "citations": citations,
        "invalid_citations": list(field(values, "invalid_citations", []) or []),
        "unsupported_claims": list(field(values, "unsupported_claims", []) or []),
    }
    # recorded by newer graphs; shown as they come
    for extra in ("searches", "parts", "communities", "hops"):
        if (value := field(values, extra)) is not None:
            why[extra] = value
    if findings:
        why["research"] = _research(findings)
    context = metadata.get("context") if isinstance(metadata.get("context"), Mapping) else {}
    uncovered = uncovered_parts(why.get("parts"))
    return {
        "thread_id": thread_id,
        "message_id": message_id,
        "run_id": run_id,
        "question": why["question"],
        "answer": answer,
        "not_covered": is_not_covered(answer, citations) or bool(uncovered),
        "uncovered_parts": uncovered,
        "citations": [
            {k: c.get(k) for k in ("n", "chunk_id", "source", "section", "url")} for c in citations
        ],
        "index_name": str((context or {}).get("index_dir") or "default"),
        "why": {**why, "passages": _passages(run, findings)},
    }


def shown(why: Mapping[str, Any]) -> dict[str, Any]:
    """The why as the page shows it: without the passages' text (kept for the export). A why
    recorded before `path` had its own name kept the steps under `route`: read as today's."""
    out = {k: v for k, v in why.items() if k != "passages"}
    if "path" not in out and isinstance(out.get("route"), list):
        out["path"] = [str(step) for step in out["route"]]
        out["route"] = planned_route(out["path"])
    return out
