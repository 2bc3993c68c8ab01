"""Kill campaign for the files backend: SIGKILL mid-ingest, and writers racing readers.

    nice -n 10 .venv/bin/python benchmarks/kill_ingest.py --points 20 --rounds 20

Part 1: a corpus big enough that a full ingest takes about a minute (`--pages` generated
Markdown pages) is ingested into an index that already holds an older version; the ingest
is killed with SIGKILL at `--points` moments spread over its run. After each kill the index
must load (old or new version) and answer a search; after all of them a clean ingest must
succeed and load.

Part 2: `--rounds` rounds of two writer processes (different corpora) racing on one index
while four reader threads load and search it throughout. Figures: corrupt states seen by a
reader, failed searches, and writers whose summary does not match the version they
replaced (checked from what each writer reports it added and deleted).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from footnote.ingest.pipeline import ingest  # noqa: E402
from footnote.store.files import load_index  # noqa: E402
from footnote.tools.search import SearchRequest, search  # noqa: E402

HANDBOOK = Path(__file__).resolve().parents[1] / "samples" / "handbook"
WRITER = r"""
import json, sys
from footnote.ingest.pipeline import ingest
summary = ingest([sys.argv[1]], sys.argv[2])
print(json.dumps({"corpus": sys.argv[1], "added": summary.added,
                  "updated": summary.updated, "deleted": summary.deleted}), flush=True)
"""


def make_corpus(root: Path, pages: int, seed: int) -> Path:
    rng = random.Random(seed)
    words = ["key", "rotation", "policy", "vpn", "deploy", "budget", "leave", "token", "audit"]
    root.mkdir(parents=True)
    for i in range(pages):
        sections = "\n\n".join(
            f"## Part {j}\n\n" + " ".join(rng.choice(words) for _ in range(120)) + "."
            for j in range(4)
        )
        (root / f"page{i:04d}.md").write_text(f"# Page {i} ({seed})\n\n{sections}\n")
    return root


def searchable(index: Path) -> bool:
    load_index(index)
    return bool(search(SearchRequest(query="key rotation", index_dir=index, k=3)))


def kill_campaign(work: Path, points: int, pages: int) -> dict[str, object]:
    old = make_corpus(work / "old", pages // 4, 1)
    new = make_corpus(work / "new", pages, 2)
    index = work / "kill-index"
    ingest([old], index)
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-c", WRITER, str(new), str(work / "timing")],
                          capture_output=True, text=True)  # fmt: skip
    full = time.monotonic() - started
    assert proc.returncode == 0, proc.stderr
    loaded = 0
    versions: dict[str, int] = {}
    for point in range(points):
        delay = full * (point + 0.5) / points
        writer = subprocess.Popen([sys.executable, "-c", WRITER, str(new), str(index)],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
        time.sleep(delay)
        writer.send_signal(signal.SIGKILL)
        writer.wait()
        try:
            ok = searchable(index)
            version = load_index(index).version
            versions[version] = versions.get(version, 0) + 1
            loaded += int(ok)
            outcome = f"loads version {version}" if ok else "loads, search finds nothing"
        except Exception as exc:
            outcome = f"{type(exc).__name__}: {exc}"
        print(f"kill {point + 1}/{points} at {delay:.1f} s: {outcome}", file=sys.stderr, flush=True)
        ingest([old], index)  # back to the old version for the next kill
    clean = ingest([new], index)
    return {
        "full_ingest_seconds": round(full, 1),
        "kills": points,
        "loaded_after_kill": loaded,
        "versions_seen": len(versions),
        "clean_ingest_after": bool(clean.version) and searchable(index),
    }


def race_campaign(work: Path, rounds: int, readers: int) -> dict[str, object]:
    corpora = []
    for name in ("a", "b"):
        corpus = work / f"race-{name}"
        shutil.copytree(HANDBOOK, corpus)
        (corpus / f"only-{name}.md").write_text(f"# Only {name}\n\nKey rotation for {name}.\n")
        corpora.append(corpus)
    index = work / "race-index"
    ingest([corpora[0]], index)
    corrupt: list[str] = []
    failed_searches: list[str] = []
    searches = 0
    stop = threading.Event()
    lock = threading.Lock()

    def read() -> None:
        nonlocal searches
        while not stop.is_set():
            try:
                load_index(index)
            except Exception as exc:
                with lock:
                    corrupt.append(f"{type(exc).__name__}: {exc}")
                continue
            try:
                hits = search(SearchRequest(query="key rotation", index_dir=index, k=3))
                assert hits
            except Exception as exc:
                with lock:
                    failed_searches.append(f"{type(exc).__name__}: {exc}")
            with lock:
                searches += 1

    threads = [threading.Thread(target=read) for _ in range(readers)]
    for thread in threads:
        thread.start()
    untruthful: list[str] = []
    try:
        for round_number in range(rounds):
            before = {c.source for c in load_index(index).chunks}
            procs = [subprocess.Popen([sys.executable, "-c", WRITER, str(c), str(index)],
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                     for c in corpora]  # fmt: skip
            reports = []
            for proc in procs:
                out, err = proc.communicate()
                if proc.returncode:
                    untruthful.append(f"round {round_number}: writer failed: {err[-300:]}")
                    continue
                reports.append(json.loads(out.strip().splitlines()[-1]))
            final = {c.source for c in load_index(index).chunks}
            if not any(truthful(order, before, final) for order in (reports, reports[::-1])):
                untruthful.append(f"round {round_number}: {reports}")
            print(f"round {round_number + 1}/{rounds}: ok", file=sys.stderr, flush=True)
    finally:
        stop.set()
        for thread in threads:
            thread.join()
    return {
        "rounds": rounds,
        "readers": readers,
        "searches": searches,
        "corrupt_states": len(corrupt),
        "failed_searches": len(failed_searches),
        "untruthful_summaries": len(untruthful),
        "details": (corrupt + failed_searches + untruthful)[:10],
    }


def truthful(order: list[dict], before: set[str], final: set[str]) -> bool:
    """Whether the writers' summaries are exactly what changed, applied in this order
    (writers take the lock one after the other; which went first is not recorded)."""
    state = before
    for report in order:
        corpus = {p.name for p in Path(report["corpus"]).iterdir()}
        if set(report["added"]) != corpus - state or set(report["deleted"]) != state - corpus:
            return False
        if report["updated"]:
            return False
        state = corpus
    return state == final


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--points", type=int, default=20)
    parser.add_argument("--pages", type=int, default=400, help="pages of the big corpus")
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--readers", type=int, default=4)
    parser.add_argument("--skip-kill", action="store_true")
    args = parser.parse_args()
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    with tempfile.TemporaryDirectory(prefix="footnote-kill-") as work:
        result: dict[str, object] = {"command": " ".join(sys.argv)}
        if not args.skip_kill:
            result["kill"] = kill_campaign(Path(work), args.points, args.pages)
        result["race"] = race_campaign(Path(work), args.rounds, args.readers)
    print(json.dumps(result, indent=2))
    kill = result.get("kill") or {"kills": 0, "loaded_after_kill": 0, "clean_ingest_after": True}
    race = result["race"]
    assert isinstance(kill, dict) and isinstance(race, dict)
    ok = (
        kill["loaded_after_kill"] == kill["kills"]
        and kill["clean_ingest_after"]
        and race["corrupt_states"] == race["failed_searches"] == race["untruthful_summaries"] == 0
    )
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
