"""Hostile input files for ingest, with what each one may and may not become.

Used by the bounded fuzz test (tests/test_fuzz_ingest.py) and by the longer campaign
(benchmarks/fuzz_ingest.py). Every generated file carries an expectation: whether it must
be ingested, the widest access its front matter allows (None: admins only), and a marker
word planted where no reader should find it (hidden HTML). `check` turns one ingest of a
generated corpus into the campaign's figures.
"""

from __future__ import annotations

import io
import json
import os
import random
import socket
import zipfile
import zlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from email.message import EmailMessage
from pathlib import Path
from typing import Any

import numpy as np

HIDDEN = "quixotry"
"""Planted only in hidden HTML text: it must never reach a chunk."""

GROUPS = ("hr", "finance", "engineering")


@dataclass
class Planted:
    """One generated path and what ingest may make of it."""

    path: str
    kind: str
    must_ingest: bool = False
    allowed: frozenset[str] | None = frozenset({"everyone"})
    """The widest access the file's own front matter allows; None: admins only."""


@dataclass
class Figures:
    files: int = 0
    crashes: int = 0
    hangs: int = 0
    unexplained: list[str] = field(default_factory=list)
    too_visible: list[str] = field(default_factory=list)
    good_missed: list[str] = field(default_factory=list)
    hidden_leaks: list[str] = field(default_factory=list)
    by_outcome: dict[str, int] = field(default_factory=dict)

    def add(self, other: Figures) -> None:
        self.files += other.files
        self.crashes += other.crashes
        self.hangs += other.hangs
        for name in ("unexplained", "too_visible", "good_missed", "hidden_leaks"):
            getattr(self, name).extend(getattr(other, name))
        for key, value in other.by_outcome.items():
            self.by_outcome[key] = self.by_outcome.get(key, 0) + value

    def clean(self) -> bool:
        return not (
            self.crashes
            or self.hangs
            or self.unexplained
            or self.too_visible
            or self.good_missed
            or self.hidden_leaks
        )


# --- generators: each writes one path under `root` and returns its expectation ------------


def _words(rng: random.Random, n: int) -> str:
    vocab = ["key", "rotation", "policy", "vpn", "deploy", "budget", "leave", "token", "audit"]
    return " ".join(rng.choice(vocab) for _ in range(n))


def good_markdown(rng: random.Random, root: Path, name: str) -> Planted:
    group = rng.choice(GROUPS)
    clean = rng.random() < 0.7
    head = f"---\ntitle: Note {name}\naccess: [{group}]\n---\n" if clean else ""
    body = "\n\n".join(f"## Part {i}\n\n{_words(rng, 30)}." for i in range(rng.randint(1, 4)))
    (root / f"{name}.md").write_text(f"{head}# Note\n\n{body}\n", "utf-8")
    allowed = frozenset({group}) if clean else frozenset({"everyone"})
    return Planted(f"{name}.md", "good markdown", must_ingest=True, allowed=allowed)


def good_text(rng: random.Random, root: Path, name: str) -> Planted:
    suffix = rng.choice([".txt", ".py", ".rst", ""])
    (root / f"{name}{suffix}").write_text(_words(rng, 80) + "\n", "utf-8")
    return Planted(f"{name}{suffix}", "good text", must_ingest=True)


def good_pdf(rng: random.Random, root: Path, name: str) -> Planted:
    (root / f"{name}.pdf").write_bytes(minimal_pdf([_words(rng, 12) for _ in range(2)]))
    return Planted(f"{name}.pdf", "good pdf", must_ingest=True)


_FRONT_MATTER_TEMPLATES = [
    "---\naccess: [hr]\n\n# P\n\n{body}\n",
    "---\naccess: [hr]\n\n# P\n\n{body}\n\n---\n",
    "---\nAccess: [hr]\n---\n{body}\n",
    "---\naccess: [hr]\naccess: [everyone]\n---\n{body}\n",
    "---\naccess: [hr]\nACCESS: [everyone]\n---\n{body}\n",
    "+++\naccess = [hr\n+++\n{body}\n",
    '+++\nAccess = ["everyone"]\naccess = ["hr"]\n+++\n{body}\n',
    "---\naccess: [hr\n  x: {{\n---\n{body}\n",
    "---\n- access: [everyone]\n---\n{body}\n",
    "---\naccess:\n---\n{body}\n",
    "---\naccess: [[everyone]]\n---\n{body}\n",
    "---\naccess: {{everyone: true}}\n---\n{body}\n",
    "\n---\naccess: [hr]\n---\n{body}\n",
    "--- x\naccess: [hr]\n---\n{body}\n",
    "---\r\naccess: [hr]\r\n{body}\r\n",
    "---\naccess: !!python/object/apply:os.system [hr]\n---\n{body}\n",
    "---\na: &a [1, 1, 1, 1, 1, 1, 1, 1]\nb: &b [*a, *a, *a, *a, *a, *a, *a, *a]\n"
    "c: &c [*b, *b, *b, *b, *b, *b, *b, *b]\nd: [*c, *c, *c, *c, *c, *c, *c, *c]\n"
    "e: [*c, *c, *c, *c, *c, *c, *c, *c]\naccess: [hr]\n---\n{body}\n",
    "---\naccess: [hr]\n" + "x: " + "[" * 2000 + "\n---\n{body}\n",
    "---\n\taccess: [hr]\n---\n{body}\n",
    "---\naccess: [hr]\n...\n{body}\n",
]


