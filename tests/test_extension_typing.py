"""How the extension asks and counts, in headless Chromium against the recorded server of
tests/test_extension.py (its fixtures: the server, the fixture site, the browser with the extension, the
pairing): the events of Tab, Ctrl+Right and typing through a ghost carry inserted characters as
`accepted_chars` and typed ones as `typed_through_chars`, as /v1/stats then counts them; and a fast
typist's requests come one at a time, the newest text asked last, none refused."""

from __future__ import annotations

import json

import httpx
import test_extension
from selenium.common.exceptions import TimeoutException
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.support.ui import WebDriverWait
from test_extension import (
    BODY,
    WAIT_S,
    _chord,
    _drawn,
    _ghost,
    _keys,
    _open_textarea,
    _settle,
    _text,
    _wait_for_ghost,
)

# its module-scoped fixtures, taken over (a server, a browser and a pairing of this module's own)
server, site, driver, paired = test_extension.server, test_extension.site, test_extension.driver, test_extension.paired


def _first_word(text: str) -> str:
    stripped = text.lstrip()
    return text[: len(text) - len(stripped)] + stripped.split()[0]


def _closing(server, mark: int) -> dict:
    """The first accepted or dismissed event after `mark`, once it has come."""
    def closed(_: object) -> dict | None:
        found = [r["body"] for r in server.recorder.since(mark, "/v1/events")
                 if r["body"]["kind"] in ("accepted", "dismissed")]
        return found[0] if found else None
    return WebDriverWait(None, WAIT_S).until(closed)


def test_typed_through_ctrl_right_and_tab_each_count_as_they_should(driver, server, site, paired):
    _open_textarea(driver, site)
    ghost = _wait_for_ghost(driver)
    assert len(ghost) >= 2, f"a suggestion of one character cannot show typing through: {ghost!r}"
    mark = server.recorder.mark()
    _keys(driver, ghost[0])  # by hand, through the ghost
    assert _ghost(driver) == ghost[1:]
    rest = ghost[1:]
    _chord(driver, Keys.CONTROL, Keys.ARROW_RIGHT)  # one word inserted
    assert _text(driver) == BODY + ghost[0] + (_first_word(rest) if rest.strip() else rest)
    if _ghost(driver):
        _keys(driver, Keys.TAB)  # the rest inserted
    assert _text(driver) == BODY + ghost
    event = _closing(server, mark)
    assert (event["kind"], event["accepted_chars"], event["typed_through_chars"]) == ("accepted", len(ghost) - 1, 1)


def test_ctrl_right_word_by_word_and_a_ghost_typed_out_by_hand(driver, server, site, paired):
    _open_textarea(driver, site)
    ghost = _wait_for_ghost(driver)
    mark = server.recorder.mark()
    taken = ""
    # word by word to the ghost's end, and no further: once it is wholly taken the next suggestion comes
    while len(taken) < len(ghost):
        rest = _ghost(driver)
        assert rest == ghost[len(taken):]  # the suggestion being taken stays as it was
        _chord(driver, Keys.CONTROL, Keys.ARROW_RIGHT)
        taken += _first_word(rest) if rest.strip() else rest
        assert _text(driver) == BODY + taken
    event = _closing(server, mark)
    assert (event["kind"], event["accepted_chars"], event["typed_through_chars"]) == ("accepted", len(ghost), 0)
    # the next suggestion, typed out wholly by hand: it saved nothing, so it was not accepted
    try:
        WebDriverWait(driver, WAIT_S).until(lambda d: _drawn(d)["text"])  # its text: it may wrap (above)
    except TimeoutException:
        asked = [(r["body"].get("prefix", "")[-30:], r.get("answer"))
                 for r in server.recorder.since(mark, "/v1/complete")]
        raise AssertionError(f"no next ghost after {_text(driver)!r}; asked: {asked[-4:]}; {_drawn(driver)}") from None
    following = _drawn(driver)["text"]
    mark = server.recorder.mark()
    _keys(driver, following)
    event = _closing(server, mark)
    assert (event["kind"], event["accepted_chars"], event["typed_through_chars"]) == (
        "dismissed", 0, len(following))
    token = server.pairing_url.split("token=")[1]  # /v1/stats, as the person reads it, counts them so
    stats = httpx.get(f"{server.url}/v1/stats", headers={"Authorization": f"Bearer {token}"}, timeout=10).json()
    assert stats["typed_through_chars"] >= len(following) and stats["accepted_chars"] >= len(ghost)


def test_a_fast_typist_has_one_request_in_flight_and_the_newest_text_asked_last(driver, server, site, paired):
    _settle(driver)
    mark = server.recorder.mark()
    _open_textarea(driver, site)
    burst = " port before Friday, and the figures for the last quarter"
    _keys(driver, burst)  # one action: the keys follow each other as fast as the driver sends them
    final = BODY + burst
    WebDriverWait(driver, WAIT_S).until(lambda d: _ghost(d) and _text(d) == final)
    asked = server.recorder.since(mark, "/v1/complete")
    assert 1 <= len(asked) <= len(final)
    for earlier, later in zip(asked, asked[1:]):
        assert later["start"] >= earlier["end"], json.dumps(asked, default=str)  # never two in flight
    assert asked[-1]["body"]["prefix"] == final
    assert all("error" not in r["answer"] for r in asked)  # none refused


def test_a_long_suggestion_is_drawn_whole_and_ctrl_right_takes_one_word(driver, server, site, paired):
    _settle(driver)
    mark = server.recorder.mark()
    _open_textarea(driver, site)
    ghost = _wait_for_ghost(driver)
    asked = [r for r in server.recorder.since(mark, "/v1/complete") if r["body"]["prefix"] == BODY][-1]
    assert asked["body"]["sentence"] is True and asked["body"]["max_words"] == 12
    assert asked["answer"]["text"] == ghost
    assert len(ghost.split()) > 3, f"the tiny model's suggestion is no longer than the old 3 words: {ghost!r}"
    drawn = _drawn(driver)
    assert "".join(drawn["lines"]).split() == ghost.split()  # every word of it on the canvas, wrapped or not
    word = _first_word(ghost)
    _chord(driver, Keys.CONTROL, Keys.ARROW_RIGHT)
    assert _text(driver) == BODY + word
    assert _ghost(driver) == ghost[len(word):]
