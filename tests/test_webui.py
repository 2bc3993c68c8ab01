"""The chat page at /ui, driven in a real headless Chromium against `langgraph dev`.

The browser is Debian's `chromium` with `chromium-driver`, driven by selenium. Without them
these tests fail in CI (CI=true) and skip elsewhere, naming the packages to install
(`./dev test` installs them where it can). Screenshots of each state are saved under
$FOOTNOTE_TEST_ARTIFACTS (default: test-artifacts/ in the repository).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from footnote.server.langgraph_dev import (
    server_command,
    server_config,
    server_environment,
    wait_until_serving,
)
from footnote.server.langgraph_dev import stop_server as stop
from tests.conftest import REPO
from tests.test_server import HOST, free_port

pytestmark = [pytest.mark.integration, pytest.mark.browser]

WORKED_EXAMPLE = "How often do I have to change my API key?"
NOT_COVERED_QUESTION = "What is the parental leave policy?"
WAIT_S = 120.0
STARTUP_TIMEOUT_S = 240.0
"""Generous: CI machines are shared, and a loaded one starts the server slowly."""
ARTIFACTS = Path(os.environ.get("FOOTNOTE_TEST_ARTIFACTS") or REPO / "test-artifacts")
BROWSER_PACKAGES = "chromium chromium-driver"


def browser_binaries() -> tuple[str, str] | None:
    """Paths of a Chromium and its driver, or None."""
    browser = next(
        (found for name in ("chromium", "chromium-browser") if (found := shutil.which(name))),
        None,
    )
    driver = shutil.which("chromedriver")
    return (browser, driver) if browser and driver else None


def require_browser() -> tuple[str, str]:
    """The browser, or fail in CI / skip elsewhere with the packages to install."""
    found = browser_binaries()
    missing = []
    try:
        import selenium  # noqa: F401
    except ImportError:
        missing.append("the selenium package (pip install -e '.[dev]')")
    if found is None:
        missing.append(f"the Debian packages {BROWSER_PACKAGES} (apt-get install -y ...)")
    if missing:
        message = "browser tests need " + " and ".join(missing)
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(message, pytrace=False)
        pytest.skip(message)
    assert found is not None
    return found


def start_server(
    index: Path | str, workdir: Path, extra_env: dict[str, str] | None = None
) -> tuple[subprocess.Popen[bytes], str]:
    """`langgraph dev` as `footnote serve` runs it, on a free loopback port, in `workdir`."""
    port = free_port()
    url = f"http://{HOST}:{port}"
    log = workdir / "langgraph-dev.log"
    env = {**server_environment(index_dir=str(index)), **(extra_env or {})}
    with log.open("wb") as sink:
        process = subprocess.Popen(
            server_command(host=HOST, port=port, config=server_config(directory=workdir)),
            env=env,
            cwd=workdir,
            stdout=sink,
            stderr=subprocess.STDOUT,
        )
    if not wait_until_serving(url, process, timeout_s=STARTUP_TIMEOUT_S):
        stop(process)
        text = log.read_text(errors="replace")
        pytest.fail(f"langgraph dev did not serve {url}:\n{text[-4000:]}", pytrace=False)
    return process, url


@pytest.fixture(scope="module")
def browser_paths() -> tuple[str, str]:
    return require_browser()


@pytest.fixture(scope="module")
def server_url(
    browser_paths: tuple[str, str], handbook_index: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    """A server without authentication: the page works anonymously."""
    process, url = start_server(handbook_index, tmp_path_factory.mktemp("webui"))
    try:
        yield url
    finally:
        stop(process)


class Page:
    """A Chromium tab on the chat page, with the waits and reads the tests share."""

    def __init__(self, driver: Any, base_url: str) -> None:
        from selenium.common.exceptions import StaleElementReferenceException
        from selenium.webdriver.support.ui import WebDriverWait

        self.driver = driver
        self.base_url = base_url
        # A list the page re-renders can replace an element between finding and reading it:
        # a condition that meets a stale element is asked again, not failed.
        self.wait = WebDriverWait(
            driver, WAIT_S, ignored_exceptions=[StaleElementReferenceException]
        )

    def open(self, fragment: str = "") -> None:
        self.driver.get(f"{self.base_url}/ui{fragment}")

    def find(self, css: str) -> Any:
        from selenium.webdriver.common.by import By

        return self.driver.find_element(By.CSS_SELECTOR, css)

    def find_all(self, css: str) -> list[Any]:
        from selenium.webdriver.common.by import By

        return self.driver.find_elements(By.CSS_SELECTOR, css)

    def until(self, condition: Callable[[], Any], message: str) -> Any:
        return self.wait.until(lambda _driver: condition(), message)

    def visible(self, css: str) -> Any:
        from selenium.webdriver.common.by import By
        from selenium.webdriver.support import expected_conditions as ec

        return self.wait.until(ec.visibility_of_element_located((By.CSS_SELECTOR, css)), css)

    def ready(self) -> None:
        """The conversation view is shown (signed in, or anonymous)."""
        self.visible("#question")

    def ask(self, question: str) -> Any:
        """Type the question and press Enter, as a keyboard user would; return the answer
        turn once it is finished."""
        from selenium.webdriver.common.keys import Keys

        before = len(self.find_all(".turn.answer"))
        box = self.find("#question")
        box.click()
        box.send_keys(question)
        box.send_keys(Keys.ENTER)
        self.until(lambda: len(self.find_all(".turn.answer")) > before, "no answer turn")
        turn = self.find_all(".turn.answer")[before]
        self.until(
            lambda: turn.get_attribute("aria-busy") is None and self.find("#send").is_enabled(),
            f"the answer to {question!r} did not finish",
        )
        return turn

    def alert(self) -> str:
        return self.visible("#alert").text

    def screenshot(self, name: str) -> Path:
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        path = ARTIFACTS / f"{name}.png"
        self.driver.save_screenshot(str(path))
        return path


@pytest.fixture
def page(browser_paths: tuple[str, str], server_url: str) -> Iterator[Page]:
    with chromium(browser_paths) as driver:
        yield Page(driver, server_url)


class chromium:  # noqa: N801 - used as a context manager, like open()
    """A fresh headless Chromium (its own session storage), quit on exit."""

    def __init__(self, paths: tuple[str, str]) -> None:
        self.paths = paths

    def __enter__(self) -> Any:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service

        options = webdriver.ChromeOptions()
        options.binary_location = self.paths[0]
        for argument in (
            "--headless=new",
            "--no-sandbox",
            "--disable-dev-shm-usage",
            "--disable-gpu",
            "--no-first-run",
            "--disable-extensions",
            "--window-size=1280,900",
        ):
            options.add_argument(argument)
        self.driver = webdriver.Chrome(service=Service(self.paths[1]), options=options)
        return self.driver

    def __exit__(self, *exc: object) -> None:
        self.driver.quit()


RECORD_STREAMING = """
window.__streamed = [];
new MutationObserver(() => {
  for (const node of document.querySelectorAll('.answer-text.streaming')) {
    window.__streamed.push(node.textContent);
  }
}).observe(document.body, {subtree: true, childList: true, characterData: true});
"""


def test_worked_example_streams_cites_and_shows_the_passage(page: Page) -> None:
    from selenium.webdriver.common.keys import Keys

    page.open()
    page.ready()
    assert "Anonymous" in page.find("#who-text").text
    page.driver.execute_script(RECORD_STREAMING)

    turn = page.ask(WORKED_EXAMPLE)

    progress = [step.text for step in turn.find_elements("css selector", ".progress li")]
    assert progress[0].startswith("Searching for"), progress
    assert any(step.startswith("Retrieved ") for step in progress), progress
    assert any(step.startswith("Graded: ") and " of " in step for step in progress), progress
    streamed = page.driver.execute_script("return window.__streamed")
    assert any("90 days" in text for text in streamed), "the answer never showed while streaming"
    answer = turn.find_element("css selector", ".answer-text").text
    assert "90 days" in answer
    assert "not-covered" not in turn.get_attribute("class")
    links = turn.find_elements("css selector", "a.cite")
    assert links, answer

    links[0].send_keys(Keys.ENTER)  # keyboard: a citation is a link

    source = page.visible(".source.active")
    heading = source.find_element("css selector", "h3").text
    where = source.find_element("css selector", ".where").text
    passage = source.find_element("css selector", ".passage")
    assert heading.endswith("keys.md"), heading
    assert "§ API keys > Rotation" in where, where
    assert "lines " in where and "–" in where, where
    assert passage.is_displayed()
    assert "90 days" in passage.text
    assert page.driver.switch_to.active_element == passage, "focus did not move to the passage"
    page.screenshot("worked-example")


def test_not_covered_is_shown_as_such(page: Page) -> None:
    page.open()
    page.ready()

    turn = page.ask(NOT_COVERED_QUESTION)

    assert "not-covered" in turn.get_attribute("class")
    badge = turn.find_element("css selector", ".badge")
    assert badge.is_displayed()
    assert badge.get_attribute("textContent") == "Not covered by your documents"
    assert not turn.find_elements("css selector", "a.cite")
    assert not page.find_all("#source-list .source")
    page.screenshot("not-covered")


def test_threads_are_listed_newest_first_and_can_be_continued(page: Page) -> None:
    page.open()
    page.ready()
    page.ask(NOT_COVERED_QUESTION)
    page.find("#new-thread").click()
    page.ask(WORKED_EXAMPLE)
    page.until(
        lambda: (
            [a.text for a in page.find_all("#thread-list a")][:2]
            == [WORKED_EXAMPLE, NOT_COVERED_QUESTION]
        ),
        "the thread list is not newest first",
    )
    url = page.driver.current_url
    assert "#thread=" in url

    page.open()  # a fresh load, then back to the conversation from the list
    page.ready()
    page.visible("#thread-list a").click()
    page.until(lambda: page.find_all(".turn.answer a.cite"), "the stored answer lost its citations")
    assert page.driver.current_url == url
    follow_up = page.ask("and for service accounts?")

    assert [q.find_element("css selector", "p").text for q in page.find_all(".turn.question")] == [
        WORKED_EXAMPLE,
        "and for service accounts?",
    ]
    follow_up.find_element("css selector", "a.cite").click()
    assert "sts.md" in page.visible(".source.active h3").text


def test_phone_width_is_readable(browser_paths: tuple[str, str], server_url: str) -> None:
    with chromium(browser_paths) as driver:
        driver.execute_cdp_cmd(
            "Emulation.setDeviceMetricsOverride",
            {"width": 390, "height": 844, "deviceScaleFactor": 1, "mobile": True},
        )
        page = Page(driver, server_url)
        page.open()
        assert driver.execute_script("return window.innerWidth") == 390
        page.ready()
        turn = page.ask(WORKED_EXAMPLE)
        turn.find_element("css selector", "a.cite").click()
        page.visible(".source.active .passage")

        overflow = driver.execute_script(
            "return document.documentElement.scrollWidth - window.innerWidth"
        )
        assert overflow <= 0, f"the page scrolls sideways by {overflow}px at phone width"
        page.screenshot("phone-width")


def test_controls_are_labelled_for_screen_readers(page: Page) -> None:
    page.open()
    page.ready()

    unlabelled = page.driver.execute_script(
        """
        const missing = [];
        for (const el of document.querySelectorAll('input, textarea, select')) {
          if (!el.labels || !el.labels.length) missing.push(el.id || el.name);
        }
        for (const el of document.querySelectorAll('button, a[href]')) {
          const name = (el.getAttribute('aria-label') || el.textContent).trim();
          if (!name) missing.push(el.outerHTML);
        }
        return missing;
        """
    )
    assert unlabelled == []
    assert page.find("#log").get_attribute("aria-live") == "polite"
    assert page.find("#alert").get_attribute("role") == "alert"
    for landmark in ("nav", "main", "aside"):
        assert page.find(landmark).get_attribute("aria-labelledby")


def test_missing_index_then_unreachable_server(
    browser_paths: tuple[str, str], tmp_path: Path
) -> None:
    process, url = start_server(tmp_path / "no-index-here", tmp_path)
    try:
        with chromium(browser_paths) as driver:
            page = Page(driver, url)
            page.open()
            page.ready()

            page.ask(WORKED_EXAMPLE)
            assert "document index is not available" in page.alert()
            assert "footnote ingest" in page.alert()
            page.screenshot("index-missing")

            stop(process)
            page.find("#alert-close").click()
            page.ask(WORKED_EXAMPLE)
            assert "Cannot reach the Footnote server" in page.alert()
            page.screenshot("server-unreachable")
    finally:
        stop(process)


@pytest.fixture(scope="module")
def team_server(
    browser_paths: tuple[str, str], handbook_index: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[str, dict[str, str]]]:
    """A server that asks for API keys: (its URL, {user: key}) for two users."""
    from footnote.server.credentials import write_api_keys

    workdir = tmp_path_factory.mktemp("webui-team")
    keys = write_api_keys(
        workdir / "keys.json",
        {"alice": {"groups": ["engineering"]}, "bob": {"groups": ["hr"]}},
    )
    process, url = start_server(
        handbook_index, workdir, {"FOOTNOTE_API_KEYS": str(workdir / "keys.json")}
    )
    try:
        yield url, keys
    finally:
        stop(process)


def sign_in(page: Page, key: str) -> None:
    """Paste the key and press Enter, as a person would."""
    from selenium.webdriver.common.keys import Keys

    field = page.visible("#api-key")
    field.send_keys(key)
    field.send_keys(Keys.ENTER)


def test_sign_in_with_a_key_and_ask(
    browser_paths: tuple[str, str], team_server: tuple[str, dict[str, str]]
) -> None:
    url, keys = team_server
    with chromium(browser_paths) as driver:
        page = Page(driver, url)
        page.open()
        page.visible("#sign-in")
        assert not page.find("#question").is_displayed()

        sign_in(page, keys["alice"])
        page.ready()
        # The header names who the server says the key belongs to.
        page.until(lambda: page.find("#who-text").text == "Signed in as alice", "no name shown")
        turn = page.ask(WORKED_EXAMPLE)
        assert "90 days" in turn.find_element("css selector", ".answer-text").text
        turn.find_element("css selector", "a.cite").click()
        assert "§ API keys > Rotation" in page.visible(".source.active .where").text

        page.open()  # the key is kept for this tab's session
        page.ready()
        # The header names who the server says the key belongs to.
        page.until(lambda: page.find("#who-text").text == "Signed in as alice", "no name shown")
        page.screenshot("signed-in")


def test_wrong_key_shows_the_401_message(
    browser_paths: tuple[str, str], team_server: tuple[str, dict[str, str]]
) -> None:
    url, keys = team_server
    with chromium(browser_paths) as driver:
        page = Page(driver, url)
        page.open()
        sign_in(page, keys["alice"][:-4] + "XXXX")

        page.until(lambda: page.find("#sign-in-error").text, "no sign-in error shown")
        message = page.find("#sign-in-error").text
        assert "did not accept your key (401 Unauthorized)" in message
        assert not page.find("#question").is_displayed()
        assert driver.execute_script("return sessionStorage.length") == 0
        page.screenshot("wrong-key")


def test_one_user_cannot_open_another_users_thread_by_url(
    browser_paths: tuple[str, str], team_server: tuple[str, dict[str, str]]
) -> None:
    url, keys = team_server
    secret_question = "How do I page the on-call engineer?"
    with chromium(browser_paths) as driver:
        alice = Page(driver, url)
        alice.open()
        sign_in(alice, keys["alice"])
        alice.ready()
        alice.ask(secret_question)
        alices_thread = driver.current_url
        assert "#thread=" in alices_thread

    with chromium(browser_paths) as driver:
        bob = Page(driver, url)
        bob.driver.get(alices_thread)
        sign_in(bob, keys["bob"])
        bob.ready()

        assert "does not exist, or it belongs to someone else" in bob.alert()
        assert not bob.find_all(".turn")
        assert secret_question not in driver.find_element("css selector", "body").text
        assert not bob.find_all("#thread-list a")
        bob.screenshot("other-users-thread")


def model_env(base_url: str) -> dict[str, str]:
    """Server settings for a chat model behind the loopback OpenAI stub."""
    return {
        "FOOTNOTE_MODEL": "openai:stub-model",
        "FOOTNOTE_MODEL_BASE_URL": base_url,
        "OPENAI_API_KEY": "sk-stub-not-a-real-key",
        "NO_PROXY": "127.0.0.1,localhost",
        "no_proxy": "127.0.0.1,localhost",
    }


def test_provider_failure_after_retries_is_explained(
    browser_paths: tuple[str, str], handbook_index: Path, tmp_path: Path
) -> None:
    """The operator's model answers HTTP 500 every time: the page says the provider failed."""
    from tests.stub_openai import StubOpenAI, server_error

    with StubOpenAI() as stub:
        stub.default = server_error(retry_after_ms=10)
        process, url = start_server(handbook_index, tmp_path, model_env(stub.base_url))
        try:
            with chromium(browser_paths) as driver:
                page = Page(driver, url)
                page.open()
                page.ready()
                page.ask(WORKED_EXAMPLE)

                message = page.alert()
                assert "language model provider failed, even after retries" in message
                # langchain-openai re-raises the client's InternalServerError as its subclass
                assert "InternalServerError" in message or "OpenAIAPIError" in message
                assert len(stub.chat_requests) >= 3, "the client did not retry"
                page.screenshot("provider-error")
        finally:
            stop(process)


