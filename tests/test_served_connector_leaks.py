"""The served leak test over connector documents whose readers come from the source, with a
permission change while the server runs (issue 42).

The index is read from a loopback stand-in for GitHub's REST API (tests/github_stub.py):
private repositories whose issues are readable by the collaborators and teams the stub lists,
mapped to the served team's users through $FOOTNOTE_IDENTITY_MAP, one repository only carol
reads, one only an unmapped login reads (admins only, then), and a public one. Each runtime
(`footnote serve`'s dev runtime, and production: Aegra on PostgreSQL + Redis) serves it with
an API-key team (the dev runtime also with a JWT team), and at least 1,000 random probes run
against it. Half-way, bob is removed as a collaborator at the source and `footnote sync`
runs in its own process while probes keep coming; from the moment the sync has published,
nothing of the repository may reach bob in any answer, citation, stream event, thread state
or thread search (threads he wrote before included), while everyone else sees exactly what
the source allows, and the running server answers from the new version (a public issue
added with the change is found) without a restart. Then every other door (MCP, the OpenAI
endpoint, the global route) is walked before and after another reader is removed.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import openai
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from langgraph_sdk.client import SyncLangGraphClient
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from footnote.ingest import corpus
from footnote.server.langgraph_dev import ServerFailed, running_server
from footnote.server.production import Deployment, ProductionError, running_deployment
from footnote.store.backends import current_version
from tests.conftest import footnote_command
from tests.github_stub import GithubStub, StubIssue, StubRepo, stamp
from tests.leak_probes import (
    GENERIC_QUESTIONS,
    Indexes,
    Probe,
    Prober,
    probes,
    refusal,
)
from tests.served import GRAPH_ID, USERS, Listener, Team, api_key_team, jwt_team, sdk_client

pytestmark = pytest.mark.integration

TOKEN = "ghp_stubLEAKtestTOKENneverShown0123456789"
PROVIDER_KEY = "sk-footnote-test-provider-key-never-sent"
PROBES = 1000
BATCH = 25
LOGINS = {"octo": "alice", "bobcat": "bob", "carolyn": "carol"}
"""GitHub logins of the served users (dave has none; root is an admin)."""
IDENTITY_MAP = {
    **{f"github:{login}": user for login, user in LOGINS.items()},
    "github-team:acme/platform": "engineering",
}
TEAMS = {"platform": ("alice",)}
"""The GitHub teams the map names, and the served users in their Footnote group."""


@dataclass(frozen=True)
class Issue:
    repo: str
    number: int
    title: str
    body: str
    question: str
    markers: tuple[str, ...]
    """Phrases found only in this issue (and in no question); empty for a public one."""
    comment: tuple[str, str] | None = None
    """(author, text) of a comment."""

    @property
    def source(self) -> str:
        return f"{self.repo}/issues/{self.number}"


ISSUES = (
    Issue(
        "acme/vault",
        1,
        "Custodian handover",
        "The vault keys pass to the next custodian by wombat rotation every fortnight.",
        "How often do the vault keys pass to the next custodian?",
        ("wombat rotation", "every fortnight"),
    ),
    Issue(
        "acme/vault",
        2,
        "Escrow copies",
        "Escrow copies of the signing key sit with the numbat notary downtown.",
        "Who holds the escrow copies of the signing key?",
        ("numbat notary", "quokka courier"),
        ("bobcat", "The quokka courier carries the escrow backup on Thursdays."),
    ),
    Issue(
        "acme/ledger",
        1,
        "Quarterly close",
        "The quarterly ledger closes only after the pangolin auditor signs the axolotl form.",
        "When does the quarterly ledger close?",
        ("pangolin auditor", "axolotl form"),
    ),
    Issue(
        "acme/sealed",
        1,
        "Break-glass credentials",
        "The break-glass credentials are sealed inside the narwhal cipher box.",
        "Where are the break-glass credentials sealed?",
        ("narwhal cipher",),
    ),
    Issue(
        "acme/handbook",
        1,
        "Laptop requests",
        "Laptops are requested through the tapir portal and arrive within a week.",
        "How do I request a new laptop?",
        (),
    ),
)
ADDED = Issue(
    "acme/handbook",
    2,
    "First day",
    "New hires follow the okapi checklist on their first day.",
    "What do new hires follow on their first day?",
    (),
)
"""A public issue opened with the permission change: found once the server reads the new
version."""
REPOS = {
    "acme/vault": StubRepo("acme", "vault", True, ["octo", "bobcat"], ["platform"]),
    "acme/ledger": StubRepo("acme", "ledger", True, ["carolyn", "ledgerbot"]),
    "acme/sealed": StubRepo("acme", "sealed", True, ["mallory"]),
    "acme/handbook": StubRepo("acme", "handbook", False),
}
SOURCES = [f"github://{name}" for name in REPOS]
QUESTIONS = [i.question for i in (*ISSUES, ADDED)] + list(GENERIC_QUESTIONS)
Readers = dict[str, frozenset[str] | None]
"""Repository -> the served users who may read it (None: everyone)."""


def start_stub() -> GithubStub:
    stub = GithubStub(TOKEN).start()
    for name, shape in REPOS.items():
        stub.repos[name] = StubRepo(
            shape.owner, shape.name, shape.private, list(shape.collaborators), list(shape.teams)
        )
    for minute, issue in enumerate(ISSUES, start=1):
        repo = stub.repos[issue.repo]
        author = next(iter(repo.collaborators), "octo")
        repo.issues[issue.number] = StubIssue(
            issue.number, issue.title, issue.body, author, stamp(minute)
        )
        if issue.comment:
            stub.add_comment(repo, issue.number, *issue.comment, minute=minute + 10)
    return stub


def readers_at(stub: GithubStub) -> Readers:
    """Who may read each repository by the stub's state now, as the identity map names them."""
    readers: Readers = {}
    for name, repo in stub.repos.items():
        if not repo.private:
            readers[name] = None
            continue
        users = {LOGINS[login] for login in repo.collaborators if login in LOGINS}
        users |= {user for team in repo.teams for user in TEAMS.get(team, ())}
        readers[name] = frozenset(users)
    return readers


