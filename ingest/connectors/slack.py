"""The Slack connector: a workspace's public and private channels, read through the official
`slack_sdk`, each channel readable only by those Slack lets read it.

`slack://WORKSPACE` reads every channel the bot is a member of; `?channels=general,eng` only
those. The token is the operator's, `$FOOTNOTE_SLACK_TOKEN`, read at each sync and never
recorded; `$FOOTNOTE_SLACK_API_URL` points at another Web API (a test's), held to the same
private-address rule as any URL a source reaches. Documents are threads and channel-days
(`slack_messages`); a sync lists each channel's top-level messages in two ranges (after the
checkpoint, `oldest=`; before it, `latest=`), reads the replies of the threads with newer
activity alone, and prunes what is no longer listed. Readers: a public channel's are the
workspace's, a private channel's its members (`conversations.members`), mapped to Footnote
identities by `connectors.identities`; members that cannot be read make it no one's.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol
from urllib.parse import parse_qsl, urlsplit

from footnote.ingest.connectors.base import (
    Batch,
    Checkpoint,
    ConnectorError,
    Permissions,
    SourceDocument,
)
from footnote.ingest.connectors.identities import IdentityMap
from footnote.ingest.connectors.slack_api import TOKEN_ENV, SlackApi, SlackFailure
from footnote.ingest.connectors.slack_messages import (
    Conversation,
    conversations,
    day_of,
    iso,
    parsed,
    permalink,
    plain_text,
    ts_value,
)
from footnote.ingest.documents import ParsedDocument, ParseError

SCHEME = "slack"
API_ENV = "FOOTNOTE_SLACK_API_URL"
DEFAULT_API = "https://slack.com/api/"
RATE_LIMIT_BUDGET_S = 120.0
"""How long one sync may wait in all for Slack's rate limits before it gives up."""
_WORKSPACE = re.compile(r"[a-z0-9][a-z0-9-]{0,62}")
_CHANNEL = re.compile(r"[a-z0-9][a-z0-9_.-]{0,79}")


@dataclass(frozen=True)
class SlackSource:
    """A Slack source as the index records it: `id` is what `footnote sources` shows."""

    workspace: str
    channels: tuple[str, ...] = ()
    """Channel names to read; empty: every channel the bot is a member of."""

    @property
    def id(self) -> str:
        tail = f"?channels={','.join(self.channels)}" if self.channels else ""
        return f"{SCHEME}://{self.workspace}{tail}"


def parse_source(value: str) -> SlackSource:
    """The Slack source a user names, or ConnectorError saying what is wrong with it."""
    shown = value[:200]
    try:
        parts = urlsplit(value)
    except ValueError as exc:
        raise ConnectorError(f"{shown}: malformed source: {exc}") from None
    workspace = parts.netloc.lower()
    if (
        parts.scheme != SCHEME
        or parts.path.strip("/")
        or parts.fragment
        or not _WORKSPACE.fullmatch(workspace)
    ):
        raise ConnectorError(f"{shown}: a Slack source is slack://WORKSPACE[?channels=a,b]")
    channels: tuple[str, ...] = ()
    for n, (key, raw) in enumerate(parse_qsl(parts.query, keep_blank_values=True)):
        names = [c.strip().lstrip("#").lower() for c in raw.split(",")]
        if key != "channels" or n or not all(_CHANNEL.fullmatch(c) for c in names):
            raise ConnectorError(
                f"{shown}: the one setting is channels=NAME,NAME (Slack channel names)"
            )
        channels = tuple(sorted(set(names)))
    return SlackSource(workspace=workspace, channels=channels)


def identify(value: str) -> tuple[str, str]:
    source = parse_source(value)
    return source.id, source.workspace


def served(value: str, checked_path: Any) -> str:
    """A served admin's Slack source: the workspace and its channels only. Which API is
    reached and which token is sent are the operator's environment's, never a source's."""
    return parse_source(value).id


def check_api(value: str) -> str:
    """An API address: http(s), a host, no credentials, query or fragment."""
    try:
        parts = urlsplit(value)
        host = parts.hostname
    except ValueError:
        host = None
    if (
        host is None
        or parts.scheme not in ("http", "https")
        or parts.username is not None
        or parts.query
        or parts.fragment
    ):
        raise ConnectorError(
            f"${API_ENV}: the Slack Web API is https://HOST/api/, with no credentials"
        )
    return value.rstrip("/") + "/"


class Opening(Protocol):
    """What opening a recorded source gives this connector (`registry.Opening`)."""

    @property
    def source(self) -> str: ...

    @property
    def check_host(self) -> Callable[[str, int], None]: ...


def open_connector(opening: Opening) -> SlackConnector:
    source = parse_source(opening.source)
    api = check_api(os.environ.get(API_ENV) or DEFAULT_API)
    parts = urlsplit(api)
    opening.check_host(parts.hostname or "", parts.port or (443 if parts.scheme == "https" else 80))
    token = os.environ.get(TOKEN_ENV, "")
    if not token:
        raise ConnectorError(f"${TOKEN_ENV} is not set (the Slack bot token)")
    client = SlackApi(
        api=api, token=token, workspace=source.workspace, budget_s=RATE_LIMIT_BUDGET_S
    )
    return SlackConnector(source, client, identities=IdentityMap.from_env())