def test_model_answer_appears_only_once_checked(
    browser_paths: tuple[str, str], handbook_index: Path, tmp_path: Path
) -> None:
    """With a chat model the page shows no draft: what streams is the answer after every
    sentence was checked against its sources (issue 30), then it gets its citation links."""
    from tests.stub_openai import StubOpenAI, structured
    from tests.test_providers import ANSWER, happy_path

    with StubOpenAI() as stub:
        plan = structured({"action": "search", "questions": [{"question": WORKED_EXAMPLE}]})
        stub.script(plan, *happy_path())  # the model plans the turn first
        process, url = start_server(handbook_index, tmp_path, model_env(stub.base_url))
        try:
            with chromium(browser_paths) as driver:
                page = Page(driver, url)
                page.open()
                page.ready()
                driver.execute_script(RECORD_STREAMING)
                turn = page.ask(WORKED_EXAMPLE)

                streamed = list(dict.fromkeys(driver.execute_script("return window.__streamed")))
                final = turn.find_element("css selector", ".answer-text").text
                assert streamed, "the checked answer streams to the page"
                assert all(ANSWER.startswith(text) for text in streamed), streamed
                assert final == ANSWER
                assert turn.find_elements("css selector", "a.cite")
                assert stub.pending == 0
        finally:
            stop(process)


