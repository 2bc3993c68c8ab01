"""Files and folders that hold document text (or the names of documents) are the owner's
alone: folders 0700, files 0600.

An index holds every chunk's text, its sources and their access groups; the embedding cache
and `sources.json` sit beside it. Left to the process umask (022 on most systems) they
would be world-readable, so an unprivileged local user could read a restricted document.
Changing the umask is no answer for a library embedded in other programs: these helpers set
the modes of what Footnote itself writes, and tighten what an older Footnote left behind.
"""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Callable
from pathlib import Path

PRIVATE_DIR = 0o700
PRIVATE_FILE = 0o600
OTHERS_READ_WRITE = 0o066
"""A folder with none of these bits lets no one else list it or change it."""
OTHERS_ANY = 0o077
STATE_ENV = "FOOTNOTE_STATE_DIR"


def state_dir() -> Path:
    """The user's own Footnote folder: $FOOTNOTE_STATE_DIR, else $XDG_STATE_HOME/footnote,
    else ~/.local/state/footnote."""
    if os.environ.get(STATE_ENV):
        return Path(os.environ[STATE_ENV])
    base = os.environ.get("XDG_STATE_HOME")
    return (Path(base) if base else Path.home() / ".local" / "state") / "footnote"


def private_dir(path: str | Path) -> Path:
    """`path` as a folder of mode 0700, made with its missing parents (each 0700 too), or
    tightened when it already exists. Parents that exist are left as they are."""
    path = Path(path)
    missing: list[Path] = []
    for folder in (path, *path.parents):
        if folder.exists() or folder.is_symlink():
            break
        missing.append(folder)
    for folder in reversed(missing):
        folder.mkdir(mode=PRIVATE_DIR, exist_ok=True)  # another process may have just made it
    if not path.is_dir():
        raise NotADirectoryError(f"{path} is not a folder")
    for folder in [path, *missing]:
        _tighten(str(folder), PRIVATE_DIR, stat.S_ISDIR, follow=folder == path)
    return path


def private_file(path: str | Path) -> Path:
    """`path` as a regular file of mode 0600: made empty if missing, tightened if wider.
    Made before SQLite opens it, so its journal files, which copy its mode, are private
    too. A file already private is left untouched (it may be another user's, read only)."""
    path = Path(path)
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    with contextlib.suppress(FileExistsError):
        os.close(os.open(path, flags, PRIVATE_FILE))
    _tighten(str(path), PRIVATE_FILE, stat.S_ISREG)
    return path


def write_private_text(path: str | Path, text: str) -> None:
    """Write `text` (UTF-8) to `path`, mode 0600 from the moment it exists."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC
    descriptor = os.open(path, flags, PRIVATE_FILE)
    os.fchmod(descriptor, PRIVATE_FILE)  # one left before with a wider mode
    with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
        handle.write(text)


def make_private(root: str | Path) -> None:
    """Every folder under `root` (and `root`) 0700, every regular file 0600. Links are
    neither followed nor changed; what vanishes meanwhile (a pruned version) is skipped.
    Files written by libraries that take no mode (FAISS, NumPy, SQLite) become private
    this way before a version is published, and an index an older Footnote wrote
    world-readable is tightened on its next write."""
    for folder, folders, files in os.walk(root):
        _tighten(folder, PRIVATE_DIR, stat.S_ISDIR)
        for name in folders:
            _tighten(os.path.join(folder, name), PRIVATE_DIR, stat.S_ISDIR)
        for name in files:
            _tighten(os.path.join(folder, name), PRIVATE_FILE, stat.S_ISREG)


def _tighten(path: str, mode: int, is_kind: Callable[[int], bool], *, follow: bool = False) -> None:
    """Set `mode` on `path` when it is of the kind and lets anyone else read or write it: a
    path already private is never touched, so a reader that is not the owner changes
    nothing. A folder others may only pass through (0711, as `serve --production` leaves
    its data folder's parents for the database's own user) lists and gives away nothing, so
    it stays. A link is left alone unless `follow` (a folder named by its caller)."""
    try:
        info = os.stat(path) if follow else os.lstat(path)
        if not is_kind(info.st_mode):
            return
        others = OTHERS_READ_WRITE if stat.S_ISDIR(info.st_mode) else OTHERS_ANY
        if stat.S_IMODE(info.st_mode) & others:
            os.chmod(path, mode)
    except FileNotFoundError:
        pass