@dataclass
class Served:
    """A running server over the stub's repositories, and what the source says now."""

    runtime: str
    url: str
    clients: dict[str, SyncLangGraphClient]
    stub: GithubStub
    indexes: Indexes
    source_env: dict[str, str]
    """What `footnote add` / `sync` need to read the stub: token, API, identity map."""
    readers: Readers
    """As of the last sync that published."""
    previous: Readers = field(default_factory=dict)
    """As of the sync before it: during a sync, a reader of either may still see a text."""
    team: Team | None = None
    """The users' API keys, for the doors that are not the LangGraph API (MCP, OpenAI)."""

    def sees(self, user: str, repo: str, *, strict: bool) -> bool:
        if USERS.get(user, {}).get("admin"):
            return True
        now, before = self.readers[repo], self.previous.get(repo, frozenset())
        if now is None or user in now:
            return True
        return not strict and (before is None or user in before)

    def leaked(self, user: str, payload: Any, *, strict: bool) -> list[str]:
        """Markers of issues `user` may not see that occur anywhere in `payload`."""
        text = payload if isinstance(payload, str) else json.dumps(payload, default=str)
        return [
            m
            for issue in ISSUES
            if not self.sees(user, issue.repo, strict=strict)
            for m in issue.markers
            if m in text
        ]


def source_env(stub: GithubStub, directory: Path) -> dict[str, str]:
    """The operator's settings for reading the stub; given to `add` and `sync` only, never to
    the server, which reads the index and nothing of the source."""
    mapping = directory / "identities.json"
    mapping.write_text(json.dumps(IDENTITY_MAP))
    return {
        "GITHUB_TOKEN": TOKEN,
        "FOOTNOTE_GITHUB_API": stub.base,
        "FOOTNOTE_IDENTITY_MAP": str(mapping),
    }


def build_indexes(stub: GithubStub, env: dict[str, str], directory: Path) -> Indexes:
    """The team's index from the stub, and a trap: the same repositories made public."""
    built = []
    for name, opened in (("team", False), ("trap", True)):
        private = {full: repo.private for full, repo in stub.repos.items()}
        if opened:
            for repo in stub.repos.values():
                repo.private = False
        with pytest.MonkeyPatch.context() as patch:
            for key, value in env.items():
                patch.setenv(key, value)
            summary = corpus.add(directory / name / "index", SOURCES, allow_private=True)
        for full, repo in stub.repos.items():
            repo.private = private[full]
        assert not summary.failed and not summary.restricted, summary
        assert len(summary.added) == len(ISSUES), summary.added
        built.append(directory / name / "index")
    return Indexes(built[0], built[1])


