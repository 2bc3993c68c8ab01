"""Entities found in text without a model, for the entity graph (store/graph_files.py).

Each entity is a normalised key (lower-case words joined by single spaces) with a kind:

    title    the document's own title (every chunk of a document carries it)
    link     another document's title named in the text: the strongest signal, on wiki-like
             corpora and team documents alike ("see oncall", "Lothair II's mother")
    heading  a heading of the chunk's section path
    name     a capitalised multi-word name ("Platform Team", "St. Maurice's Abbey")
    code     a code identifier (`snake_case`, CamelCase, dotted.names, UPPER-CODES, `ticks`)
    phrase   a rule-based noun phrase: two or three content words between stopwords and
             punctuation ("service account", "on-call engineer")

Titles and links are the same entity (a title's key), so a chunk that names a document
reaches that document's chunks in one hop. Everything here is a pure function of the text
and the corpus's titles, so a graph rebuilt from the same chunks is the same graph.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

KINDS = ("title", "link", "heading", "name", "code", "phrase")
"""Kind ids are positions here; a lower id wins when one key is found as several kinds."""
KIND_WEIGHT = {"title": 1.0, "link": 1.0, "heading": 0.5, "name": 0.6, "code": 0.6, "phrase": 0.3}
"""Weight of a chunk's mention edge by the kind it was found as."""
MAX_TITLE_WORDS = 12
"""Longer titles are matched on their first MAX_TITLE_WORDS words only, and the link a match
makes is named by the words matched: a title's later words may be readable only by its own
document's readers, and an entity's name is shown to everyone who may read a chunk naming it."""
MAX_NAME_CHARS = 120
MAX_PHRASES = 24
"""Noun phrases kept per chunk: the graph stays linear in the corpus whatever the text."""

_WORD = re.compile(r"\w+")
_SPACES = re.compile(r"\s+")
_PAREN = re.compile(r"\s*\([^)]*\)\s*$")
_NAME = re.compile(
    r"\b[A-Z](?:[\w'’-]|\.(?=\w))*(?:[ \t]+(?:(?:of|the|de|del|da|di|du|von|van|der|la|le|and|&)"
    r"[ \t]+)*[A-Z](?:[\w'’-]|\.(?=\w))*)+"
)
_CODE = re.compile(
    r"`([^`\n]{2,60})`"  # a code span
    r"|\b([a-z][a-z0-9]*(?:_[a-z0-9]+)+)\b"  # snake_case
    r"|\b([a-z]+[A-Z][A-Za-z0-9]*|[A-Z][a-z0-9]+(?:[A-Z][a-z0-9]+)+)\b"  # camelCase, CamelCase
    r"|\b([A-Za-z_][\w-]*(?:\.[A-Za-z_][\w-]*)+)\b"  # dotted.names, file.ext
    r"|\b([A-Z][A-Z0-9]{1,}(?:[-_][A-Z0-9]+)*)\b"  # UPPER codes, SEV-1
)
_STOPWORD_TEXT = """
    a about above after again against all also am an and any are as at be because been
    before being below between both but by can could did do does doing down during each few
    for from further had has have having he her here hers herself him himself his how i if
    in into is it its itself just me more most must my myself no nor not now of off on once
    only or other our ours ourselves out over own same she should so some such than that
    the their theirs them themselves then there these they this those through to too under
    until up very was we were what when where which while who whom why will with would you
    your yours yourself yourselves may might shall one two three use used using get gets
    got make made new see every many much per via etc e g ie eg
"""
STOPWORDS = frozenset(_STOPWORD_TEXT.split())
_PHRASE_WORD = re.compile(r"[a-z][a-z-]*[a-z]")


def entity_key(name: str) -> str:
    """The normalised form entities are matched and stored by."""
    return " ".join(_WORD.findall(name.lower()))


def key_hash(key: str) -> int:
    """A stable 63-bit id for a key (the graph's entities are sorted by it)."""
    digest = hashlib.blake2b(key.encode("utf-8"), digest_size=8).digest()
    return int.from_bytes(digest, "little") >> 1


@dataclass(frozen=True)
class Mention:
    key: str
    name: str
    kind: int

    @property
    def weight(self) -> float:
        return KIND_WEIGHT[KINDS[self.kind]]


