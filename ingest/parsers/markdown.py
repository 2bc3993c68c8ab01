"""Markdown with front matter: sections at ATX headings, GitHub-style anchors, line ranges."""

from __future__ import annotations

import datetime as dt
import re
import tomllib
import unicodedata
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from footnote.ingest.documents import ParsedDocument, ParseError, Section
from footnote.ingest.parsers.common import (
    HEADING_MAX,
    decode_text,
    iso_date,
    scalar_text,
    split_lines,
    trim_range,
)

SUFFIXES = frozenset({".md", ".markdown"})

_FENCE_OPEN = re.compile(r"^ {0,3}(`{3,}|~{3,})(.*)$")
_ATX_HEADING = re.compile(r"^ {0,3}(#{1,6})(?=[ \t]|$)(.*)$")
_ATX_CLOSING = re.compile(r"(?:^|[ \t]+)#+[ \t]*$")
_MD_IMAGE_OR_LINK = re.compile(r"!?\[([^\]]*)\]\([^)]*\)")
_MD_EMPHASIS = re.compile(r"(\*\*|__)(.+?)\1")
_FENCES = {"---": ("---", "..."), "+++": ("+++",)}
_KEY_LINE = re.compile(r"""^\s*(?:-\s+)?["']?[^\s:"'#\[\]{}-][^:"'\[\]{}]*["']?\s*[:=]""")
_YAML_ONLY_BREAKS = re.compile("[\x85\u2028\u2029]")
_GROUP_NAME = re.compile(r"[^\s\[\]{}:,\"'][^\[\]{}:,\"']*")
_YAML_INDICATORS = frozenset("!&*|>@`%")
"""Characters that make YAML read a value as other than plain text (tag, anchor, alias...)."""
_UNCLOSED_LOOKAHEAD = 50
_HEAD_LINES = 30
"""Non-blank lines past the front matter that some reader could still take as its own."""
_ACCESS_KEY_LINE = re.compile(
    r"""^[\s\-*+>|]*["'`]?\s*access\s*["'`]?\s*(?:[:=]|\.\s*[\w"'-]+\s*=)"""
    r"""|^\s*\[+\s*["']?access["']?\s*(?:\.[^\]]*)?\]+\s*$"""
)
"""A line that states `access` as a key in YAML, TOML, MultiMarkdown or a list item
(`access:`, `- access:`, `access =`, `access.groups =`, `[access]`), checked on its
`_skeleton` so case, look-alike letters and invisible characters make no difference."""
_FRONT_MATTER_MAX_CHARS = 65_536
_FRONT_MATTER_MAX_DEPTH = 32
_METADATA_NODE_BUDGET = 10_000


@dataclass
class _MdHeading:
    level: int
    text: str


def parse(data: bytes, path: Path, source: str) -> ParsedDocument:
    lines = split_lines(decode_text(data))
    fields, body_start, access, problem = read_front_matter(lines)

    sections: list[Section] = []
    stack: list[_MdHeading] = []
    slugs = _Slugs()
    first_h1: str | None = None
    anchor: str | None = None
    block_start = body_start
    fence: tuple[str, int] | None = None

    def close(end: int) -> None:
        span = trim_range(lines, block_start, end)
        if span is None:
            return
        start, stop = span
        sections.append(
            Section(
                text="\n".join(lines[start:stop]),
                headings=[h.text for h in stack],
                anchor=anchor,
                line_start=start + 1,
                line_end=stop,
            )
        )

    for index in range(body_start, len(lines)):
        line = lines[index]
        if fence is not None:
            if _closes_fence(line, fence):
                fence = None
            continue
        opened = _FENCE_OPEN.match(line)
        if opened and not (opened.group(1)[0] == "`" and "`" in opened.group(2)):
            fence = (opened.group(1)[0], len(opened.group(1)))
            continue
        heading = _ATX_HEADING.match(line)
        if heading is None:
            continue
        close(index)
        level = len(heading.group(1))
        text = _plain_heading(_ATX_CLOSING.sub("", heading.group(2).strip()))
        while stack and stack[-1].level >= level:
            stack.pop()
        stack.append(_MdHeading(level, text[:HEADING_MAX]))
        anchor = slugs.unique(text)
        if level == 1 and first_h1 is None and text:
            first_h1 = text[:HEADING_MAX]
        block_start = index + 1
    close(len(lines))

    title = scalar_text(fields.pop("title", None)) or first_h1 or path.stem
    date = iso_date(fields.get("date"))
    if date is not None:
        del fields["date"]  # an unparseable date stays in metadata, as written
    return ParsedDocument(
        source=source,
        title=title,
        sections=sections,
        date=date,
        access=access,
        access_problem=problem,
        metadata=jsonable_fields(fields),
    )