class SlackConnector:
    """One workspace's channels: the `Connector` protocol over the Web API."""

    def __init__(self, source: SlackSource, api: SlackApi, *, identities: IdentityMap) -> None:
        self.source = source
        self.api = api
        self.identities = identities
        self._channels: dict[str, dict[str, Any]] | None = None
        self._skipped: dict[str, str] = {}
        self._listed: dict[str, list[Conversation]] = {}
        self._readers: dict[str, Permissions] = {}

    # -- the Connector protocol --------------------------------------------------------

    def full_load(self) -> Batch:
        found = [c for cid in self.channels() for c in self._conversations(cid, "")]
        return self._batch(found, "")

    def poll(self, since: Checkpoint) -> Batch:
        """The threads and days with activity after each channel's checkpoint: new
        messages (listed with `oldest=`), new replies and edits of older ones (their
        parent's `latest_reply` and `edited`). A channel new since is read in full."""
        marks = since.detail.get("channels")
        if not isinstance(marks, dict):
            return self.full_load()
        changed = []
        for cid in self.channels():
            mark = str(marks.get(cid) or "")
            listed = self._conversations(cid, mark)
            changed += [c for c in listed if not mark or ts_value(c.activity()) > ts_value(mark)]
        return self._batch(changed, since.cursor)

    def list_ids(self) -> dict[str, str]:
        return {c.doc_id: self._version(c) for cid in self.channels() for c in self._listed_of(cid)}

    def permissions(self, doc_id: str) -> Permissions:
        """The channel's readers: Slack has no per-message permissions."""
        cid = doc_id.split("/", 1)[0]
        if cid not in self._readers:
            self._readers[cid] = self._read_readers(self.channels()[cid])
        return self._readers[cid]

    # -- channels and their messages -----------------------------------------------------

    def channels(self) -> dict[str, dict[str, Any]]:
        """The channels read (id -> conversations.list entry): those the bot is a member
        of, of the names the source lists if it lists any."""
        if self._channels is None:
            listed = self._listing(self.api.channels, "conversations.list")
            member = {str(c["id"]): c for c in listed if c.get("id") and c.get("is_member") is True}
            wanted = set(self.source.channels)
            if wanted:
                member = {k: c for k, c in member.items() if c.get("name") in wanted}
                for name in sorted(wanted - {str(c.get("name")) for c in member.values()}):
                    self._skipped[f"#{name}"] = "no such channel, or the bot is not a member"
            self._channels = member
        return self._channels

    def _listing(self, read: Callable[[], Any], what: str) -> Any:
        """A listing the sync cannot go on without: Slack's refusal (a missing scope, a
        channel gone mid-sync) fails the source in one line, and nothing changes."""
        try:
            return self.api.guarded(read)
        except SlackFailure as failure:
            raise ConnectorError(
                f"{self.source.workspace}: Slack answered {failure.error[:80]} to {what}"
            ) from None

    def _conversations(self, cid: str, mark: str) -> list[Conversation]:
        """A channel's documents, its history listed once a sync: after the checkpoint
        (`oldest=`) and before it (`latest=`), or whole when there is no checkpoint."""
        if cid not in self._listed:
            what = f"conversations.history of #{self.channels()[cid].get('name')}"
            if mark:
                newer = self._listing(lambda: self.api.history(cid, oldest=mark), what)
                older = self._listing(lambda: self.api.history(cid, latest=mark), what)
                unique = {str(m.get("ts")): m for m in [*older, *newer]}
                messages = list(unique.values())
            else:
                messages = self._listing(lambda: self.api.history(cid), what)
            self._listed[cid] = conversations(cid, messages)
        return self._listed[cid]

    def _listed_of(self, cid: str) -> list[Conversation]:
        return self._listed[cid] if cid in self._listed else self._conversations(cid, "")

    def _batch(self, changed: list[Conversation], cursor: str) -> Batch:
        marks = {
            cid: max((c.activity() for c in self._listed_of(cid)), key=ts_value, default="")
            for cid in self.channels()
        }
        latest = max(marks.values(), key=ts_value, default="")
        detail = {
            "workspace": self.source.workspace,
            "channels": {cid: mark for cid, mark in marks.items() if mark},
            "changed": len(changed),
        }
        checkpoint = Checkpoint(iso(latest) if latest else cursor, _now(), detail)
        documents = [self._document(c) for c in changed]
        return Batch(documents=documents, checkpoint=checkpoint, skipped=dict(self._skipped))

    # -- readers -----------------------------------------------------------------------

    def _read_readers(self, channel: dict[str, Any]) -> Permissions:
        name = f"#{channel.get('name') or channel.get('id')}"
        if not channel.get("is_private"):
            workspace = f"slack-workspace:{self.source.workspace}"
            mapped = self.identities.names.get(workspace)
            return Permissions(groups=(mapped,)) if mapped else Permissions(public=True)
        try:
            members = self.api.guarded(lambda: self.api.members(str(channel["id"])))
            people = [self._person(uid) for uid in members]
        except SlackFailure as failure:
            return Permissions.nobody(
                f"Slack did not list the members of {name} ({failure.error[:60]}); a token "
                "with groups:read and users:read is needed"
            )
        users = sorted(
            {
                self._identity(person)
                for person in people
                if person and not person.get("deleted") and not person.get("is_bot")
            }
        )
        if not users:
            return Permissions.nobody(f"{name} lists no members Footnote can name")
        return Permissions(users=tuple(users))

    def _person(self, uid: str) -> dict[str, Any] | None:
        return self.api.guarded(lambda: self.api.user(uid))

    def _identity(self, person: dict[str, Any]) -> str:
        """A member's Footnote identity: the operator's mapping of their e-mail, then of
        their Slack id or user name; unmapped, `slack:ID` (which no one holds)."""
        profile = person.get("profile") if isinstance(person.get("profile"), dict) else {}
        email = str((profile or {}).get("email") or "")
        keys = [email.lower(), email, str(person.get("id") or ""), str(person.get("name") or "")]
        for key in keys:
            mapped = self.identities.names.get(f"slack:{key}") if key else None
            if mapped:
                return mapped
        return f"slack:{person.get('id')}"

    # -- documents ---------------------------------------------------------------------

    def _version(self, conversation: Conversation) -> str:
        """Changes with the conversation's activity and with who may read it, so a
        member removed reaches every document of the channel at the next sync."""
        readers = self.permissions(conversation.doc_id)
        digest = hashlib.sha256(json.dumps(readers.record()).encode()).hexdigest()
        return f"{conversation.activity()}/{conversation.fingerprint()}/{digest[:16]}"

    def _document(self, conversation: Conversation) -> SourceDocument:
        channel = self.channels()[conversation.channel]
        readers = self.permissions(conversation.doc_id)
        where = f"{self.source.workspace}/#{channel.get('name') or conversation.channel}"
        first = conversation.messages[0]
        shown = f"thread-{conversation.key}" if conversation.thread else conversation.key

        def read() -> bytes:
            try:
                record = self._record(conversation, where)
            except (ConnectorError, SlackFailure) as exc:
                raise ParseError(f"cannot read from Slack: {exc}") from None
            record["readers"] = readers.record()  # a new reader changes the content
            return json.dumps(record, ensure_ascii=False, sort_keys=True).encode("utf-8")

        def parse(data: bytes, source: str) -> ParsedDocument:
            return parsed(json.loads(data), source, readers.access_groups() or [], readers.problem)

        return SourceDocument(
            id=conversation.doc_id,
            name=f"{where}/{shown}",
            version=self._version(conversation),
            link=permalink(self.source.workspace, conversation.channel, first),
            read=read,
            parse=parse,
            author=self._author(first),
            updated=iso(conversation.activity()),
            permissions=readers,
        )

    def _record(self, conversation: Conversation, where: str) -> dict[str, Any]:
        """What a document holds: its messages' text, author, time and permalink."""
        messages = conversation.messages
        if conversation.thread:
            messages = self.api.guarded(
                lambda: self.api.replies(conversation.channel, conversation.key)
            )
        kept = [m for m in messages if str(m.get("subtype") or "") != "tombstone"]
        channel = where.split("/", 1)[1]
        opening = str(messages[0].get("text") or "") if messages else ""
        opening = opening.strip().split("\n", 1)[0][:80]
        title = (
            f"{channel}, thread of {day_of(conversation.key)}: {opening}"
            if conversation.thread
            else f"{channel} on {conversation.key}"
        )
        return {
            "title": title,
            "workspace": self.source.workspace,
            "channel": channel,
            "updated": iso(conversation.activity()),
            "messages": [
                {
                    "text": plain_text(str(m.get("text") or ""), self._name_of),
                    "author": self._author(m),
                    "time": iso(str(m.get("ts") or "0")),
                    "link": permalink(self.source.workspace, conversation.channel, m),
                }
                for m in kept
            ],
        }

    def _name_of(self, uid: str) -> str | None:
        """A mentioned person's Slack user name, when Slack tells it."""
        try:
            person = self._person(uid)
        except SlackFailure:
            return None
        return (str(person.get("name") or "") or None) if person else None

    def _author(self, message: dict[str, Any]) -> str | None:
        """The message's author by their Slack user name (users.info, cached), or a bot's."""
        uid = message.get("user")
        if isinstance(uid, str) and uid:
            try:
                person = self._person(uid)
            except SlackFailure:
                person = None
            if person:
                return str(person.get("real_name") or person.get("name") or uid)
            return uid
        name = message.get("username") or (message.get("bot_profile") or {}).get("name")
        return str(name) if name else None


def _now() -> str:
    return iso(str(time.time()))
