"""E-mail: one message (.eml) or a mailbox (.mbox), read by the standard library's `email`
and `mailbox` with `policy.default`.

Each message is a section cited by its place in the file (`inbox.mbox#message-3`) under the
heading path `thread subject > sender, date`, its text starting with From/To/Date lines;
its sender, thread and Message-ID are its chunks' metadata, for filters.
Messages are grouped into threads by References / In-Reply-To (else by subject without
Re:/Fwd:), oldest first within a thread. An attachment some parser reads becomes sections
of its own under the message (`message-3-report-pdf`, its pages kept); one that cannot be
read is named in the document's metadata, never a failure of the whole message.
"""

from __future__ import annotations

import datetime as dt
import email
import email.header
import email.message
import email.policy
import email.utils
import mailbox
import re
import tempfile
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

from footnote.ingest.documents import ParsedDocument, ParseError, Section
from footnote.ingest.parsers import html
from footnote.ingest.parsers.common import normalize_newlines

EML_SUFFIXES = frozenset({".eml"})
MBOX_SUFFIXES = frozenset({".mbox"})
MAX_MESSAGES = 20_000
MAX_ATTACHMENTS = 50
"""Attachments read per message; the rest are named as unread."""
MAX_NESTING = 3
"""Messages attached inside messages, at most this deep."""
_REPLY_PREFIX = re.compile(r"^\s*(?:(?:re|fwd?|aw|wg|sv|tr)\s*(?:\[\d+\])?\s*:\s*)+", re.I)

Lookup = Mapping[str, Callable[[bytes, Path, str], ParsedDocument]]
"""Parsers by suffix, for attachments (the package's registry, passed in by it)."""


@dataclass
class _Message:
    number: int
    message: email.message.EmailMessage
    subject: str
    sender: str
    date: dt.datetime | None
    message_id: str
    thread: str = ""
    unread: list[str] = field(default_factory=list)


def parse_eml(data: bytes, path: Path, source: str, *, parsers: Lookup) -> ParsedDocument:
    message = _message_from_bytes(data)
    item = _describe(1, message)
    sections = _sections(item, source, parsers, anchor="message", depth=0)
    metadata: dict[str, Any] = {
        "from": item.sender,
        "to": _header(message, "to"),
        "subject": item.subject,
        "thread": _thread_subject(item.subject),
        "message_id": item.message_id,
    }
    if item.unread:
        metadata["attachments_unread"] = ", ".join(item.unread)
    return ParsedDocument(
        source=source,
        title=item.subject or path.stem,
        sections=sections,
        date=item.date.date().isoformat() if item.date else None,
        metadata={k: v for k, v in metadata.items() if v},
    )


def parse_mbox(data: bytes, path: Path, source: str, *, parsers: Lookup) -> ParsedDocument:
    if not data.startswith(b"From "):
        raise ParseError('not an mbox file (it must start with a "From " line)')
    items = [_describe(n, m) for n, m in enumerate(_mbox_messages(data), 1)]
    threads = _threads(items)
    sections: list[Section] = []
    unread: list[str] = []
    for thread in threads:
        for item in thread:
            sections.extend(
                _sections(item, source, parsers, anchor=f"message-{item.number}", depth=0)
            )
            unread.extend(f"message {item.number}: {name}" for name in item.unread)
    dates = [item.date for item in items if item.date]
    metadata: dict[str, Any] = {"messages": len(items), "threads": len(threads)}
    if unread:
        metadata["attachments_unread"] = "; ".join(unread)
    return ParsedDocument(
        source=source,
        title=path.stem,
        sections=sections,
        date=max(dates).date().isoformat() if dates else None,
        metadata=metadata,
    )


def _message_from_bytes(data: bytes) -> email.message.EmailMessage:
    message = email.message_from_bytes(data, policy=email.policy.default)
    if not isinstance(message, email.message.EmailMessage) or not (
        message.keys() or message.get_payload()
    ):
        raise ParseError("not an e-mail message")
    return message


