"""The offline planner: explicit rules for whether a turn needs documents and what to search.

- `conversational_reply`: greetings, thanks, goodbyes, questions about the conversation
  itself and about the assistant get a short reply and no search. Anything with a subject
  of its own searches.
- `split_question`: a question with several parts becomes sub-questions: several questions
  in one message, two questions joined by "and"/"also" where the second starts with a
  question word (or by ", and" before a statement and its question), a bulleted or numbered
  list, a comparison of two named things. It is conservative: "How do I create and rotate a
  key?" and "What is the difference between arguments and parameters?" are one question,
  and so is "Where do I book it, and how far ahead?": an ellipsis is not a part of its own.

With a chat model the model plans instead (nodes/turn.py); these rules are its fallback.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from footnote.graph.grader import ANSWER_FRAME
from footnote.store.text import keyword_tokens

_QUESTION_WORD = (
    r"(what|how|when|where|why|who|whom|which|whose|is|are|can|could|do|does|did|should|"
    r"shall|will|would|may|must|has|have)"
)

_GREETING = re.compile(
    r"^(hi|hello|hey|hiya|howdy|good (morning|afternoon|evening|day)|greetings|yo)\b", re.I
)
_THANKS = re.compile(
    r"^(thanks|thank you|thank u|thx|ty|cheers|much appreciated|great|perfect|awesome|cool|"
    r"nice|ok|okay|got it|understood|that helps|that'?s helpful|brilliant)\b",
    re.I,
)
_BYE = re.compile(r"^(bye|goodbye|good bye|see you|see ya|later|farewell|good night)\b", re.I)
_ABOUT_SOURCES = re.compile(
    r"\b(what did you (just )?(cite|quote)|what (were|are) (your|the) (sources|citations|"
    r"references)|which (sources|documents|files) did you (use|cite)|where did (that|this|it) "
    r"come from)\b",
    re.I,
)
_REPEAT = re.compile(
    r"\b(repeat (that|your (last )?answer|what you said)|what did you (just )?(say|said|mean)|"
    r"(summari[sz]e|say) (that|it) again)\b",
    re.I,
)
_LAST_QUESTION = re.compile(r"\b(what did i (just )?ask|what was my (last )?question)\b", re.I)
_ABOUT_ASSISTANT = re.compile(
    r"^(who|what) are you\b|^what can you do\b|^how (do|can) you help\b|^how are you\b|"
    r"^what do you do\b",
    re.I,
)
_FILLER = set(
    keyword_tokens(
        "please just again so much very lot all bye now for everything help helpful helps team "
        "there you today later soon tomorrow need needed wanted that's it was is what i know "
        "info information answer great good day s thanks thank"
    )
)
"""Words a pleasantry may carry and still need no search ("thanks, that's all I needed")."""

GREETING_REPLY = (
    "Hello! Ask me about your team's documents and I will answer with citations, or say "
    "plainly when they do not cover something."
)
THANKS_REPLY = "You're welcome. Ask another question whenever you like."
BYE_REPLY = "Goodbye!"
ABOUT_REPLY = (
    "I answer questions from your team's documents, cite every claim, and say plainly when the "
    "documents do not cover something. Ask me about a policy, a system or a procedure."
)


def conversational_reply(
    question: str,
    previous_question: str,
    previous_answer: str,
    previous_citations: Sequence[dict[str, Any]],
) -> str | None:
    """The reply to a turn that needs no documents, or None when it should search.

    A pleasantry followed by a real question ("thanks! how do I rotate a key?") searches:
    what remains after the pleasantry must have no words of its own.
    """
    text = question.strip()
    if not text:
        return None
    for pattern in (_ABOUT_SOURCES, _REPEAT, _LAST_QUESTION):
        # "What did you say I should install?" asks about the documents, not the conversation.
        match = pattern.search(text)
        if match and not _has_subject(text[: match.start()] + " " + text[match.end() :]):
            return _about_conversation(text, previous_question, previous_answer, previous_citations)
    if _ABOUT_ASSISTANT.search(text) and len(text.split()) <= 8:
        return ABOUT_REPLY
    for pattern, reply in ((_GREETING, GREETING_REPLY), (_THANKS, THANKS_REPLY),
                           (_BYE, BYE_REPLY)):  # fmt: skip
        match = pattern.match(text)
        if match and not _has_subject(text[match.end() :]):
            return reply
    return None


def _has_subject(rest: str) -> bool:
    words = [w for w in keyword_tokens(rest) if w not in _FILLER]
    return bool(words)


def _about_conversation(
    text: str, question: str, answer: str, citations: Sequence[dict[str, Any]]
) -> str:
    if not answer:
        return "We have not talked about anything yet: ask a question about your documents."
    if _LAST_QUESTION.search(text):
        return f'You asked: "{question}"'
    if _REPEAT.search(text):
        return re.sub(r"\s*\[\d+\]", "", answer)  # the numbers belonged to that answer's sources
    if not citations:
        return "My last answer cited no sources."
    listed = "; ".join(
        f"[{c.get('n')}] {c.get('source', '')}"
        + (f", § {c['section']}" if c.get("section") else "")
        for c in citations
    )
    return f"My last answer cited: {listed}."


_SPLIT_JOINER = re.compile(
    rf"(?:,\s*|\s+|;\s*)(?:and\s+also|and|also|plus|as well as)\s*,?\s+(?={_QUESTION_WORD}\b)",
    re.I,
)
_COMPARISON = re.compile(
    r"^(?:what(?:'s| is) the )?(?:difference|differences) between (?P<a>.+?) and (?P<b>.+?)\??$"
    r"|^compare (?P<c>.+?) (?:and|with|to) (?P<d>.+?)\??$"
    r"|^(?P<e>[^?]+?) (?:vs\.?|versus) (?P<f>[^?]+?)\??$",
    re.I,
)
_LIST_ITEM = re.compile(r"^\s*(?:[-*•]|\d+[.)])\s+(?P<item>.+)$")


def split_question(question: str, *, max_parts: int = 4) -> list[str]:
    """The question's parts; one part (the question itself) unless the rules are sure."""
    text = question.strip()
    parts = _list_items(text) or _question_sentences(text) or _joined(text) or _compared(text)
    parts = [p for p in parts if _is_part(p)]
    if len(parts) < 2:
        return [text]
    return parts[:max_parts]


