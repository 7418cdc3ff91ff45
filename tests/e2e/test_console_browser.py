"""The operator's console in a real browser: headless Chromium (Debian's `chromium` and
`chromium-driver`, which .ci/run installs) driven by Selenium against a real API process and
worker. An operator logs in, filters the responses, opens one, watches a running one finish live,
cancels one, revokes an account's key, looks at a conversation and the system; model text that is
markup does nothing. Each page's screenshot is kept in
build/screenshots/ (docs/console.png, in the README, is one of them)."""

from __future__ import annotations

import json
import secrets
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path

import openai
import pytest
from selenium import webdriver
from selenium.common.exceptions import NoAlertPresentException, StaleElementReferenceException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support import expected_conditions
from selenium.webdriver.support.wait import WebDriverWait

from tests.api.test_console import XSS, operators
from tests.conftest import ROOT, Environment, create_key
from tests.e2e.processes import Stack

SCREENSHOTS = ROOT / "build" / "screenshots"
CHROMIUM, DRIVER = shutil.which("chromium"), shutil.which("chromedriver")


@pytest.fixture(scope="module")
def stack(environment: Environment) -> Iterator[Stack]:
    with Stack(environment, RESPONSES_CONSOLE="true") as stack:
        stack.start_worker()
        yield stack


@pytest.fixture(scope="module")
def browser() -> Iterator[WebDriver]:
    assert CHROMIUM and DRIVER, "apt-get install chromium chromium-driver (.ci/run does)"
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for argument in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1400,1000"):
        options.add_argument(argument)
    driver = webdriver.Chrome(options=options, service=Service(DRIVER))
    driver.set_page_load_timeout(30)
    yield driver
    driver.quit()


@pytest.fixture(scope="module")
def logged_in(browser: WebDriver, stack: Stack, environment: Environment) -> WebDriver:
    key = operators(environment, "create", f"browser-{secrets.token_hex(3)}").stdout.strip().splitlines()[-1]
    browser.get(f"{origin(stack)}/console/responses")
    WebDriverWait(browser, 10).until(expected_conditions.url_contains("/console/login"))
    screenshot(browser, "login")
    browser.find_element(By.NAME, "key").send_keys(key)
    browser.find_element(By.CSS_SELECTOR, "form.login button").click()
    WebDriverWait(browser, 10).until(expected_conditions.url_contains("/console/responses"))
    return browser


def origin(stack: Stack) -> str:
    return f"http://127.0.0.1:{stack.port}"


def screenshot(browser: WebDriver, name: str) -> Path:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    path = SCREENSHOTS / f"console-{name}.png"
    browser.save_screenshot(str(path))
    return path


def text_of(browser: WebDriver, selector: str) -> str:
    return str(browser.find_element(By.CSS_SELECTOR, selector).text)


def until(browser: WebDriver, condition: Callable[[WebDriver], object], seconds: float = 10) -> None:
    """Until the condition holds (a page that reloads meanwhile is read again)."""
    WebDriverWait(browser, seconds, ignored_exceptions=[StaleElementReferenceException]).until(condition)


def test_an_operator_filters_the_responses_and_opens_one(logged_in: WebDriver, stack: Stack) -> None:
    browser, run = logged_in, secrets.token_hex(3)
    made = [stack.client.responses.create(model="fake", input=f"question {n}", metadata={"run": run}) for n in range(3)]
    browser.get(f"{origin(stack)}/console/responses")
    field = browser.find_element(By.NAME, "metadata")
    field.send_keys(f"run={run}")
    browser.find_element(By.CSS_SELECTOR, "form.filters button").click()
    WebDriverWait(browser, 10).until(expected_conditions.url_contains("metadata="))
    rows = browser.find_elements(By.CSS_SELECTOR, "table.list tbody tr")
    assert [row.find_element(By.TAG_NAME, "a").text for row in rows] == [r.id for r in reversed(made)]
    screenshot(browser, "responses")
    rows[-1].find_element(By.TAG_NAME, "a").click()
    WebDriverWait(browser, 10).until(expected_conditions.url_contains(made[0].id))
    assert "question 0" in text_of(browser, "main")
    assert "waiting for a worker" in text_of(browser, "section.timeline")
    screenshot(browser, "response")


