"""First contact with the command line: what a newcomer meets before anything works.

A command that cannot do what it was asked says so in one line with exit status 2 (the
set-up must change) or 3 (a server could not be reached), never a traceback or a silent
success: a `postgresql://` index without the postgres extra, an option only `--production`
reads, an unreachable checkpoint database, a greeting asked of an index that does not exist,
a scanned PDF where OCR is not installed, and the extras `eval` and `serve` need.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from footnote.cli.main import main
from footnote.ingest.documents import ParseError
from footnote.ingest.parsers import parse_file
from tests.format_files import make_scanned_pdf, tesseract_found_at

REPO = Path(__file__).resolve().parents[1]
FOOTNOTE = Path(sys.executable).parent / "footnote"


def run_cli(
    args: list[str], tmp_path: Path, *, stdin: str = "", blocked: tuple[str, ...] = ()
) -> subprocess.CompletedProcess[str]:
    """`footnote ARGS` in a process of its own (its session stopped by PID on a timeout, so a
    server it started never outlives the test), with the modules in `blocked` unimportable."""
    command = [str(FOOTNOTE), *args]
    if blocked:
        block = "; ".join(f"sys.modules[{name!r}] = None" for name in blocked)
        program = f"import sys; {block}; from footnote.cli.main import main; sys.exit(main())"
        command = [sys.executable, "-c", program, *args]
    env = {**os.environ, "FOOTNOTE_STATE_DIR": str(tmp_path / "state")}
    process = subprocess.Popen(
        command,
        cwd=tmp_path,
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        out, err = process.communicate(stdin, timeout=120)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        out, err = process.communicate()
        pytest.fail(f"footnote {' '.join(args)} did not finish: {err[-2000:]}")
    return subprocess.CompletedProcess(command, process.returncode, out, err)


def one_line(result: subprocess.CompletedProcess[str]) -> str:
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert "Traceback" not in result.stderr, result.stderr
    assert len(lines) == 1, result.stderr
    return lines[0]


def closed_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


# --- 14: a postgresql:// index without the postgres extra --------------------------------

POSTGRES_URL = "postgresql://reader:s3cret@127.0.0.1:{port}/footnote?index=handbook"


@pytest.mark.parametrize(
    "command",
    [
        ["ingest", str(REPO / "samples" / "handbook"), "--quiet"],
        ["search", "api keys"],
        ["ask", "How often do I have to change my API key?", "--quiet"],
        ["ask", "hi", "--quiet"],
        ["sources"],
        ["sync"],
        ["serve", "--port", "0", "--startup-timeout", "5"],
    ],
    ids=lambda command: command[0] + ("-hi" if "hi" in command else ""),
)
def test_a_postgres_index_without_its_driver_names_the_extra(
    command: list[str], tmp_path: Path
) -> None:
    url = POSTGRES_URL.format(port=closed_port())
    result = run_cli([*command, "--index", url], tmp_path, blocked=("psycopg_pool", "psycopg"))
    line = one_line(result)
    assert result.returncode == 2, result.stderr
    assert "footnote-rag[postgres]" in line
    assert "pip install 'psycopg[binary]" in line
    assert "s3cret" not in result.stderr + result.stdout


# --- 15: options, databases and indexes that were silently accepted -----------------------


@pytest.mark.parametrize(
    ("options", "named"),
    [
        (["--metrics"], "--metrics needs --production"),
        (["--replicas", "2"], "--replicas needs --production"),
        (["--metrics", "--replicas", "3"], "--replicas, --metrics need --production"),
    ],
)
def test_production_options_without_production_are_refused(
    options: list[str], named: str, tmp_path: Path
) -> None:
    result = run_cli(["serve", "--port", "0", "--index", str(tmp_path), *options], tmp_path)
    assert result.returncode == 2, result.stderr
    assert named in one_line(result)


def test_an_unreachable_checkpoint_database_is_named(tmp_path: Path) -> None:
    url = f"postgresql://keeper:s3cret@127.0.0.1:{closed_port()}/threads"
    result = run_cli(
        ["serve", "--port", "0", "--index", str(tmp_path), "--checkpoint-url", url], tmp_path
    )
    line = one_line(result)
    assert result.returncode == 3, result.stderr
    assert "the checkpoint database (--checkpoint-url) cannot be reached" in line
    assert f"postgresql://keeper:***@127.0.0.1:{url.rsplit(':', 1)[1].split('/')[0]}" in line
    assert "s3cret" not in result.stderr + result.stdout


def test_a_server_that_exits_says_why_from_its_log(tmp_path: Path) -> None:
    from footnote.server.langgraph_dev import exit_reason

    log = tmp_path / "serve.log"
    log.write_text(
        "\x1b[2m2026-12-04T14:51:48Z\x1b[0m [info] Starting\n"
        "Traceback (most recent call last):\n"
        '  File "checkpoint.py", line 50, in server_checkpointer\n'
        "psycopg.OperationalError: connection failed: connection refused\n"
        "\tIs the server running on that host and accepting TCP/IP connections?\n"
        "\x1b[31m[error]\x1b[0m Application startup failed. Exiting.\n"
    )
    assert exit_reason(log) == "psycopg.OperationalError: connection failed: connection refused"
    log.write_text("[info] Starting\n[info] Stopped\n")
    assert exit_reason(log) == ""


@pytest.mark.parametrize(
    ("command", "stdin"), [(["ask", "hi"], ""), (["chat"], "hi\n")], ids=["ask", "chat"]
)
def test_a_greeting_to_a_missing_index_exits_2(
    command: list[str], stdin: str, tmp_path: Path
) -> None:
    missing = tmp_path / "no-such-index"
    result = run_cli([*command, "--index", str(missing)], tmp_path, stdin=stdin)
    assert result.returncode == 2, result.stdout + result.stderr
    assert one_line(result) == (
        f"footnote: no index at {missing}: build one with `footnote ingest PATH --index {missing}`"
    )
    assert not missing.exists()


def test_a_scanned_pdf_without_pillow_says_how_to_install_ocr(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Tesseract alone (Debian's package, e.g. on a machine that ran the tests) cannot read a
    scan: the base install has no Pillow, and the reason must say so, not "no text found"."""
    import footnote.ingest.parsers.ocr as ocr

    make_scanned_pdf(tmp_path / "scan.pdf")
    monkeypatch.setattr(ocr.shutil, "which", tesseract_found_at("/usr/bin/tesseract"))
    for module in [name for name in sys.modules if name == "PIL" or name.startswith("PIL.")]:
        monkeypatch.setitem(sys.modules, module, None)
    with pytest.raises(ParseError, match=r"scanned PDF.*install Pillow: pip install 'Pillow>="):
        parse_file(tmp_path / "scan.pdf", "scan.pdf")
    monkeypatch.setattr(ocr.shutil, "which", tesseract_found_at(None))
    with pytest.raises(ParseError, match=r"apt-get install tesseract-ocr\) and install Pillow"):
        parse_file(tmp_path / "scan.pdf", "scan.pdf")


# --- 13: the extras `eval` and `serve` ----------------------------------------------------


def test_eval_without_its_extra_names_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, "ranx", None)
    monkeypatch.setattr("importlib.util.find_spec", lambda name, *_: None)
    status = main(["eval", str(REPO / "tests" / "fixtures" / "beir_tiny")])
    err = capsys.readouterr().err.strip()
    assert status == 2
    assert len(err.splitlines()) == 1
    assert "pip install 'ranx>=" in err and "(footnote-rag's eval extra)" in err


def test_serve_without_its_extra_names_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr("shutil.which", lambda *_args, **_kwargs: None)
    status = main(["serve", "--index", str(tmp_path), "--port", "0"])
    err = capsys.readouterr().err.strip()
    assert status == 2
    assert len(err.splitlines()) == 1
    assert "pip install 'langgraph-cli[inmem]>=" in err and "(footnote-rag's serve extra)" in err


def test_the_demo_installs_the_serve_extra() -> None:
    """`./dev demo` leaves `footnote serve` working: the README's next step is the chat page."""
    demo = (REPO / "dev").read_text().split("    demo)", 1)[1].split(";;", 1)[0]
    assert 'ensure_env "[serve]"' in demo
