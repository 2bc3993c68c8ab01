"""The usage page (docs/usage.md, where the README's "Using it" points), followed as a
newcomer follows it: every command of every block, in order, from a fresh index, each checked
for its exit status and a line of what it prints; and the serve status line the chat page's
doc (docs/chat-page.md) shows is the one `footnote serve` prints.

The commands run in a scratch folder holding copies of what they name (samples/, docs/,
tests/fixtures/), so nothing is written into the checkout. Three things are adapted, and
only these: `[optional]` parts and `# comments` are dropped; the example site
(https://example.com/docs/) is a small site on loopback (tests/site_server.py), which the
address guard lets through only with `--allow-private`; and pip runs offline against this
environment (`/path/to/footnote` is the checkout, `--no-build-isolation`, and installs are
`--dry-run`: what pip would install, not an install over this environment)."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import REPO, footnote_command

pytestmark = pytest.mark.integration

USAGE = (REPO / "docs" / "usage.md").read_text(encoding="utf-8")
CHAT_PAGE = (REPO / "docs" / "chat-page.md").read_text(encoding="utf-8")

EXPECTED: list[tuple[str, int, str]] = [
    # (command as the usage page writes it, after dropping [...] and comments; exit; a line)
    (
        "footnote ingest samples/handbook --index .footnote/index",
        0,
        ".footnote/index: 9 added, 0 updated, 0 unchanged, 0 deleted, 0 failed",
    ),
    ('footnote search "api key rotation" --index .footnote/index -k 5', 0, "keys.md#rotation"),
    (
        'footnote ask "How often do I have to change my API key?" --index .footnote/index',
        0,
        "  [1] keys.md, § API keys > Rotation, lines 13-19",
    ),
    ("footnote eval tests/fixtures/beir_tiny --json", 0, '"dataset": "beir_tiny"'),
    ("footnote serve --index .footnote/index", 0, "Footnote server: http://127.0.0.1:"),
    ("pip install -c constraints.txt '/path/to/footnote'", 0, "Would install footnote-rag-0.1.0"),
    ("pip wheel --no-deps -w dist /path/to/footnote", 0, "footnote_rag-0.1.0-py3-none-any.whl"),
    (
        "pip install -c constraints.txt dist/footnote_rag-0.1.0-py3-none-any.whl",
        0,
        "Would install footnote-rag-0.1.0",
    ),
    (
        "footnote add docs/ --access engineering --exclude 'scaling.md'",
        0,
        "  added: benchmarks.md: new in its source",
    ),
    (
        "footnote add https://example.com/docs/ --crawl --max-depth 2 --max-pages 200",
        0,
        "  added: HOST/docs/index.html: new in its source",
    ),
    ("footnote add git+file:///srv/repo", 0, "  added: repo/deploy.py: new in its source"),
    ("footnote sources", 0, "  site https://example.com/docs/ (2 documents, private addresses"),
    ("footnote remove docs/ vpn.md", 0, "  deleted: vpn.md: removed by `footnote remove`"),
    ("footnote sync", 0, ".footnote/index: 0 added, 0 updated, 11 unchanged, 0 deleted, 0 failed"),
    (
        "footnote sync --rebuild",
        0,
        ".footnote/index: 11 added, 0 updated, 0 unchanged, 0 deleted, 0 failed",
    ),
]

SERVE_LINE = re.compile(
    r"Footnote server: (?P<url>http://127\.0\.0\.1:\d+)  chat page: (?P=url)/ui  "
    r"Studio: https://smith\.langchain\.com/studio/\?baseUrl=(?P=url)  "
    r"\(index: [^;]+; threads: in memory; log: \S+/serve-\d+\.log\)"
)
"""The status line of `footnote serve` (without --checkpoint-url): printed, and shown in the
chat page's doc."""

SITE = {
    "docs/index.html": '<html><body><main><h1 id="start">Docs</h1><p>The kiwi guide.</p>'
    '<a href="/docs/birds.html">Birds</a></main></body></html>',
    "docs/birds.html": '<html><body><main><h1 id="birds">Birds</h1><p>Kiwis cannot fly.</p>'
    "</main></body></html>",
}


def command_blocks(text: str) -> list[tuple[str, list[str]]]:
    """Each fenced block's language and its lines."""
    return [
        (lang, body.splitlines())
        for lang, body in re.findall(r"^```(\w*)\n(.*?)^```", text, re.M | re.S)
    ]


def commands(text: str) -> list[str]:
    found = []
    for lang, lines in command_blocks(text):
        if lang != "sh":
            continue
        for line in lines:
            line = re.sub(r"\s+#.*$", "", line)  # a comment after the command
            line = re.sub(r"\s*\[[^\]]*\]", "", line).strip()  # [optional] parts
            if line:
                found.append(line)
    return found