PARTIAL_QUESTION = "What is the parental leave policy and how do I rotate an API key?"


def test_an_uncovered_part_is_shown_as_such(page: Page) -> None:
    page.open()
    page.ready()

    turn = page.ask(PARTIAL_QUESTION)

    parts = page.until(lambda: turn.find_elements("css selector", ".parts .part"), "no parts")
    assert [p.get_attribute("class") for p in parts] == ["part uncovered", "part covered"]
    uncovered = parts[0]
    assert uncovered.is_displayed()
    assert "What is the parental leave policy?" in uncovered.text
    assert "Not covered by your documents" in uncovered.text
    assert "[1]" in parts[1].text
    assert "partly-covered" in turn.get_attribute("class")
    assert "not-covered" not in turn.get_attribute("class"), "the covered part is answered"
    assert turn.find_elements("css selector", "a.cite")
    page.screenshot("partly-covered")


def test_a_new_question_in_a_thread_is_answered_from_its_own_passages(page: Page) -> None:
    """A short question that does not refer back is not joined to the previous one: it used
    to be answered with the previous question's passages."""
    page.open()
    page.ready()
    page.ask(WORKED_EXAMPLE)
    page.ask("How do I connect to the VPN?")
    second = page.ask("Who approves my expenses?")

    links = second.find_elements("css selector", "a.cite")
    assert links, second.text
    links[0].click()
    assert page.visible(".source.active h3").text.endswith("expenses.md")
    cited = {h.text.rsplit(" ", 1)[-1] for h in page.find_all("#source-list .source h3")}
    assert cited == {"expenses.md"}, cited


