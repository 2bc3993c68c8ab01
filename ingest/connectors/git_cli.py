"""Running the `git` command for a connector: a fixed argv (never a shell), a time limit, the
repository's own hooks and helpers switched off, and git's complaint turned into one line.

A repository is data, not code to run: its config could name an fsmonitor command, a
pager, hooks, or a signature program that `git log` would start. Only commands that read
objects (ls-tree, cat-file, log, diff-tree, rev-parse) run against it, with those settings
overridden; the user's and the system's git config are not read, so a credential helper or
alias there cannot change what runs either. Fetches speak only the protocols a connector
allows (`GIT_ALLOW_PROTOCOL`), so a URL cannot reach `ext::` commands or local files.
"""

from __future__ import annotations

import ast
import os
import subprocess
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

from footnote.ingest.connectors.base import ConnectorError

GIT_TIMEOUT_S = 120.0
"""Seconds for one git command that reads the repository."""
FETCH_TIMEOUT_S = 600.0
"""Seconds for a clone or fetch of a remote repository."""
REMOTE_PROTOCOLS = "https:ssh"
"""What a clone URL may be fetched over: never `file`, `ext` or `fd`."""
_SAFE_CONFIG = (
    "core.fsmonitor=false",
    "core.hooksPath=/dev/null",
    "core.pager=cat",
    "core.quotePath=true",
    "log.showSignature=false",
    "diff.external=",
    "http.followRedirects=false",
    "submodule.recurse=false",
)


class GitFailed(ConnectorError):
    """git refused or failed; the message is git's own last line."""


def git_env(protocols: str = REMOTE_PROTOCOLS, ceiling: Path | None = None) -> dict[str, str]:
    """The environment git runs in: no prompt, no user or system config, C messages."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_") and k != "SSH_ASKPASS"}
    env.update(
        GIT_TERMINAL_PROMPT="0",
        GIT_SSH_COMMAND="ssh -o BatchMode=yes",  # a key or nothing: never a prompt
        GIT_CONFIG_NOSYSTEM="1",
        GIT_CONFIG_GLOBAL=os.devnull,
        GIT_ALLOW_PROTOCOL=protocols,
        GIT_OPTIONAL_LOCKS="0",
        GIT_NO_REPLACE_OBJECTS="1",
        LC_ALL="C",
    )
    if ceiling is not None:  # never discover a repository above the one named
        env["GIT_CEILING_DIRECTORIES"] = str(ceiling)
    return env


def git_argv(where: Path, args: Sequence[str]) -> list[str]:
    """git with the repository's code-running settings off. The repository is named by the
    operator (or held to their folders), and nothing its config names is run, so git's
    ownership check (`safe.directory`) is settled for it here: a repository another user
    owns is read like any other file they share."""
    settings = [part for item in _SAFE_CONFIG for part in ("-c", item)]
    trusted = ["-c", f"safe.directory={where}"]
    return ["git", "--no-pager", *settings, *trusted, "-C", str(where), *args]


def run_git(
    where: Path,
    args: Sequence[str],
    *,
    timeout: float = GIT_TIMEOUT_S,
    protocols: str = REMOTE_PROTOCOLS,
) -> bytes:
    """git's output for `args` in the repository at `where`; GitFailed with git's last
    line of complaint when it fails, is missing, or runs past `timeout`."""
    try:
        done = subprocess.run(
            git_argv(where, args),
            capture_output=True,
            timeout=timeout,
            env=git_env(protocols, where.parent),
            stdin=subprocess.DEVNULL,
            check=False,
        )
    except FileNotFoundError:
        raise GitFailed("git is not installed (the git connector runs the git command)") from None
    except subprocess.TimeoutExpired:
        raise GitFailed(f"git {args[0]} took more than {timeout:g} s") from None
    if done.returncode != 0:
        raise GitFailed(f"git {args[0]} failed: {last_line(done.stderr)}")
    return done.stdout


def stream_git(
    where: Path, args: Sequence[str], *, timeout: float = GIT_TIMEOUT_S
) -> Iterator[bytes]:
    """git's output line by line, so a reader may stop early (the process is then ended).
    It ends by itself after `timeout` seconds: what was read by then is what it gives."""
    try:
        process = subprocess.Popen(
            git_argv(where, args),
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            stdin=subprocess.DEVNULL,
            env=git_env(ceiling=where.parent),
        )
    except FileNotFoundError:
        raise GitFailed("git is not installed (the git connector runs the git command)") from None
    assert process.stdout is not None
    deadline = time.monotonic() + timeout
    try:
        for line in process.stdout:
            if time.monotonic() > deadline:
                return
            yield line
    finally:
        process.kill()
        process.stdout.close()
        process.wait()  # killed: it ends at once


def last_line(stderr: bytes) -> str:
    lines = [line.strip() for line in stderr.decode("utf-8", "replace").splitlines()]
    lines = [line for line in lines if line and not line.startswith("hint:")]
    return (lines[-1] if lines else "no message")[:300]


def unquote_path(line: bytes) -> bytes:
    """A path as `git log --name-only` prints it: C-quoted (octal escapes, ASCII only, with
    `core.quotePath`) when it holds anything unusual, else as it is."""
    if line.startswith(b'"') and line.endswith(b'"'):
        try:
            value = ast.literal_eval("b" + line.decode("ascii"))
        except (ValueError, SyntaxError, UnicodeDecodeError):
            return line
        if isinstance(value, bytes):
            return value
    return line
