"""Holding a request at a loopback stub, so a test can kill the client while it waits: the
one mechanism the GitHub, GitLab, Drive and Atlassian stubs share."""

from __future__ import annotations

import re
import threading


class RequestHold:
    """`hold`: a pattern (`re.fullmatch`) for the requests to hold; `held`: what was held,
    as the stub records requests; `arrived`: set by the first; `released`: set to let them
    go. A stub calls `catches` under its lock, once a request's credentials pass, and
    `wait_if` outside it."""

    def __init__(self) -> None:
        self.hold: str | None = None
        self.held: list[str] = []
        self.arrived = threading.Event()
        self.released = threading.Event()

    def catches(self, key: str, request: str) -> bool:
        """Whether `key` matches the pattern; a match is recorded as `request`."""
        if self.hold is None or re.fullmatch(self.hold, key) is None:
            return False
        self.held.append(request)
        self.arrived.set()
        return True

    def wait_if(self, held: bool) -> None:
        if held:
            self.released.wait(60)

    def let_go(self) -> None:
        self.hold = None
        self.released.set()