def test_thanks_gets_a_reply_without_a_search(page: Page) -> None:
    page.open()
    page.ready()
    page.ask(WORKED_EXAMPLE)

    turn = page.ask("thanks!")

    steps = [step.text for step in turn.find_elements("css selector", ".progress li")]
    assert not [s for s in steps if s.startswith(("Searching", "Retrieved", "Graded"))], steps
    assert "welcome" in turn.find_element("css selector", ".answer-text").text
    assert not turn.find_elements("css selector", "a.cite")


# ---------------------------------------------------------------- answers as Markdown

CITED = "https://example.org/rotation"

HOSTILE = """## Rotation <img src=x onerror="window.__pwned = 'img'">

Keys rotate every **90 days** [1], and _old ones_ keep working for a day [1].

- <script>window.__pwned = 'script'</script> stays text
- [the cited page](https://example.org/rotation), [elsewhere](https://evil.example/x), \
[script link](javascript:window.__pwned='href') and [2]
1. Run `rotate --key <b>`
2. <a href="https://evil.example/">a raw link</a>

| Step | Days <svg onload="window.__pwned='svg'"> |
|---|---|
| rotate | 90 |

> quoted <iframe src="https://evil.example/"></iframe>

```html
<script>window.__pwned = 'fence'</script>
```
"""


