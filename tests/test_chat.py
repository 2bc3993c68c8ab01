"""A conversation from the command line: `footnote ask --thread NAME` and `footnote chat`
keep the thread's history owner-only in the state folder, and a follow-up is made
standalone by the graph's own planner, as on the page."""

from __future__ import annotations

import json
import stat
import subprocess
from pathlib import Path

from footnote.cli.chat import history_path
from tests.conftest import REPO, RunCli, footnote_command

FIRST = "How often do I have to change my API key?"
FOLLOW_UP = "and what happens to the old one?"


def ask_json(run_cli: RunCli, index: Path, question: str, *extra: str) -> dict:
    done = run_cli("ask", question, "--index", str(index), "--json", "--quiet", *extra)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_a_follow_up_in_a_thread_is_read_with_the_earlier_question(
    handbook_index: Path, run_cli: RunCli
) -> None:
    alone = ask_json(run_cli, handbook_index, FOLLOW_UP)
    assert "rewrite_query:condensed" not in alone["path"], "no history: asked as it stands"

    first = ask_json(run_cli, handbook_index, FIRST, "--thread", "keys")
    assert first["citations"][0]["source"] == "keys.md" and first["route"] == "search"
    follow = ask_json(run_cli, handbook_index, FOLLOW_UP, "--thread", "keys")
    assert "rewrite_query:condensed" in follow["path"], follow["path"]
    assert follow["citations"][0]["source"] == "keys.md"
    assert "grace period" in follow["answer"]

    path = history_path(str(handbook_index), "keys")
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    kept = json.loads(path.read_text())
    assert [m["type"] for m in kept["messages"]] == ["human", "ai", "human", "ai"]
    assert kept["messages"][2]["data"]["content"] == FOLLOW_UP
    assert kept["citations"][0]["source"] == "keys.md"


def test_chat_reads_questions_until_end_of_input_and_forgets(
    handbook_index: Path, run_cli: RunCli
) -> None:
    done = subprocess.run(
        [*footnote_command(), "chat", "--index", str(handbook_index), "--quiet"],
        input=f"{FIRST}\n\n{FOLLOW_UP}\n",
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.count("Sources:\n  [1] keys.md") == 2, done.stdout
    path = history_path(str(handbook_index), "default")
    assert len(json.loads(path.read_text())["messages"]) == 4
    again = run_cli(
        "ask",
        "does it expire?",
        "--index",
        str(handbook_index),
        "--thread",
        "default",
        "--json",
        "--quiet",
    )
    assert "rewrite_query:condensed" in json.loads(again.stdout)["path"]

    forgot = run_cli("chat", "--index", str(handbook_index), "--forget")
    assert forgot.returncode == 0 and "thread 'default' forgotten" in forgot.stdout
    assert not path.exists()
    assert run_cli("chat", "--index", str(handbook_index), "--forget").returncode == 1


def test_a_bad_thread_name_or_history_is_one_line(handbook_index: Path, run_cli: RunCli) -> None:
    escape = run_cli("ask", FIRST, "--index", str(handbook_index), "--thread", "../../etc/x")
    assert escape.returncode == 2 and escape.stdout == ""
    assert escape.stderr.startswith("footnote: thread name '../../etc/x': use up to 64")

    path = history_path(str(handbook_index), "broken")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text('{"messages": [{"type": "nonsense"}]}')
    broken = run_cli("ask", FIRST, "--index", str(handbook_index), "--thread", "broken")
    assert broken.returncode == 2
    lines = broken.stderr.strip().splitlines()
    assert len(lines) == 1 and "--forget starts the thread over" in lines[0], broken.stderr