def malformed_front_matter(rng: random.Random, root: Path, name: str) -> Planted:
    text = rng.choice(_FRONT_MATTER_TEMPLATES).format(body=_words(rng, 20))
    if rng.random() < 0.3:  # and a random mutation on top
        cut = rng.randrange(4, len(text))  # after the opening fence, which stays intact
        noise = rng.choice(["\n", "---\n", ":", "\t", "[", "\u00a0", "\x85", "\u2028"])
        text = text[:cut] + noise + text[cut:]
    (root / f"{name}.md").write_bytes(text.encode("utf-8"))
    return Planted(f"{name}.md", "malformed front matter", allowed=frozenset({"hr"}))


def hostile_html(rng: random.Random, root: Path, name: str, size: float = 1.0) -> Planted:
    choice = rng.randrange(7)
    if choice == 0:  # deep nesting
        depth = rng.randint(100, max(100, int(30_000 * size)))
        text = "<div>" * depth + _words(rng, 10) + "</div>" * depth
    elif choice == 1:  # entity-heavy
        text = (
            "<p>"
            + rng.choice(["&lt;", "&amp;", "&#x41;", "&nbsp;"])
            * rng.randint(100, max(100, int(200_000 * size)))
            + "</p>"
        )
    elif choice == 2:  # hidden text next to visible text
        hide = rng.choice(
            ['style="display:none"', 'style="visibility: hidden"', 'aria-hidden="true"',
             "hidden", 'style="opacity:0"']
        )  # fmt: skip
        text = f"<main><h1>T</h1><p>{_words(rng, 10)}</p><div {hide}>{HIDDEN}</div></main>"
    elif choice == 3:  # duplicate ids
        text = "".join(f'<h2 id="s{rng.choice(["", "-1"])}">H</h2><p>{_words(rng, 5)}</p>'
                       for _ in range(rng.randint(2, 30)))  # fmt: skip
    elif choice == 4:  # broken markup and odd charsets
        charset = rng.choice(["utf-7", "rot13", "utf-16", "x-unknown", "latin-1"])
        text = f'<meta charset="{charset}"><p>{_words(rng, 5)}<b><i></p></b><table><td>'
        body = text.encode("utf-8") + bytes(rng.randrange(256) for _ in range(50))
        (root / f"{name}.html").write_bytes(body)
        return Planted(f"{name}.html", "broken html", allowed=frozenset({"everyone"}))
    elif choice == 5:  # UTF-16 with a BOM
        body = ("\ufeff<p>" + _words(rng, 10) + "</p>").encode(
            rng.choice(["utf-16-le", "utf-16-be"])
        )
        (root / f"{name}.html").write_bytes(body)
        return Planted(f"{name}.html", "utf-16 html", must_ingest=True)
    else:  # a huge attribute and many tags
        text = (
            f'<p title="{"a" * rng.randint(1, int(500_000 * size) + 1)}">{_words(rng, 5)}</p>'
            + "<br>" * 5000
        )
    (root / f"{name}.html").write_text(f"<html><body>{text}</body></html>", "utf-8")
    return Planted(f"{name}.html", "hostile html")


