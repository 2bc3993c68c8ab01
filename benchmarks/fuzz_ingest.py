"""Fuzz campaign for ingest: rounds of generated hostile corpora through a real ingest.

    nice -n 10 .venv/bin/python benchmarks/fuzz_ingest.py --rounds 6 --files 100 --seed 1

Each round writes `--files` hostile files (tests/hostile_files.py: malformed front matter,
deep and entity-heavy HTML, hidden HTML text, broken PDFs, binary and mixed encodings, huge
lines, symlinks out of the root, FIFOs, sockets, dotfiles; damaged, deeply nested and
oversized CSV/JSON/e-mail files, zip and entity bombs in Office and EPUB containers) plus
good ones, ingests them, and
checks the published index. Vectors come from a hash (real MiniLM token counts size the
chunks): the campaign is about parsing, chunking and access, not embeddings.

Figures: crashes (ingest raised), hangs (a file hit the per-file time budget), files
without a reason (neither ingested nor failed/skipped/admins-only with a reason), documents
more visible than their front matter allowed, hidden HTML text indexed, good files missed.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import time
import traceback
from pathlib import Path
from unittest import mock

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from footnote.ingest.parsers import parse_bytes  # noqa: E402
from footnote.ingest.pipeline import ingest  # noqa: E402
from footnote.store.files import load_index  # noqa: E402
from tests.hostile_files import Figures, HashEmbeddings, check, generate, make_outside  # noqa: E402


class ParseTimer:
    """Wraps the pipeline's parse step to time each file (chunking is not included)."""

    def __init__(self) -> None:
        self.seconds: list[tuple[float, str]] = []

    def __call__(self, data: bytes, path: Path, source: str) -> object:
        started = time.monotonic()
        try:
            return parse_bytes(data, path, source)
        finally:
            self.seconds.append((time.monotonic() - started, source))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--files", type=int, default=100, help="hostile files per round")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--max-seconds", type=float, default=60.0, help="per-file time budget")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args()

    embeddings = HashEmbeddings()
    total = Figures()
    kinds: dict[str, int] = {}
    slowest: list[tuple[float, str]] = []
    rounds: list[float] = []
    started = time.monotonic()
    for round_number in range(args.rounds):
        rng = random.Random(args.seed * 1000 + round_number)
        with tempfile.TemporaryDirectory(prefix="footnote-fuzz-") as work:
            root = Path(work)
            planted = generate(rng, root / "docs", make_outside(root / "out"), args.files)
            for item in planted:
                kinds[item.kind] = kinds.get(item.kind, 0) + 1
            round_started = time.monotonic()
            timer = ParseTimer()
            try:
                with (
                    mock.patch(
                        "footnote.models.embedding_choice.load_embeddings",
                        lambda spec="": embeddings,
                    ),
                    mock.patch("footnote.ingest.gather.parse_bytes", timer),
                ):
                    summary = ingest([root / "docs"], root / "index", max_seconds=args.max_seconds)
                chunks = load_index(root / "index").chunks
            except Exception:
                traceback.print_exc()
                total.crashes += 1
                total.files += len(planted)
                continue
            took = time.monotonic() - round_started
            rounds.append(took)
            slowest.extend((s, f"round {round_number}: {name}") for s, name in timer.seconds)
            figures = check(planted, summary, chunks)
            total.add(figures)
            print(
                f"round {round_number}: {len(planted)} files, {len(chunks)} chunks, "
                f"{took:.1f} s, outcomes {figures.by_outcome}",
                file=sys.stderr,
                flush=True,
            )
    result = {
        "command": " ".join(sys.argv),
        "rounds": args.rounds,
        "files": total.files,
        "kinds": dict(sorted(kinds.items())),
        "outcomes": dict(sorted(total.by_outcome.items())),
        "crashes": total.crashes,
        "hangs": total.hangs,
        "files_without_a_reason": len(total.unexplained),
        "more_visible_than_allowed": len(total.too_visible),
        "hidden_text_indexed": len(total.hidden_leaks),
        "good_files_missed": len(total.good_missed),
        "seconds": round(time.monotonic() - started, 1),
        "slowest_round_seconds": round(max(rounds), 1) if rounds else None,
        "slowest_files": [f"{s:.1f} s {name}" for s, name in sorted(slowest, reverse=True)[:8]],
        "details": {
            "unexplained": total.unexplained[:20],
            "too_visible": total.too_visible[:20],
            "hidden_leaks": total.hidden_leaks[:20],
            "good_missed": total.good_missed[:20],
        },
    }
    print(json.dumps(result, indent=2))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    return 0 if total.clean() else 1


if __name__ == "__main__":
    raise SystemExit(main())