def render_answer(page: Page, text: str) -> dict[str, Any]:
    """Finish an answer turn with `text` through the page's own code, as a run's final state
    is shown; return what the answer's DOM holds."""
    values = {
        "messages": [{"type": "ai", "content": text}],
        "citations": [
            {"n": 1, "source": CITED, "url": CITED, "kind": "web", "text": "Keys rotate."}
        ],
    }
    return page.driver.execute_script(
        """
        const turn = addAnswerTurn();
        finishAnswer(turn, JSON.parse(arguments[0]));
        const body = turn.querySelector('.answer-text');
        const all = [...body.querySelectorAll('*')];
        return {
          pwned: window.__pwned === undefined ? null : String(window.__pwned),
          tags: [...new Set(all.map((e) => e.tagName.toLowerCase()))].sort(),
          handlers: all.flatMap((e) => [...e.attributes].map((a) => a.name))
            .filter((name) => name.startsWith('on')),
          links: [...body.querySelectorAll('a')].map((a) => a.getAttribute('href')),
          text: body.innerText,
          code: body.querySelector('pre code') ? body.querySelector('pre code').textContent : '',
          heading: body.querySelector('h4') ? body.querySelector('h4').textContent : '',
          cells: [...body.querySelectorAll('th, td')].map((c) => c.textContent),
          items: [...body.querySelectorAll('li')].map((li) => li.textContent),
        };
        """,
        json.dumps(values),
    )


