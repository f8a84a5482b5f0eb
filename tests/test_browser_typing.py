"""How the compose page asks and counts, in headless Chromium against `seqlab serve` on a tiny trained GRU:
what the server's statistics say of Tab, Ctrl+Right and typing through a ghost (only inserted characters
are `accepted_chars`; typed ones are `typed_through_chars`), and the pacing of a fast typist's requests
(never two in flight, the newest text asked last, nothing refused). Skipped without chromium, as
tests/test_browser.py is."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from selenium import webdriver
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.support.ui import WebDriverWait
from serving_helpers import Served, chromium, served

WAIT_S = 60  # generous for 2 busy cores; every wait ends as soon as it succeeds
SUBJECT = "Quarterly report"
BODY = "Hi Dana,\n\nCould you send me the rep"
MIN_GAP_MS = 40  # ghost_core.js's: two requests never start closer than this
# Every /v1/complete the page makes, with when it started and settled (page clock, ms): window.asked.
RECORD_TIMES = """const real = window.fetch; window.asked = [];
window.fetch = (url, options = {}) => {
  if (!String(url).endsWith('/v1/complete')) return real(url, options);
  const entry = {prefix: JSON.parse(options.body).prefix, start: performance.now(), end: null};
  window.asked.push(entry);
  const settle = () => { entry.end = performance.now(); };
  const going = real(url, options);
  going.then(settle, settle);
  return going;
};"""


@pytest.fixture(scope="module")
def server(browser_run_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    with served(browser_run_dir, tmp_path_factory.mktemp("serve"), "--min-confidence", "0", timeout=WAIT_S) as s:
        yield s


@pytest.fixture(scope="module")
def driver(server: Served, tmp_path_factory: pytest.TempPathFactory) -> Iterator[webdriver.Chrome]:
    browser = chromium(tmp_path_factory.mktemp("chromium"))
    try:
        yield browser
    finally:
        browser.quit()


def _open(driver: webdriver.Chrome, server: Served, record: bool = False):
    driver.get(server.page)
    driver.find_element(By.ID, "subject").send_keys(SUBJECT)
    if record:
        driver.execute_script(RECORD_TIMES)
    area = driver.find_element(By.ID, "body")
    area.click()
    area.send_keys(BODY)
    return area


def _ghost(driver: webdriver.Chrome) -> str:
    return driver.execute_script("return document.getElementById('ghost').textContent")


def _wait_for_ghost(driver: webdriver.Chrome) -> str:
    return WebDriverWait(driver, WAIT_S).until(lambda d: _ghost(d))


def _value(driver: webdriver.Chrome) -> str:
    return driver.execute_script("return document.getElementById('body').value")


def _counts(server: Served) -> dict:
    stats = server.get("/v1/stats")
    return {k: stats[k] for k in ("accepted", "dismissed", "accepted_chars", "typed_through_chars", "rejected")}


def _after_closing(server: Served, before: dict) -> dict:
    """The counts' change once the suggestion's closing event (accepted or dismissed) has arrived."""
    def closed(_: object) -> dict | None:
        now = _counts(server)
        done = now["accepted"] + now["dismissed"] > before["accepted"] + before["dismissed"]
        return {k: now[k] - before[k] for k in now} if done else None
    return WebDriverWait(None, WAIT_S).until(closed)


def _first_word(text: str) -> str:
    stripped = text.lstrip()
    return text[: len(text) - len(stripped)] + stripped.split()[0]


def test_typed_through_ctrl_right_and_tab_each_count_as_they_should(driver, server):
    area = _open(driver, server)
    ghost = _wait_for_ghost(driver)
    assert len(ghost) >= 2, f"a suggestion of one character cannot show typing through: {ghost!r}"
    before = _counts(server)
    area.send_keys(ghost[0])  # by hand, through the ghost
    assert _ghost(driver) == ghost[1:]
    rest = ghost[1:]
    word = _first_word(rest) if rest.strip() else rest
    area.send_keys(Keys.CONTROL, Keys.ARROW_RIGHT)  # one word inserted
    assert _value(driver) == BODY + ghost[0] + word
    if _ghost(driver):
        area.send_keys(Keys.TAB)  # the rest inserted
    assert _value(driver) == BODY + ghost
    change = _after_closing(server, before)
    assert change == {"accepted": 1, "dismissed": 0, "accepted_chars": len(ghost) - 1, "typed_through_chars": 1,
                      "rejected": 0}


def test_a_suggestion_typed_out_by_hand_saves_nothing(driver, server):
    area = _open(driver, server)
    ghost = _wait_for_ghost(driver)
    before = _counts(server)
    area.send_keys(ghost)  # every character of it typed, none inserted
    assert _value(driver) == BODY + ghost
    change = _after_closing(server, before)
    assert change == {"accepted": 0, "dismissed": 1, "accepted_chars": 0, "typed_through_chars": len(ghost),
                      "rejected": 0}


def test_ctrl_right_word_by_word_counts_each_inserted_word(driver, server):
    area = _open(driver, server)
    ghost = _wait_for_ghost(driver)
    before = _counts(server)
    taken = ""
    while len(taken) < len(ghost):  # to the ghost's end and no further: the next suggestion comes at once
        rest = _ghost(driver)
        assert rest == ghost[len(taken):]  # the suggestion being taken stays as it was
        word = _first_word(rest) if rest.strip() else rest
        area.send_keys(Keys.CONTROL, Keys.ARROW_RIGHT)
        taken += word
        assert _value(driver) == BODY + taken
    assert taken == ghost
    change = _after_closing(server, before)
    assert change == {"accepted": 1, "dismissed": 0, "accepted_chars": len(ghost), "typed_through_chars": 0,
                      "rejected": 0}


def test_a_fast_typist_has_one_request_in_flight_and_the_newest_text_asked_last(driver, server):
    before = _counts(server)
    area = _open(driver, server, record=True)
    burst = " port before Friday, and the figures for the last quarter"
    area.send_keys(burst)  # one command: the keys follow each other as fast as the driver can send them
    final = BODY + burst
    WebDriverWait(driver, WAIT_S).until(
        lambda d: d.execute_script("return window.asked.length && window.asked.at(-1).end !== null")
        and _ghost(d) and d.execute_script("return window.asked.at(-1).prefix") == final)
    asked = driver.execute_script("return window.asked")
    keys = len(BODY) + len(burst)
    assert 1 <= len(asked) <= keys
    for earlier, later in zip(asked, asked[1:]):
        assert later["start"] >= earlier["end"], json.dumps(asked)  # never two in flight
        assert later["start"] - earlier["start"] >= MIN_GAP_MS - 1, json.dumps(asked)  # timer granularity
    assert asked[-1]["prefix"] == final
    assert _counts(server)["rejected"] == before["rejected"]  # the server refused none of them


def test_a_long_suggestion_is_drawn_and_ctrl_right_takes_one_word(driver, server):
    area = _open(driver, server)
    ghost = _wait_for_ghost(driver)
    # the page asks for the sentence (up to 12 words), and draws what the server answers for it
    direct = httpx.post(f"{server.url}/v1/complete", headers=server.headers(), timeout=30,
                        json={"prefix": BODY, "subject": SUBJECT, "max_words": 12, "sentence": True}).json()
    assert direct["text"] == ghost
    assert len(ghost.split()) > 3, f"the tiny model's suggestion is no longer than the old 3 words: {ghost!r}"
    word = _first_word(ghost)
    area.send_keys(Keys.CONTROL, Keys.ARROW_RIGHT)
    assert _value(driver) == BODY + word
    assert _ghost(driver) == ghost[len(word):]