def runtime(name: str, index: Path, env: dict[str, str], log: Path) -> AbstractContextManager[Any]:
    """`footnote serve` (dev) or `footnote serve --production` over `index`, stopped by PID."""
    if name == "production":
        return running_deployment(
            index_dir=str(index),
            workdir=log.parent / "production",
            extra_env=env,
            inherit_credentials=False,
        )
    return running_server(index_dir=str(index), log=log, extra_env=env)


@pytest.fixture(scope="module", params=["dev", "production", "dev-jwt"])
def served(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Served]:
    """A stub, an index read from it and a server per runtime (an API-key team, and on the
    dev runtime also a team signed in by JWT): each server's permission changes are its own."""
    directory = tmp_path_factory.mktemp(f"connector-{request.param}")
    name, _, method = request.param.partition("-")
    stub = start_stub()
    try:
        env = source_env(stub, directory)
        indexes = build_indexes(stub, env, directory)
        team = jwt_team(directory) if method == "jwt" else api_key_team(directory)
        server_env = {**team.env, "OPENAI_API_KEY": PROVIDER_KEY}
        with runtime(name, indexes.index, server_env, directory / "server.log") as run:
            url = run.replicas[0].url if isinstance(run, Deployment) else run.url
            clients = {user: sdk_client(url, team.headers(user)) for user in USERS}
            yield Served(
                request.param, url, clients, stub, indexes, env, readers_at(stub), team=team
            )
    except (ServerFailed, ProductionError) as exc:
        pytest.fail(str(exc), pytrace=False)
    finally:
        stub.stop()


# --- the source changes ----------------------------------------------------------------------


