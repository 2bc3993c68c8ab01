"""URL sources: a crawl of a small site served on loopback by its own process (links,
sitemap, robots.txt, a redirect, ETag 304s on re-sync), citations to the page URL with its
section anchor, and the address guard: loopback refused unless allowed. Both backends."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from footnote.ingest import corpus
from footnote.ingest.documents import ParseError
from footnote.ingest.roots import SourceRoot
from footnote.ingest.web import FetchRefused, check_address
from footnote.tools.search import SearchRequest, search
from tests.conftest import REPO, Locate, RunCli

PAGES = {
    "index.html": '<html><head><title>Home</title></head><body><main><h1 id="home">Home</h1>'
    '<p>The capybara site starts here.</p><a href="/a.html">A</a> <a href="/old.html">B</a>'
    ' <a href="/private/secret.html">S</a> <a href="http://other.invalid/x.html">X</a>'
    "</main></body></html>",
    "a.html": '<html><body><main><h1 id="a">Page A</h1><h2 id="feeding">Feeding</h2>'
    "<p>Capybaras eat grass in the afternoon.</p></main></body></html>",
    "b.html": '<html><body><main><h1 id="b">Page B</h1><p>Capybara baths are warm.</p>'
    "</main></body></html>",
    "c.html": '<html><body><main><h1 id="c">Page C</h1><p>Only the sitemap names this capybara '
    "page.</p></main></body></html>",
    "private/secret.html": "<html><body><p>The capybara secret.</p></body></html>",
    "robots.txt": "User-agent: *\nDisallow: /private/\n",
}


@pytest.fixture
def site(tmp_path: Path) -> Iterator[tuple[str, Path, Path]]:
    root = tmp_path / "site"
    for name, text in PAGES.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    log = tmp_path / "requests.log"
    proc = subprocess.Popen(
        [sys.executable, str(REPO / "tests" / "site_server.py"), str(root), str(log)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        base = f"http://127.0.0.1:{int(proc.stdout.readline())}"
        (root / "sitemap.xml").write_text(
            '<?xml version="1.0"?><urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">'
            f"<url><loc>{base}/c.html</loc></url></urlset>"
        )
        yield base, root, log
    finally:
        os.kill(proc.pid, signal.SIGTERM)
        proc.wait(timeout=10)


def test_crawl_sync_and_conditional_requests(locate: Locate, site: tuple[str, Path, Path]) -> None:
    base, root, log = site
    index = locate()
    host = base.split("://")[1]
    summary = corpus.add(index, [base + "/index.html"], crawl={"max_depth": 2}, allow_private=True)
    assert sorted(summary.added) == [
        f"{host}/{p}" for p in ("a.html", "b.html", "c.html", "index.html")
    ]
    assert summary.skipped[f"{base}/private/secret.html"] == "disallowed by robots.txt"
    assert "another host" in summary.skipped["http://other.invalid/x.html"]
    hits = search(SearchRequest(query="capybaras eat grass", index_dir=index, k=1, stage="bm25"))
    assert hits[0].chunk.url == f"{base}/a.html#feeding"
    redirected = search(
        SearchRequest(query="capybara baths warm", index_dir=index, k=1, stage="bm25")
    )
    assert redirected[0].chunk.url == f"{base}/b.html#b"

    log.write_text("")
    again = corpus.sync(index, allow_private=True)
    assert again.added == [] and again.deleted == [] and again.embedded_chunks == 0
    statuses = log.read_text().split()
    assert "/a.html" in statuses and statuses[statuses.index("/a.html") + 1] == "304"

    (root / "a.html").write_text(PAGES["a.html"].replace("grass", "melons"))
    (root / "c.html").unlink()
    changed = corpus.sync(index, allow_private=True)
    assert changed.updated == [f"{host}/a.html"] and changed.deleted == [f"{host}/c.html"]
    assert not search(SearchRequest(query="grass", index_dir=index, k=5, stage="bm25"))


def test_allow_private_is_remembered_with_the_source(
    locate: Locate, site: tuple[str, Path, Path], run_cli: RunCli
) -> None:
    """`add --allow-private` is kept with the site: `sources` shows it, a plain `sync`
    fetches the site the same way, and the skipped pages are listed without --json."""
    base, root, _ = site
    index = locate()
    added = run_cli(
        "add", base + "/index.html", "--crawl", "--allow-private", "--index", index, "--quiet"
    )
    assert added.returncode == 0, added.stderr
    assert f"  skipped: {base}/private/secret.html: disallowed by robots.txt" in added.stdout
    assert "  skipped: http://other.invalid/x.html: another host" in added.stdout
    listed = run_cli("sources", "--index", index)
    assert "private addresses allowed (--allow-private)" in listed.stdout
    (root / "b.html").write_text(PAGES["b.html"].replace("warm", "hot"))
    synced = run_cli("sync", "--index", index, "--quiet")  # no --allow-private this time
    assert synced.returncode == 0, synced.stdout + synced.stderr
    assert "loopback" not in synced.stdout
    assert corpus.sources(index)["sources"][0]["allow_private"] is True
    # A run may still decide otherwise (the served indexer passes its operator's setting).
    refused = corpus.sync(index, allow_private=False)
    assert "loopback, private or link-local" in refused.failed[base + "/index.html"]


def test_loopback_is_refused_by_default(locate: Locate, site: tuple[str, Path, Path]) -> None:
    base, _, log = site
    index = locate()
    summary = corpus.add(index, [base + "/a.html"])
    assert "loopback, private or link-local" in summary.failed[base + "/a.html"]
    assert summary.added == [] and not log.exists()  # not one request reached the site
    with pytest.raises(FetchRefused):
        check_address("localhost", 80, allow_private=False)
    for address in ("10.1.2.3", "169.254.169.254", "192.168.0.1", "::1"):
        with pytest.raises(FetchRefused):
            check_address(address, 80, allow_private=False)


def test_each_redirect_hop_is_checked(
    site: tuple[str, Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """With the first host allowed (standing in for a public one), a redirect to a host that
    resolves to loopback is refused before any request reaches it."""
    from footnote.ingest import web

    real = web.check_address

    def first_hop_public(host: str, port: int, allow_private: bool) -> str:
        return real(host, port, allow_private=allow_private or host == "127.0.0.1")

    monkeypatch.setattr(web, "check_address", first_hop_public)
    base, _, log = site
    fetcher = web.Fetcher(allow_private=False, max_bytes=100_000)
    try:
        assert fetcher.get(base + "/a.html").status == 200
        with pytest.raises(FetchRefused, match="localhost resolves to"):
            fetcher.get(base + "/away.html")
    finally:
        fetcher.close()
    assert log.read_text().split() == ["/a.html", "200", "/away.html", "302"]


def test_a_malformed_redirect_and_failing_links_cost_one_page_each(
    locate: Locate, site: tuple[str, Path, Path], tmp_path: Path
) -> None:
    """A redirect to `http:\\\\x\\y` is that page's failure, not an exception out of the whole
    add (a folder added with it still comes in); failed pages count toward max_pages, and a
    crawl that keeps failing stops, keeping what its last sync gave."""
    from footnote.ingest import web

    base, root, log = site
    links = "".join(f'<a href="/missing-{n}.html">m</a>' for n in range(300))
    (root / "failing.html").write_text(
        f'<html><body><h1>Failing</h1><p>A capybara hub.</p><a href="/malformed.html">x</a>'
        f"{links}</body></html>"
    )
    folder = tmp_path / "notes"
    folder.mkdir()
    (folder / "note.md").write_text("# Note\n\nA capybara note from a folder.\n")
    fetcher = web.Fetcher(allow_private=True, max_bytes=100_000)
    try:
        with pytest.raises(ParseError, match="malformed|InvalidURL"):
            fetcher.get(base + "/malformed.html")
    finally:
        fetcher.close()
    log.unlink()
    index = locate()
    summary = corpus.add(
        index,
        [base + "/failing.html", folder],
        crawl={"max_pages": 5, "max_depth": 2},
        allow_private=True,
    )
    assert "note.md" in summary.added and "127.0.0.1" in " ".join(summary.added)
    assert any("InvalidURL" in r or "malformed" in r for r in summary.failed.values()), summary
    pages = [p for p in log.read_text().split()[::2] if p not in ("/robots.txt", "/sitemap.xml")]
    assert len(pages) == 5, pages  # the start page, the bad redirect, three missing pages

    # Every link fails: the crawl stops at MAX_FAILED_PAGES, not at its 1,000 pages, and
    # answers None, so the root keeps the documents of its last sync.
    (root / "failing.html").write_text(
        "<html><body><p>Hub.</p>"
        + "".join(f'<a href="/malformed.html?n={n}">m</a>' for n in range(300))
        + "</body></html>"
    )
    crawl = SourceRoot(id=base + "/failing.html", kind="site", label="site",
                       crawl={"max_pages": 1000, "max_depth": 2})  # fmt: skip
    failed: dict[str, str] = {}
    log.unlink()
    got = web.page_candidates(crawl, {}, failed, {}, max_bytes=100_000, allow_private=True)
    assert got is None and "the crawl stopped" in failed[crawl.id], failed
    fetched = [p for p in log.read_text().split()[::2] if p not in ("/robots.txt", "/sitemap.xml")]
    assert fetched[:2] == ["/failing.html", "/c.html"]  # the start page, the sitemap's page
    assert len(fetched) == 2 + web.MAX_FAILED_PAGES  # then the failures, up to the bound


def test_the_guard_reads_the_ipv4_address_inside_ipv6_forms() -> None:
    import ipaddress

    from footnote.ingest.web import is_public

    for private in ("::127.0.0.1", "64:ff9b::7f00:1", "2002:7f00:1::", "224.0.0.1", "ff02::1",
                    "::ffff:10.0.0.1", "64:ff9b::a00:1", "2002:c0a8:1::"):  # fmt: skip
        assert not is_public(ipaddress.ip_address(private)), private
        with pytest.raises(FetchRefused):
            check_address(private, 80, allow_private=False)
    for public in ("93.184.215.14", "2606:4700:4700::1111", "64:ff9b::5db8:d70e"):
        assert is_public(ipaddress.ip_address(public)), public


def test_a_name_with_any_private_answer_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    """A DNS answer that mixes a public and a loopback address is refused whole, and an
    accepted name is connected to at the very address that was checked."""
    import socket

    from footnote.ingest import web

    answers = {
        "mixed.test": ["93.184.215.14", "127.0.0.1"],
        "public.test": ["93.184.215.14"],
        "mapped.test": ["::ffff:10.0.0.1"],
    }

    def resolve(host: str, port: int, *args: object, **kwargs: object) -> list[tuple]:
        family = socket.AF_INET
        return [(family, socket.SOCK_STREAM, 6, "", (a, port)) for a in answers[host]]

    monkeypatch.setattr(web.socket, "getaddrinfo", resolve)
    with pytest.raises(FetchRefused, match="127.0.0.1"):
        check_address("mixed.test", 80, allow_private=False)
    with pytest.raises(FetchRefused):
        check_address("mapped.test", 80, allow_private=False)
    assert check_address("public.test", 80, allow_private=False) == "93.184.215.14"
    assert check_address("mixed.test", 80, allow_private=True) == "93.184.215.14"
