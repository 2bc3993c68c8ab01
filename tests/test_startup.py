"""Fast paths load only what they use: the timing itself is measured by benchmarks/startup.py,
outside the test run; these check the causes it depends on.

- The parser (every command builds it, `footnote --help` included) and a no-change ingest load
  no search or model code, and the parser no connector, document parser, grader or LangChain.
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
from footnote.graph.grader_choice import DEFAULT_OFFLINE_GRADER

HEAVY = ["faiss", "bm25s", "onnxruntime", "langchain_text_splitters", "langgraph"]
ENGINES = ["footnote.ingest.connectors.registry", "footnote.ingest.parsers", "bs4"]


def loaded_after(code: str, modules: list[str] = HEAVY) -> list[str]:
    probe = (
        f"{code}\nimport json, sys\nprint(json.dumps([m for m in {modules!r} if m in sys.modules]))"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=300
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_cli_parser_loads_no_search_or_model_code() -> None:
    assert loaded_after("from footnote.cli.main import build_parser; build_parser()") == []


def test_cli_parser_loads_no_langchain_and_no_grader() -> None:
    """The parser reads the answer graph's settings for `ask`'s options: the names and the
    default of the offline graders (graph/grader_choice.py), not the graders, whose imports
    reach LangChain (0.3 s of `footnote --help`)."""
    build = "from footnote.cli.main import build_parser; build_parser()"
    light = ["langchain_core", "footnote.graph.grader"]
    assert loaded_after(build, light) == []


def test_cli_parser_loads_no_connector_or_document_parser() -> None:
    """The registry imports every connector and the parsers they use (0.2 s): a served
    source policy, whose constants the parser reads, loads it only to judge a connector."""
    build = "from footnote.cli.main import build_parser; build_parser()"
    assert loaded_after(build, ENGINES) == []


def test_ingest_with_nothing_to_do_reads_no_vectors_and_no_model(
    handbook_dir: Path, tmp_path: Path
) -> None:
    index = tmp_path / "index"
    build = (
        "from footnote.ingest.pipeline import ingest\n"
        f"ingest([{str(handbook_dir)!r}], {str(index)!r})"
    )
    assert "faiss" in loaded_after(build), "a first ingest writes vectors"
    again = (
        f"from footnote.ingest.pipeline import ingest\n"
        f"s = ingest([{str(handbook_dir)!r}], {str(index)!r})\n"
        "assert s.embedded_chunks == 0 and s.chunks > 0 and len(s.unchanged) == 9, s"
    )
    assert loaded_after(again) == []


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
    assert seen == ([DEFAULT_OFFLINE_GRADER, "graph"] if offline else ["graph"])


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