def test_hostile_markdown_runs_nothing_and_links_only_to_cited_sources(page: Page) -> None:
    page.open()
    page.ready()
    shown = render_answer(page, HOSTILE)
    page.until(lambda: page.driver.execute_script("return window.__pwned") is None, "ran")
    assert shown["pwned"] is None, shown["pwned"]
    assert not {"script", "img", "iframe", "svg", "style", "object", "embed"} & set(shown["tags"])
    assert shown["handlers"] == []
    # The cited source is a link; the citation marker [1] is the page's own link; [2] names
    # no source and stays text; every other address is text only.
    assert sorted(shown["links"]) == sorted([CITED, "#source-1-1", "#source-1-1"]), shown
    assert "<script>window.__pwned = 'script'</script> stays text" in shown["text"]
    assert '<a href="https://evil.example/">a raw link</a>' in shown["text"]
    assert "elsewhere" in shown["text"] and "evil.example/x" not in shown["text"]
    assert "[2]" in shown["text"]
    # The subset renders.
    assert {"h4", "strong", "em", "ul", "ol", "li", "code", "pre", "table", "blockquote"} <= set(
        shown["tags"]
    )
    assert shown["heading"].startswith("Rotation <img src=x")
    assert shown["code"] == "<script>window.__pwned = 'fence'</script>"
    assert shown["cells"][:2] == ["Step", "Days <svg onload=\"window.__pwned='svg'\">"]
    assert shown["items"][2] == "Run rotate --key <b>"
    page.driver.execute_script("document.querySelector('.turn.answer').scrollIntoView()")
    path = page.screenshot("answer-markdown")
    assert path.is_file() and path.parent == ARTIFACTS