def jsonable_fields(fields: dict[str, Any]) -> dict[str, Any]:
    """Front matter's other fields as document metadata, within a node budget."""
    budget = [_METADATA_NODE_BUDGET]
    return {str(key): _jsonable(value, budget) for key, value in fields.items()}


def _closes_fence(line: str, fence: tuple[str, int]) -> bool:
    char, length = fence
    stripped = line.strip()
    indent = len(line) - len(line.lstrip(" "))
    return indent <= 3 and len(stripped) >= length and stripped == char * len(stripped)


def _plain_heading(text: str) -> str:
    """Heading text as rendered: link text without URLs, no code or bold markers."""
    text = _MD_IMAGE_OR_LINK.sub(r"\1", text)
    text = _MD_EMPHASIS.sub(r"\2", text)
    return " ".join(text.replace("`", "").split())


def _slugify(text: str) -> str:
    """GitHub-style anchor: lower case, punctuation dropped, spaces to hyphens."""
    text = unicodedata.normalize("NFKC", text).lower()
    text = "".join(ch for ch in text if ch.isalnum() or ch in " -_")
    return text.replace(" ", "-")


class _Slugs:
    """The anchors given so far in one document, and the last suffix tried for each base."""

    def __init__(self) -> None:
        self.seen: set[str] = set()
        self.counts: dict[str, int] = {}

    def unique(self, text: str) -> str:
        """Repeat headings get `-1`, `-2`... as GitHub does; a suffix already taken (a
        heading that reads `Setup 1`) moves on to the next, so anchors stay unique. The
        search resumes at the base's last suffix (any below it is taken): a page of ten
        thousand `# a` headings costs ten thousand steps, not fifty million."""
        base = slug = _slugify(text)
        count = self.counts.get(base, 0)
        if count:
            slug = f"{base}-{count}"
        while slug in self.seen:
            count += 1
            slug = f"{base}-{count}"
        self.seen.add(slug)
        self.counts[base] = count
        return slug


@dataclass
class _FrontMatter:
    """What the front matter says, where the body starts, and why access cannot be trusted."""

    fields: dict[str, Any]
    body_start: int
    problem: str | None = None