def start_sync(served: Served) -> subprocess.Popen[str]:
    """`footnote sync` as the operator runs it, in its own process beside the server."""
    env = {**os.environ, **served.source_env, "TOKENIZERS_PARALLELISM": "false"}
    env.pop("FOOTNOTE_INDEX", None)
    return subprocess.Popen(
        [*footnote_command(), "sync", "--index", str(served.indexes.index)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def synced(served: Served, sync: subprocess.Popen[str]) -> None:
    """Wait for the sync; once it has published, what the source says now is the rule."""
    output, _ = sync.communicate(timeout=600)
    assert sync.returncode == 0, output
    assert TOKEN not in output
    served.previous, served.readers = served.readers, readers_at(served.stub)


# --- what each user sees ---------------------------------------------------------------------


def ask(client: SyncLangGraphClient, question: str, thread: str | None = None) -> Any:
    return client.runs.wait(
        thread, GRAPH_ID, input={"messages": [{"role": "user", "content": question}]}
    )


def cited(output: Any) -> set[str]:
    return {c["source"] for c in output.get("citations", [])}


def check_markers() -> None:
    """The oracle itself: each marker is in its issue's text and in no question."""
    for issue in ISSUES:
        text = issue.body + (issue.comment[1] if issue.comment else "")
        assert all(m in text for m in issue.markers), issue
        assert not any(m in q for q in QUESTIONS for m in issue.markers), issue


def check_views(served: Served, issues: tuple[Issue, ...]) -> None:
    """Each user, asking about each issue in a fresh thread: the issue is cited exactly when
    the source lets the user read it, and nothing else the user may not see shows anywhere."""

    def check(user: str) -> None:
        client = served.clients[user]
        for issue in issues:
            thread = client.threads.create()["thread_id"]
            output = ask(client, issue.question, thread)
            state = client.threads.get_state(thread)
            if served.sees(user, issue.repo, strict=True):
                assert issue.source in cited(output), (served.runtime, user, issue, output)
            else:
                assert issue.source not in cited(output), (served.runtime, user, issue)
            assert not served.leaked(user, [output, state], strict=True), (user, issue.question)

    with ThreadPoolExecutor(max_workers=len(USERS)) as pool:
        for done in [pool.submit(check, user) for user in USERS]:
            done.result()


# --- probes -----------------------------------------------------------------------------------


DURING = 40
"""Batches the sync may take; spare examples after the last strict batch run nothing."""


class Schedule:
    """What happens around each batch of probes: bob's access is revoked at the source and
    `footnote sync` starts once half the probes have run; once it has published, the views
    are checked again and every later probe is strict."""

    def __init__(self, served: Served, prober: Prober) -> None:
        self.served = served
        self.prober = prober
        self.sync: subprocess.Popen[str] | None = None
        self.version: str | None = None
        self.during = 0
        """Probes begun while the sync ran."""

    def next_batch(self) -> bool:
        """Move the run on; False once enough strict probes have run."""
        tally = self.prober.tally
        if self.sync is None and tally.probes >= PROBES // 2:
            self.version = revoke_bob(self.served)
            self.during = -tally.probes
            self.sync = start_sync(self.served)
        elif self.sync is not None and self.during < 0 and self.sync.poll() is not None:
            self.during += tally.probes
            self.published()
        return tally.strict < PROBES // 2

    def published(self) -> None:
        assert self.sync is not None
        synced(self.served, self.sync)
        assert current_version(self.served.indexes.index) != self.version, "a new version"
        assert not self.served.sees("bob", "acme/vault", strict=True)
        for client in self.served.clients.values():  # for telling history from new answers
            self.prober.before_change.update(
                t["thread_id"] for t in client.threads.search(limit=1000)
            )
        check_views(self.served, (*ISSUES, ADDED))  # the running server reads it
        self.prober.changed.set()


def run_probes(schedule: Schedule, listener: Listener) -> None:
    """Batches of random probes, eight at a time, until enough have run after the change."""
    served = schedule.served
    strategy = probes(list(USERS), QUESTIONS, served.indexes, f"http://127.0.0.1:{listener.port}")

    @settings(
        max_examples=PROBES // BATCH + DURING,
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(batch=st.lists(strategy, min_size=BATCH, max_size=BATCH))
    def probe_batch(batch: list[Probe]) -> None:
        if schedule.next_batch():
            with ThreadPoolExecutor(max_workers=8) as pool:
                for done in [pool.submit(schedule.prober.run, probe) for probe in batch]:
                    done.result()

    probe_batch()


def revoke_bob(served: Served) -> str | None:
    """bob is no longer a collaborator on acme/vault, and a public issue is opened."""
    vault, handbook = served.stub.repos["acme/vault"], served.stub.repos["acme/handbook"]
    vault.collaborators.remove("bobcat")
    handbook.issues[ADDED.number] = StubIssue(
        ADDED.number, ADDED.title, ADDED.body, "octo", stamp(60)
    )
    return current_version(served.indexes.index)


def written_before(served: Served, user: str, issue: Issue) -> str:
    """A thread in which `user` asks about `issue` and is answered from it."""
    client = served.clients[user]
    thread = str(client.threads.create()["thread_id"])
    assert issue.source in cited(ask(client, issue.question, thread)), (user, issue)
    return thread


def shown_after(served: Served, user: str, thread: str, issue: Issue) -> dict[str, list[str]]:
    """What of the issues `user` may no longer see each way of reading an earlier thread
    shows: its state, history and listing, a run continuing it, and a new question."""
    client = served.clients[user]
    reads = {
        "state": lambda: client.threads.get_state(thread),
        "history": lambda: client.threads.get_history(thread),
        "search": lambda: client.threads.search(limit=1000),
        "continue": lambda: ask(client, "and what else?", thread),
        "fresh": lambda: ask(client, issue.question),
    }
    shown = {}
    for name, read in reads.items():
        status, body = refusal(read)
        assert status in (200, 404), (name, status, body)
        shown[name] = served.leaked(user, body, strict=True)
    return shown


def leaks(shown: dict[str, list[str]]) -> dict[str, list[str]]:
    return {name: markers for name, markers in shown.items() if markers}


def test_a_revoked_reader_sees_nothing_of_the_repository_once_the_sync_publishes(
    served: Served,
) -> None:
    """≥ 1,000 probes, half before the change and half after the sync has published, some
    while it runs; zero leaks in anything answered or shown after the change, threads
    written before it included (bob's earlier thread among them), and the running server
    answers from the new version."""
    started = time.monotonic()
    check_markers()
    assert served.sees("bob", "acme/vault", strict=True), "bob reads the vault before"
    check_views(served, ISSUES)
    earlier = written_before(served, "bob", ISSUES[0])
    listener = Listener()
    schedule = Schedule(served, Prober(served.url, served.clients, served.leaked))
    try:
        run_probes(schedule, listener)
    finally:
        listener.close()
        if schedule.sync is not None and schedule.sync.poll() is None:
            schedule.sync.kill()
            schedule.sync.wait()
    prober = schedule.prober
    tally = prober.tally
    print(
        f"\n{served.runtime}: {tally.summary()}, {schedule.during} during the sync, "
        f"{time.monotonic() - started:.0f} s"
    )
    assert prober.changed.is_set(), "the sync published within the run"
    assert tally.probes >= PROBES and tally.strict >= PROBES // 2, tally.summary()
    assert tally.answered >= PROBES // 20, tally.summary()
    assert listener.received == []
    assert not tally.leaks, (tally.summary(), tally.leaks[:5])
    shown = shown_after(served, "bob", earlier, ISSUES[0])
    assert not any(shown.values()), (served.runtime, leaks(shown))


def test_a_thread_written_before_the_change_shows_none_of_it_after(served: Served) -> None:
    """carol asks about the ledger only she reads, then loses it at the source; after the
    sync her earlier thread's state, history and listing, and a run continuing it, hold none
    of the ledger's text: the publish records the revocation, and her scope carries it
    (footnote.store.revocations), so the thread is no longer hers to read."""
    (ledger,) = [i for i in ISSUES if i.repo == "acme/ledger"]
    earlier = written_before(served, "carol", ledger)
    served.stub.repos["acme/ledger"].collaborators.remove("carolyn")
    synced(served, start_sync(served))

    shown = shown_after(served, "carol", earlier, ledger)
    assert not shown.pop("fresh"), "a new question is answered from the new version"
    assert not any(shown.values()), (served.runtime, leaks(shown))


WHOLE_CORPUS = "What do these documents cover?"


def every_door(served: Served, user: str, issue: Issue) -> dict[str, Any]:
    """What each door other than the LangGraph API gives `user` for `issue`: MCP's search,
    ask, fetch and listing, the OpenAI endpoint, and a whole-corpus answer over MCP (the
    global route, which reads the entity graph's communities)."""
    assert served.team is not None
    headers, shown = served.team.headers(user), {}

    async def over_mcp() -> None:
        async with (
            create_mcp_http_client(headers=headers) as http,
            streamable_http_client(f"{served.url}/mcp", http_client=http) as (read, write, _),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            for door, tool, arguments in (
                ("mcp search", "search", {"query": issue.question, "k": 20}),
                ("mcp ask", "ask", {"question": issue.question}),
                ("mcp fetch", "fetch", {"id": issue.source}),
                ("mcp list_sources", "list_sources", {}),
                ("global route", "ask", {"question": WHOLE_CORPUS}),
            ):
                result = await session.call_tool(tool, arguments)
                content = {
                    k: v for k, v in (result.structuredContent or {}).items() if k != "query"
                }
                shown[door] = [content, [c.model_dump() for c in result.content]]

    asyncio.run(over_mcp())
    client = openai.OpenAI(
        base_url=f"{served.url}/v1", api_key=served.team.secrets[user], max_retries=0
    )
    shown["openai"] = client.chat.completions.create(
        model="footnote", messages=[{"role": "user", "content": issue.question}]
    ).model_dump_json()
    return shown


def test_every_door_shows_a_revoked_reader_nothing_after_the_sync(served: Served) -> None:
    """alice reads the vault as a collaborator and through the platform team, and both are
    taken away at the source. Before the sync MCP's search, fetch and ask and the OpenAI
    endpoint give her the vault's text (so the check can see it); after it no door does,
    a whole-corpus answer included."""
    vault = ISSUES[0]
    before = every_door(served, "alice", vault)
    for door in ("mcp search", "mcp fetch", "mcp ask", "openai"):
        assert any(m in json.dumps(before[door]) for m in vault.markers), (door, before[door])
    assert before["global route"][0].get("route") == "global", before["global route"]

    repo = served.stub.repos["acme/vault"]
    repo.collaborators.remove("octo")
    repo.collaborators.append("mallory")  # still someone's (an unmapped login's), not no one's
    repo.teams.remove("platform")
    synced(served, start_sync(served))

    assert not served.sees("alice", "acme/vault", strict=True)
    after = every_door(served, "alice", vault)
    assert after["global route"][0].get("route") == "global", after["global route"]
    shown = {door: served.leaked("alice", payload, strict=True) for door, payload in after.items()}
    assert not any(shown.values()), (served.runtime, leaks(shown))
