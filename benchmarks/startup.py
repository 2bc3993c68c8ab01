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
import resource
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
    return [str(script)] if script.exists() else [sys.executable, "-m", "footnote.cli.main"]


def timed(args: list[str], env: dict[str, str]) -> tuple[float, float]:
    """Wall seconds and CPU seconds (user + system) of one run of `args`. On a shared machine
    the CPU time is the steadier figure: wall time also counts waiting for a core."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    subprocess.run(args, env=env, cwd=REPO, check=True, capture_output=True)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


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
        if not args.json:
            print(
                f"{args.runs} runs each, whole process, median (min-max); "
                f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f} at start\n"
            )
            print("| command | wall s, median | wall min-max | CPU s, median | target s | met |")
            print("|---|---:|---:|---:|---:|---|", flush=True)
        rows = []
        for name, command, target in cases:
            timed(command, env)  # warm the OS file cache; not counted
            runs = [timed(command, env) for _ in range(args.runs)]
            times = [wall for wall, _ in runs]
            row = {
                "command": name,
                "median_s": round(statistics.median(times), 3),
                "min_s": round(min(times), 3),
                "max_s": round(max(times), 3),
                "cpu_median_s": round(statistics.median(cpu for _, cpu in runs), 3),
                "target_s": target,
                "met": statistics.median(times) < target,
            }
            rows.append(row)
            if not args.json:
                print(
                    f"| `{name}` | {row['median_s']:.2f} | {row['min_s']:.2f}-{row['max_s']:.2f} "
                    f"| {row['cpu_median_s']:.2f} | < {target} | {'yes' if row['met'] else 'no'} |",
                    flush=True,
                )
    if args.json:
        print(json.dumps(rows, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