def _front_matter(lines: list[str]) -> _FrontMatter:
    """Read YAML (`---`) or TOML (`+++`) front matter; fail closed on anything unclear.

    Front matter that opens but cannot be read cleanly — never closed, not valid YAML or
    TOML, not a mapping, a duplicated key, `Access:` spelled in another case, front matter
    that does not start on the first line — yields a `problem`: the document is then
    visible to admins only, and the reason is reported. A block with no `key:` line at all
    is a horizontal rule, not front matter, and stays body text.
    """
    first = next((i for i, line in enumerate(lines) if line.strip()), None)
    if first is None:
        return _FrontMatter({}, 0)
    opener = lines[first].strip()
    fence = opener[:3]
    if opener.startswith("%"):  # `%YAML 1.2`, `%TAG`: a YAML reader reads the block after it
        later = _front_matter_after(lines, first + 1)
        if later is not None:
            return _FrontMatter({}, later, "front matter follows a YAML directive (%...)")
        return _FrontMatter({}, 0)
    if fence not in _FENCES:
        return _FrontMatter({}, 0)
    if _YAML_ONLY_BREAKS.search(lines[first]):  # YAML sees lines after the fence on this one
        return _FrontMatter({}, first + 1, "front matter holds Unicode line separators")
    end = next(
        (i for i in range(first + 1, len(lines)) if lines[i].strip() in _FENCES[fence]), None
    )
    if end is None:
        head = lines[first + 1 : first + 1 + _UNCLOSED_LOOKAHEAD]
        if any(_KEY_LINE.match(line) for line in head):
            return _FrontMatter({}, first + 1, f"front matter opened with {fence} is never closed")
        return _FrontMatter({}, 0)
    block = lines[first + 1 : end]
    if not _is_front_matter(block):
        later = _front_matter_after(lines, end + 1)
        if later is not None:  # `---\n---` (empty front matter), then the real block
            return _FrontMatter(
                {}, later, f"front matter must open on the first line with exactly {fence}"
            )
        return _FrontMatter({}, 0)  # `---`, prose, `---`: rules around a paragraph
    if first != 0 or lines[first].rstrip() != fence:
        return _FrontMatter(
            {}, end + 1, f"front matter must open on the first line with exactly {fence}"
        )
    raw = "\n".join(block)
    if _YAML_ONLY_BREAKS.search(raw):  # YAML would see other lines than we do
        return _FrontMatter({}, end + 1, "front matter holds Unicode line separators")
    if len(raw) > _FRONT_MATTER_MAX_CHARS or _flow_depth(raw) > _FRONT_MATTER_MAX_DEPTH:
        # PyYAML takes quadratic time on deep flow nesting (`[[[[...`): refuse it unread
        return _FrontMatter({}, end + 1, "front matter too large or nested too deeply")
    try:
        fields = _load_toml(raw) if fence == "+++" else _load_yaml(raw)
    except _Unreadable as exc:
        return _FrontMatter({}, end + 1, str(exc))
    problem = _yaml_form_problem(raw) if fence == "---" else None
    return _FrontMatter(fields, end + 1, problem or _access_problem(fields))


def _is_front_matter(block: list[str]) -> bool:
    return any(_KEY_LINE.match(line) or _looks_structured(line) for line in block)


def _front_matter_after(lines: list[str], start: int) -> int | None:
    """Where the body starts if a front-matter block opens on the next non-blank line from
    `start` (closed, with a key line); None when none does."""
    opened = next((i for i in range(start, len(lines)) if lines[i].strip()), None)
    if opened is None or lines[opened].strip()[:3] not in _FENCES:
        return None
    closers = _FENCES[lines[opened].strip()[:3]]
    end = next((i for i in range(opened + 1, len(lines)) if lines[i].strip() in closers), None)
    if end is None:
        head = lines[opened + 1 : opened + 1 + _UNCLOSED_LOOKAHEAD]
        return opened + 1 if _is_front_matter(head) else None
    return end + 1 if _is_front_matter(lines[opened + 1 : end]) else None


def read_front_matter(lines: list[str]) -> tuple[dict[str, Any], int, list[str] | None, str | None]:
    """Front matter as a document's: (other fields, body start, access, problem). A problem
    means access `[]` (admins only): unclear access never widens to the default."""
    front = _front_matter(lines)
    if front.problem is None:
        front.problem = _stray_access_problem(lines, front.body_start)
    fields = dict(front.fields)
    access: list[str] | None = None
    if front.problem is not None:
        access = []
        fields.pop("access", None)
    elif "access" in fields:
        access = _access_list(fields.pop("access"))
    return fields, front.body_start, access, front.problem


def _stray_access_problem(lines: list[str], body_start: int) -> str | None:
    """An `access` key in the file's first lines that the front matter read did not take.

    Readers differ on front matter (an empty `---`/`---` block first, a `%YAML` directive
    with a comment, MultiMarkdown's bare `Key: value` lines, a second block): whichever
    form hides an `access` from this reader would leave the document public while its
    author meant it restricted. So any access-like key line past the block read, within
    the first non-blank lines, makes access untrustworthy and the document admins-only.
    """
    seen = 0
    prose_seen = False
    fence: tuple[str, int] | None = None
    for index in range(body_start, len(lines)):
        line = lines[index]
        if not line.strip():
            continue
        seen += 1
        if seen > _HEAD_LINES:
            return None
        if fence is not None:  # an example in a code block, once prose has begun the body
            fence = None if _closes_fence(line, fence) else fence
            continue
        opened = _FENCE_OPEN.match(line)
        if opened and prose_seen:
            fence = (opened.group(1)[0], len(opened.group(1)))
            continue
        if _ACCESS_KEY_LINE.match(_skeleton(line)):
            return (
                f"line {index + 1} states access outside the front matter read; "
                "put `access:` in one `---` block that opens on the first line"
            )
        prose_seen = prose_seen or (line.strip()[0].isalnum() and not _KEY_LINE.match(line))
    return None


