"""The Google Drive connector: a folder's files (its subfolders' too) or a shared drive's,
read through google-api-python-client over Drive's REST API (v3), each readable only by
those Drive shares it with.

`gdrive://FOLDER_ID` reads a folder and every folder under it; `gdrive://shared-drive/DRIVE_ID`
a whole shared drive. Google Docs are exported as Markdown; plain text, Markdown, HTML and PDF
files are downloaded; each is parsed by the parser of its format and cited by its
`webViewLink`. Other types are skipped with their reason. A sync reads Drive's change feed
from the checkpoint (a change token): a file changed, moved in or re-shared is read again, a
file deleted, trashed or moved out is pruned because the tree listed now no longer holds it.
Readers come from each file's permissions: users, groups and domains by e-mail through the
identity map; "anyone with the link" only when the operator allows it. Permissions that
cannot be read make the file no one's.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Protocol

from footnote.ingest.connectors import gdrive_api
from footnote.ingest.connectors.base import (
    Batch,
    Checkpoint,
    CheckpointLost,
    ConnectorError,
    Permissions,
    SourceDocument,
)
from footnote.ingest.connectors.identities import IdentityMap
from footnote.ingest.documents import ParsedDocument, ParseError

SCHEME = "gdrive"
API_ENV = "FOOTNOTE_GDRIVE_API"
PUBLIC_ENV = "FOOTNOTE_GDRIVE_PUBLIC"
"""`1`: a file shared with anyone who has the link is for everyone; else that sharing is
not counted (the file is for its named readers)."""
FOLDER = "application/vnd.google-apps.folder"
GOOGLE_DOC = "application/vnd.google-apps.document"
SUFFIXES = {
    GOOGLE_DOC: ".md",
    "text/plain": ".txt",
    "text/markdown": ".md",
    "text/x-markdown": ".md",
    "text/html": ".html",
    "application/pdf": ".pdf",
}
"""The types read -> the suffix of the parser that reads them (a Google Doc as exported)."""
FILE_FIELDS = (
    "id,name,mimeType,parents,modifiedTime,version,webViewLink,size,driveId,"
    "owners(emailAddress),lastModifyingUser(emailAddress)"
)
_ID = re.compile(r"[A-Za-z0-9_-]{1,200}")
_LOOPBACK = ("127.0.0.1", "::1", "localhost")
_FORM = "a Google Drive source is gdrive://FOLDER_ID or gdrive://shared-drive/DRIVE_ID"


@dataclass(frozen=True)
class DriveSource:
    """A Drive source as the index records it: a folder, or a shared drive."""

    folder: str | None = None
    drive: str | None = None

    @property
    def id(self) -> str:
        return (
            f"{SCHEME}://shared-drive/{self.drive}" if self.drive else f"{SCHEME}://{self.folder}"
        )

    @property
    def where(self) -> str:
        return f"shared drive {self.drive}" if self.drive else f"folder {self.folder}"


def parse_source(value: str) -> DriveSource:
    """The Drive source a user names, or ConnectorError saying what is wrong with it."""
    shown = value[:200]
    head, sep, rest = value.partition("://")
    if head != SCHEME or not sep or any(c in rest for c in "?#@"):
        raise ConnectorError(f"{shown}: {_FORM}")
    parts = rest.strip("/").split("/")
    if len(parts) == 1 and _ID.fullmatch(parts[0]) and parts[0] != "shared-drive":
        return DriveSource(folder=parts[0])
    if len(parts) == 2 and parts[0] == "shared-drive" and _ID.fullmatch(parts[1]):
        return DriveSource(drive=parts[1])
    raise ConnectorError(f"{shown}: {_FORM}")


def check_api(value: str) -> str:
    """Drive's API root (`https://HOST`, a trailing `/drive/v3` dropped): https, or http on
    loopback; a host, no credentials, query or fragment."""
    try:
        parts = urllib.parse.urlsplit(value)
        host = parts.hostname
    except ValueError:
        host = None
    if (
        host is None
        or parts.scheme not in ("http", "https")
        or (parts.scheme == "http" and host not in _LOOPBACK)
        or parts.username is not None
        or parts.query
        or parts.fragment
    ):
        raise ConnectorError(
            f"{value[:200]}: ${API_ENV} is Drive's API root, https://HOST (http on loopback "
            "only), with no credentials"
        )
    return value.rstrip("/").removesuffix("/drive/v3")


def identify(value: str) -> tuple[str, str]:
    source = parse_source(value)
    return source.id, f"gdrive-{source.drive or source.folder}"


def served(value: str, checked_path: Any) -> str:
    """A served admin's Drive source: a folder or shared drive only. Which API is reached
    and which credentials are sent are the operator's (`$FOOTNOTE_GDRIVE_API`,
    `$FOOTNOTE_GDRIVE_CREDENTIALS` or `$FOOTNOTE_GDRIVE_TOKEN`); a source names neither."""
    return parse_source(value).id


class Opening(Protocol):
    """What opening a recorded source gives this connector (`registry.Opening`, which
    imports this module, so it is named by its shape here)."""

    @property
    def source(self) -> str: ...

    @property
    def max_bytes(self) -> int: ...

    @property
    def check_host(self) -> Callable[[str, int], None]: ...


def open_connector(opening: Opening) -> DriveConnector:
    source = parse_source(opening.source)
    api = check_api(os.environ[API_ENV]) if os.environ.get(API_ENV) else None
    parts = urllib.parse.urlsplit(api or "https://www.googleapis.com")
    opening.check_host(parts.hostname or "", parts.port or (443 if parts.scheme == "https" else 80))
    return DriveConnector(
        source,
        api=api,
        identities=IdentityMap.from_env(),
        anyone_public=os.environ.get(PUBLIC_ENV) == "1",
        max_bytes=opening.max_bytes,
    )


@dataclass(frozen=True)
class DriveFile:
    """A file of the tree as listed, with its path from the folder or drive read."""

    data: dict[str, Any]
    path: str

    @property
    def id(self) -> str:
        return str(self.data["id"])


class DriveConnector:
    """One folder tree or shared drive: the `Connector` protocol over the Drive v3 client."""

    def __init__(
        self,
        source: DriveSource,
        *,
        api: str | None = None,
        identities: IdentityMap | None = None,
        anyone_public: bool = False,
        max_bytes: int = 20_000_000,
        budget_s: float = gdrive_api.RATE_LIMIT_BUDGET_S,
    ) -> None:
        self.source = source
        self.api = api
        self.identities = identities or IdentityMap({})
        self.anyone_public = anyone_public
        self.max_bytes = max_bytes
        self.caller = gdrive_api.RequestRunner(
            where=f"Google Drive {source.where}",
            api=api or "https://www.googleapis.com",
            budget_s=budget_s,
        )
        self._drive: Any = None
        self._tree: dict[str, DriveFile] | None = None
        self._skipped: dict[str, str] = {}
        self._readers: dict[str, Permissions] = {}

    # -- the Connector protocol --------------------------------------------------------

    def full_load(self) -> Batch:
        """Every file of the tree; the change token is taken first, so a change made while
        the tree is listed is read again by the next sync rather than missed."""
        token = self._start_token()
        files = list(self._everything().values())
        return self._batch(files, token, {"files": len(files)})

    def poll(self, since: Checkpoint) -> Batch:
        """The files of the tree that Drive's change feed names since the checkpoint; a file
        removed, trashed or moved out of the tree is listed as deleted."""
        if not since.cursor:
            return self.full_load()
        changes, token = self.caller.call(lambda: self._changes(since.cursor))
        tree = self._everything()
        changed = sorted({c["fileId"] for c in changes if c.get("fileId") in tree})
        # removed, trashed, moved out, or never in the tree: none of them is listed now
        gone = sorted({c["fileId"] for c in changes if c.get("fileId") and c["fileId"] not in tree})
        batch = self._batch([tree[f] for f in changed], token, {"changed": len(changed)})
        return replace(batch, deleted=gone)

    def list_ids(self) -> dict[str, str]:
        return {file_id: self._version(file) for file_id, file in self._everything().items()}

    def permissions(self, doc_id: str) -> Permissions:
        file = self._everything().get(doc_id)
        if file is None:
            return Permissions.nobody(f"{doc_id} is no longer in the {self.source.where}")
        return self._file_readers(file)

    # -- reading the tree --------------------------------------------------------------

    def drive(self) -> Any:
        if self._drive is None:
            self._drive = self.caller.call(lambda: gdrive_api.client(self.api))
        return self._drive

    def _listing(self, drive_id: str | None) -> dict[str, Any]:
        """The settings every listing of this tree takes."""
        corpus = {"corpora": "drive", "driveId": drive_id} if drive_id else {"corpora": "user"}
        return {
            **corpus,
            "includeItemsFromAllDrives": True,
            "supportsAllDrives": True,
            "pageSize": 100,
            "fields": f"nextPageToken,incompleteSearch,files({FILE_FIELDS})",
        }

    def _everything(self) -> dict[str, DriveFile]:
        """Every file of the tree that is read, by id (listed once a run)."""
        if self._tree is None:
            self._tree = self.caller.call(self._walk)
        return self._tree

    def _walk(self) -> dict[str, DriveFile]:
        files = self.drive().files()
        if self.source.drive:
            listed = list(
                self.caller.pages(
                    files.list, "files", q="trashed = false", **self._listing(self.source.drive)
                )
            )
            return self._kept(_paths(listed, self.source.drive))
        root = self.caller.run(
            files.get(fileId=self.source.folder, supportsAllDrives=True, fields=FILE_FIELDS)
        )
        if root.get("mimeType") != FOLDER:
            raise ConnectorError(f"{self.source.id}: not a folder ({root.get('mimeType')})")
        found: list[DriveFile] = []
        queue, seen = [(root["id"], "")], {root["id"]}
        while queue:
            folder, prefix = queue.pop(0)
            query = f"'{folder}' in parents and trashed = false"
            listing = self._listing(root.get("driveId"))
            for data in self.caller.pages(files.list, "files", q=query, **listing):
                path = f"{prefix}{_name(data)}"
                if data.get("mimeType") == FOLDER:
                    if data["id"] not in seen:
                        seen.add(data["id"])
                        queue.append((data["id"], f"{path}/"))
                else:
                    found.append(DriveFile(data, path))
        return self._kept(found)

    def _kept(self, files: list[DriveFile]) -> dict[str, DriveFile]:
        """The files read, by id, each named once; the rest skipped with their reason."""
        kept: dict[str, DriveFile] = {}
        names: set[str] = set()
        for file in sorted(files, key=lambda f: (f.path, f.id)):
            mime = str(file.data.get("mimeType") or "")
            if file.id in kept:
                continue
            if mime not in SUFFIXES:
                self._skipped[file.path] = f"not read: type {mime[:100]}"
            elif int(file.data.get("size") or 0) > self.max_bytes:
                self._skipped[file.path] = f"file too large: over the limit {self.max_bytes}"
            else:
                path = file.path if file.path not in names else f"{file.path} ({file.id})"
                names.add(path)
                kept[file.id] = DriveFile(file.data, path)
        return kept

    def _start_token(self) -> str:
        changes = self.drive().changes()
        drive = {"driveId": self.source.drive} if self.source.drive else {}
        answer = self.caller.call(
            lambda: self.caller.run(changes.getStartPageToken(supportsAllDrives=True, **drive))
        )
        return str(answer["startPageToken"])

    def _changes(self, token: str) -> tuple[list[dict[str, Any]], str]:
        """The change feed from `token` to now, with the token to resume from next;
        CheckpointLost for a token Drive no longer knows."""
        from googleapiclient.errors import HttpError  # type: ignore[import-untyped]

        changes = self.drive().changes()
        drive = {"driveId": self.source.drive} if self.source.drive else {}
        found: list[dict[str, Any]] = []
        while True:
            try:
                page = self.caller.run(
                    changes.list(
                        pageToken=token,
                        includeItemsFromAllDrives=True,
                        supportsAllDrives=True,
                        includeRemoved=True,
                        pageSize=1000,
                        fields="nextPageToken,newStartPageToken,"
                        "changes(changeType,fileId,removed,file(id,trashed,parents))",
                        **drive,
                    )
                )
            except HttpError as exc:
                if (exc.status_code or exc.resp.status) in (400, 404, 410):
                    raise CheckpointLost(f"Drive no longer knows change token {token}") from None
                raise
            found += [c for c in page.get("changes") or [] if c.get("changeType", "file") == "file"]
            if page.get("newStartPageToken"):
                return found, str(page["newStartPageToken"])
            token = str(page.get("nextPageToken") or "")
            if not token:
                raise CheckpointLost("Drive's change feed ended without a token")

    # -- readers -----------------------------------------------------------------------

    def _file_readers(self, file: DriveFile) -> Permissions:
        if file.id not in self._readers:
            self._readers[file.id] = self.caller.call(lambda: self._read_readers(file))
        return self._readers[file.id]

    def _read_readers(self, file: DriveFile) -> Permissions:
        """Who reads one file: its users, groups and domains, by e-mail through the identity
        map; anyone with the link only as the operator allows; no one's when not listed."""
        from googleapiclient.errors import HttpError

        try:
            listed = list(
                self.caller.pages(
                    self.drive().permissions().list,
                    "permissions",
                    fileId=file.id,
                    supportsAllDrives=True,
                    pageSize=100,
                    fields="nextPageToken,permissions(id,type,role,emailAddress,domain,deleted)",
                )
            )
        except HttpError as exc:
            status = gdrive_api.refused(exc)
            if status is None:
                raise
            return Permissions.nobody(
                f"Google Drive did not list the permissions of {file.path} ({status}); "
                "credentials that may read them are needed"
            )
        users, groups, anyone = set(), set(), False
        for p in listed:
            kind, email = p.get("type"), str(p.get("emailAddress") or "").lower()
            if p.get("deleted"):
                continue
            if kind == "user" and email:
                users.add(self.identities.user("gdrive", email))
            elif kind == "group" and email:
                groups.add(self.identities.group("gdrive-group", email))
            elif kind == "domain" and p.get("domain"):
                groups.add(self.identities.group("gdrive-domain", str(p["domain"]).lower()))
            elif kind == "anyone":
                anyone = True
        if anyone and self.anyone_public:
            return Permissions(public=True)
        if not users and not groups:
            return Permissions.nobody(f"{file.path} is shared with no one Footnote can name")
        return Permissions(users=tuple(sorted(users)), groups=tuple(sorted(groups)))

    # -- documents ---------------------------------------------------------------------

    def _version(self, file: DriveFile) -> str:
        """Changes with the file (Drive's version, its modification time), its path and who
        may read it, so a permission change reaches the file at the next sync."""
        readers = self._file_readers(file).record()
        digest = hashlib.sha256(json.dumps([file.path, readers]).encode()).hexdigest()[:16]
        data = file.data
        return f"{data.get('version', '')}/{data.get('modifiedTime', '')}/{digest}"

    def _batch(self, files: list[DriveFile], token: str, detail: dict[str, Any]) -> Batch:
        return Batch(
            documents=[self._document(f) for f in files],
            checkpoint=Checkpoint(token, gdrive_api.now(), {"drive": self.source.id, **detail}),
            skipped=dict(self._skipped),
        )

    def _content(self, file: DriveFile) -> bytes:
        files = self.drive().files()
        if file.data.get("mimeType") == GOOGLE_DOC:
            request = files.export(fileId=file.id, mimeType="text/markdown")
        else:
            request = files.get_media(fileId=file.id, supportsAllDrives=True)
        return bytes(self.caller.run(request))

    def _document(self, file: DriveFile) -> SourceDocument:
        readers = self._file_readers(file)
        data = file.data
        author = _email(data.get("owners") or [{}]) or _email([data.get("lastModifyingUser")])
        link = str(data.get("webViewLink") or "")

        def read() -> bytes:
            try:
                content = self.caller.call(lambda: self._content(file))
            except ConnectorError as exc:
                raise ParseError(str(exc)) from None
            if len(content) > self.max_bytes:
                raise ParseError(f"file too large: over the limit {self.max_bytes}")
            record = {
                "name": data.get("name") or file.path,
                "suffix": SUFFIXES[str(data.get("mimeType"))],
                "link": link,
                "author": author,
                "modified": data.get("modifiedTime") or "",
                "readers": readers.record(),  # a new reader changes the content
                "base64": base64.b64encode(content).decode("ascii"),
            }
            return json.dumps(record, sort_keys=True).encode("utf-8")

        def parse(content: bytes, source: str) -> ParsedDocument:
            return _parsed(json.loads(content), source, readers)

        return SourceDocument(
            id=file.id,
            name=file.path,
            version=self._version(file),
            link=link,
            read=read,
            parse=parse,
            author=author,
            updated=gdrive_api.iso(data.get("modifiedTime")) or None,
            permissions=readers,
        )


