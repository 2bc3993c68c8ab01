"""`footnote serve`: the URL it prints is the one the server listens on, and it serves /ui."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.conftest import REPO, footnote_command
from tests.test_server import HOST

pytestmark = pytest.mark.integration

STARTUP_LINES = 200


@pytest.fixture(scope="module")
def served(handbook_index: Path) -> Iterator[tuple[int, list[str]]]:
    """`footnote serve` asked for a port that is taken: (that port, what it printed)."""
    with socket.socket() as taken:
        taken.bind((HOST, 0))
        taken.listen()
        port = taken.getsockname()[1]
        process = subprocess.Popen(
            [*footnote_command(), "serve", "--index", str(handbook_index), "--port", str(port)],
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            env={k: v for k, v in os.environ.items() if k != "FOOTNOTE_INDEX"},
        )
        try:
            assert process.stdout is not None
            printed: list[str] = []
            for line in process.stdout:
                printed.append(line.strip())
                if line.startswith("Footnote server:") or len(printed) > STARTUP_LINES:
                    break
            assert printed[-1].startswith("Footnote server:"), printed
            yield port, printed
        finally:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=10)


def printed_url(printed: list[str], label: str) -> str:
    """The URL after `label` in the one status line `footnote serve` prints."""
    status = next(line for line in printed if label in line)
    return status.split(label, 1)[1].split()[0]


def test_serve_moves_off_a_taken_port_and_prints_the_real_url(
    served: tuple[int, list[str]],
) -> None:
    taken, printed = served
    server = printed_url(printed, "Footnote server:")
    chat = printed_url(printed, "chat page:")

    moved_to = server.rsplit(":", 1)[1]
    assert printed[0] == f"Port {taken} is in use on {HOST}; serving on port {moved_to} instead."
    assert chat == f"{server}/ui"
    assert f":{taken}" not in server
    assert httpx.get(f"{server}/ok", timeout=10).json()["ok"] is True
    assert printed_url(printed, "Studio:").endswith(f"baseUrl={server}")
    assert len(printed) == 2, "a notice for the port, then one status line: nothing else"


def test_chat_page_comes_from_the_package_with_a_strict_policy(
    served: tuple[int, list[str]],
) -> None:
    chat = printed_url(served[1], "chat page:")
    page = httpx.get(chat, timeout=10)
    script = httpx.get(f"{chat}/app.js", timeout=10)
    config = httpx.get(f"{chat}/config.json", timeout=10)
    outside = httpx.get(f"{chat}/webapp.py", timeout=10)  # a file beside the page, not listed

    assert page.status_code == script.status_code == config.status_code == 200
    assert page.headers["content-type"].startswith("text/html")
    assert "script-src 'self'" in page.headers["content-security-policy"]
    assert "frame-ancestors 'none'" in page.headers["content-security-policy"]
    assert "://" not in page.text, "the page loads nothing from another origin"
    assert script.headers["content-type"].startswith("text/javascript")
    assert config.json()["graph_id"] == "footnote"
    assert outside.status_code == 404


def test_stopping_serve_stops_the_server(handbook_index: Path) -> None:
    process = subprocess.Popen(
        [*footnote_command(), "serve", "--index", str(handbook_index), "--port", "0"],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    assert process.stdout is not None
    server = ""
    for line in process.stdout:
        if line.startswith("Footnote server:"):
            server = line.split()[2]
            break
    assert server, "footnote serve printed no URL"
    process.send_signal(signal.SIGTERM)
    process.wait(timeout=15)

    with pytest.raises(httpx.ConnectError):
        httpx.get(f"{server}/ok", timeout=5)


def test_serve_is_quiet_and_its_server_logs_to_a_file(handbook_index: Path, tmp_path: Path) -> None:
    """One status line on the terminal, whatever the server does; its own log in a file."""
    log = tmp_path / "serve.log"
    process = subprocess.Popen(
        [*footnote_command(), "serve", "--index", str(handbook_index), "--port", "0"]
        + ["--log-file", str(log)],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={k: v for k, v in os.environ.items() if k != "FOOTNOTE_INDEX"},
    )
    try:
        assert process.stdout is not None
        status = process.stdout.readline().strip()
        server = printed_url([status], "Footnote server:")
        page = httpx.get(f"{server}/ui", timeout=10)
        assert '<link rel="icon" href="/ui/favicon.svg"' in page.text, "no /favicon.ico asked"
        icon = httpx.get(f"{server}/ui/favicon.svg", timeout=10)
        assert icon.status_code == 200 and icon.headers["content-type"] == "image/svg+xml"
        for _ in range(3):
            assert httpx.get(f"{server}/ok", timeout=10).status_code == 200
    finally:
        process.send_signal(signal.SIGTERM)
        out, err = process.communicate(timeout=30)
    assert status.startswith("Footnote server: ") and f"log: {log}" in status
    assert out.strip() == "" and err.strip() == "", (out, err)
    assert "langgraph_api" in log.read_text(errors="replace"), "the server's own log went there"
