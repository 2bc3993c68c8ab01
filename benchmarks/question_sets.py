"""The handbook question sets written after the method, read from the question files.

Each benchmark that reports the sets written apart used to keep its own list of them, and each
new set had to be added to four scripts by hand. The question files are the one home: a set is
a key of benchmarks/questions/handbook.json ("written_apart", "written_apart_2", ...) and a
`set` value of benchmarks/questions/multihop_team.json, so adding a set's questions is what
adds it to every report.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

QUESTIONS = Path(__file__).resolve().parent / "questions"
HANDBOOK_QUESTIONS = QUESTIONS / "handbook.json"
TEAM_QUESTIONS = QUESTIONS / "multihop_team.json"

WRITTEN_AFTER = "written_after"
_APART = re.compile(r"written_apart(?:_(\d+))?")


def apart_number(name: str) -> int | None:
    """The writer's number of a set written apart ("written_apart" is the first), else None."""
    match = _APART.fullmatch(name)
    if match is None:
        return None
    return int(match.group(1) or 1)


def apart_sets(names: Any) -> tuple[str, ...]:
    """The sets written apart among `names`, in the order they were written."""
    numbered = [(n, name) for name in names if (n := apart_number(name)) is not None]
    return tuple(name for _, name in sorted(numbered))


def handbook_apart_sets() -> tuple[str, ...]:
    """The handbook sets written apart (handbook.json's keys), in the order they were written."""
    return apart_sets(_read(HANDBOOK_QUESTIONS))


def handbook_later_sets() -> tuple[str, ...]:
    """The handbook sets written after the method: "written_after", then those written apart."""
    spec = _read(HANDBOOK_QUESTIONS)
    return ((WRITTEN_AFTER,) if WRITTEN_AFTER in spec else ()) + apart_sets(spec)


def team_sets() -> tuple[str, ...]:
    """The sets of the team-document bridges (multihop_team.json's `set` values, "original"
    for a question without one): "original" and "written_after" first, then those written
    apart in the order they were written."""
    names = dict.fromkeys(q.get("set", "original") for q in _read(TEAM_QUESTIONS)["questions"])
    first = tuple(n for n in ("original", WRITTEN_AFTER) if n in names)
    return first + apart_sets(names)


def _read(path: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return data