def broken_pdf(rng: random.Random, root: Path, name: str, size: float = 1.0) -> Planted:
    good = minimal_pdf([_words(rng, 10)])
    choice = rng.randrange(5)
    if choice == 0:
        data = good[: rng.randrange(len(good))]
    elif choice == 1:
        data = bytearray(good)
        for _ in range(rng.randint(1, 20)):
            data[rng.randrange(len(data))] = rng.randrange(256)
        data = bytes(data)
    elif choice == 2:
        data = b"%PDF-1.7\n" + bytes(rng.randrange(256) for _ in range(rng.randint(0, 5000)))
    elif choice == 3:  # a content stream that inflates a thousandfold
        data = minimal_pdf(
            [],
            stream=zlib.compress(b"BT ET " * rng.randint(1_000, max(1_000, int(2_000_000 * size)))),
        )
    else:  # objects that refer to themselves
        data = (b"%PDF-1.4\n1 0 obj << /Type /Catalog /Pages 1 0 R /Kids [1 0 R] >> endobj\n"
                b"trailer << /Root 1 0 R >>\n%%EOF")  # fmt: skip
    (root / f"{name}.pdf").write_bytes(data)
    return Planted(f"{name}.pdf", "broken pdf")


def binary_or_mixed(rng: random.Random, root: Path, name: str, size: float = 1.0) -> Planted:
    suffix = rng.choice([".md", ".txt", ".py", ".html", ""])
    choice = rng.randrange(5)
    if choice == 0:
        data = bytes(rng.randrange(256) for _ in range(rng.randint(1, max(1, int(20_000 * size)))))
    elif choice == 1:
        data = _words(rng, 2_000).encode() + b"\x00" + _words(rng, 10).encode()
    elif choice == 2:
        data = ("Caf\u00e9 " + _words(rng, 20)).encode(rng.choice(["latin-1", "utf-16-le"]))
    elif choice == 3:
        data = _words(rng, 20).encode() + b"\xff\xfe\xc0\x80" + _words(rng, 5).encode()
    else:
        data = b"\xef\xbb\xbf" + ("\u202e\u200b\ufffd" + _words(rng, 20)).encode()
    (root / f"{name}{suffix}").write_bytes(data)
    return Planted(f"{name}{suffix}", "binary or mixed encoding")