def test_an_operator_watches_a_running_response_finish_live(logged_in: WebDriver, stack: Stack) -> None:
    browser = logged_in
    words = " ".join(f"live{i}" for i in range(60))
    script = {"text": words, "delay": 0.1, "first_delay": 2}  # (the page is open before its first output)
    running = stack.client.responses.create(model="fake", input="#fake " + json.dumps(script), background=True)
    browser.get(f"{origin(stack)}/console/responses/{running.id}")
    until(browser, lambda b: "live3" in text_of(b, "#live-output"))  # streaming, in the page
    assert "output item opened" in text_of(browser, "#steps")  # the timeline grows as events arrive
    screenshot(browser, "live")
    until(browser, lambda b: text_of(b, "#status") == "completed", 30)
    until(browser, lambda b: not b.find_elements(By.ID, "live"))  # the page, again, whole
    assert words in text_of(browser, "main")


def test_an_operator_cancels_a_running_response(logged_in: WebDriver, stack: Stack) -> None:
    browser = logged_in
    slow = " ".join(f"w{i}" for i in range(300))
    running = stack.client.responses.create(
        model="fake", input="#fake " + json.dumps({"text": slow, "delay": 0.1}), background=True
    )
    browser.get(f"{origin(stack)}/console/responses/{running.id}")
    browser.find_element(By.CSS_SELECTOR, "form.cancel button").click()
    until(browser, lambda b: text_of(b, "#status") == "cancelled" and not b.find_elements(By.ID, "live"), 20)
    assert stack.client.responses.retrieve(running.id).status == "cancelled"


def test_model_output_that_is_markup_does_nothing(logged_in: WebDriver, stack: Stack) -> None:
    browser = logged_in
    response = stack.client.responses.create(model="fake", input="#fake " + json.dumps({"text": XSS}))
    browser.get(f"{origin(stack)}/console/responses/{response.id}")
    assert XSS in text_of(browser, "main")  # shown, as text
    with pytest.raises(NoAlertPresentException):
        browser.switch_to.alert.text  # noqa: B018
    assert browser.find_elements(By.CSS_SELECTOR, "main img:not(.thumb)") == []
    assert [a for a in browser.find_elements(By.TAG_NAME, "a") if "javascript" in (a.get_attribute("href") or "")] == []


def test_an_operator_revokes_a_key_and_sees_the_system(
    logged_in: WebDriver, stack: Stack, environment: Environment
) -> None:
    browser, name = logged_in, f"browsed-{secrets.token_hex(3)}"
    key = create_key(environment, name)
    client = openai.OpenAI(base_url=f"{origin(stack)}/v1", api_key=key, max_retries=0)
    conversation = client.conversations.create()
    client.responses.create(model="fake", input="before the revoke", conversation=conversation.id)
    browser.get(f"{origin(stack)}/console/accounts")
    screenshot(browser, "accounts")
    browser.find_element(By.LINK_TEXT, name).click()
    until(browser, lambda b: b.find_elements(By.CSS_SELECTOR, "form.revoke button"))
    screenshot(browser, "account")
    browser.find_element(By.CSS_SELECTOR, "form.revoke button").click()
    until(browser, lambda b: text_of(b, "td.key-state").startswith("revoked"))
    with pytest.raises(openai.AuthenticationError):
        client.responses.create(model="fake", input="after the revoke")
    browser.get(f"{origin(stack)}/console/conversations/{conversation.id}")
    assert "before the revoke" in text_of(browser, "main")
    screenshot(browser, "conversation")
    browser.find_element(By.LINK_TEXT, "System").click()
    until(browser, lambda b: "Workers" in text_of(b, "main"))
    assert "taking jobs" in text_of(browser, "table.workers")
    screenshot(browser, "system")
