"""Split a BEIR dataset's questions into its fitting and reporting halves (docs/evaluation.md,
"The protocol"), as two datasets beside it that `footnote eval` reads like any other.

    python benchmarks/split_halves.py benchmarks/data/pyfaq-core [benchmarks/data/debfaq ...]

Writes DIR-fit/ and DIR-report/: the same corpus.jsonl, and the queries and qrels of each half
(footnote.evaluation.halves: a question's half is fixed by a hash of the corpus name and its
id). Parameters are chosen on DIR-fit only; figures are reported on DIR-report.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from footnote.evaluation.halves import HALVES, half_of  # noqa: E402


def split(dataset: Path) -> dict[str, int]:
    corpus = dataset.name
    queries = [
        json.loads(line)
        for line in (dataset / "queries.jsonl").read_text(encoding="utf-8").splitlines()
        if line.strip()
    ]
    header, *qrels = (dataset / "qrels" / "test.tsv").read_text(encoding="utf-8").splitlines()
    counts: dict[str, int] = {}
    for half in HALVES:
        out = dataset.with_name(f"{dataset.name}-{half}")
        (out / "qrels").mkdir(parents=True, exist_ok=True)
        shutil.copyfile(dataset / "corpus.jsonl", out / "corpus.jsonl")
        mine = [q for q in queries if half_of(corpus, str(q["_id"])) == half]
        ids = {str(q["_id"]) for q in mine}
        (out / "queries.jsonl").write_text(
            "".join(json.dumps(q) + "\n" for q in mine), encoding="utf-8"
        )
        rows = [row for row in qrels if row.split("\t", 1)[0] in ids]
        (out / "qrels" / "test.tsv").write_text("\n".join([header, *rows]) + "\n", "utf-8")
        counts[half] = len({row.split("\t", 1)[0] for row in rows})
    return counts


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("datasets", nargs="+", type=Path)
    for dataset in parser.parse_args().datasets:
        print(f"{dataset}: judged questions per half {split(dataset)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