def _looks_structured(line: str) -> bool:
    """A line that only YAML's less common forms start with (`{...}`, `!!map`, `? key`),
    or one naming `access` in any disguise: such a block is front
    matter, to be read or refused, never body text that leaves the document public."""
    stripped = line.lstrip()
    return stripped[:1] in {"{", "!", "?"} or "access" in _skeleton(line)


def _yaml_form_problem(raw: str) -> str | None:
    """Front matter must be plain block `key: value` lines. Flow mappings, tags, explicit
    `?` keys, anchors, aliases and merge keys each let a reader and PyYAML disagree on what
    `access` says, so each one fails closed with its name as the reason."""
    try:
        tokens = list(yaml.scan(raw))
    except yaml.YAMLError:
        return None  # read by the simple `key: value` fallback, which has its own checks
    first = next((t for t in tokens if not isinstance(t, yaml.StreamStartToken)), None)
    if isinstance(first, yaml.FlowMappingStartToken):
        return "front matter is a one-line {...} mapping; write one `key: value` per line"
    for token in tokens:
        if isinstance(token, yaml.TagToken):
            return "front matter uses a YAML tag (!!...); write plain `key: value` lines"
        if isinstance(token, yaml.AnchorToken | yaml.AliasToken):
            return "front matter uses a YAML anchor or alias (& or *); write values out"
        if (
            isinstance(token, yaml.KeyToken)
            and raw[token.start_mark.index : token.start_mark.index + 1] == "?"
        ):
            return "front matter uses an explicit `? key`; write `key: value`"
        if isinstance(token, yaml.ScalarToken) and token.plain and token.value == "<<":
            return "front matter uses a merge key (<<); write `access` out in full"
    return None


_CONFUSABLES = str.maketrans(
    {"\u0430": "a", "\u0251": "a", "\u03b1": "a", "\u0441": "c", "\u03f2": "c",
     "\u1d04": "c", "\u0435": "e", "\u0454": "e", "\u03b5": "e", "\u0455": "s",
     "\ua731": "s"}
)  # fmt: skip
"""Letters that look like those of `access` (Cyrillic, Greek, small capitals)."""


def _skeleton(text: str) -> str:
    """What `text` looks like to a reader: compatibility forms folded, invisible and
    combining characters dropped, look-alike letters mapped to Latin, lower case."""
    folded = unicodedata.normalize("NFKD", text).casefold()
    visible = "".join(ch for ch in folded if unicodedata.category(ch) not in {"Cf", "Mn", "Me"})
    return visible.translate(_CONFUSABLES)


def _flow_depth(raw: str) -> int:
    """Deepest `[`/`{` nesting, ignoring quotes: an upper bound is all the check needs."""
    depth = deepest = 0
    for char in raw:
        if char in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif char in "]}":
            depth = max(0, depth - 1)
    return deepest


class _Unreadable(Exception):
    """Front matter that cannot be read cleanly; the message is the reason."""


def _load_toml(raw: str) -> dict[str, Any]:
    try:
        return tomllib.loads(raw)
    except (tomllib.TOMLDecodeError, RecursionError, ValueError) as exc:
        raise _Unreadable(f"front matter is not valid TOML ({exc})") from exc


def _load_yaml(raw: str) -> dict[str, Any]:
    """YAML when it parses as a mapping; else the simple `key: value` reading.

    The fallback matters because hand-written front matter often breaks YAML
    (`title: Keys: how to rotate`) yet is perfectly clear to a human: every line is
    one top-level key, a colon and a value. Anything less clear is unreadable.
    """
    try:
        loaded = yaml.load(raw, Loader=_StrictLoader)  # noqa: S506 - a SafeLoader subclass
    except _Unreadable:
        raise
    except (yaml.YAMLError, RecursionError, ValueError, TypeError) as exc:
        simple = _simple_front_matter(raw)
        if simple is None:
            reason = " ".join(str(exc).split())[:160]
            raise _Unreadable(f"front matter is not valid YAML ({reason})") from exc
        return simple
    if not isinstance(loaded, dict):
        raise _Unreadable("front matter is not a mapping of keys to values")
    return loaded


