"""Build the debfaq benchmark (BEIR layout) from the Debian FAQ and the Debian Reference.

Why this corpus: the Debian FAQ (Debian package `debian-faq`) is, like the Python FAQ, a
documentation set whose section headings are real user questions ("How can I tell what
packages are already installed on a Debian system?"), so it gives judged queries without
anyone writing them. The Debian Reference (`debian-reference-en`) covers the same ground
(packages, APT, the system, networking) in reference form, which gives the near-miss
distractors a leave-gold-out evaluation needs. Both are DocBook HTML, a different generator,
vocabulary and writing style from the Sphinx-built Python docs, so a grader fitted on pyfaq
is checked on text it has not seen. The corpus is bounded: a few thousand chunks, so it
indexes in minutes on two cores.

    apt-get install debian-faq debian-reference-en
    python benchmarks/build_debfaq.py [--out DIR]

Passages are DocBook sections (`div.section`, `div.chapter`) with nested sections removed and
the heading stripped (an FAQ answer must not contain its own question). Queries are the FAQ's
question headings (numbering removed) whose section has a real answer; the one relevant
passage is that answer. Writes DIR/corpus.jsonl, DIR/queries.jsonl, DIR/qrels/test.tsv
(DIR defaults to benchmarks/data/debfaq, which git ignores).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path

from bs4 import BeautifulSoup, Tag, XMLParsedAsHTMLWarning
from build_pyfaq import Passage, _TextCollector, is_real_answer

FAQ_HTML = Path("/usr/share/doc/debian/FAQ")
REFERENCE_HTML = Path("/usr/share/debian-reference")
DEFAULT_OUT = Path(__file__).resolve().parent / "data" / "debfaq"

SECTION_CLASSES = {"section", "chapter", "appendix", "preface", "sect1", "sect2", "sect3"}
HEADINGS = {"h1", "h2", "h3", "h4", "h5", "h6"}
NUMBERING = re.compile(r"^(Chapter|Appendix)?\s*[A-Z]?[\d.]*\d*\.?\s+")


def is_docbook_section(tag: Tag) -> bool:
    return tag.name == "div" and bool(SECTION_CLASSES.intersection(tag.get_attribute_list("class")))


def _heading(section: Tag) -> Tag | None:
    titlepage = section.find("div", class_="titlepage", recursive=False)
    if titlepage is None:
        return None
    return titlepage.find(HEADINGS)


def _own_text(section: Tag) -> str:
    """Section text without its title page, its table of contents and nested sections."""
    skip = {
        id(child)
        for child in section.children
        if isinstance(child, Tag)
        and (
            is_docbook_section(child)
            or "titlepage" in child.get_attribute_list("class")
            or "toc" in child.get_attribute_list("class")
        )
    }
    collector = _TextCollector(skip)
    collector.walk(section)
    return collector.text()


def page_passages(path: Path, page: str) -> Iterator[Passage]:
    with warnings.catch_warnings():  # the Reference is XHTML; the HTML parser reads it fine
        warnings.simplefilter("ignore", XMLParsedAsHTMLWarning)
        soup = BeautifulSoup(path.read_bytes(), "lxml")
    for junk in soup.select("div.navheader, div.navfooter, a.headerlink, script, style"):
        junk.decompose()
    title = " ".join((soup.title.get_text() if soup.title else page).split())
    for section in soup.find_all(is_docbook_section):
        heading = _heading(section)
        if heading is None:
            continue
        anchor = heading.find("a", id=True)
        if anchor is None:
            continue
        text = _own_text(section)
        if not text.strip():
            continue
        heading_text = NUMBERING.sub("", " ".join(heading.get_text().split())).strip()
        yield Passage(
            id=f"{page}#{anchor['id']}",
            title=title,
            heading=heading_text,
            text=text,
            leaf=section.find(is_docbook_section) is None,
        )


def build(faq: Path, reference: Path, out: Path) -> dict[str, int]:
    """Write the dataset; returns the counts so callers can check them."""
    passages: list[Passage] = []
    pages = 0
    for root, prefix in ((faq, "faq"), (reference, "reference")):
        for path in sorted(root.glob("*.en.html")):
            if path.name.startswith("index"):
                continue  # the table of contents lists every question verbatim
            pages += 1
            passages.extend(page_passages(path, f"{prefix}/{path.name}"))
    by_id: dict[str, Passage] = {}
    for passage in passages:
        by_id.setdefault(passage.id, passage)
    unique = list(by_id.values())
    questions = [
        p
        for p in unique
        if p.id.startswith("faq/") and p.leaf and p.heading.endswith("?") and is_real_answer(p.text)
    ]
    (out / "qrels").mkdir(parents=True, exist_ok=True)
    with (out / "corpus.jsonl").open("w", encoding="utf-8") as handle:
        for p in unique:
            handle.write(json.dumps({"_id": p.id, "title": p.title, "text": p.text}) + "\n")
    with (out / "queries.jsonl").open("w", encoding="utf-8") as handle:
        for number, p in enumerate(questions, 1):
            handle.write(json.dumps({"_id": f"d{number:03d}", "text": p.heading}) + "\n")
    with (out / "qrels" / "test.tsv").open("w", encoding="utf-8") as handle:
        handle.write("query-id\tcorpus-id\tscore\n")
        for number, p in enumerate(questions, 1):
            handle.write(f"d{number:03d}\t{p.id}\t1\n")
    return {"pages": pages, "passages": len(unique), "queries": len(questions)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--faq", type=Path, default=FAQ_HTML, help="Debian FAQ HTML folder")
    parser.add_argument("--reference", type=Path, default=REFERENCE_HTML)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="output dataset folder")
    args = parser.parse_args(argv)
    if not args.faq.is_dir() or not args.reference.is_dir():
        print(
            "build_debfaq: install debian-faq and debian-reference-en (or pass --faq/--reference)",
            file=sys.stderr,
        )
        return 2
    counts = build(args.faq, args.reference, args.out)
    print(
        f"debfaq: {counts['passages']} passages from {counts['pages']} pages, "
        f"{counts['queries']} queries -> {args.out}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