def _mbox_messages(data: bytes) -> list[email.message.EmailMessage]:
    """The mailbox's messages; `mailbox.mbox` reads a path, so the bytes go to a private
    temporary file that is removed at once."""
    with tempfile.TemporaryDirectory(prefix="footnote-mbox-") as folder:
        file = Path(folder) / "box.mbox"
        file.write_bytes(data)
        factory: Any = (
            _message_from_file  # typeshed expects mboxMessage; policy.default gives EmailMessage
        )
        box = mailbox.mbox(file, factory=factory, create=False)
        messages: list[email.message.EmailMessage] = []
        try:
            for message in cast(Iterator[email.message.EmailMessage], box):
                if len(messages) >= MAX_MESSAGES:
                    raise ParseError(f"more than {MAX_MESSAGES:,} messages")
                messages.append(message)
        finally:
            box.close()
    return messages


def _message_from_file(handle: Any) -> email.message.EmailMessage:
    message = email.message_from_binary_file(handle, policy=email.policy.default)
    assert isinstance(message, email.message.EmailMessage)
    return message


def _header(message: email.message.EmailMessage, name: str) -> str:
    """A header's first value as text, encoded words decoded. Read raw: the policy's header
    objects parse each address list in full, ten times slower, to the same text."""
    wanted = name.lower()
    raw = next((str(v) for k, v in message.raw_items() if k.lower() == wanted), "")
    try:
        value = str(email.header.make_header(email.header.decode_header(raw)))
    except (ValueError, LookupError, UnicodeError):  # a bad charset or encoding: as written
        value = raw
    return " ".join(value.replace("\x00", "").split())


def _describe(number: int, message: email.message.EmailMessage) -> _Message:
    date: dt.datetime | None = None
    raw_date = _header(message, "date")
    if raw_date:
        try:
            date = email.utils.parsedate_to_datetime(raw_date)
        except (TypeError, ValueError, IndexError):
            date = None
    return _Message(
        number=number,
        message=message,
        subject=_header(message, "subject"),
        sender=_header(message, "from"),
        date=date,
        message_id=_header(message, "message-id"),
    )


def _thread_subject(subject: str) -> str:
    return _REPLY_PREFIX.sub("", subject).strip() or "(no subject)"


def _threads(items: list[_Message]) -> list[list[_Message]]:
    """Messages grouped by the first message their References / In-Reply-To name (a reply's
    root), else by subject; threads in the order they start, messages oldest first."""
    root_of: dict[str, str] = {}
    groups: dict[str, list[_Message]] = {}
    for item in items:
        references = _header(item.message, "references").split()
        reply_to = _header(item.message, "in-reply-to").split()
        chain = references or reply_to
        if chain:
            key = root_of.get(chain[0], chain[0])
        else:
            key = f"subject:{_thread_subject(item.subject).lower()}"
        for known in (*chain, item.message_id):
            if known and known in groups and known != key:  # a root seen by its own id first
                key = root_of.get(known, known)
        if item.message_id:
            root_of.setdefault(item.message_id, key)
        item.thread = key
        groups.setdefault(key, []).append(item)
    epoch = dt.datetime.min.replace(tzinfo=dt.UTC)

    def when(item: _Message) -> tuple[dt.datetime, int]:
        moment = item.date or epoch
        return (moment if moment.tzinfo else moment.replace(tzinfo=dt.UTC), item.number)

    return [sorted(group, key=when) for group in groups.values()]


