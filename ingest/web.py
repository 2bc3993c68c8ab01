"""Web pages as sources: one URL, or a site crawled from a start URL and its sitemap.

Fetches go through httpx with a guard: every hop (redirects included) is resolved first and
refused when any address is loopback, private, link-local or otherwise not public, unless
the operator allows it; the connection then goes to the address that was checked (the Host
header and TLS name stay the site's), so a second DNS answer cannot send it elsewhere.
Crawls stay on the start host by default, honour robots.txt, stop at depth and page limits,
and send the ETag / Last-Modified of the last fetch so an unchanged page costs a 304.
"""

from __future__ import annotations

import ipaddress
import socket
import time
import urllib.robotparser
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urldefrag, urljoin, urlsplit, urlunsplit

from footnote.ingest.candidates import Candidate
from footnote.ingest.documents import ParsedDocument, ParseError
from footnote.ingest.parsers import parse_bytes
from footnote.ingest.roots import SourceRoot
from footnote.store.types import FileRecord

USER_AGENT = "FootnoteBot/1.0 (+https://github.com/footnote-rag)"
DEFAULT_TIMEOUT = 10.0
"""Seconds per page: connecting, waiting and reading together."""
MAX_REDIRECTS = 5
_SUFFIX_BY_TYPE = {
    "text/html": ".html",
    "application/xhtml+xml": ".html",
    "text/markdown": ".md",
    "text/plain": ".txt",
    "application/pdf": ".pdf",
    "application/vnd.openxmlformats-officedocument.wordprocessingml.document": ".docx",
    "application/vnd.openxmlformats-officedocument.presentationml.presentation": ".pptx",
}


class FetchRefused(ParseError):
    """A URL the guard will not fetch; the message says why."""


@dataclass
class Page:
    url: str
    status: int
    data: bytes = b""
    content_type: str = ""
    validators: dict[str, str] | None = None


MAX_FAILED_PAGES = 20
"""Pages of one crawl that may fail before it stops (a failing site is not walked to its end):
the root then keeps the documents of its last sync."""
_NAT64 = ipaddress.ip_network("64:ff9b::/96")
_IPV4_COMPATIBLE = ipaddress.ip_network("::/96")


def is_public(ip: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    """A global unicast address, including what an IPv6 form embeds: an IPv4 address in
    `::a.b.c.d`, `::ffff:a.b.c.d`, NAT64 (`64:ff9b::/96`), 6to4 (`2002::/16`) or Teredo must
    itself be public (`64:ff9b::7f00:1` is loopback by way of a translator)."""
    if not ip.is_global or ip.is_multicast:
        return False
    if isinstance(ip, ipaddress.IPv6Address):
        embedded: list[ipaddress.IPv4Address] = []
        if ip.ipv4_mapped is not None:
            embedded.append(ip.ipv4_mapped)
        if ip in _NAT64 or ip in _IPV4_COMPATIBLE:
            embedded.append(ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF))
        if ip.sixtofour is not None:
            embedded.append(ip.sixtofour)
        if ip.teredo is not None:
            embedded.extend(ip.teredo)
        return all(is_public(v4) for v4 in embedded)
    return True


def check_address(host: str, port: int, allow_private: bool) -> str:
    """The first address `host` resolves to, once every answer is a public address."""
    try:
        answers = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        raise FetchRefused(f"cannot resolve {host}: {exc.strerror}") from exc
    addresses = [str(a[4][0]) for a in answers]
    for address in addresses:
        ip = ipaddress.ip_address(address.split("%", 1)[0])
        if not allow_private and not is_public(ip):
            raise FetchRefused(
                f"{host} resolves to {address}, a loopback, private or link-local address: "
                "not fetched (allow_private lets an operator permit it)"
            )
    return addresses[0]