def huge_line(rng: random.Random, root: Path, name: str, size: float = 1.0) -> Planted:
    suffix = rng.choice([".js", ".txt", ".md", ".json.txt"])
    length = rng.randint(5_000, max(5_000, int(400_000 * size)))
    unit = rng.choice(["a", "var x=function(){return 1};", "word ", "\u00e9", "<&>"])
    (root / f"{name}{suffix}").write_text((unit * (length // len(unit) + 1))[:length], "utf-8")
    return Planted(f"{name}{suffix}", "huge line")


def link_or_special(rng: random.Random, root: Path, name: str, outside: Path) -> Planted:
    choice = rng.randrange(9)
    path = root / f"{name}.md"
    if choice == 0:
        path.symlink_to("/etc/passwd")
    elif choice == 1:
        path.symlink_to("/proc/self/status")
    elif choice == 2:
        path.symlink_to("/dev/zero")
    elif choice == 3:
        path = root / name
        path.symlink_to(outside, target_is_directory=True)
    elif choice == 4:
        path.symlink_to(path.name)  # a loop
    elif choice == 5:
        os.mkfifo(path)
    elif choice == 6:
        with socket.socket(socket.AF_UNIX) as sock:
            try:
                sock.bind(str(path))
            except OSError:  # a socket path over the length limit
                path.write_text("# Socket\n\nfallback text\n")
                return Planted(path.name, "link or special file", must_ingest=True)
    elif choice == 7:
        path = root / f".{name}.md"
        path.write_text(f"# Hidden\n\n{_words(rng, 5)}\n")
    else:
        path = root / f"..{name}.md"
        path.write_text(f"# Dots\n\n{_words(rng, 5)}\n")
    return Planted(path.name, "link or special file", allowed=None)


def _record_file(rng: random.Random, suffix: str) -> bytes:
    """A small valid file of a record format, made by the standard library."""
    if suffix == ".csv":
        rows = "".join(
            f"{_words(rng, 1)},{rng.randint(1, 99)},{_words(rng, 4)}\n" for _ in range(3)
        )
        return ("name,count,note\n" + rows).encode()
    if suffix == ".json":
        items = [{"id": i, "text": _words(rng, 6)} for i in range(3)]
        return json.dumps({"title": _words(rng, 2), "items": items}).encode()
    if suffix == ".jsonl":
        return "".join(
            json.dumps({"n": i, "text": _words(rng, 6)}) + "\n" for i in range(3)
        ).encode()
    mail = EmailMessage()
    mail["From"], mail["Subject"] = "a@example.com", _words(rng, 3)
    mail["Date"] = "Mon, 02 Mar 2026 09:30:00 +0000"
    mail.set_content(_words(rng, 20))
    if suffix == ".mbox":
        return b"From a@example.com Mon Mar  2 09:30:00 2026\n" + bytes(mail) + b"\n"
    return bytes(mail)


_RECORD_SUFFIXES = [".csv", ".json", ".jsonl", ".eml", ".mbox"]


def good_records(rng: random.Random, root: Path, name: str) -> Planted:
    suffix = rng.choice(_RECORD_SUFFIXES)
    (root / f"{name}{suffix}").write_bytes(_record_file(rng, suffix))
    return Planted(f"{name}{suffix}", "good records", must_ingest=True)


def _zip(members: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for member, data in members.items():
            archive.writestr(member, data)
    return buffer.getvalue()


_LAUGHS = (
    b'<?xml version="1.0"?><!DOCTYPE r [<!ENTITY a0 "lol">'
    + b"".join(b'<!ENTITY a%d "%s">' % (i, b"&a%d;" % (i - 1) * 10) for i in range(1, 10))
    + b"]><r>&a9;</r>"
)


def broken_records(rng: random.Random, root: Path, name: str, size: float = 1.0) -> Planted:
    """Record formats and zip containers, damaged or built to explode."""
    choice = rng.randrange(7)
    suffix = rng.choice(_RECORD_SUFFIXES)
    if choice == 0:
        good = _record_file(rng, suffix)
        data = good[: rng.randrange(1, len(good))]
    elif choice == 1:
        data = bytearray(_record_file(rng, suffix))
        for _ in range(rng.randint(1, 20)):
            data[rng.randrange(len(data))] = rng.randrange(256)
        data = bytes(data)
    elif choice == 2:  # nesting to exhaust a recursive reader
        suffix = rng.choice([".json", ".jsonl"])
        depth = rng.randint(100, max(100, int(200_000 * size)))
        data = (rng.choice(["[", '{"a":']) * depth).encode()
    elif choice == 3:  # a zip bomb: one member of zeros
        suffix = rng.choice([".xlsx", ".docx", ".pptx", ".epub"])
        data = _zip(
            {
                "mimetype": b"application/epub+zip",
                "big.xml": bytes(int(40_000_000 * size) + 2_000_000),
            }
        )
    elif choice == 4:  # an entity bomb where the container's XML is read
        suffix, member = rng.choice(
            [(".xlsx", "xl/workbook.xml"), (".docx", "word/document.xml"),
             (".epub", "META-INF/container.xml"), (".pptx", "ppt/presentation.xml")]
        )  # fmt: skip
        data = _zip({"[Content_Types].xml": _LAUGHS, member: _LAUGHS})
    elif choice == 5:  # a CSV field past the reader's limit, or a row of endless columns
        suffix = ".csv"
        data = rng.choice([b'a\n"' + b"x" * 200_000 + b'"\n', b"," * 100_000 + b"\n"])
    else:  # random bytes under a record suffix
        suffix = rng.choice([*_RECORD_SUFFIXES, ".xlsx", ".epub", ".png"])
        data = bytes(rng.randrange(256) for _ in range(rng.randint(1, 4_000)))
    (root / f"{name}{suffix}").write_bytes(data)
    return Planted(f"{name}{suffix}", "broken records")


GENERATORS: list[tuple[str, Callable[..., Planted], float]] = [
    ("good markdown", good_markdown, 0.12),
    ("good text", good_text, 0.06),
    ("good pdf", good_pdf, 0.04),
    ("malformed front matter", malformed_front_matter, 0.22),
    ("hostile html", hostile_html, 0.16),
    ("broken pdf", broken_pdf, 0.12),
    ("binary or mixed", binary_or_mixed, 0.12),
    ("huge line", huge_line, 0.06),
    ("link or special", link_or_special, 0.10),
    ("good records", good_records, 0.04),
    ("broken records", broken_records, 0.10),
]


_SIZED = {"hostile html", "broken pdf", "binary or mixed", "huge line", "broken records"}


def generate(
    rng: random.Random, root: Path, outside: Path, count: int, size: float = 1.0
) -> list[Planted]:
    """`count` hostile files under `root` (created), drawn by the weights above; `size`
    scales the large ones (the suite's bounded run uses a fraction)."""
    root.mkdir(parents=True, exist_ok=True)
    names = [g[0] for g in GENERATORS]
    weights = [g[2] for g in GENERATORS]
    makers = {g[0]: g[1] for g in GENERATORS}
    planted: list[Planted] = []
    for i in range(count):
        kind = rng.choices(names, weights)[0]
        maker = makers[kind]
        name = f"f{i:04d}"
        if kind == "link or special":
            planted.append(maker(rng, root, name, outside))
        elif kind in _SIZED:
            planted.append(maker(rng, root, name, size))
        else:
            planted.append(maker(rng, root, name))
    return planted


def make_outside(root: Path) -> Path:
    """A folder beside the corpus with a page no link may pull into the index."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "outside.md").write_text(f"# Outside\n\n{HIDDEN} outside the root.\n")
    return root


def minimal_pdf(pages: Iterable[str], *, stream: bytes | None = None) -> bytes:
    """A small valid PDF with one text line per page (or one page with a raw `stream`)."""
    objects: list[bytes] = [b"<< /Type /Catalog /Pages 2 0 R >>", b""]
    kids: list[str] = []
    contents = [stream] if stream is not None else [
        b"BT /F1 12 Tf 72 712 Td (" + text.encode("latin-1", "replace") + b") Tj ET"
        for text in pages
    ]  # fmt: skip
    font = len(objects) + 1
    objects.append(b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>")
    for content in contents:
        filters = b" /Filter /FlateDecode" if stream is not None else b""
        objects.append(
            b"<< /Length %d%s >>\nstream\n" % (len(content), filters) + content + b"\nendstream"
        )
        content_ref = len(objects)
        objects.append(
            b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents %d 0 R "
            b"/Resources << /Font << /F1 %d 0 R >> >> >>" % (content_ref, font)
        )
        kids.append(f"{len(objects)} 0 R")
    objects[1] = b"<< /Type /Pages /Kids [%s] /Count %d >>" % (
        " ".join(kids).encode(),
        len(kids),
    )
    out = bytearray(b"%PDF-1.4\n")
    offsets = []
    for number, body in enumerate(objects, 1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % number + body + b"\nendobj\n"
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % offset for offset in offsets)
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (
        len(objects) + 1,
        xref,
    )
    return bytes(out)


# --- fast embeddings: the fuzz campaign is about parsing, chunking and access ---------------


class HashEmbeddings:
    """Real MiniLM token counting (so chunks are sized as in production) with cheap
    deterministic vectors in place of the model."""

    model_id = "fuzz:hash-embeddings"
    dimension = 384
    max_tokens = 256

    def __init__(self) -> None:
        from footnote.models.embeddings import load_embeddings

        self._counter = load_embeddings("")

    def count_tokens(self, text: str) -> int:
        return self._counter.count_tokens(text)

    def token_ends(self, text: str) -> list[int]:
        return self._counter.token_ends(text)

    def embed_array(self, texts: list[str]) -> np.ndarray:
        out = np.zeros((len(texts), self.dimension), dtype=np.float32)
        for row, text in enumerate(texts):
            seed = zlib.crc32(text.encode("utf-8", "replace"))
            vector = np.random.default_rng(seed).standard_normal(self.dimension)
            out[row] = vector / np.linalg.norm(vector)
        return out


# --- the checks --------------------------------------------------------------------------


def check(planted: list[Planted], summary: Any, chunks: list[Any]) -> Figures:
    """Figures for one ingest of a generated corpus (`chunks`: the published index's)."""
    figures = Figures(files=len(planted))
    ingested = set(summary.added) | set(summary.updated) | set(summary.unchanged)
    by_source: dict[str, list[Any]] = {}
    for chunk in chunks:
        by_source.setdefault(chunk.source, []).append(chunk)
        if HIDDEN in chunk.text or HIDDEN in chunk.section:
            figures.hidden_leaks.append(chunk.source)
    for item in planted:
        reasons = [
            summary.failed.get(item.path),
            summary.skipped.get(item.path),
            summary.restricted.get(item.path),
        ]
        if item.path in summary.failed:
            outcome = "failed"
        elif item.path in summary.skipped:
            outcome = "skipped"
        elif item.path in summary.restricted:
            outcome = "admins only"
        elif item.path in ingested:
            outcome = "ingested"
        else:
            outcome = "unaccounted"
        figures.by_outcome[outcome] = figures.by_outcome.get(outcome, 0) + 1
        if outcome == "unaccounted" or (outcome != "ingested" and not any(reasons)):
            figures.unexplained.append(item.path)
        if "time budget exceeded" in (summary.failed.get(item.path) or ""):
            figures.hangs += 1
        if item.must_ingest and outcome != "ingested":
            figures.good_missed.append(f"{item.path}: {reasons}")
        for chunk in by_source.get(item.path, []):
            access = chunk.access
            if access is None:
                continue  # admins only: never wider than anything
            if item.allowed is None or not set(access) <= item.allowed:
                figures.too_visible.append(f"{item.path}: {access}")
                break
    return figures
