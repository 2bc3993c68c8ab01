"""Build the synonym table the offline grader's keyword coverage reads, from Debian's WordNet.

    python training/synonyms/build.py [--out models/data/synonyms.json.gz]

A paraphrase asks in other words: "What do I do if I wake up ill?" of a section that says
"If you are sick, ...". Keyword coverage (tools/retrieval.py) then finds none of the question's
words and the grader refuses a chunk that answers. WordNet's first sense of "ill" is the synset
{ill, sick}, so "ill" counts as present when "sick" is.

What is kept, and why:
- only each word's first (most frequent) sense in WordNet's index, in all four parts of
  speech: later senses are where "key" meets "name" and "phone" meets "call";
- single words of at least three letters, no stopwords, no numbers;
- keys and values stemmed with the same Snowball stemmer as the BM25 index
  (`footnote.store.text.stem_words`), so the table is looked up with the question's own tokens.

Reads /usr/share/wordnet (Debian's `wordnet-base`, WordNet 3.0) and nothing else, and writes the
same bytes every run (sorted keys, gzip without a timestamp). The file's sha256 goes into
`footnote.models.synonyms.SYNONYMS_SHA256`, which refuses any other bytes.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import re
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from footnote.store.text import STOPWORDS, stem_words  # noqa: E402

WORDNET = Path("/usr/share/wordnet")
PARTS_OF_SPEECH = ("noun", "verb", "adj", "adv")
OUT = REPO / "models" / "data" / "synonyms.json.gz"
_WORD = re.compile(r"[a-z]{3,}")


def synset_lemmas(root: Path) -> dict[tuple[str, str], list[str]]:
    """(part of speech, offset) -> the synset's lemmas, lowercased, markers like "(p)" cut."""
    lemmas: dict[tuple[str, str], list[str]] = {}
    for pos in PARTS_OF_SPEECH:
        for line in (root / f"data.{pos}").read_text(encoding="utf-8").splitlines():
            if line.startswith(" "):
                continue
            fields = line.split(" | ")[0].split()
            count = int(fields[3], 16)
            lemmas[(pos, fields[0])] = [
                re.sub(r"\(.*\)$", "", fields[4 + 2 * i].lower()) for i in range(count)
            ]
    return lemmas


def first_sense_synonyms(root: Path) -> dict[str, set[str]]:
    """Each single word -> the other single words of its first sense's synset (any POS)."""
    lemmas = synset_lemmas(root)
    found: dict[str, set[str]] = defaultdict(set)
    for pos in PARTS_OF_SPEECH:
        for line in (root / f"index.{pos}").read_text(encoding="utf-8").splitlines():
            if line.startswith(" "):
                continue
            fields = line.split()
            word, pointer_count = fields[0], int(fields[3])
            offsets = fields[6 + pointer_count :]
            if offsets and _WORD.fullmatch(word):
                found[word] |= {w for w in lemmas[(pos, offsets[0])] if _WORD.fullmatch(w)}
    return found


def stemmed_table(found: dict[str, set[str]]) -> dict[str, list[str]]:
    """The table keyed and valued by stems, without stopwords or self-matches."""
    table: dict[str, set[str]] = defaultdict(set)
    for word, synonyms in found.items():
        if word in STOPWORDS:
            continue
        stem = stem_words([word])[0]
        table[stem] |= {
            s for s in stem_words(sorted(w for w in synonyms if w not in STOPWORDS)) if s != stem
        }
    return {stem: sorted(values) for stem, values in sorted(table.items()) if values}


def wordnet_version() -> str:
    out = subprocess.run(
        ["dpkg-query", "-W", "-f", "${Version}", "wordnet-base"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    return out.stdout.strip()


def build(root: Path = WORDNET) -> bytes:
    table = stemmed_table(first_sense_synonyms(root))
    document = {
        "about": "First-sense WordNet synonyms, stemmed (training/synonyms/build.py)",
        "source": {"package": "wordnet-base", "version": wordnet_version()},
        "licence": "WordNet 3.0 Copyright 2006 by Princeton University. All rights reserved. "
        "Used under the WordNet 3.0 licence: see models/data/NOTICE.md",
        "stemmer": "Snowball English (footnote.store.text.stem_words)",
        "synonyms": table,
    }
    raw = json.dumps(document, sort_keys=True, separators=(",", ":")).encode("utf-8")
    return gzip.compress(raw, compresslevel=9, mtime=0)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=OUT, help=f"where to write (default {OUT})")
    args = parser.parse_args()
    data = build()
    args.out.write_bytes(data)
    print(f"wrote {args.out} ({len(data):,} bytes), sha256 {hashlib.sha256(data).hexdigest()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