class Fetcher:
    """Guarded GETs with a size and time cap per page."""

    def __init__(self, *, allow_private: bool, max_bytes: int, timeout: float = DEFAULT_TIMEOUT):
        import httpx

        self.allow_private = allow_private
        self.max_bytes = max_bytes
        self.timeout = timeout
        self.client = httpx.Client(timeout=timeout, follow_redirects=False, trust_env=False)

    def close(self) -> None:
        self.client.close()

    def get(self, url: str, validators: dict[str, str] | None = None) -> Page:
        headers = {"User-Agent": USER_AGENT}
        if validators:
            if validators.get("etag"):
                headers["If-None-Match"] = validators["etag"]
            if validators.get("last_modified"):
                headers["If-Modified-Since"] = validators["last_modified"]
        started = time.monotonic()
        for _ in range(MAX_REDIRECTS + 1):
            try:
                parts = urlsplit(url)
                port = parts.port or (443 if parts.scheme == "https" else 80)
            except ValueError as exc:  # `http:\\x\\y`, `http://[::1`, a port of letters
                raise FetchRefused(f"malformed URL {url[:200]!r}: {exc}") from None
            if parts.scheme not in ("http", "https") or not parts.hostname:
                raise FetchRefused(f"not an http(s) URL: {url[:200]}")
            address = check_address(parts.hostname, port, self.allow_private)
            pinned = address if ":" not in address else f"[{address}]"
            target = urlunsplit(
                (parts.scheme, f"{pinned}:{port}", parts.path or "/", parts.query, "")
            )
            response = self._send(
                target, {**headers, "Host": parts.netloc}, parts.hostname, started
            )
            if response[0] in (301, 302, 303, 307, 308) and response[2].get("location"):
                try:
                    url = urldefrag(urljoin(url, response[2]["location"]))[0]
                except ValueError as exc:
                    raise FetchRefused(f"malformed redirect from {url[:200]}: {exc}") from None
                continue
            status, data, found = response
            return Page(
                url=url,
                status=status,
                data=data,
                content_type=found.get("content-type", "").split(";")[0].strip().lower(),
                validators={
                    k: v
                    for k, v in (
                        ("etag", found.get("etag")),
                        ("last_modified", found.get("last-modified")),
                    )
                    if v
                }
                or None,
            )
        raise ParseError(f"more than {MAX_REDIRECTS} redirects")

    def _send(
        self, target: str, headers: dict[str, str], host: str, started: float
    ) -> tuple[int, bytes, dict[str, str]]:
        import httpx

        try:
            with self.client.stream(
                "GET", target, headers=headers, extensions={"sni_hostname": host}
            ) as response:
                chunks: list[bytes] = []
                size = 0
                for piece in response.iter_bytes():
                    size += len(piece)
                    if size > self.max_bytes:
                        raise ParseError(f"page too large: over the limit {self.max_bytes} bytes")
                    if time.monotonic() - started > self.timeout:
                        raise ParseError(f"page took more than {self.timeout:g} s to fetch")
                    chunks.append(piece)
                return response.status_code, b"".join(chunks), dict(response.headers)
        except (httpx.HTTPError, httpx.InvalidURL, ValueError) as exc:  # one page's failure
            raise ParseError(f"fetch failed: {type(exc).__name__}: {exc}") from exc


def page_name(url: str) -> str:
    """A readable source name: host and path, without the scheme."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return url.split("://", 1)[-1][:200]
    path = parts.path or "/"
    name = f"{parts.netloc}{path}"
    return name + (f"?{parts.query}" if parts.query else "")


def parse_page(data: bytes, url: str, content_type: str, source: str) -> ParsedDocument:
    """A fetched page, parsed by its type; every section's citation URL is the page URL
    with the section's anchor."""
    suffix = _SUFFIX_BY_TYPE.get(content_type) or Path(urlsplit(url).path).suffix.lower() or ".html"
    doc = parse_bytes(data, Path("page" + suffix), source)
    for section in doc.sections:
        section.url = f"{url}#{section.anchor}" if section.anchor else url
    return doc


def page_candidates(
    root: SourceRoot,
    old_pages: dict[str, FileRecord],
    failed: dict[str, str],
    skipped: dict[str, str],
    *,
    max_bytes: int,
    allow_private: bool,
    fetcher_factory: Callable[..., Fetcher] = Fetcher,
) -> list[Candidate] | None:
    """Fetch a URL root (one page) or a site root (a crawl); None when the root cannot be
    reached at all, so its documents stay as they are. Reasons go to `failed` and `skipped`
    (source or URL -> reason), as ingest reports them."""
    crawl = root.crawl or {}
    fetcher = fetcher_factory(
        allow_private=allow_private,
        max_bytes=min(max_bytes, int(crawl.get("max_bytes") or max_bytes)),
        timeout=float(crawl.get("timeout") or DEFAULT_TIMEOUT),
    )
    try:
        return _crawl(root, old_pages, failed, skipped, fetcher)
    finally:
        fetcher.close()


