"""What a cold `footnote` command pays before it does its work (benchmarks/startup.py measures
the times; these tests hold the causes).

- Building the parser loads no connector or document parser: every command builds it,
  `footnote --help` included.
- `footnote ask` graded offline by a judge grader starts loading the judge before it imports
  the graph, and only then.
- The installed command freezes its objects out of the garbage collector before it exits, and
  passes `main`'s status on unchanged.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import pytest

from footnote.cli import ask
from footnote.graph import grader

ENGINES = (
    "footnote.ingest.connectors.registry",
    "footnote.ingest.parsers",
    "bs4",
)


def test_building_the_parser_loads_no_connector_or_parser() -> None:
    program = (
        "import json, sys\n"
        "from footnote.cli.main import build_parser\n"
        "build_parser()\n"
        f"print(json.dumps([m for m in {ENGINES!r} if m in sys.modules]))\n"
    )
    loaded = subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, check=True, timeout=60
    )
    assert json.loads(loaded.stdout) == []


@pytest.mark.parametrize(
    ("offline_grader", "loads"),
    [("judge-rescue", True), ("judge-veto", True), ("judge", True), ("calibrated", False),
     ("linear", False)],
)  # fmt: skip
def test_only_a_judge_grader_starts_loading_the_judge(
    offline_grader: grader.OfflineGrader, loads: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    from footnote.models import judge

    started: list[bool] = []
    monkeypatch.setattr(judge, "load_judge_early", lambda: started.append(True))
    grader.prepare_offline_grader(offline_grader)
    assert started == ([True] if loads else [])


def _ask_args(index: Path, model: str) -> argparse.Namespace:
    from footnote.cli.main import build_parser

    argv = ["ask", "How often do I have to change my API key?", "--index", str(index), "--quiet"]
    return build_parser().parse_args([*argv, *(["--model", model] if model else [])])


class GraphImported(Exception):
    """Raised in place of building the graph: the test stops there."""


@pytest.mark.parametrize(("model", "offline"), [("", True), ("openai:gpt-4.1", False)])
def test_ask_prepares_the_offline_grader_before_the_graph_only_when_it_grades_offline(
    handbook_index: Path, model: str, offline: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Offline, `footnote ask` prepares the grader the run reads before it builds the graph;
    with a chat model the model grades, and nothing is loaded for an offline grader."""
    from footnote.graph import graph

    seen: list[str] = []

    def make_graph() -> None:
        seen.append("graph")
        raise GraphImported

    monkeypatch.setattr(grader, "prepare_offline_grader", seen.append)
    monkeypatch.setattr(graph, "make_graph", make_graph)
    with pytest.raises(GraphImported):
        ask.cmd_ask(_ask_args(handbook_index, model))
    assert seen == ([grader.DEFAULT_OFFLINE_GRADER, "graph"] if offline else ["graph"])


def test_the_installed_command_freezes_its_objects_and_keeps_mains_status() -> None:
    program = (
        "import gc, sys\n"
        "from footnote.cli import main as cli\n"
        "sys.argv = ['footnote', 'settings', '--json']\n"
        "status = cli.run()\n"
        "print('frozen', gc.get_freeze_count() > 0, 'status', status, file=sys.stderr)\n"
        "sys.exit(status)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)  # settings --json printed as it does from `main`
    assert "frozen True status 0" in done.stderr


def test_the_installed_command_is_run() -> None:
    """The console script calls `run`, not `main`, so the command gets the faster exit."""
    pyproject = Path(__file__).resolve().parents[1] / "pyproject.toml"
    assert 'footnote = "footnote.cli.main:run"' in pyproject.read_text(encoding="utf-8")