class TitleMatcher:
    """Finds the corpus's document titles inside text, word-aligned and case-blind, except
    that a one-word title must be capitalised where it is found ("Keys", not "keys"). A
    match is named by the text it matched (whitespace runs made one space), never by the
    title: a restricted document's title is not the public text's to show."""

    def __init__(self, titles: Iterable[str]) -> None:
        self.names: dict[tuple[str, ...], str] = {}
        for title in sorted(set(titles)):
            for form in dict.fromkeys([title, _PAREN.sub("", title)]):
                words = tuple(_WORD.findall(form.lower()))[:MAX_TITLE_WORDS]
                if words and not (len(words) == 1 and (words[0] in STOPWORDS or len(words[0]) < 3)):
                    self.names.setdefault(words, title)
        self.lengths: dict[str, list[int]] = {}
        for words in self.names:
            self.lengths.setdefault(words[0], []).append(len(words))
        for first in self.lengths:
            self.lengths[first] = sorted(set(self.lengths[first]), reverse=True)

    def find(self, text: str) -> list[Mention]:
        found = list(_WORD.finditer(text))
        lower = [m.group().lower() for m in found]
        out: list[Mention] = []
        for i, word in enumerate(lower):
            for length in self.lengths.get(word, ()):
                if i + length > len(lower):  # near the end, a shorter run may name a title
                    continue
                words = tuple(lower[i : i + length])
                if words not in self.names:
                    continue
                if length == 1 and not found[i].group()[:1].isupper():
                    continue
                said = text[found[i].start() : found[i + length - 1].end()]
                out.append(Mention(" ".join(words), _SPACES.sub(" ", said), KINDS.index("link")))
                break
        return out


def key_words(name: str, key: int) -> str | None:
    """The part of a stored name whose words make the entity's key (its key hash), so that
    what is shown is what a chunk naming the entity says: the whole name in a graph built now;
    in one built when a link was named by the title it matched, that title, or the title
    without its parenthesis, cut to its first MAX_TITLE_WORDS words. None: no such part."""
    for form in dict.fromkeys([name, _PAREN.sub("", name)]):
        words = list(_WORD.finditer(form))[:MAX_TITLE_WORDS]
        if not words:
            continue
        said = _SPACES.sub(" ", form[words[0].start() : words[-1].end()])
        if key_hash(entity_key(said)) == key:
            return name if entity_key(name) == entity_key(said) else said
    return None


def text_mentions(text: str) -> list[Mention]:
    """Names, code identifiers and noun phrases in a text (no titles: see TitleMatcher)."""
    out: list[Mention] = []
    for match in _NAME.finditer(text):
        name = match.group().strip(".-'’ ")
        words = name.split()
        while words and words[0].lower() in STOPWORDS:
            words = words[1:]
        if len(words) >= 2:
            _add(out, " ".join(words), "name")
    for match in _CODE.finditer(text):
        code = next(g for g in match.groups() if g)
        if not code.replace(".", "").isdigit():
            _add(out, code, "code")
    for phrase in noun_phrases(text):
        _add(out, phrase, "phrase")
    return out


def noun_phrases(text: str) -> list[str]:
    """Runs of two or three lower-case content words, split at stopwords and punctuation
    (RAKE-style candidates, no tagger needed); longer runs are lists or noise, not names, and
    are skipped. At most MAX_PHRASES per text, in order."""
    phrases: list[str] = []
    for clause in re.split(r"[^\w\s-]|\s-\s|\n", text):
        run: list[str] = []
        for word in [*clause.split(), ""]:
            lowered = word.lower()
            content = lowered not in STOPWORDS and _PHRASE_WORD.fullmatch(word)
            if word and word == lowered and content:
                run.append(lowered)
                continue
            if 2 <= len(run) <= 3:
                phrases.append(" ".join(run))
                if len(phrases) == MAX_PHRASES:
                    return phrases
            run = []
    return phrases


def _add(out: list[Mention], name: str, kind: str) -> None:
    name = name[:MAX_NAME_CHARS]
    key = entity_key(name)
    if key and not key.isdigit():
        out.append(Mention(key, name, KINDS.index(kind)))


def chunk_mentions(
    title: str, section: str, text: str, matcher: TitleMatcher
) -> dict[str, Mention]:
    """Every entity a chunk mentions, once per key, as its strongest kind: its own title, its
    headings, the titles it names, then names, codes and phrases."""
    found: list[Mention] = []
    # "David Bradley (director)" is also titled "David Bradley", the form text names it by
    for form in dict.fromkeys([title, _PAREN.sub("", title)]):
        if entity_key(form):
            found.append(Mention(entity_key(form), form, KINDS.index("title")))
    for heading in section.split(" > "):
        _add(found, heading.strip(), "heading")
    found.extend(matcher.find(text))
    found.extend(text_mentions(text))
    return strongest(found)


def query_mentions(text: str, matcher: TitleMatcher | None = None) -> dict[str, Mention]:
    """The entities a question names: titles (when a matcher is given), names, codes and
    noun phrases, matched against the graph by key."""
    found = matcher.find(text) if matcher else []
    found.extend(text_mentions(text))
    # a question's lone capitalised words ("Where was Lothair born?") may be a title too
    for word in re.findall(r"\b[A-Z][\w'’-]{2,}", text):
        _add(found, word, "name")
    return strongest(found)


def strongest(mentions: Sequence[Mention]) -> dict[str, Mention]:
    """One mention per key: the lowest kind id, then the smallest surface form."""
    best: dict[str, Mention] = {}
    for mention in mentions:
        held = best.get(mention.key)
        if held is None or (mention.kind, mention.name) < (held.kind, held.name):
            best[mention.key] = mention
    return best
