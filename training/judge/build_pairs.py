"""Build the judge's training pairs from documentation that Debian packages install.

    python3.11 training/judge/build_pairs.py [--out training/judge/data/pairs.jsonl]

Reads HTML manuals (a heading and the text under it make one section) and writes
(query, passage, label) rows to a JSONL file, with a fixed seed so a rerun gives the same file:

- positives: a heading, or a question form of it ("What is X?", "How do I X?"), against its
  own section (label 1);
- hard negatives: a sibling section of the same page, and the best BM25 neighbour from another
  page (label 0);
- near-miss negatives: the query with one noun swapped for a WordNet co-hyponym ("sick leave"
  -> "annual leave"), against the ORIGINAL section (label 0). This is the case a bi-encoder
  cannot tell apart, and the one the judge exists for.

Excluded on purpose, because they are (or hold) Footnote's evaluation sets and a judge trained on
them would be measured on its own training data: the Python FAQ pages (`/faq/`), the Debian FAQ,
R's documentation (kept for an outside check), and the repository's samples/handbook and
benchmarks/questions text (never read here). A second file, `<out>.sources.json`, names the
packages and versions read (from `dpkg-query -W`).
"""

from __future__ import annotations

import argparse
import gzip
import json
import math
import random
import re
import subprocess
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path

SEED = 41
HERE = Path(__file__).resolve().parent
WORDNET = Path("/usr/share/wordnet")

SOURCES: dict[str, Path] = {
    "python3-doc": Path("/usr/share/doc/python3.11/html"),
    "postgresql-doc-15": Path("/usr/share/doc/postgresql-doc-15/html"),
    "nodejs-doc": Path("/usr/share/doc/nodejs/api"),
    "git-doc": Path("/usr/share/doc/git/html"),
    "debian-reference-en": Path("/usr/share/doc/debian-reference-en/docs"),
}
FAQS: dict[str, Path] = {
    "perl-doc": Path("/usr/share/perl/5.36/pod"),
    "sqlite3-doc": Path("/usr/share/doc/sqlite3/faq.html"),
}
"""Question-and-answer pages: questions as people ask them, against the answer that follows,
which rarely repeats the question's words (perlfaq1-9, SQLite's FAQ). Read only with
`--faq-repeats N` (N > 0: each FAQ pair written N times, its negatives drawn afresh). The
shipped model was trained without them; a run with them (N = 4) measured worse on the handbook
(docs/evaluation.md, "A second training run, with FAQ questions")."""
WRITTEN_SOURCES: dict[str, Path] = {
    "developers-reference": Path("/usr/share/developers-reference"),
    "debian-policy": Path("/usr/share/doc/debian-policy/policy.html"),
}
WRITTEN = HERE / "written" / "debian-dev.jsonl"
"""Questions written for sections of these two manuals, as people ask (training/judge/written/
README.md): two the section answers, in other words, and two near misses it does not answer, on
its topic. The file names each section by page and heading; its text is read from the package.
Read only with `--written-repeats N`."""
EXCLUDED_PARTS = ("/faq/", "debian-faq", "/r-doc", "/R/")
"""Path fragments never read: evaluation sets (Python FAQ, Debian FAQ) and R's manuals."""

SKIPPED_TAGS = {"script", "style", "nav", "head", "pre"}
SKIPPED_MARKERS = ("sphinxsidebar", "related", "footer", "navheader", "navfooter", "toc",
                   "column2", "headerlink", "toolbar", "api_stability")  # fmt: skip
VOID_TAGS = {"br", "img", "hr", "meta", "link", "input", "wbr", "col", "area", "base", "source"}
HEADINGS = {"h1", "h2", "h3", "h4"}
SILENT_E_STEMS = ("at", "iz", "is", "us", "ov", "ur", "uc", "ag", "ar", "id", "rib", "iv")
"""Gerund stems that take their 'e' back: creat(ing) -> create, configur(ing) -> configure."""
PASSAGE_WORDS = 120
"""Words kept per passage: enough for the answer, short enough to train on 2 cores."""
# fmt: off
STOPWORDS = frozenset({
    "a", "an", "the", "of", "to", "in", "on", "for", "and", "or", "is", "are", "be", "with", "by",
    "as", "at", "from", "how", "do", "i", "what", "it", "this", "that", "does", "can", "using",
    "use", "your", "you", "my",
})
# fmt: on


@dataclass
class Section:
    page: str
    heading: str
    text: str


