"""The chat page on a phone, and which conversations its list shows (issue findings 7, 8).

At 390 × 844 the conversation list is a drawer behind a button and the question box stays on
screen; the list shows the chat page's own conversations unless asked for the others (MCP
`ask`, the LangGraph SDK, RemoteGraph), each then marked by where it came from. Driven in
headless Chromium against `langgraph dev` with API keys, like tests/test_webui.py.
`docs/phone-drawer-closed.png` and `docs/phone-drawer-open.png` are this file's screenshots.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from footnote.server.langgraph_dev import stop_server as stop
from tests.test_webui import WORKED_EXAMPLE, Page, chromium, require_browser, sign_in, start_server

pytestmark = [pytest.mark.integration, pytest.mark.browser]

PHONE = {"width": 390, "height": 844, "deviceScaleFactor": 1, "mobile": True}
SDK_QUESTION = "How do I connect to the VPN?"
MCP_QUESTION = "Who approves my expenses?"


class Team:
    """A server that asks for API keys, and the keys of its users."""

    def __init__(self, url: str, keys: dict[str, str]) -> None:
        self.url, self.keys = url, keys

    def headers(self, user: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.keys[user]}"}

    def post(self, user: str, path: str, body: dict[str, Any]) -> Any:
        response = httpx.post(
            f"{self.url}{path}", json=body, headers=self.headers(user), timeout=120, trust_env=False
        )
        response.raise_for_status()
        return response.json()

    def thread(self, user: str, thread_id: str) -> dict[str, Any]:
        response = httpx.get(
            f"{self.url}/threads/{thread_id}", headers=self.headers(user), trust_env=False
        )
        response.raise_for_status()
        return dict(response.json())


@pytest.fixture(scope="module")
def team(handbook_index: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Team]:
    from footnote.server.credentials import write_api_keys

    require_browser()
    workdir = tmp_path_factory.mktemp("webui-phone")
    users = {name: {"groups": ["engineering"]} for name in ("phone", "alice", "bob")}
    keys = write_api_keys(workdir / "keys.json", users)
    process, url = start_server(
        handbook_index, workdir, {"FOOTNOTE_API_KEYS": str(workdir / "keys.json")}
    )
    try:
        yield Team(url, keys)
    finally:
        stop(process)


def signed_in(driver: Any, team: Team, user: str) -> Page:
    page = Page(driver, team.url)
    page.open()
    sign_in(page, team.keys[user])
    page.ready()
    return page


def in_viewport(page: Page, css: str) -> bool:
    """Is the element wholly on screen, without scrolling?"""
    return bool(
        page.driver.execute_script(
            "const r = document.querySelector(arguments[0]).getBoundingClientRect();"
            "return r.width > 0 && r.top >= 0 && r.bottom <= window.innerHeight;",
            css,
        )
    )


def test_phone_keeps_the_question_box_on_screen_and_the_list_in_a_drawer(team: Team) -> None:
    from selenium.webdriver.common.actions.action_builder import ActionBuilder
    from selenium.webdriver.common.keys import Keys

    for n in range(10):
        team.post("phone", "/threads", {"metadata": {"source": "chat", "title": f"Topic {n}"}})
    with chromium(require_browser()) as driver:
        driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", PHONE)
        page = signed_in(driver, team, "phone")
        page.until(lambda: len(page.find_all("#thread-list a")) == 10, "10 conversations")
        toggle = page.find("#threads-toggle")

        assert driver.execute_script("return window.scrollY") == 0
        assert in_viewport(page, "#question"), "the question box is below the fold"
        assert in_viewport(page, "#send")
        assert not page.find("#thread-list").is_displayed(), "the list is not in a drawer"
        assert toggle.tag_name == "button" and toggle.is_displayed()
        assert toggle.get_attribute("aria-expanded") == "false"

        toggle.click()
        assert toggle.get_attribute("aria-expanded") == "true"
        page.visible("#thread-list a")
        assert all(a.is_displayed() for a in page.find_all("#thread-list a"))
        page.screenshot("phone-drawer-open")

        driver.switch_to.active_element.send_keys(Keys.ESCAPE)
        page.until(lambda: not page.find("#thread-list").is_displayed(), "Escape kept it open")
        assert toggle.get_attribute("aria-expanded") == "false"
        assert driver.switch_to.active_element == toggle, "focus did not return to the button"

        toggle.click()  # a tap on the dimmed page beside the drawer closes it
        tap = ActionBuilder(driver)
        tap.pointer_action.move_to_location(370, 420).click()
        tap.perform()
        page.until(lambda: not page.find("#thread-list").is_displayed(), "a tap kept it open")
        toggle.click()
        page.find("#threads-close").click()
        page.until(lambda: not page.find("#thread-list").is_displayed(), "Close kept it open")
        assert driver.switch_to.active_element == toggle

        toggle.send_keys(Keys.ENTER)  # a real button: the keyboard opens it too
        chosen = page.visible("#thread-list a")
        thread_id = chosen.get_attribute("data-thread-id")
        chosen.click()
        page.until(lambda: not page.find("#thread-list").is_displayed(), "choosing kept it open")
        assert toggle.get_attribute("aria-expanded") == "false"
        assert driver.current_url.endswith(f"#thread={thread_id}")

        turn = page.ask(WORKED_EXAMPLE)
        turn.find_element("css selector", "a.cite").click()
        passage = page.visible(".source.active .passage")
        assert in_viewport(page, "#question"), "the question box scrolled away"
        covered = driver.execute_script(
            "return arguments[0].getBoundingClientRect().top >="
            " document.querySelector('#ask-form').getBoundingClientRect().top",
            passage,
        )
        assert not covered, "the cited passage is hidden behind the question box"
        overflow = driver.execute_script(
            "return document.documentElement.scrollWidth - window.innerWidth"
        )
        assert overflow <= 0, f"the page scrolls sideways by {overflow}px"
        page.screenshot("phone-cited-passage")
        driver.execute_script("window.scrollTo(0, 0)")
        assert in_viewport(page, "#question") and in_viewport(page, "#threads-toggle")
        page.screenshot("phone-drawer-closed")


async def mcp_ask(team: Team, user: str, question: str) -> str:
    from mcp import ClientSession
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared._httpx_utils import create_mcp_http_client

    async with (
        create_mcp_http_client(headers=team.headers(user)) as http,
        streamable_http_client(f"{team.url}/mcp", http_client=http) as (read, write, _),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        result = await session.call_tool("ask", {"question": question})
        assert not result.isError, result.content
        assert result.structuredContent is not None
        return str(result.structuredContent["thread_id"])


def listed(page: Page) -> dict[str, str]:
    """Thread id -> its mark (empty when unmarked), as the list shows them."""
    marks = {}
    for item in page.find_all("#thread-list li"):
        link = item.find_element("css selector", "a")
        mark = item.find_elements("css selector", ".thread-source")
        marks[link.get_attribute("data-thread-id")] = mark[0].text if mark else ""
    return marks


def test_the_list_shows_chat_page_conversations_unless_asked_for_all(team: Team) -> None:
    mcp_thread = asyncio.run(mcp_ask(team, "alice", MCP_QUESTION))
    sdk_thread = team.post("alice", "/threads", {})["thread_id"]
    team.post(
        "alice",
        f"/threads/{sdk_thread}/runs/wait",
        {
            "assistant_id": "footnote",
            "input": {"messages": [{"role": "user", "content": SDK_QUESTION}]},
        },
    )
    assert team.thread("alice", mcp_thread)["metadata"].get("source") == "mcp"
    assert "source" not in team.thread("alice", sdk_thread)["metadata"]

    with chromium(require_browser()) as driver:
        page = signed_in(driver, team, "alice")
        assert not page.find("#threads-toggle").is_displayed(), "the desktop has no drawer"
        assert page.find("#threads").is_displayed()
        page.ask(WORKED_EXAMPLE)
        chat_thread = driver.current_url.split("#thread=", 1)[1]
        assert team.thread("alice", chat_thread)["metadata"].get("source") == "chat"
        page.until(lambda: chat_thread in listed(page), "the chat page's thread is not listed")
        assert listed(page) == {chat_thread: ""}, "threads from MCP or the SDK are listed"

        show_all = page.find("#threads-all")
        assert show_all.get_attribute("type") == "checkbox" and show_all.is_displayed()
        show_all.click()
        page.until(lambda: len(listed(page)) == 3, "show all did not list the others")
        marks = listed(page)
        assert marks[mcp_thread] == "From MCP ask", marks
        assert marks[sdk_thread] == "From the API", marks
        assert marks[chat_thread] == "From the chat page", marks
        page.screenshot("threads-all-sources")

    bobs_thread = team.post("bob", "/threads", {})["thread_id"]
    with chromium(require_browser()) as driver:  # another user sees only his own
        page = signed_in(driver, team, "bob")
        page.find("#threads-all").click()
        page.until(lambda: listed(page), "bob's own thread is not listed")
        assert listed(page) == {bobs_thread: "From the API"}