def _crawl(
    root: SourceRoot,
    old_pages: dict[str, FileRecord],
    failed: dict[str, str],
    skipped: dict[str, str],
    fetcher: Fetcher,
) -> list[Candidate] | None:
    site = root.kind == "site"
    crawl = root.crawl or {}
    max_depth = int(crawl.get("max_depth", 3)) if site else 0
    max_pages = int(crawl.get("max_pages", 100)) if site else 1
    same_host = bool(crawl.get("same_host", True))
    start = urldefrag(root.id)[0]
    host = urlsplit(start).netloc
    robots = _robots(fetcher, start) if site else None
    queue: deque[tuple[str, int]] = deque([(start, 0)])
    if site:
        for url in _sitemap(fetcher, start, robots):
            queue.append((url, 1))
        queue.extend((url, max_depth) for url in sorted(old_pages))  # pages known last time
    seen: set[str] = set()
    found: list[Candidate] = []
    fetched = failures = 0  # a failed page costs a fetch too: both count toward max_pages
    while queue and fetched < max_pages:
        url, depth = queue.popleft()
        if url in seen:
            continue
        seen.add(url)
        if site and same_host and urlsplit(url).netloc != host:
            skipped[url] = "another host (the crawl stays on the start host)"
            continue
        if robots is not None and not robots.can_fetch(USER_AGENT, url):
            skipped[url] = "disallowed by robots.txt"
            continue
        old = old_pages.get(url)
        fetched += 1
        try:
            page = fetcher.get(url, old.fetch if old else None)
        except ParseError as exc:
            if url == start:
                failed[root.id] = str(exc)
                return None
            failed[page_name(url)] = str(exc)
            failures += 1
            if failures >= MAX_FAILED_PAGES:
                failed[root.id] = f"{failures} pages failed: the crawl stopped"
                return None
            continue
        if page.url != url:  # redirected: the page is known by where it ended
            if page.url in seen:
                continue
            seen.add(page.url)
            old = old_pages.get(page.url)
        if page.status in (404, 410):
            if url == start and not site:
                failed[root.id] = f"HTTP {page.status}"
                return None
            continue  # gone: a page of the last sync is deleted
        if page.status == 304 and old is not None:
            found.append(_candidate(root, page.url, page, fetcher, old))
            continue
        if page.status != 200:
            if url == start:
                failed[root.id] = f"HTTP {page.status}"
                return None
            failed[page_name(url)] = f"HTTP {page.status}"
            failures += 1
            if failures >= MAX_FAILED_PAGES:
                failed[root.id] = f"{failures} pages failed: the crawl stopped"
                return None
            continue
        found.append(_candidate(root, page.url, page, fetcher, old))
        if (
            site
            and depth < max_depth
            and page.content_type in ("text/html", "application/xhtml+xml", "")
        ):
            for link in _links(page.data, page.url):
                if link not in seen:
                    queue.append((link, depth + 1))
    return found


def _candidate(
    root: SourceRoot, url: str, page: Page, fetcher: Fetcher, old: FileRecord | None
) -> Candidate:
    fetched = [page]

    def read() -> bytes:
        if fetched[0].status == 304:  # the index wants the body after all
            fetched[0] = fetcher.get(url)
        return fetched[0].data

    return Candidate(
        root=root.id,
        origin=url,
        name=page_name(url),
        label=root.label,
        read=read,
        parse=lambda data, source: parse_page(
            data, fetched[0].url, fetched[0].content_type, source
        ),
        mtime=time.time,
        access=root.access,
        fetch=page.validators or (old.fetch if old else None),
        not_modified=page.status == 304,
    )


def _robots(fetcher: Fetcher, start: str) -> urllib.robotparser.RobotFileParser | None:
    parts = urlsplit(start)
    url = urlunsplit((parts.scheme, parts.netloc, "/robots.txt", "", ""))
    parser = urllib.robotparser.RobotFileParser(url)
    try:
        page = fetcher.get(url)
    except ParseError:
        return None
    if page.status != 200:
        parser.parse([])
        return parser
    parser.parse(page.data.decode("utf-8", "replace").splitlines())
    return parser


def _sitemap(
    fetcher: Fetcher, start: str, robots: urllib.robotparser.RobotFileParser | None
) -> list[str]:
    """Page URLs from the site's sitemaps (those robots.txt names, else /sitemap.xml)."""
    from bs4 import BeautifulSoup

    parts = urlsplit(start)
    maps = list((robots.site_maps() if robots else None) or [])
    if start.endswith(".xml"):
        maps.insert(0, start)
    if not maps:
        maps = [urlunsplit((parts.scheme, parts.netloc, "/sitemap.xml", "", ""))]
    urls: list[str] = []
    for sitemap in maps[:5]:
        try:
            page = fetcher.get(sitemap)
        except ParseError:
            continue
        if page.status != 200:
            continue
        soup = BeautifulSoup(page.data, "xml")
        urls.extend(urldefrag(loc.get_text(strip=True))[0] for loc in soup.find_all("loc"))
    return urls


def _links(data: bytes, base: str) -> list[str]:
    from bs4 import BeautifulSoup

    soup = BeautifulSoup(data, "lxml")
    links: list[str] = []
    for anchor in soup.find_all("a", href=True):
        href: Any = anchor.get("href")
        try:
            url = urldefrag(urljoin(base, str(href)))[0]
        except ValueError:  # a malformed link is not followed
            continue
        if url.startswith(("http://", "https://")):
            links.append(url)
    return links