class SectionParser(HTMLParser):
    """Heading -> the text under it, skipping navigation, sidebars, scripts and code blocks."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.sections: list[tuple[str, list[str]]] = []
        self._skip_depth = 0
        self._stack: list[bool] = []
        self._heading: list[str] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in VOID_TAGS:
            return
        marks = " ".join(v or "" for k, v in attrs if k in ("class", "id", "role"))
        skip = tag in SKIPPED_TAGS or any(m in marks for m in SKIPPED_MARKERS)
        self._stack.append(skip)
        self._skip_depth += skip
        if tag in HEADINGS and not self._skip_depth:
            self._heading = []

    def handle_endtag(self, tag: str) -> None:
        if tag in VOID_TAGS or not self._stack:
            return
        if tag in HEADINGS and self._heading is not None:
            self.sections.append((" ".join(self._heading), []))
            self._heading = None
        self._skip_depth -= self._stack.pop()

    def handle_data(self, data: str) -> None:
        if self._skip_depth:
            return
        if self._heading is not None:
            self._heading.append(data)
        elif self.sections:
            self.sections[-1][1].append(data)


def clean_heading(raw: str) -> str:
    text = re.sub(r"\s+", " ", raw.replace("¶", "")).strip()
    text = re.sub(r"^(Chapter|Appendix)?\s*[\dA-Z]+(\.\d+)*\.?\s+", "", text)
    return text.strip(" #:")


def read_page(path: Path) -> str:
    data = path.read_bytes()
    if path.suffix == ".gz":
        data = gzip.decompress(data)
    return data.decode("utf-8", errors="replace")


def sections_of(package: str, root: Path) -> Iterator[Section]:
    pages = sorted(p for p in root.rglob("*.html*") if p.suffix in (".html", ".gz"))
    for page in pages:
        if any(part in str(page) for part in EXCLUDED_PARTS):
            continue
        parser = SectionParser()
        parser.feed(read_page(page))
        for raw_heading, parts in parser.sections:
            heading = clean_heading(raw_heading)
            words = " ".join(parts).split()
            if len(re.findall(r"[A-Za-z]{3,}", heading)) < 2 or len(words) < 25:
                continue
            yield Section(f"{package}:{page.relative_to(root)}", heading,
                          " ".join(words[:PASSAGE_WORDS]))  # fmt: skip


_POD_CODE = re.compile(r"[CFIBLSX]<+\s*(.*?)\s*>+", re.S)


def pod_text(raw: str) -> str:
    """Plain text of POD prose: formatting codes unwrapped, E<gt>/E<lt> spelled out."""
    text = raw.replace("E<gt>", ">").replace("E<lt>", "<")
    for _ in range(3):  # nested codes: C<L<...>>
        text = _POD_CODE.sub(lambda m: m.group(1).split("|")[0], text)
    return text


def perlfaq(root: Path) -> Iterator[Section]:
    """perlfaq1-9: each `=head2` question with the prose under it (code blocks skipped)."""
    for page in sorted(root.glob("perlfaq[1-9].pod")):
        question, prose = "", []
        for block in [*read_page(page).split("\n\n"), "=head2 "]:
            if block.startswith("=head"):
                words = " ".join(prose).split()
                if question.endswith("?") and len(words) >= 25:
                    yield Section(
                        f"perl-doc:{page.name}", question, " ".join(words[:PASSAGE_WORDS])
                    )
                question, prose = pod_text(block.partition(" ")[2]).strip(), []
            elif question and not block.startswith((" ", "\t", "=")):
                prose.append(pod_text(block))


def sqlite_faq(path: Path) -> Iterator[Section]:
    """SQLite's FAQ: `(n) question` in bold, the answer in the blockquote after it."""
    html = read_page(path)
    entries = re.split(r'<a name="q\d+"></a>', html)[1:]
    for entry in entries:
        match = re.match(r"\s*<p><b>\(\d+\)\s*(.*?)</b></p>(.*)", entry, re.S)
        if not match:
            continue
        body = re.sub(r"<pre>.*?</pre>", " ", match.group(2), flags=re.S)
        words = re.sub(r"<[^>]+>", " ", body).split()
        question = re.sub(r"\s+", " ", re.sub(r"<[^>]+>", "", match.group(1))).strip()
        if len(words) >= 25:
            yield Section(f"sqlite3-doc:{path.name}", question, " ".join(words[:PASSAGE_WORDS]))


def faq_sections() -> list[Section]:
    found = list(perlfaq(FAQS["perl-doc"])) if FAQS["perl-doc"].is_dir() else []
    if FAQS["sqlite3-doc"].is_file():
        found += sqlite_faq(FAQS["sqlite3-doc"])
    return found