def _sections(
    item: _Message, source: str, parsers: Lookup, *, anchor: str, depth: int
) -> list[Section]:
    message = item.message
    stamp = item.date.isoformat(sep=" ", timespec="minutes") if item.date else "no date"
    headings = [_thread_subject(item.subject), f"{item.sender or 'unknown sender'}, {stamp}"]
    lines = [f"From: {item.sender}" if item.sender else ""]
    for name in ("to", "cc"):
        if value := _header(message, name):
            lines.append(f"{name.title()}: {value}")
    lines.append(f"Date: {stamp}")
    if item.subject:
        lines.append(f"Subject: {item.subject}")
    body = _body(message)
    text = "\n".join(line for line in lines if line) + (f"\n\n{body}" if body else "")
    own = {"from": item.sender, "thread": headings[0], "message_id": item.message_id}
    metadata = {k: v for k, v in own.items() if v}
    sections = [
        Section(
            text=text,
            headings=headings,
            anchor=anchor,
            url=f"{source}#{anchor}",
            metadata=metadata,
        )
    ]
    for number, part in enumerate(message.iter_attachments(), 1):
        name = _attachment_name(part, number)
        if number > MAX_ATTACHMENTS:
            item.unread.append(f"{name} (over {MAX_ATTACHMENTS} attachments)")
            continue
        try:
            attached = _attachment(
                part, name, item, headings, source, parsers, anchor=anchor, depth=depth
            )
        except ParseError as exc:
            item.unread.append(f"{name} ({exc})")
        except Exception as exc:  # a parser bug on one attachment must not lose the message
            item.unread.append(f"{name} (parse failed: {type(exc).__name__})")
        else:
            for section in attached:  # a file's rows found by the message's sender too
                section.metadata = {**metadata, **section.metadata}
            sections.extend(attached)
    return sections


def _attachment_name(part: email.message.EmailMessage, number: int) -> str:
    name = part.get_filename()
    if not name and part.get_content_type() == "message/rfc822":
        name = f"message-{number}.eml"
    name = Path(str(name or f"attachment-{number}").replace("\\", "/")).name
    return " ".join(name.replace("\x00", "").split()) or f"attachment-{number}"


def _attachment(
    part: email.message.EmailMessage,
    name: str,
    item: _Message,
    headings: list[str],
    source: str,
    parsers: Lookup,
    *,
    anchor: str,
    depth: int,
) -> list[Section]:
    base = f"{anchor}-{re.sub(r'[^a-z0-9]+', '-', name.lower()).strip('-') or 'attachment'}"
    own = [*headings, f"Attachment: {name}"]
    if part.get_content_type() == "message/rfc822":
        if depth + 1 >= MAX_NESTING:
            raise ParseError(f"messages nested more than {MAX_NESTING} deep")
        inner = part.get_content()
        if not isinstance(inner, email.message.EmailMessage):
            raise ParseError("not an e-mail message")
        attached = _describe(0, inner)
        nested = _sections(attached, source, parsers, anchor=base, depth=depth + 1)
        item.unread.extend(f"{name}: {unread}" for unread in attached.unread)
        for section in nested:
            section.headings = [*own, *section.headings[1:]]
        return nested
    parser = parsers.get(Path(name).suffix.lower())
    if parser is None:
        raise ParseError("no parser for this type")
    data = part.get_payload(decode=True)
    if not isinstance(data, bytes) or not data:
        raise ParseError("empty attachment")
    parsed = parser(data, Path(name), name)
    sections = []
    for section in parsed.sections:
        inner_anchor = f"{base}-{section.anchor}" if section.anchor else base
        sections.append(
            Section(
                text=section.text,
                headings=[*own, *section.headings],
                anchor=inner_anchor,
                url=f"{source}#{inner_anchor}",
                page=section.page,
                is_code=section.is_code,
            )
        )
    return sections


def _body(message: email.message.EmailMessage) -> str:
    """The message's own text: its plain part, else its HTML part read as the HTML parser
    reads a page (hidden text and scripts dropped)."""
    part = message.get_body(preferencelist=("plain", "html"))
    if part is None:
        return ""
    try:
        content = part.get_content()
    except (LookupError, ValueError, AssertionError):  # unknown charset, broken encoding
        raw = part.get_payload(decode=True)
        content = raw.decode("utf-8", errors="replace") if isinstance(raw, bytes) else ""
    if not isinstance(content, str):
        return ""
    if part.get_content_subtype() == "html":
        try:
            page = html.parse(content.encode("utf-8"), Path("body.html"), "body.html")
        except ParseError:
            return ""
        return "\n\n".join(section.text for section in page.sections)
    return normalize_newlines(content.replace("\x00", "")).strip()