def _parsed(record: dict[str, Any], source: str, readers: Permissions) -> ParsedDocument:
    """The file parsed by its format's parser, every section cited by the file's link, its
    access the file's readers. The text is data: a Markdown file's front matter cannot name
    its own readers."""
    from footnote.ingest.parsers import parse_bytes

    data = base64.b64decode(record["base64"])
    doc = parse_bytes(data, Path(f"document{record['suffix']}"), source)
    meta = {"author": record["author"]} if record["author"] else {}
    for section in doc.sections:
        section.url = record["link"] or section.url
        section.metadata = {**section.metadata, **meta}
    doc.title = str(record["name"])
    doc.date = str(record["modified"])[:10] or None
    doc.access = readers.access_groups() or []  # [] (no one): the index never widens it
    doc.access_problem = readers.problem
    doc.metadata = {"drive_link": record["link"]}
    return doc


def _paths(listed: list[dict[str, Any]], top: str) -> list[DriveFile]:
    """A shared drive's files with their paths, from one listing of the whole drive; a file
    whose folders do not lead to the drive's top is left out."""
    folders = {d["id"]: d for d in listed if d.get("mimeType") == FOLDER}

    def path(data: dict[str, Any]) -> str | None:
        names, seen = [_name(data)], set()
        parent = (data.get("parents") or [top])[0]
        while parent != top:
            folder = folders.get(parent)
            if folder is None or parent in seen:
                return None
            seen.add(parent)
            names.append(_name(folder))
            parent = (folder.get("parents") or [top])[0]
        return "/".join(reversed(names))

    files = []
    for data in listed:
        found = path(data) if data.get("mimeType") != FOLDER else None
        if found is not None:
            files.append(DriveFile(data, found))
    return files


def _name(data: dict[str, Any]) -> str:
    return str(data.get("name") or data["id"]).replace("/", "_")


def _email(users: list[Any]) -> str | None:
    first = users[0] if users else None
    return (
        str(first["emailAddress"])
        if isinstance(first, dict) and first.get("emailAddress")
        else None
    )