def _list_items(text: str) -> list[str]:
    lines = [line for line in text.splitlines() if line.strip()]
    items = [m.group("item").strip() for line in lines if (m := _LIST_ITEM.match(line))]
    if len(items) < 2:
        return []
    lead = [line for line in lines if not _LIST_ITEM.match(line)]
    # "Tell me about: - keys - VPN" names topics; the lead says what to ask about each.
    prefix = lead[0].rstrip(":").strip() if len(lead) == 1 and not lead[0].endswith("?") else ""
    return [_as_question(f"{prefix} {item}" if prefix and not _starts_question(item) else item)
            for item in items]  # fmt: skip


def _question_sentences(text: str) -> list[str]:
    sentences = [s.strip() for s in re.findall(r"[^?]+\?", text)]
    if len(sentences) < 2 or not all(_starts_question(s) for s in sentences):
        return []
    return sentences


def _joined(text: str) -> list[str]:
    """Split at "and"/"also" before a question word, when what comes before reads as a question
    too (`_reads_as_question`: "I run stable. How do I X, and why Y?"). Also at ", and" before
    a statement that leads to a question of its own ("How do I X, and I run stable; can I
    Y?"), a comma and a question on both sides."""
    pieces = _SPLIT_JOINER.split(text)
    if len(pieces) < 2:
        pieces = _STATEMENT_JOINER.split(text)
        if len(pieces) != 2 or not _asks_later(pieces[1]):
            return []
    if not all(_reads_as_question(left) for left in pieces[:-1]):
        return []
    return [_as_question(p) for p in pieces]


_DANGLING = re.compile(r"[\s,;]+(?:and|also|plus|or)$", re.I)
_STATEMENT_JOINER = re.compile(r",\s*and\s+(?!also\b)", re.I)
_CLAUSE = re.compile(r"(?<=[.!?;:,])\s+")


def _reads_as_question(text: str) -> bool:
    """The message or one of its clauses opens with a question word ("I have two machines;
    how do I ..."), or it ends with one ("My threads do not run: why")."""
    clauses = _CLAUSE.split(text.strip())
    return (
        any(_starts_question(c) for c in clauses)
        or re.search(rf"\b{_QUESTION_WORD}\W*$", text, re.I) is not None
    )


def _asks_later(text: str) -> bool:
    """A statement followed by its question: ends with "?", and a later sentence (not a comma's
    clause: "and the old one, when does it expire?" is one question) opens with a question word
    ("I run stable. Can I change to testing?", "the make fails; why?")."""
    sentences = re.split(r"(?<=[.!?;:])\s+", text.strip())
    return text.strip().endswith("?") and any(_starts_question(c) for c in sentences[1:])


def _compared(text: str) -> list[str]:
    """A comparison of two named things ("API keys and STS tokens") is two searches; one of
    two common words ("arguments and parameters") is one question, usually answered where the
    documents compare them."""
    match = _COMPARISON.match(text.strip())
    if not match:
        return []
    groups = [g for g in match.groups() if g]
    a, b = groups[0].strip(), groups[1].strip()
    opening = a[1:] if text.strip().startswith(a) else a  # "Lists vs tuples?": not a name
    if len(a.split()) > 6 or len(b.split()) > 6 or not (_is_named(opening) and _is_named(b)):
        return []
    return [f"What is {a}?", f"What is {b}?"]


