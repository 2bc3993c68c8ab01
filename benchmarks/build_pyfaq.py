"""Build the pyfaq retrieval benchmark (BEIR layout) from the installed Python HTML docs.

The corpus is every section of every content page of the Python docs, split at headings with
nested sections removed, so a passage is what one heading introduces and nothing more. The
queries are the FAQ's own questions, and the one relevant passage for each is the answer under
that question. Headings are stripped from passages, otherwise an FAQ answer would contain its
own question verbatim and keyword search would win by copying.

    python benchmarks/build_pyfaq.py [--html /usr/share/doc/python3.11/html] [--out DIR]
    python benchmarks/build_pyfaq.py --only faq tutorial reference using extending \
        --out benchmarks/data/pyfaq-core

`--only` keeps the pages of the named top-level folders (the queries stay the FAQ's): the
bounded corpus `pyfaq-core` (about 2,000 chunks instead of 18,000) that answer-level
evaluation uses, because it embeds in minutes rather than an hour on a shared machine.

Writes DIR/corpus.jsonl, DIR/queries.jsonl and DIR/qrels/test.tsv (DIR defaults to
benchmarks/data/pyfaq, which git ignores). Self-contained on purpose: BeautifulSoup and lxml
only, so the benchmark does not move when Footnote's own HTML parser changes.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from bs4 import BeautifulSoup, Comment, NavigableString, Tag

DEFAULT_HTML = Path("/usr/share/doc/python3.11/html")
DEFAULT_OUT = Path(__file__).resolve().parent / "data" / "pyfaq"

SKIPPED_DIRS = {"_static", "_sources", "_images", "_downloads"}
SKIPPED_PAGES = {"search.html", "py-modindex.html", "contents.html"}
"""Index pages, not content: contents.html is the whole site's table of contents, which
lists every FAQ question verbatim and so would answer each query with its own heading."""
HEADINGS = {"h1", "h2", "h3", "h4", "h5", "h6"}
BLOCKS = HEADINGS | {
    "p", "div", "section", "pre", "ul", "ol", "li", "dl", "dt", "dd", "table", "thead",
    "tbody", "tr", "th", "td", "blockquote", "figure", "figcaption", "caption", "aside",
    "nav", "header", "footer", "hr", "br", "article", "details", "summary",
}  # fmt: skip
INVISIBLE = {"script", "style", "template", "noscript"}
TITLE_SUFFIX = re.compile(r"\s+[\u2014\u2013-]+\s+Python\s+[\w.+]+\s+documentation\s*$")
MIN_ANSWER_WORDS = 3
POINTER_MAX_WORDS = 30


@dataclass(frozen=True)
class Passage:
    """One section's own text, addressed as `page#section-id`."""

    id: str
    title: str
    heading: str
    text: str
    leaf: bool


def is_section(tag: Tag) -> bool:
    """Sphinx wraps each heading's content in <section id> (new) or <div class="section"> (old)."""
    if not tag.get("id"):
        return False
    classes = tag.get_attribute_list("class")
    return tag.name == "section" or (tag.name == "div" and "section" in classes)


def page_title(soup: BeautifulSoup, fallback: str) -> str:
    raw = soup.title.get_text() if soup.title else ""
    title = TITLE_SUFFIX.sub("", " ".join(raw.split()))
    return title or fallback


def content_root(soup: BeautifulSoup) -> Tag | None:
    """The article body, without navigation, contents boxes and permalink marks."""
    root = soup.select_one("div[role=main]") or soup.select_one("div.body")
    if root is None:
        return None
    for junk in root.select(
        "div.contents, nav.contents, div.topic, a.headerlink, nav, div.related, "
        "div.sphinxsidebar, div.footer, script, style"
    ):
        junk.decompose()
    for comment in root.find_all(string=lambda s: isinstance(s, Comment)):
        comment.extract()
    return root


def section_heading(section: Tag) -> Tag | None:
    """The section's own heading; empty link targets (`<span id=...>`) may precede it."""
    for child in section.children:
        if not isinstance(child, Tag):
            continue
        if child.name in HEADINGS:
            return child
        if child.get_text().strip():
            return None
    return None


