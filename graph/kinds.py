"""Another kind of the same thing: the near miss that similarity cannot see.

"How many weeks of parental leave do I get?" against a section headed "Annual leave": the
chunk is about leave, shares every word but one with the question, and scores as well as a
true paraphrase does (docs/evaluation.md, "Fourth pass"; no bi-encoder tells them apart). But
its own heading says which kind of leave it covers, and the question names another kind the
chunk never mentions. A person reading both would say the handbook does not cover it.

The test reads only the question, the chunk's headings and its words: no model, no fitted
parameter. A compound is two adjacent content words (a modifier and its head: "parental
leave", "API key"); the chunk names another kind when one of its heading compounds has the
question compound's head with another modifier, and the question's modifier appears nowhere
in the chunk. A heading's compound is a claim about the whole section; a compound in the body
("unused days") is not, so only headings count.

A number can name the kind too: "What do I do for a severity 2 incident?" against "For a
severity 1 incident, open an incident channel ...". There the chunk names the same thing with
another number, anywhere in its text, and never the question's: a series ("severity 1",
"level 3", "Python 3.11") names each member by its number. A number that measures (one before
a unit: "every 90 days", "500 EUR") or tells the time ("Monday 10:00") names no member.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from footnote.store.text import STOPWORDS, stem_words
from footnote.tools.documents import Candidate

_CLAUSE = re.compile(r"[^\w\s'-]+|\s-\s|\n")
"""What ends a compound: punctuation ("Credentials > Rotation", "keys, tokens") and a line
break (a title and its section path are two headings, not one phrase)."""
_WORD = re.compile(r"[A-Za-z][A-Za-z'-]*")
_FRAME = frozenset({"many", "much", "long", "often", "soon", "far", "quickly", "get", "need"})
"""A question's frame, not its topic: "how many weeks" names no kind of week."""


_NUMBERED = re.compile(
    r"(?<![\w-])([A-Za-z][A-Za-z-]*)[ \t]+(\d+(?:\.\d+)*)(?![\w%]|[:.,\u2013-]\d)"
    r"(?:[ \t]+([A-Za-z]+))?"
)
"""A word, the number right after it (not "10:00", "2nd", "50%" or "1-9"), and the word after
the number if any."""
_UNITS = frozenset(
    {
        *("second", "seconds", "minute", "minutes", "min", "mins", "hour", "hours", "hr", "hrs"),
        *("day", "days", "week", "weeks", "month", "months", "year", "years", "times"),
        *("eur", "euro", "euros", "usd", "dollar", "dollars", "gbp", "pound", "pounds"),
        *("percent", "ms", "kb", "mb", "gb", "tb"),
    }
)
"""Words after a number that make it a measure ("90 days", "500 EUR"), not a member's name."""
_MEASURE = re.compile(r"\d+(?:(?:st|nd|rd|th)|[ap]m|h|hrs?|mins?|s|ms|d|k|x|eur|usd)?", re.I)
"""A number, an ordinal ("2nd"), a time of day ("3am") or a measure ("24h", "5min")."""


def is_measure(token: str) -> bool:
    """Whether a token is a number, alone or with its unit stuck to it ("3am", "24h")."""
    return _MEASURE.fullmatch(token) is not None


def numbered(text: str) -> set[tuple[str, str]]:
    """(word stem, number) for each content word followed by a number that names a member of
    a series ("severity 1 incident", "Python 3.11"), not a measure ("every 90 days") or a
    clock time ("Monday 10:00")."""
    pairs: set[tuple[str, str]] = set()
    for word, number, after in _NUMBERED.findall(text):
        word = word.lower()
        if len(word) < 2 or word in STOPWORDS | _FRAME or after.lower() in _UNITS:
            continue
        pairs.add((stem_words([word])[0], number))
    return pairs


def compounds(text: str) -> set[tuple[str, str]]:
    """(modifier, head) stems of each two adjacent content words in `text` within a clause;
    a stopword, a number or punctuation between them breaks the pair."""
    pairs: set[tuple[str, str]] = set()
    for clause in _CLAUSE.split(text):
        run: list[str] = []
        for token in clause.split():
            word = token.strip("'").lower()
            if _WORD.fullmatch(word) and len(word) > 2 and word not in STOPWORDS | _FRAME:
                run.append(word)
                continue
            pairs |= _adjacent(run)
            run = []
        pairs |= _adjacent(run)
    return pairs


def _adjacent(words: list[str]) -> set[tuple[str, str]]:
    stems = stem_words([w.replace("'", "") for w in words])
    return {(a, b) for a, b in zip(stems, stems[1:], strict=False) if a != b}


def _stems(text: str) -> set[str]:
    return set(stem_words(w.lower() for w in _WORD.findall(text)))


def names_another_kind(question: str, candidate: Candidate) -> bool:
    """Whether the chunk's headings name another kind of what the question asks about (its
    heading has the question's head word with another modifier) and the question's own
    modifier is nowhere in the chunk: "parental leave" against "Annual leave"; or the chunk
    names another numbered member of what the question asks about and never the question's:
    "severity 2" against "severity 1"."""
    return _another_modifier(question, candidate) or _another_number(question, candidate)


def _another_number(question: str, candidate: Candidate) -> bool:
    asked = numbered(question)
    if not asked:
        return False
    metadata = candidate["document"].metadata
    own = numbered(
        f"{metadata.get('title') or ''}\n{metadata.get('section') or ''}\n"
        f"{candidate['document'].page_content}"
    )
    return any(
        (word, number) not in own and any(w == word and n != number for w, n in own)
        for word, number in asked
    )


def _another_modifier(question: str, candidate: Candidate) -> bool:
    asked = compounds(question)
    if not asked:
        return False
    metadata = candidate["document"].metadata
    headings = f"{metadata.get('title') or ''}\n{metadata.get('section') or ''}"
    headed = compounds(headings)
    if not headed:
        return False
    present = _stems(f"{headings}\n{candidate['document'].page_content}")
    return any(
        head == own_head and modifier != own_modifier and modifier not in present
        for modifier, head in asked
        for own_modifier, own_head in headed
    )


def vetoed(question: str, candidates: Iterable[Candidate]) -> list[bool]:
    """`names_another_kind` for each candidate, in order."""
    return [names_another_kind(question, c) for c in candidates]
