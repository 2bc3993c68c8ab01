"""A real MediaWiki (Debian's `mediawiki` package, SQLite) served by PHP's built-in server
on a loopback port, for the MediaWiki connector's tests.

`wiki_template` (session-scoped) installs the wiki once with `maintenance/install.php` into a
temporary folder, gives Admin and Bob bot passwords (`createBotPassword.php`) and writes the
pages every test starts from; `WikiServer.start` copies that SQLite data into a test's own
folder and serves it, so each test edits a wiki of its own. The settings read the port
from the request and the data folder and whether anonymous visitors may read from the
environment, so one LocalSettings.php serves every copy. Each request the server answers
is in its log (`requests()`), so a test can see what the connector asked for.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.waiting import wait_for

MEDIAWIKI = Path("/usr/share/mediawiki")
ADMIN_PASSWORD = "Admin-pass-2718281828"
BOT_PASSWORDS = {
    "Admin": "adminbotpasswordforfootnote00001",
    "Bob": "bobbotpasswordforfootnote0000001",
}
SETTINGS = """
$wgServer = "http://" . ($_SERVER["HTTP_HOST"] ?? "127.0.0.1");
$wgSQLiteDataDir = getenv("MW_TEST_DATA");
$wgGroupPermissions["*"]["read"] = getenv("MW_TEST_PRIVATE") !== "1";
$wgGroupPermissions["*"]["edit"] = false;
$wgEnableBotPasswords = true;
$wgJobRunRate = 0;
"""
PAGES = {
    "Deploy Guide": (
        "Admin",
        "Deployments go out on '''Tuesdays''' through the [[Pipeline|release pipeline]].\n\n"
        "== Rollback ==\nA rollback restores the previous build within ten minutes.\n\n"
        "=== Canary ===\nThe canary receives the platypus traffic first.\n",
    ),
    "Pager Rotation": ("Bob", "The pager rotates among the quokkas weekly.{{Citation needed}}\n"),
    "Key Escrow": (
        "Admin",
        "Escrowed keys live in the wombat vault.\n== Access ==\nTwo officers.\n",
    ),
    "Test Wiki:Policy": ("Admin", "Only sysops read the narwhal policy.\n"),
}


@dataclass(frozen=True)
class WikiTemplate:
    """The installed wiki: its settings file and the SQLite data every test copies."""

    settings: Path
    data: Path


class WikiServer:
    """One copy of the template wiki, served on a loopback port until `stop`."""

    def __init__(self, template: WikiTemplate, folder: Path, *, private: bool = False) -> None:
        self.template = template
        self.folder = folder
        self.data = folder / "data"
        self.log = folder / "server.log"
        self.private = private
        self.process: subprocess.Popen[bytes] | None = None
        self.base = ""

    @property
    def api(self) -> str:
        return f"{self.base}/api.php"

    def env(self) -> dict[str, str]:
        return {
            **os.environ,
            "MW_CONFIG_FILE": str(self.template.settings),
            "MW_TEST_DATA": str(self.data),
            "MW_TEST_PRIVATE": "1" if self.private else "0",
        }

    def start(self) -> WikiServer:
        """Serves the copy on a port of the system's choosing, or on the port it had."""
        if not self.data.exists():
            shutil.copytree(self.template.data, self.data)
        address = self.base.removeprefix("http://") or "127.0.0.1:0"
        before = len(self._started())
        self.process = subprocess.Popen(
            ["php", "-S", address, "-t", str(MEDIAWIKI)],
            env=self.env(),
            stdout=subprocess.DEVNULL,
            stderr=self.log.open("ab"),
        )
        wait_for(
            lambda: len(self._started()) > before,
            process=self.process,
            what="php -S to start",
            timeout_s=30,
        )
        assert self.process.poll() is None, self.log.read_text()
        started = self._started()
        assert len(started) > before, "php -S did not start"
        self.base = started[-1]
        return self

    def restart(self, *, private: bool) -> None:
        """The same wiki on the same address, now private (or public)."""
        self.stop()
        self.private = private
        self.start()

    def _started(self) -> list[str]:
        text = self.log.read_text() if self.log.exists() else ""
        return re.findall(r"Development Server \((http://127\.0\.0\.1:\d+)\) started", text)

    def stop(self) -> None:
        """Stops the server by its PID (SIGTERM, then SIGKILL)."""
        if self.process is None or self.process.poll() is not None:
            return
        os.kill(self.process.pid, signal.SIGTERM)
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.kill(self.process.pid, signal.SIGKILL)
            self.process.wait()

    def requests(self) -> list[str]:
        """The request lines the server logged (`GET /api.php?...`), oldest first."""
        return re.findall(r"\[\d{3}\]: ((?:GET|POST) \S+)", self.log.read_text())

    def session(self, user: str = "Admin") -> WikiSession:
        return WikiSession(self.api, f"{user}@footnote", BOT_PASSWORDS[user])