class _TextCollector:
    """Block-aware text: paragraphs and list items on their own lines, code kept verbatim."""

    def __init__(self, skip: set[int]) -> None:
        self.skip = skip
        self.blocks: list[str] = []
        self.inline: list[str] = []

    def flush(self) -> None:
        text = " ".join("".join(self.inline).split())
        if text:
            self.blocks.append(text)
        self.inline = []

    def walk(self, node: Tag) -> None:
        for child in node.children:
            if isinstance(child, NavigableString):
                self.inline.append(str(child))
            elif isinstance(child, Tag):
                if id(child) in self.skip or child.name in INVISIBLE or is_section(child):
                    continue
                if child.name == "pre":
                    self.flush()
                    code = child.get_text().strip("\n").rstrip()
                    if code.strip():
                        self.blocks.append(code)
                elif child.name in BLOCKS:
                    self.flush()
                    self.walk(child)
                    self.flush()
                else:
                    self.walk(child)

    def text(self) -> str:
        self.flush()
        return "\n\n".join(self.blocks)


def own_text(section: Tag, heading: Tag | None) -> str:
    """The section's text without its heading and without the sections nested in it."""
    collector = _TextCollector({id(heading)} if heading is not None else set())
    collector.walk(section)
    return collector.text()


def page_passages(path: Path, page: str) -> Iterator[Passage]:
    soup = BeautifulSoup(path.read_bytes(), "lxml")
    title = page_title(soup, page)
    root = content_root(soup)
    if root is None:
        return
    for section in root.find_all(is_section):
        heading = section_heading(section)
        text = own_text(section, heading)
        if not text.strip():
            continue
        heading_text = " ".join(heading.get_text().split()) if heading is not None else ""
        leaf = section.find(is_section) is None
        yield Passage(
            id=f"{page}#{section['id']}",
            title=title,
            heading=heading_text.rstrip("¶").strip(),
            text=text,
            leaf=leaf,
        )


def content_pages(html_root: Path) -> Iterator[tuple[Path, str]]:
    for path in sorted(html_root.rglob("*.html")):
        page = path.relative_to(html_root).as_posix()
        parts = page.split("/")
        if SKIPPED_DIRS.intersection(parts[:-1]):
            continue
        if page in SKIPPED_PAGES or parts[-1].startswith("genindex"):
            continue
        yield path, page


def is_real_answer(text: str) -> bool:
    """At least a few words, and not merely a pointer elsewhere ("See the ... FAQ.")."""
    words = text.split()
    if len(words) < MIN_ANSWER_WORDS:
        return False
    return not (words[0] in {"See", "See:"} and len(words) <= POINTER_MAX_WORDS)


def is_question(passage: Passage) -> bool:
    return (
        passage.id.startswith("faq/")
        and passage.leaf
        and passage.heading.endswith("?")
        and is_real_answer(passage.text)
    )


def build(html_root: Path, out: Path, only: set[str] | None = None) -> dict[str, int]:
    """Write the dataset; returns the counts so callers can check them. `only` keeps the
    pages under those top-level folders."""
    passages: list[Passage] = []
    pages = 0
    for path, page in content_pages(html_root):
        if only and page.split("/", 1)[0] not in only:
            continue
        pages += 1
        passages.extend(page_passages(path, page))
    by_id: dict[str, Passage] = {}
    for passage in passages:
        by_id.setdefault(passage.id, passage)
    unique = list(by_id.values())
    questions = [p for p in unique if is_question(p)]

    (out / "qrels").mkdir(parents=True, exist_ok=True)
    with (out / "corpus.jsonl").open("w", encoding="utf-8") as handle:
        for p in unique:
            row = {"_id": p.id, "title": p.title, "text": p.text}
            handle.write(json.dumps(row, ensure_ascii=False) + "\n")
    with (out / "queries.jsonl").open("w", encoding="utf-8") as handle:
        for number, p in enumerate(questions, 1):
            row = {"_id": f"q{number:03d}", "text": p.heading}
            handle.write(json.dumps(row, ensure_ascii=False) + "\n")
    with (out / "qrels" / "test.tsv").open("w", encoding="utf-8") as handle:
        handle.write("query-id\tcorpus-id\tscore\n")
        for number, p in enumerate(questions, 1):
            handle.write(f"q{number:03d}\t{p.id}\t1\n")
    return {"pages": pages, "passages": len(unique), "queries": len(questions)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--html", type=Path, default=DEFAULT_HTML, help="Python HTML docs root")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="output dataset folder")
    parser.add_argument(
        "--only", nargs="+", default=None, metavar="FOLDER", help="keep only these folders"
    )
    args = parser.parse_args(argv)
    if args.only and "faq" not in args.only:
        parser.error("--only must keep faq: the queries come from it")
    if not (args.html / "faq").is_dir():
        print(
            f"build_pyfaq: no Python docs at {args.html} (install python3-doc or pass --html)",
            file=sys.stderr,
        )
        return 2
    counts = build(args.html, args.out, set(args.only) if args.only else None)
    print(
        f"pyfaq: {counts['passages']} passages from {counts['pages']} pages, "
        f"{counts['queries']} queries -> {args.out}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
