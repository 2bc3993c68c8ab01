"""Feedback in the chat page, in a real headless Chromium against `langgraph dev` with API
keys: rate an answer, flag a citation, open "why", and an admin's Review view. What users
wrote is shown as text, never as HTML. The Review view's screenshot is docs/feedback.md's."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from footnote.server.credentials import write_api_keys
from footnote.server.langgraph_dev import stop_server as stop
from tests.test_webui import (
    NOT_COVERED_QUESTION,
    WORKED_EXAMPLE,
    Page,
    chromium,
    require_browser,
    sign_in,
    start_server,
)

pytestmark = [pytest.mark.integration, pytest.mark.browser]

HOSTILE = "The security page says 60 days, not 90: <b>check</b> [1]"
"""A comment with markup: shown as these characters, never as a bold element."""


@pytest.fixture(scope="module")
def browser_paths() -> tuple[str, str]:
    return require_browser()


@pytest.fixture(scope="module")
def review_server(
    browser_paths: tuple[str, str], handbook_index: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[str, dict[str, str]]]:
    workdir = tmp_path_factory.mktemp("feedback-webui")
    keys = write_api_keys(
        workdir / "keys.json",
        {"alice": {"groups": ["engineering"]}, "root": {"groups": [], "admin": True}},
    )
    process, url = start_server(
        handbook_index,
        workdir,
        {
            "FOOTNOTE_API_KEYS": str(workdir / "keys.json"),
            "FOOTNOTE_FEEDBACK_DB": str(workdir / "feedback.sqlite3"),
        },
    )
    try:
        yield url, keys
    finally:
        stop(process)


def pressed(element: Any) -> bool:
    return element.get_attribute("aria-pressed") == "true"


def test_rate_flag_why_and_review(
    browser_paths: tuple[str, str], review_server: tuple[str, dict[str, str]]
) -> None:
    url, keys = review_server
    with chromium(browser_paths) as driver:
        page = Page(driver, url)
        page.open()
        sign_in(page, keys["alice"])
        page.ready()
        turn = page.ask(WORKED_EXAMPLE)
        bar = page.until(lambda: turn.find_element("css selector", ".feedback-bar"), "no bar")
        status = bar.find_element("css selector", ".feedback-status")

        down = bar.find_element("css selector", "button.rate.down")
        down.click()
        page.until(lambda: "saved" in status.text, "the rating was not saved")
        assert pressed(down)
        flag = bar.find_element("css selector", "button.flag[data-n='1']")
        flag.click()
        page.until(lambda: pressed(flag) and "saved" in status.text, "the flag was not saved")
        comment = bar.find_element("css selector", "textarea.feedback-comment")
        comment.send_keys(HOSTILE)
        bar.find_element("css selector", "button.send-comment").click()
        page.until(lambda: "saved" in status.text, "the comment was not saved")

        bar.find_element("css selector", "button.why-button").click()
        panel = page.visible(".turn.answer .why-panel")
        # The steps in words, not the graph's node names.
        assert "Steps" in panel.text and "read the question" in panel.text
        assert "kept " in panel.text and "checked every citation" in panel.text
        assert "new_question" not in panel.text and "plan_turn" not in panel.text
        steps = panel.find_element("css selector", ".why-facts dd[title]")
        assert steps.get_attribute("title").startswith("new_question")
        # Headers and numbers are not broken mid-word: each stays on one line.
        lines = page.driver.execute_script(
            "return [...document.querySelectorAll('.why-candidates th, "
            ".why-candidates td:nth-child(2), .why-candidates td:nth-child(4)')]"
            ".map((c) => { const r = document.createRange(); r.selectNodeContents(c); "
            "return r.getClientRects().length; })"
        )
        assert lines and all(n == 1 for n in lines), lines

        rows = panel.find_elements("css selector", ".why-candidates tr.kept")
        assert rows and "keys.md" in rows[0].text
        assert "Part 1:" in panel.find_element("css selector", "h5.why-part").text
        assert "Grade" in panel.text and "Searches" in panel.text
        page.screenshot("feedback-why")

        page.find("#new-thread").click()
        page.ask(NOT_COVERED_QUESTION)  # recorded for review, unrated

        page.open()  # reopened from history: the rating and the flag are still there
        page.ready()
        links = page.until(
            lambda: (
                len(page.find_all("#thread-list li a")) == 2 and page.find_all("#thread-list li a")
            ),
            "the two threads are not listed",
        )
        links[-1].click()  # oldest: the worked example
        reopened = page.until(
            lambda: page.find_all(".turn.answer .feedback-bar"), "the reopened answer has no bar"
        )[0]
        page.until(
            lambda: pressed(reopened.find_element("css selector", "button.rate.down")),
            "the stored rating was not shown",
        )
        assert pressed(reopened.find_element("css selector", "button.flag[data-n='1']"))
        assert not page.find_all("#review-toggle"), "a user who is not an admin sees Review"

    with chromium(browser_paths) as driver:
        page = Page(driver, url)
        page.open()
        sign_in(page, keys["root"])
        page.ready()
        page.visible("#review-toggle").click()
        page.visible("#review")
        items = page.until(
            lambda: len(found := page.find_all("#review-items .review-item")) >= 2 and found,
            "the review list did not fill",
        )
        texts = [item.text for item in items]
        assert NOT_COVERED_QUESTION in texts[0] and "not covered" in texts[0]  # newest first
        assert WORKED_EXAMPLE in texts[1] and "down" in texts[1]
        assert HOSTILE in texts[1]  # shown as the text it is
        assert "[1] keys.md#" in texts[1]
        assert not driver.find_elements("css selector", "#review b")

        items[1].find_element("css selector", "button.why-button").click()
        panel = page.until(
            lambda: (p := items[1].find_element("css selector", ".why-panel")).is_displayed() and p,
            "why did not open in the Review view",
        )
        assert "As recorded" in panel.text and "kept" in panel.text

        gap = items[0].find_element("css selector", "button.should-cover")
        gap.click()
        page.until(  # one lookup: the saved item replaces the clicked one (no stale element)
            lambda: page.find_all(
                "#review-items .review-item:first-child button.should-cover[aria-pressed='true']"
            ),
            "should-cover was not saved",
        )

        driver.set_window_size(1280, 1500)
        page.screenshot("review-view")  # docs/review-view.png in docs/feedback.md is this one