class _StrictLoader(yaml.SafeLoader):
    """SafeLoader that refuses duplicate keys (YAML forbids them; PyYAML keeps the last)."""

    def construct_mapping(self, node: Any, deep: bool = False) -> dict[Any, Any]:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            try:
                duplicate = key in seen
                seen.add(key)
            except TypeError:  # an unhashable key (a list); SafeLoader reports it
                continue
            if duplicate:
                raise _Unreadable(f"front matter has a duplicate key {str(key)[:40]!r}")
        return super().construct_mapping(node, deep=deep)


def _simple_front_matter(raw: str) -> dict[str, Any] | None:
    result: dict[str, Any] = {}
    for line in raw.split("\n"):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        key, sep, value = line.partition(":")
        if not sep or not key.strip() or key != key.lstrip():
            return None
        key = key.strip()
        if key in result:
            raise _Unreadable(f"front matter has a duplicate key {key[:40]!r}")
        value = value.strip()
        if value[:1] in _YAML_INDICATORS and _skeleton(key).strip() == "access":
            # YAML read this value as something else (a tag, an alias...) and failed: its
            # text is no group name to trust.
            raise _Unreadable(f"front matter's access starts with YAML's {value[:1]!r}")
        if value.startswith("[") and value.endswith("]"):
            result[key] = [_unquote(v) for v in value[1:-1].split(",") if v.strip()]
        else:
            result[key] = _unquote(value)
    return result


def _unquote(value: str) -> str:
    value = value.strip()
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
        return value[1:-1]
    return value


_ACCESS_WORD = re.compile(r"(?<![\w-])access(?![\w-])")
"""`access` as a word of a key (not `access_notes` or `access-log`)."""


def _access_problem(fields: dict[str, Any]) -> str | None:
    """Why `access` cannot be trusted, or None when it is absent or a clean list of groups."""
    for key in fields:
        if key == "access":
            continue
        if str(key).strip().lower() == "access":
            return f"the access key is written {str(key)!r}; write it `access`"
        if _skeleton(str(key)).strip() == "access":
            return f"the access key {str(key)!r} holds hidden or look-alike characters"
        if _ACCESS_WORD.search(_skeleton(str(key))):
            # `"access":[hr]` or `- "access":[hr]`, which a YAML reader may take for the key
            # access but PyYAML cannot read, reach here through the plain `key: value`
            # reading with their quotes and dashes on: never read as some other field
            return f"the key {str(key)[:40]!r} names access; write it `access`"
    if "access" not in fields:
        return None
    value = fields["access"]
    if isinstance(value, str):
        value = value.split(",")
    if not isinstance(value, list) or not value:
        return "access must be a non-empty list of group names, e.g. `access: [hr]`"
    for item in value:
        if not isinstance(item, str) or not _GROUP_NAME.fullmatch(item.strip()):
            return f"access lists {str(item)[:40]!r}, which is not a group name"
    return None


def _access_list(value: Any) -> list[str]:
    """Groups named by a clean `access:` (checked by `_access_problem` first)."""
    items = value.split(",") if isinstance(value, str) else value
    groups: list[str] = []
    for item in items:
        name = item.strip()
        if name not in groups:
            groups.append(name)
    return groups


def _jsonable(value: Any, budget: list[int]) -> Any:
    """Metadata must survive JSON (the index stores it): dates become ISO strings.

    `budget` caps the nodes visited, since YAML aliases can make a few lines of
    front matter expand exponentially (or refer to themselves).
    """
    budget[0] -= 1
    if budget[0] < 0:
        raise ParseError("front matter too complex")
    if isinstance(value, dt.datetime | dt.date | dt.time):
        return value.isoformat()
    if isinstance(value, dict):
        return {str(k): _jsonable(v, budget) for k, v in value.items()}
    if isinstance(value, list | tuple | set):
        return [_jsonable(v, budget) for v in value]
    if value is None or isinstance(value, str | int | float | bool):
        return value
    return str(value)