def terms(text: str) -> list[str]:
    return [w for w in re.findall(r"[a-z0-9_]+", text.lower()) if w not in STOPWORDS]


class BM25:
    """A small inverted-index BM25 (k1=1.2, b=0.75): rank_bm25 scans every document per term."""

    def __init__(self, documents: list[str]) -> None:
        self.lengths = [len(terms(d)) for d in documents]
        self.average = sum(self.lengths) / max(len(documents), 1)
        self.postings: dict[str, list[tuple[int, int]]] = defaultdict(list)
        for i, doc in enumerate(documents):
            for term, count in Counter(terms(doc)).items():
                self.postings[term].append((i, count))
        self.count = len(documents)

    def top(self, query: str, k: int) -> list[int]:
        scores: dict[int, float] = defaultdict(float)
        for term in sorted(set(terms(query))):  # a fixed order: sums, hence ties, repeat
            posting = self.postings.get(term, [])
            if not posting or len(posting) > self.count // 10:
                continue  # too common to tell sections apart, and slow
            idf = math.log(1 + (self.count - len(posting) + 0.5) / (len(posting) + 0.5))
            for i, tf in posting:
                norm = tf + 1.2 * (0.25 + 0.75 * self.lengths[i] / self.average)
                scores[i] += idf * tf * 2.2 / norm
        return sorted(scores, key=lambda i: (-scores[i], i))[:k]


class WordNet:
    """Noun co-hyponyms read straight from WordNet's index.noun and data.noun."""

    def __init__(self, root: Path = WORDNET) -> None:
        self.first_sense: dict[str, str] = {}
        for line in (root / "index.noun").read_text(encoding="utf-8").splitlines():
            if line.startswith(" "):
                continue
            fields = line.split()
            pointer_count = int(fields[3])
            offsets = fields[6 + pointer_count :]
            if offsets:
                self.first_sense[fields[0]] = offsets[0]
        self.synsets: dict[str, tuple[list[str], list[str], list[str]]] = {}
        for line in (root / "data.noun").read_text(encoding="utf-8").splitlines():
            if line.startswith(" "):
                continue
            fields = line.split(" | ")[0].split()
            lemma_count = int(fields[3], 16)
            lemmas = [fields[4 + 2 * i].lower() for i in range(lemma_count)]
            at = 4 + 2 * lemma_count
            pointers = fields[at + 1 : at + 1 + 4 * int(fields[at])]
            hypernyms = [pointers[i + 1] for i in range(0, len(pointers), 4) if pointers[i] == "@"]
            hyponyms = [pointers[i + 1] for i in range(0, len(pointers), 4) if pointers[i] == "~"]
            self.synsets[fields[0]] = (lemmas, hypernyms, hyponyms)

    def co_hyponyms(self, lemma: str) -> list[str]:
        offset = self.first_sense.get(lemma)
        if offset is None:
            return []
        own = set(self.synsets[offset][0])
        found: list[str] = []
        for parent in self.synsets[offset][1]:
            for sibling in self.synsets[parent][2]:
                if sibling != offset:
                    found.extend(w for w in self.synsets[sibling][0][:1] if w not in own)
        return [re.sub(r"\(.*\)$", "", w).replace("_", " ") for w in found]


def question_forms(heading: str, rng: random.Random) -> list[str]:
    lower = heading[0].lower() + heading[1:]
    first, _, rest = lower.partition(" ")
    forms = [heading, f"What is {lower}?", f"Tell me about {lower}."]
    if first.endswith("ing") and len(first) > 5 and rest:
        verb = first[:-3]
        if verb[-1] == verb[-2] and verb[-1] not in "lsz":
            verb = verb[:-1]  # running -> run
        elif verb.endswith(SILENT_E_STEMS):
            verb += "e"  # creating -> create
        forms.append(f"How do I {verb} {rest}?")
    if heading.endswith("?"):
        forms = [heading]
    return rng.sample(forms, k=min(2, len(forms)))


def near_miss(query: str, passage: str, wordnet: WordNet, rng: random.Random) -> str | None:
    """The query with one noun (a two-word compound first) swapped for a co-hyponym absent
    from the passage, so the passage no longer answers it."""
    words = re.findall(r"[A-Za-z]+", query)
    spans = [" ".join(words[i : i + 2]) for i in range(len(words) - 1)] + words
    passage_lower = passage.lower()
    for span in spans:
        key = span.lower().replace(" ", "_")
        if key in STOPWORDS or len(key) < 4:
            continue
        options = [
            w for w in wordnet.co_hyponyms(key)
            if w.lower() not in passage_lower and span.lower() not in w.lower()
        ]  # fmt: skip
        if options:
            swapped = rng.choice(sorted(options))
            return re.sub(re.escape(span), swapped, query, count=1, flags=re.IGNORECASE)
    return None


