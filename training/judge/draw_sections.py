"""Draw sections of Debian's manuals for question writers (training/judge/written/README.md).

Each writer gets a batch of sections (JSON lines: id, page, heading, text) and the instructions
in written/PROMPT.md, and writes two answered questions and two near misses per section. This
script draws the sections: the same number from each package named, at random (fixed seed)
among the sections of at least `--min-words` words of prose, leaving out every section an
existing written file already has questions for. Never drawn: python3-doc (pyfaq-core's
passages) and debian-reference-en (debfaq's), which Footnote's evaluation corpora are made of.

    .venv-train/bin/python training/judge/draw_sections.py --packages postgresql-doc-15 \\
        git-doc nodejs-doc developers-reference debian-policy --per-package 48 --batch 30 \\
        --seed 12 --out training/judge/data/draw
    # each writer turns batch-NN.jsonl into questions-NN.jsonl; then, into one written file:
    .venv-train/bin/python training/judge/draw_sections.py --collect training/judge/data/draw \
        --into training/judge/written/manuals-2.jsonl
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from build_pairs import SOURCES, WRITTEN_SOURCES, sections_of  # noqa: E402

NEVER_DRAWN = ("python3-doc", "debian-reference-en")
"""Packages whose sections are passages of Footnote's evaluation corpora."""


def already_written(folder: Path = HERE / "written") -> set[tuple[str, str]]:
    """(page, heading) of every section a written file already has questions for."""
    done = set()
    for path in sorted(folder.glob("*.jsonl")):
        for line in path.read_text(encoding="utf-8").splitlines():
            item = json.loads(line)
            done.add((item["page"], item["heading"]))
    return done


def draw(packages: list[str], per_package: int, min_words: int, seed: int) -> list[dict[str, str]]:
    roots = {**SOURCES, **WRITTEN_SOURCES}
    done = already_written()
    rng = random.Random(seed)
    drawn = []
    for package in packages:
        if package in NEVER_DRAWN:
            raise SystemExit(f"{package}: its sections are evaluation passages; never drawn")
        if package not in roots or not roots[package].exists():
            raise SystemExit(f"{package}: not a known manual, or not installed")
        pool = [
            s
            for s in sections_of(package, roots[package])
            if len(s.text.split()) >= min_words and (s.page, s.heading) not in done
        ]
        unique = list({(s.page, s.heading): s for s in pool}.values())
        for section in rng.sample(unique, min(per_package, len(unique))):
            drawn.append({"page": section.page, "heading": section.heading, "text": section.text})
    rng.shuffle(drawn)
    return [{"id": f"s{i:03d}", **section} for i, section in enumerate(drawn)]


def collect(folder: Path, into: Path) -> int:
    """The writers' questions (questions-NN.jsonl beside each batch-NN.jsonl) as one written
    file, each naming its section by page and heading, as build_pairs.py reads them. A batch
    whose questions are missing or not two answered and two near misses per section is left
    out, and said so."""
    lines, kept = [], 0
    for batch in sorted(folder.glob("batch-*.jsonl")):
        sections = {s["id"]: s for s in map(json.loads, batch.read_text("utf-8").splitlines())}
        answers = batch.with_name(batch.name.replace("batch-", "questions-"))
        try:
            items = [json.loads(line) for line in answers.read_text("utf-8").splitlines() if line]
        except (OSError, json.JSONDecodeError) as exc:
            print(f"{batch.name}: left out ({exc})")
            continue
        complete = all(
            sum(i.get("id") == sid and i.get("kind") == kind for i in items) == 2
            for sid in sections
            for kind in ("answered", "near_miss")
        )
        if not complete or len(items) != 4 * len(sections):
            print(f"{batch.name}: left out (not two answered and two near misses per section)")
            continue
        for item in items:
            section = sections[item["id"]]
            lines.append(json.dumps({"page": section["page"], "heading": section["heading"],
                                     "question": item["question"], "kind": item["kind"]},
                                    ensure_ascii=False))  # fmt: skip
        kept += 1
    into.write_text("\n".join(lines) + "\n", encoding="utf-8")
    print(f"{len(lines)} questions from {kept} batches in {into}")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--packages", nargs="+")
    parser.add_argument("--per-package", type=int, default=48)
    parser.add_argument("--min-words", type=int, default=60)
    parser.add_argument("--batch", type=int, default=30, help="sections per writer")
    parser.add_argument("--seed", type=int, default=12)
    parser.add_argument("--out", type=Path, help="folder for batch-NN.jsonl")
    parser.add_argument("--collect", type=Path, help="a drawn folder whose questions are written")
    parser.add_argument("--into", type=Path, help="with --collect: the written file to make")
    args = parser.parse_args()
    if args.collect:
        if not args.into:
            parser.error("--collect needs --into")
        return collect(args.collect, args.into)
    if not args.packages or not args.out:
        parser.error("drawing needs --packages and --out")
    sections = draw(args.packages, args.per_package, args.min_words, args.seed)
    args.out.mkdir(parents=True, exist_ok=True)
    for start in range(0, len(sections), args.batch):
        batch = args.out / f"batch-{start // args.batch:02d}.jsonl"
        lines = [json.dumps(s, ensure_ascii=False) for s in sections[start : start + args.batch]]
        batch.write_text("\n".join(lines) + "\n", encoding="utf-8")
    print(f"{len(sections)} sections in {-(-len(sections) // args.batch)} batches under {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
