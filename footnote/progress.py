"""Progress while long work runs (ingest, evaluation): a bar per stage on a terminal, a
plain line now and then otherwise. In the app layer's lowest module, so the command line and
the evaluation both print it without importing each other."""

from __future__ import annotations

import sys
from typing import Any

UNITS = {"parse": "file", "embed": "chunk"}
"""tqdm's unit per stage ingest reports; evaluation's stages count queries."""


class ProgressPrinter:
    """A bar per stage on a terminal, a plain line per ~10% otherwise, nothing when quiet.

    Called as `progress(stage, done, total)`, the shape ingest and evaluation report in.
    """

    def __init__(self, quiet: bool = False) -> None:
        self.quiet = quiet
        self.tty = sys.stderr.isatty()
        self._bars: dict[str, Any] = {}
        self._last: dict[str, int] = {}

    def __call__(self, stage: str, done: int, total: int) -> None:
        if self.quiet or total == 0:
            return
        if self.tty:
            from tqdm import tqdm

            bar = self._bars.get(stage)
            if bar is None:
                unit = UNITS.get(stage, "query")
                bar = self._bars[stage] = tqdm(total=total, desc=stage, unit=unit, leave=False)
            bar.update(done - bar.n)
            if done >= total:
                bar.close()
                del self._bars[stage]
            return
        step = max(1, total // 10)
        if done == total or done - self._last.get(stage, 0) >= step:
            self._last[stage] = 0 if done == total else done
            print(f"{stage}: {done}/{total}", file=sys.stderr, flush=True)