def add_faq_pairs(
    i: int,
    sections: list[Section],
    passages: list[str],
    bm25: BM25,
    wordnet: WordNet,
    rng: random.Random,
    add: Callable[[str, int, int, str], None],
) -> None:
    """An FAQ question against its answer (1), against the answer BM25 ranks best among the
    other answers of its FAQ and among the manuals (0), and with a noun swapped (0)."""
    question = sections[i].heading
    add(question, i, 1, "faq_positive")
    same_faq = [j for j in bm25.top(question, 8) if j != i and sections[j].page == sections[i].page]
    others = [j for j in bm25.top(question, 8) if sections[j].page != sections[i].page]
    for pool in (same_faq, others):
        if pool:
            add(question, rng.choice(pool[:3]), 0, "faq_neighbour")
    swapped = near_miss(question, passages[i], wordnet, rng)
    if swapped:
        add(swapped, i, 0, "faq_near_miss")


def written_packages(paths: Sequence[Path]) -> list[str]:
    """The manuals the written files' sections come from (each page is "package:path"), the
    two of the first file first, in WRITTEN_SOURCES' order."""
    used = {
        json.loads(line)["page"].split(":", 1)[0]
        for path in paths
        for line in path.read_text(encoding="utf-8").splitlines()
    }
    unknown = used - set(WRITTEN_SOURCES) - set(SOURCES)
    if unknown:
        raise SystemExit(f"written questions for sections of unknown manuals: {sorted(unknown)}")
    order = [*WRITTEN_SOURCES, *(p for p in SOURCES if p not in WRITTEN_SOURCES)]
    return [package for package in order if package in used]


def written_pairs(
    paths: Sequence[Path] = (WRITTEN,), neighbours: bool = False
) -> list[dict[str, object]]:
    """The written questions against the sections they were written for (label 1: answered,
    0: near miss), each section read from its installed manual as heading + text. With
    `neighbours`, each answered question also meets the section BM25 ranks best for it on
    another page (label 0): what the section says decides, not how the question is worded."""
    roots = {**SOURCES, **WRITTEN_SOURCES}
    texts = {
        (s.page, s.heading): f"{s.heading}\n{s.text}"
        for package in written_packages(paths)
        for s in sections_of(package, roots[package])
    }
    keys = list(texts)
    bm25 = BM25([texts[key] for key in keys]) if neighbours else None
    rows = []
    for path in paths:
        for line in path.read_text(encoding="utf-8").splitlines():
            item = json.loads(line)
            passage = texts.get((item["page"], item["heading"]))
            if passage is None:
                raise SystemExit(
                    f"{path}: no section {item['page']} / {item['heading']!r} installed"
                )
            label = {"answered": 1, "near_miss": 0}[item["kind"]]
            rows.append({"query": item["question"], "passage": passage, "label": label,
                         "kind": f"written_{item['kind']}"})  # fmt: skip
            if bm25 is not None and label == 1:
                other = [j for j in bm25.top(item["question"], 5) if keys[j][0] != item["page"]]
                if other:
                    rows.append({"query": item["question"], "passage": texts[keys[other[0]]],
                                 "label": 0, "kind": "written_neighbour"})  # fmt: skip
    return rows


