"""How a Slack channel's messages become documents, and how a document is cited.

A **thread** (a parent message with replies) is one document: it is one conversation, read
together, and one more reply re-reads that thread alone (`conversations.replies`). Messages
nobody replied to are gathered into one document **per channel and day** (UTC): one such
message is too short to stand alone, a day of a channel reads as one conversation, and an
edit or a deletion re-reads that day only, from the history already listed. Each message
is a section cited by its permalink, in the archive form Slack's own permalinks take
(`https://WORKSPACE.slack.com/archives/CHANNEL/pTS`, a reply with `?thread_ts=&cid=`), so
no `chat.getPermalink` call is spent per message.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from footnote.ingest.documents import ParsedDocument, Section

_MARKUP = re.compile(r"<([^<>|]{1,500})(?:\|([^<>]{0,500}))?>")
_KEPT_SUBTYPES = frozenset({"", "bot_message", "file_share", "me_message", "tombstone"})
"""Messages with text people wrote; joins, leaves, topic and rename notices are not."""


@dataclass
class Conversation:
    """One document of a channel: a thread, or the unthreaded messages of one day."""

    channel: str
    key: str
    """The thread's ts, or the day (YYYY-MM-DD)."""
    thread: bool
    messages: list[dict[str, Any]] = field(default_factory=list)
    """For a thread, its parent as listed; for a day, its messages, oldest first."""

    @property
    def doc_id(self) -> str:
        return f"{self.channel}/{self.key}"

    def activity(self) -> str:
        """The latest ts anything in it happened at (a message, a reply, an edit)."""
        stamps = [
            str(stamp)
            for m in self.messages
            for stamp in (m.get("ts"), m.get("latest_reply"), _edited(m))
            if stamp
        ]
        return max(stamps, key=ts_value, default="")

    def fingerprint(self) -> str:
        """Changes when a message is added, edited or deleted, or a reply is added or
        deleted (a reply's own edit leaves its parent unchanged: Slack does not say)."""
        shape = [
            [m.get("ts"), _edited(m), m.get("reply_count"), m.get("latest_reply")]
            for m in self.messages
        ]
        return hashlib.sha256(json.dumps(shape).encode()).hexdigest()[:16]


def conversations(channel: str, listed: list[dict[str, Any]]) -> list[Conversation]:
    """A channel's documents from its listed top-level messages."""
    threads: list[Conversation] = []
    days: dict[str, Conversation] = {}
    for message in sorted(listed, key=lambda m: ts_value(str(m.get("ts") or "0"))):
        ts = str(message.get("ts") or "")
        subtype = str(message.get("subtype") or "")
        if not ts or subtype not in _KEPT_SUBTYPES:
            continue
        if int(message.get("reply_count") or 0) > 0 and message.get("thread_ts") in (None, ts):
            threads.append(Conversation(channel, ts, True, [message]))
        elif subtype != "tombstone" and message.get("thread_ts") in (None, ts):
            day = day_of(ts)
            days.setdefault(day, Conversation(channel, day, False)).messages.append(message)
    return [*threads, *days.values()]


def permalink(workspace: str, channel: str, message: dict[str, Any]) -> str:
    ts = str(message.get("ts") or "")
    link = f"https://{workspace}.slack.com/archives/{channel}/p{ts.replace('.', '')}"
    thread = message.get("thread_ts")
    if thread and thread != ts:
        link += f"?thread_ts={thread}&cid={channel}"
    return link


def parsed(record: dict[str, Any], source: str, access: list[str], problem: str | None) -> Any:
    """The document: each message a section cited by its permalink, headed by its channel,
    author and time. Its text is data: never read for front matter, so a message cannot
    name its own readers."""
    title = record["title"]
    sections = []
    for message in record["messages"]:
        if not message["text"].strip():
            continue
        heading = f"{message['author'] or 'unknown'} at {message['time']}"
        sections.append(
            Section(
                text=message["text"],
                headings=[title, heading],
                url=message["link"],
                metadata={"author": message["author"]} if message["author"] else {},
            )
        )
    return ParsedDocument(
        source=source,
        title=title,
        sections=sections,
        date=record["updated"][:10] or None,
        access=access,
        access_problem=problem,
        metadata={"workspace": record["workspace"], "channel": record["channel"]},
    )


def plain_text(text: str, name_of: Callable[[str], str | None]) -> str:
    """A message's mrkdwn as it reads: `<@U123>` as `@name`, `<#C123|eng>` as `#eng`,
    `<https://x|label>` as `label (https://x)`, `<!here>` as `@here`; entities decoded."""

    def read(match: re.Match[str]) -> str:
        target, label = match.group(1), match.group(2)
        if target.startswith("@"):
            return f"@{label or name_of(target[1:]) or target[1:]}"
        if target.startswith("#"):
            return f"#{label or target[1:]}"
        if target.startswith("!"):
            return f"@{label or target[1:].split('^')[0]}"
        return f"{label} ({target})" if label and label != target else target

    plain = _MARKUP.sub(read, text)
    return plain.replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&")


def ts_value(ts: str) -> float:
    try:
        return float(ts)
    except ValueError:
        return 0.0


def iso(ts: str) -> str:
    """A Slack ts (seconds since the epoch, with a sequence after the dot) as ISO 8601."""
    when = dt.datetime.fromtimestamp(int(ts_value(ts)), dt.UTC)
    return when.strftime("%Y-%m-%dT%H:%M:%SZ")


def day_of(ts: str) -> str:
    return iso(ts)[:10]


def _edited(message: dict[str, Any]) -> str:
    edited = message.get("edited")
    return str(edited.get("ts") or "") if isinstance(edited, dict) else ""
