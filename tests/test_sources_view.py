"""The Sources view of the chat page in headless Chromium against `langgraph dev`: an admin
uploads a file with access groups, adds a URL (refused: loopback, with its reason shown),
removes a document and syncs (in full, then permissions only), with progress; a non-admin
sees only what they may read and no admin controls."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from footnote.ingest.pipeline import ingest
from footnote.server.langgraph_dev import stop_server as stop
from tests.conftest import HANDBOOK
from tests.test_webui import Page, chromium, require_browser, sign_in, start_server

pytestmark = [pytest.mark.integration, pytest.mark.browser]


@pytest.fixture(scope="module")
def admin_server(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[str, dict[str, str], Path]]:
    from footnote.server.credentials import write_api_keys

    paths = require_browser()
    workdir = tmp_path_factory.mktemp("sources-view")
    corpus = workdir / "handbook"
    shutil.copytree(HANDBOOK, corpus)
    index = workdir / "index"
    assert not ingest([corpus], index).failed
    keys = write_api_keys(
        workdir / "keys.json",
        {"root": {"groups": [], "admin": True}, "alice": {"groups": ["engineering"]}},
    )
    env = {"FOOTNOTE_API_KEYS": str(workdir / "keys.json"),
           "FOOTNOTE_UPLOAD_DIR": str(workdir / "uploads")}  # fmt: skip
    process, url = start_server(index, workdir, env)
    try:
        yield url, keys, paths  # type: ignore[misc]
    finally:
        stop(process)


def open_sources(page: Page, key: str) -> None:
    page.open()
    sign_in(page, key)
    page.ready()
    page.find("#library-open").click()
    page.until(lambda: rows(page), "no documents listed")


def rows(page: Page) -> list[str]:
    """Read in one script: the table is re-rendered after each action."""
    script = "return [...document.querySelectorAll('#library-rows tr')].map(r => r.dataset.source)"
    return list(page.driver.execute_script(script))


def roots(page: Page) -> list[str]:
    script = "return [...document.querySelectorAll('#library-roots li')].map(r => r.dataset.source)"
    return list(page.driver.execute_script(script))


def status(page: Page) -> str:
    return page.find("#library-status").text


def test_admin_uploads_adds_removes_and_syncs(admin_server: tuple, tmp_path: Path) -> None:
    url, keys, paths = admin_server
    upload = tmp_path / "leave.md"
    upload.write_text("# Leave\n\nParental leave is twenty weeks for the hr team.\n")
    with chromium(paths) as driver:
        page = Page(driver, url)
        open_sources(page, keys["root"])
        page.until(lambda: page.find("#who-text").text == "Signed in as root (admin)", "no name")
        assert page.find("#library-admin").is_displayed()
        assert "keys.md" in rows(page)
        page.find("#library-file").send_keys(str(upload))
        page.find("#library-groups").send_keys("hr")
        page.find("#library-upload button[type=submit]").click()
        page.until(lambda: status(page).startswith("Done: 1 added"), "upload did not finish")
        script = "return document.querySelector('tr[data-source=\"leave.md\"]').textContent"
        assert "hr" in page.driver.execute_script(script)
        page.find("#library-url").send_keys("http://127.0.0.1:9/private.html")
        page.find("#library-add-url button[type=submit]").click()
        page.until(lambda: status(page).startswith("Done:"), "adding the URL did not finish")
        assert "loopback, private or link-local" in status(page)
        failures = page.find("#library-failures").text
        assert "http://127.0.0.1:9/private.html" in failures
        # Remove asks first; Keep leaves the document where it is.
        assert page.find('button[aria-label="Remove vpn.md"]').get_attribute("class") == (
            "secondary"
        )
        page.find('button[aria-label="Remove vpn.md"]').click()
        confirm = page.visible('[role="group"][aria-label="Remove vpn.md?"]')
        assert "Remove vpn.md from the index?" in confirm.text
        confirm.find_element("xpath", ".//button[text()='Keep']").click()
        assert "vpn.md" in rows(page) and not page.find_all(".confirm-remove")
        page.find('button[aria-label="Remove vpn.md"]').click()
        page.visible(".confirm-remove").find_element(
            "xpath", ".//button[text()='Yes, remove']"
        ).click()
        page.until(lambda: "vpn.md" not in rows(page), "vpn.md was not removed")
        assert "removed by `footnote remove`" in status(page)
        page.find("#library-sync").click()
        page.until(lambda: status(page).startswith("Done:"), "the sync did not finish")
        assert "0 added" in status(page) and "vpn.md" not in rows(page)
        page.find("#library-sync-permissions").click()  # readers only: no connector source here
        page.until(lambda: status(page).startswith("Done: permissions"), "no permission sync")
        assert "of 0 checked, 0 access changed, 0 admins only, 0 failed." in status(page)
        # A whole source goes too (the upload's file source here): its documents and itself.
        (upload_root,) = [r for r in roots(page) if r.endswith("/leave.md")]
        page.find(f'#library-roots button[aria-label="Remove {upload_root}"]').click()
        page.visible("#library-roots .confirm-remove").find_element(
            "xpath", ".//button[text()='Yes, remove']"
        ).click()
        page.until(lambda: "leave.md" not in rows(page), "the source's document stayed")
        assert upload_root not in roots(page) and "keys.md" in rows(page)
        page.screenshot("sources-view-admin")


def test_a_reader_sees_only_what_they_may_read(admin_server: tuple) -> None:
    url, keys, paths = admin_server
    with chromium(paths) as driver:
        page = Page(driver, url)
        open_sources(page, keys["alice"])
        page.until(lambda: "may read" in status(page), "the reader's listing did not load")
        assert page.find("#who-text").text == "Signed in as alice"
        assert not page.find("#library-admin").is_displayed()
        assert "keys.md" in rows(page) and "leave.md" not in rows(page)
        assert not page.find_all('button[aria-label^="Remove"]')


def test_the_sources_view_fits_a_phone(admin_server: tuple) -> None:
    """At 390 px each document is a card of labelled lines: nothing scrolls sideways."""
    url, keys, paths = admin_server
    with chromium(paths) as driver:
        driver.execute_cdp_cmd(
            "Emulation.setDeviceMetricsOverride",
            {"width": 390, "height": 844, "deviceScaleFactor": 1, "mobile": True},
        )
        page = Page(driver, url)
        open_sources(page, keys["root"])
        assert driver.execute_script("return window.innerWidth") == 390
        overflow = driver.execute_script(
            "return document.documentElement.scrollWidth - window.innerWidth"
        )
        assert overflow <= 0, f"the Sources view scrolls sideways by {overflow}px at 390 px"
        label = driver.execute_script(
            "const td = document.querySelector('#library-rows td');"
            "return getComputedStyle(td, '::before').content"
        )
        assert label == '"Document: "', label
        page.screenshot("sources-view-phone")