def interleave(rows: list[dict[str, object]], extra: list[dict[str, object]], repeats: int,
               span: int, rng: random.Random) -> list[dict[str, object]]:  # fmt: skip
    """`extra` repeated `repeats` times, each pass shuffled, spread evenly over the first `span`
    rows: a run that stops at its time budget still sees every pass."""
    passes = [row for _ in range(repeats) for row in rng.sample(extra, len(extra))]
    if not passes:
        return rows
    head, tail = rows[:span], rows[span:]
    step = max(1, len(head) // len(passes))
    mixed: list[dict[str, object]] = []
    for n, row in enumerate(passes):
        mixed += head[n * step : (n + 1) * step] + [row]
    return mixed + head[len(passes) * step :] + tail


def packages_read(faqs: bool, written: Sequence[str] = ()) -> dict[str, str]:
    names = list(SOURCES) + (list(FAQS) if faqs else []) + ["wordnet-base"]
    names += [package for package in written if package not in names]
    out = subprocess.run(["dpkg-query", "-W", *names], capture_output=True, text=True, check=True)
    return dict(line.split("\t", 1) for line in out.stdout.strip().splitlines())


def build(out: Path, faq_repeats: int = 0, written_repeats: int = 0,
          written_span: int = 30000, written_neighbours: bool = False,
          answered_weight: int = 1,
          written_files: Sequence[Path] = (WRITTEN,)) -> dict[str, int]:  # fmt: skip
    rng = random.Random(SEED)
    sections = [s for pkg, root in SOURCES.items() if root.is_dir() for s in sections_of(pkg, root)]
    manuals = len(sections)
    sections += faq_sections() if faq_repeats else []
    # an FAQ answer never carries its question: the judge must read the answer
    passages = [
        f"{s.heading}\n{s.text}" if i < manuals and rng.random() < 0.5 else s.text
        for i, s in enumerate(sections)
    ]
    bm25 = BM25([f"{s.heading} {s.text}" for s in sections])
    wordnet = WordNet()
    by_page: dict[str, list[int]] = defaultdict(list)
    for i, s in enumerate(sections):
        by_page[s.page].append(i)
    rows: list[dict[str, object]] = []
    counts: Counter[str] = Counter()

    def add(query: str, passage_index: int, label: int, kind: str) -> None:
        rows.append({"query": query, "passage": passages[passage_index], "label": label,
                     "kind": kind})  # fmt: skip
        counts[kind] += 1

    for i, section in enumerate(sections[:manuals]):
        queries = question_forms(section.heading, rng)
        for query in queries:
            add(query, i, 1, "positive")
        siblings = [j for j in by_page[section.page] if sections[j].heading != section.heading]
        if siblings:
            add(rng.choice(queries), rng.choice(siblings), 0, "sibling")
        # a same-named section on another page may well answer the query: not a negative
        neighbours = [
            j for j in bm25.top(section.heading, 5)
            if sections[j].page != section.page
            and sections[j].heading.lower() != section.heading.lower()
        ]  # fmt: skip
        if neighbours:
            add(rng.choice(queries), neighbours[0], 0, "bm25")
        for query in queries:
            swapped = near_miss(query, passages[i], wordnet, rng)
            if swapped:
                add(swapped, i, 0, "near_miss")
    for _ in range(faq_repeats):
        for i in range(manuals, len(sections)):
            add_faq_pairs(i, sections, passages, bm25, wordnet, rng, add)
    rng.shuffle(rows)
    written = written_pairs(written_files, written_neighbours) if written_repeats else []
    written += [r for r in written if r["label"] == 1] * (answered_weight - 1)
    counts.update(
        {k: written_repeats * n for k, n in Counter(str(r["kind"]) for r in written).items()}
    )
    rows = interleave(rows, written, written_repeats, written_span, rng)
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open("w", encoding="utf-8") as handle:
        for row in rows:
            handle.write(json.dumps(row, ensure_ascii=False) + "\n")
    used = written_packages(written_files) if written_repeats else []
    sources = {"packages": packages_read(faq_repeats > 0, used),
               "excluded": list(EXCLUDED_PARTS),
               "seed": SEED, "sections": len(sections), "pairs": dict(counts)}  # fmt: skip
    out.with_suffix(".sources.json").write_text(json.dumps(sources, indent=2) + "\n")
    return dict(counts)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=HERE / "data" / "pairs.jsonl")
    parser.add_argument(
        "--faq-repeats", type=int, default=0,
        help="also learn from perl-doc's and sqlite3-doc's FAQs, N times each",
    )  # fmt: skip
    parser.add_argument(
        "--written-repeats", type=int, default=0,
        help="also learn from the written questions (--written-files), N passes",
    )  # fmt: skip
    parser.add_argument(
        "--written-span", type=int, default=30000,
        help="spread the written passes over this many first rows (what a run will see)",
    )  # fmt: skip
    parser.add_argument(
        "--written-neighbours", action="store_true",
        help="with --written-repeats: each answered written question also against its best "
        "BM25 neighbour on another page (label 0)",
    )  # fmt: skip
    parser.add_argument(
        "--answered-weight", type=int, default=1,
        help="with --written-repeats: each answered written question N times per pass",
    )  # fmt: skip
    parser.add_argument(
        "--written-files", type=Path, nargs="+", default=[WRITTEN],
        help="with --written-repeats: the written question files (default: "
        "written/debian-dev.jsonl, the shipped model's)",
    )  # fmt: skip
    args = parser.parse_args()
    counts = build(args.out, args.faq_repeats, args.written_repeats, args.written_span,
                   args.written_neighbours, args.answered_weight,
                   args.written_files)  # fmt: skip
    print(json.dumps(counts))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