class WikiSession:
    """An editor logged in with a bot password, writing through the API."""

    def __init__(self, api: str, user: str, password: str) -> None:
        self.api = api
        self.client = httpx.Client(timeout=60)
        token = self._get(meta="tokens", type="login")["query"]["tokens"]["logintoken"]
        login = self._post(action="login", lgname=user, lgpassword=password, lgtoken=token)
        assert login["login"]["result"] == "Success", login
        self.csrf = self._get(meta="tokens")["query"]["tokens"]["csrftoken"]

    def edit(self, title: str, text: str) -> int:
        """Writes the page; its new revision id."""
        answer = self._post(action="edit", title=title, text=text, token=self.csrf, bot="1")
        assert answer.get("edit", {}).get("result") == "Success", answer
        return int(answer["edit"].get("newrevid") or answer["edit"]["pageid"])

    def delete(self, title: str) -> None:
        answer = self._post(action="delete", title=title, token=self.csrf)
        assert "delete" in answer, answer

    def move(self, title: str, to: str) -> None:
        answer = self._post(action="move", **{"from": title}, to=to, token=self.csrf)
        assert "move" in answer, answer

    def close(self) -> None:
        self.client.close()

    def _get(self, **params: str) -> Any:
        query = {"action": "query", "format": "json", "formatversion": "2", **params}
        return self.client.get(self.api, params=query).json()

    def _post(self, **params: str) -> Any:
        data = {"format": "json", "formatversion": "2", **params}
        return self.client.post(self.api, data=data).json()


def _php(template: WikiTemplate, script: str, *args: str) -> None:
    env = {
        **os.environ,
        "MW_CONFIG_FILE": str(template.settings),
        "MW_TEST_DATA": str(template.data),
    }
    done = subprocess.run(
        ["php", str(MEDIAWIKI / "maintenance" / script), *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, f"{script}: {done.stdout}{done.stderr}"


def install(folder: Path) -> WikiTemplate:
    """Installs the wiki into `folder` (install.php, SQLite), then its users and pages."""
    assert shutil.which("php") and (MEDIAWIKI / "maintenance" / "install.php").is_file(), (
        "Debian's mediawiki and php-sqlite3 packages are needed (./dev test installs them)"
    )
    template = WikiTemplate(settings=folder / "LocalSettings.php", data=folder / "data")
    done = subprocess.run(
        ["php", str(MEDIAWIKI / "maintenance" / "install.php"), "--dbtype", "sqlite",
         "--dbpath", str(template.data), "--dbname", "wiki", "--server", "http://127.0.0.1",
         "--scriptpath", "", "--confpath", str(folder), "--pass", ADMIN_PASSWORD, "--skins", "",
         "Test Wiki", "Admin"],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    with template.settings.open("a") as handle:
        handle.write(SETTINGS)
    _php(template, "createAndPromote.php", "Bob", "Bob-pass-3141592653")
    grants = "basic,highvolume,editpage,createeditmovepage,delete"
    for user, password in BOT_PASSWORDS.items():
        _php(
            template,
            "createBotPassword.php",
            "--appid",
            "footnote",
            "--grants",
            grants,
            user,
            password,
        )
    (folder / "seed").mkdir()
    server = WikiServer(template, folder / "seed")
    server.data = template.data
    server.start()
    try:
        sessions = {user: server.session(user) for user in BOT_PASSWORDS}
        for title, (user, text) in PAGES.items():
            sessions[user].edit(title, text)
    finally:
        server.stop()
    return template


@pytest.fixture(scope="session")
def wiki_template(tmp_path_factory: pytest.TempPathFactory) -> WikiTemplate:
    """The wiki installed once for the whole run; tests serve copies of it."""
    return install(tmp_path_factory.mktemp("mediawiki"))


def serve(template: WikiTemplate, folder: Path, *, private: bool = False) -> Iterator[WikiServer]:
    """A fixture's body: a copy of the wiki served for one test, stopped after it."""
    folder.mkdir(parents=True, exist_ok=True)
    server = WikiServer(template, folder, private=private).start()
    try:
        yield server
    finally:
        server.stop()