@pytest.fixture
def site(tmp_path: Path) -> Iterator[str]:
    root = tmp_path / "site"
    for name, text in SITE.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    proc = subprocess.Popen(
        [sys.executable, str(REPO / "tests" / "site_server.py"), str(root), str(tmp_path / "log")],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        yield f"http://127.0.0.1:{int(proc.stdout.readline())}"
    finally:
        os.kill(proc.pid, signal.SIGTERM)
        proc.wait(timeout=10)


def git_repository(root: Path) -> Path:
    """A one-file repository standing in for the page's /srv/repo."""
    root.mkdir()
    (root / "deploy.py").write_text('def deploy():\n    """Ship the site on Fridays."""\n')
    for argv in (["init", "-q"], ["add", "deploy.py"], ["commit", "-q", "-m", "deploy"]):
        subprocess.run(
            ["git", "-c", "user.name=Ada", "-c", "user.email=ada@example.org", *argv],
            cwd=root,
            check=True,
        )
    return root


def test_the_using_it_commands_are_the_ones_this_test_runs() -> None:
    assert commands(USAGE) == [command for command, _, _ in EXPECTED]


def test_the_chat_page_doc_shows_the_serve_line_serve_prints() -> None:
    shown = re.search(r"^Footnote server: .*$", CHAT_PAGE, re.M)
    assert shown is not None and SERVE_LINE.fullmatch(shown.group(0)), shown


def test_using_it_in_order_from_a_fresh_index(tmp_path: Path, site: str) -> None:
    work = tmp_path / "work"
    work.mkdir()
    for folder in ("samples", "docs", "tests/fixtures"):
        shutil.copytree(REPO / folder, work / folder)
    shutil.copy2(REPO / "constraints.txt", work)
    fixtures_before = sorted(p.relative_to(work) for p in (work / "tests").rglob("*"))
    env = {**os.environ, "TOKENIZERS_PARALLELISM": "false"}
    env.pop("FOOTNOTE_INDEX", None)
    host = site.split("://", 1)[1]
    repository = git_repository(tmp_path / "repo")

    for command, status, expected in EXPECTED:
        argv = shlex.split(command)
        if argv[0] == "footnote":
            argv = [*footnote_command(), *argv[1:]]
            if "https://example.com/docs/" in argv:
                argv = [site + "/docs/index.html" if a.startswith("https://") else a for a in argv]
                argv.append("--allow-private")
            argv = [f"git+file://{repository}" if a == "git+file:///srv/repo" else a for a in argv]
        else:  # pip, offline, against this environment
            argv = [sys.executable, "-m", *argv, "--no-build-isolation"]
            argv = [str(REPO) if a == "/path/to/footnote" else a for a in argv]
            if "install" in argv:
                argv.append("--dry-run")
        if command.startswith("footnote serve"):
            output = serve_until_it_says_where(argv, work, env)
        else:
            done = subprocess.run(
                argv, cwd=work, env=env, capture_output=True, text=True, timeout=900
            )
            assert done.returncode == status, (command, done.stdout[-2000:], done.stderr[-2000:])
            output = done.stdout + done.stderr
        if command.startswith("pip wheel"):
            assert (work / "dist" / expected).is_file(), "the wheel has the name the docs use"
        if command.startswith("footnote sources"):
            output = output.replace(site + "/docs/index.html", "https://example.com/docs/")
        if command.startswith("footnote eval"):
            assert json.loads(output[: output.rindex("}") + 1])["stages"]
        assert expected.replace("HOST", host) in output, (command, output[-3000:])

    # The eval dataset (a copy of the checkout's tests/fixtures) was only read.
    assert sorted(p.relative_to(work) for p in (work / "tests").rglob("*")) == fixtures_before

    # The usage page's Python example, run where a notes.txt exists.
    (work / "notes.txt").write_text("Our notes: the hr team meets on Thursdays.\n")
    (python,) = [lines for lang, lines in command_blocks(USAGE) if lang == "python"]
    done = subprocess.run(
        [sys.executable, "-c", "\n".join(python) + "\nprint(ids)"],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "['notes.txt']"


def serve_until_it_says_where(argv: list[str], cwd: Path, env: dict[str, str]) -> str:
    """Start `footnote serve`, wait for its status line, check the page answers, stop it."""
    import httpx

    proc = subprocess.Popen(
        argv, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    lines: list[str] = []
    try:
        assert proc.stdout is not None
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line:
                break
            lines.append(line)
            match = SERVE_LINE.fullmatch(line.rstrip("\n"))
            if match:
                assert "(index: .footnote/index;" in line
                assert httpx.get(match.group("url") + "/ui", timeout=30).status_code == 200
                break
        else:
            raise AssertionError(f"no status line in time: {''.join(lines)}")
        assert lines and SERVE_LINE.fullmatch(lines[-1].rstrip("\n")), "".join(lines)
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    return "".join(lines)