def test_a_plain_answer_reads_as_before(page: Page) -> None:
    page.open()
    page.ready()
    shown = render_answer(page, "First paragraph [1].\n\nSecond paragraph.")
    assert shown["tags"] == ["a", "p"] and shown["links"] == ["#source-1-1"]
    assert shown["text"].split("\n\n") == ["First paragraph [1].", "Second paragraph."]


def test_a_conversation_can_be_renamed_and_deleted(page: Page) -> None:
    """Rename (Save) and Delete (after "Yes, delete") act on the server's thread: a fresh
    load shows the new name, and a deleted conversation is gone from the list and the URL."""
    from selenium.webdriver.common.keys import Keys

    page.open()
    page.ready()
    page.find("#new-thread").click()
    page.ask(WORKED_EXAMPLE)
    page.until(lambda: "#thread=" in page.driver.current_url, "no thread in the URL")
    thread_id = page.driver.current_url.split("#thread=", 1)[1]
    item = f'#thread-list li:has(a[data-thread-id="{thread_id}"])'

    page.find(f'{item} button[aria-label^="Rename"]').click()
    field = page.visible(f"{item} .thread-rename input")
    field.send_keys(Keys.CONTROL, "a")
    field.send_keys("Key rotation notes", Keys.ENTER)
    page.until(
        lambda: page.find(f'a[data-thread-id="{thread_id}"]').text == "Key rotation notes",
        "the new name is not listed",
    )
    page.open()  # the name is the server's, not the page's
    page.ready()
    page.until(
        lambda: (
            page.find_all(f'a[data-thread-id="{thread_id}"]')
            and page.find(f'a[data-thread-id="{thread_id}"]').text == "Key rotation notes"
        ),
        "the name did not survive a reload",
    )

    page.find(f'{item} button[aria-label^="Delete"]').click()
    confirm = page.visible(f'{item} [role="group"]')
    assert "Delete this conversation?" in confirm.text
    confirm.find_element("xpath", ".//button[text()='Keep']").click()
    assert page.find_all(f'a[data-thread-id="{thread_id}"]'), "Keep deleted it"
    page.find(f'a[data-thread-id="{thread_id}"]').click()
    page.until(lambda: page.find_all(".turn.answer"), "the conversation did not open")
    page.find(f'{item} button[aria-label^="Delete"]').click()
    page.visible(f"{item} .confirm-remove").find_element(
        "xpath", ".//button[text()='Yes, delete']"
    ).click()
    page.until(lambda: not page.find_all(f'a[data-thread-id="{thread_id}"]'), "still listed")
    assert "#thread=" not in page.driver.current_url and not page.find_all(".turn.answer")
    page.screenshot("thread-deleted")