_NAMED = re.compile(r"[A-Z]|\d|`|\w[._/()-]+\w|\w\(\)")
"""A name, not a common word: a capital (not the question's first letter), a digit, code
(`x.y`, `f()`, backticks) or a path."""


def _is_named(thing: str) -> bool:
    return _NAMED.search(thing) is not None


def _starts_question(text: str) -> bool:
    return re.match(rf"^\s*{_QUESTION_WORD}\b", text, re.I) is not None


def _as_question(text: str) -> str:
    # "What is X, and and how do I Y?" splits after the second "and": drop the first.
    text = _DANGLING.sub("", text.strip()).rstrip(",;. ")
    text = text[:1].upper() + text[1:]
    return text if text.endswith("?") else f"{text}?"


_REFERS_BACK = re.compile(r"\b(it|its|itself|they|them|their|those|these)\b", re.I)
"""A pronoun that stands for something named earlier ("the devices used for it")."""


def is_bridge(part: str) -> bool:
    """A later part that refers back to the part before it: what it asks about ("the devices
    used for it") is named only there."""
    return _REFERS_BACK.search(part) is not None


def bridge_question(earlier: str, part: str) -> str:
    """What a bridge part is researched as: the earlier part's words with its own, as a
    follow-up borrows the last question's (`condense_question`). Searched alone, "what does
    the policy say about the devices used for it?" names no subject, and the search answers
    a question the user did not ask."""
    return f"{earlier} {part}"


def _is_part(text: str) -> bool:
    """A part worth searching on its own: it names something ("What about sid?"), and is not
    an ellipsis of the question before it ("where do I book it, and how far ahead?")."""
    return len(keyword_tokens(text)) >= 1 and not is_ellipsis(text)


_ELLIPSIS_FRAME = re.compile(rf"^\s*(?:{ANSWER_FRAME.pattern}|{_QUESTION_WORD}\b)", re.I)


def is_ellipsis(part: str) -> bool:
    """A question word with at most one more word ("And when?", "how far ahead?", "how many
    days?"): it asks about what the question before it named, and means nothing alone."""
    text = re.sub(r"^\s*(?:and|or|also|but|plus)\b", "", part.strip(), flags=re.I)
    frame = _ELLIPSIS_FRAME.match(text)
    return frame is not None and len(re.findall(r"[\w'’-]+", text[frame.end() :])) <= 1


_FOLLOW_UP = re.compile(
    r"^(and|or|but|also|what about|how about|same for|what if|then|so)\b|\b(it|that|this|they|"
    r"them|those|these)\b",
    re.IGNORECASE,
)


def researched_questions(questions: Sequence[str]) -> list[str]:
    """The questions that were about the documents, in order: a turn about the conversation
    itself or a pleasantry ("what did you just cite?", "thanks") is told apart by its form, as
    `conversational_reply` answers it, and is never a topic a follow-up refers back to."""
    return [q for q in questions if conversational_reply(q, "", "", []) is None]


def condense_question(question: str, earlier_questions: Sequence[str]) -> tuple[str, str]:
    """A standalone question without an LLM: a follow-up that refers back ("and for service
    accounts?", "does it expire?") borrows the words of the last question that was researched
    (`researched_questions`: "what did you cite?" between them changes no topic). A question
    with no such reference stands alone, however short: joining it to the previous one would
    answer it with the previous question's passages. Returns (question, strategy)."""
    topics = researched_questions(earlier_questions)
    if topics and _FOLLOW_UP.search(question.strip()):
        return f"{topics[-1]} {question}", "condensed"
    return question, "as_asked"


_GLOBAL = re.compile(
    r"\b(?:summari[sz]e|summary of|overview of|give me an overview)\b"
    r"|\bwhat (?:does|do|is in|is covered (?:in|by)) (?:the|our|this|these|all) [\w -]{1,40}?"
    r"\b(?:cover|contain|include|talk about|deal with)s?\b"
    r"|\bwhat (?:topics|subjects|areas|themes|kinds of (?:things|topics))\b"
    r"|\b(?:list|name) (?:every|all|each)\b"
    r"|\bwhich (?:documents|docs|files|pages|policies|sections|sources|guides|parts)\b"
    r"|\b(?:across|in) (?:all|every) (?:the )?(?:documents|docs|files|policies|pages)\b",
    re.I,
)


def is_global_question(question: str) -> bool:
    """A question about the whole corpus or a large part of it ("summarize everything", "what
    does the handbook cover?", "what topics ...", "list every ...", "which documents mention
    ...", "which policies set a deadline?"): answered from the graph's communities, not from
    the few best chunks. Questions about the conversation were answered before this."""
    return _GLOBAL.search(question.strip()) is not None
