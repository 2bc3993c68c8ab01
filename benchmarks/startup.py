"""Whole-process start-up times of the `footnote` command, against the issue's targets.

    python benchmarks/startup.py [--runs 7] [--json]

Measures, as a user would feel them (process start to exit, median of several runs):
`footnote --help`, a no-change `footnote ingest` of samples/handbook, and `footnote ask` on
the handbook (offline default). The index is built once in a temporary directory first.
Run it on an otherwise idle machine; shared-machine load shows up directly in the figures.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
HANDBOOK = REPO / "samples" / "handbook"
QUESTION = "How often do I have to change my API key?"


def footnote_command() -> list[str]:
    script = Path(sys.executable).with_name("footnote")
    return [str(script)] if script.exists() else [sys.executable, "-m", "footnote.cli"]


def timed(args: list[str], env: dict[str, str]) -> float:
    started = time.perf_counter()
    subprocess.run(args, env=env, cwd=REPO, check=True, capture_output=True)
    return time.perf_counter() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7, help="runs per command (median)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()

    env = {**os.environ, "TOKENIZERS_PARALLELISM": "false", "LANGSMITH_TRACING": "false"}
    env.pop("FOOTNOTE_INDEX", None)
    footnote = footnote_command()
    with tempfile.TemporaryDirectory() as tmp:
        index = str(Path(tmp) / "index")
        subprocess.run(
            [*footnote, "ingest", str(HANDBOOK), "--index", index],
            env=env,
            check=True,
            capture_output=True,
        )
        cases = [
            ("footnote --help", [*footnote, "--help"], 0.5),
            (
                "footnote ingest samples/handbook (no change)",
                [*footnote, "ingest", str(HANDBOOK), "--index", index],
                1.0,
            ),
            (
                "footnote ask (handbook, offline)",
                [*footnote, "ask", QUESTION, "--index", index, "--quiet"],
                2.5,
            ),
        ]
        rows = []
        for name, command, target in cases:
            timed(command, env)  # warm the OS file cache; not counted
            times = [timed(command, env) for _ in range(args.runs)]
            rows.append(
                {
                    "command": name,
                    "median_s": round(statistics.median(times), 3),
                    "min_s": round(min(times), 3),
                    "max_s": round(max(times), 3),
                    "target_s": target,
                    "met": statistics.median(times) < target,
                }
            )
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    print(f"{args.runs} runs each, whole process, median (min-max); {os.cpu_count()} CPUs\n")
    print("| command | median s | min-max s | target s | met |")
    print("|---|---:|---:|---:|---|")
    for r in rows:
        print(
            f"| `{r['command']}` | {r['median_s']:.2f} | {r['min_s']:.2f}-{r['max_s']:.2f} "
            f"| < {r['target_s']} | {'yes' if r['met'] else 'no'} |"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
