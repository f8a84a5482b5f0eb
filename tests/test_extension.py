"""The browser extension (extension/) in a real headless Chromium, against a real server on loopback.

Debian's chromium and chromedriver load the unpacked extension; the server is the app of `seqlab serve`
on a tiny trained GRU, behind a recorder that notes every request it gets (and, for one test, says the
model reads context); the fixture pages (tests/extension_fixtures/) come from a second loopback HTTP
server, so they are a site of their own. Without chromium the module is skipped, unless
SEQLAB_REQUIRE_BROWSER=1 (set by CI), when it fails instead, as tests/test_browser.py does.

The tests pair through the options page with the token (the pairing kept in a temporary paired.json),
then check what the writer sees and what the keys do on a textarea, a webmail-shaped contenteditable
editor and a reply; that undo takes a suggestion back; that the page's own text never holds the ghost;
that a site not switched on and a password field get nothing; that a hostile page on a switched-on site
can neither reach the extension's worker nor get a request to the server out of it; that a switched-on
page's own scripts can neither read the ghost (what is drawn is read from the content script's isolated
world, pixels included: tests/extension_harness.py), nor put hidden or unasked text into the prompt, nor
make the person "send" its text; and that Forget unpairs. The editor test saves
out/screenshots/extension.png for the docs (docs/extension.png is a copy, made with SEQLAB_BROWSER_RUN
set to a better-trained run); the others save a screenshot of their page for review.
"""

from __future__ import annotations

import hashlib
import http.server
import json
import shutil
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
from extension_harness import NoContentScript, isolated_contexts, isolated_eval
from selenium import webdriver
from selenium.common.exceptions import TimeoutException
from selenium.webdriver.common.action_chains import ActionChains
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.support.ui import WebDriverWait
from serving_helpers import chromium, require_browser, running_server, static_site
from starlette.middleware import Middleware

from seqlab.serving.access import replay_body
from seqlab.serving.credentials import PairingStore
from seqlab.serving.sealing import open_sealed
from seqlab.serving.signing import WINDOW_MS, parse_signed

REPO = Path(__file__).resolve().parents[1]
EXTENSION = REPO / "extension"
FIXTURES = Path(__file__).resolve().parent / "extension_fixtures"
SCREENSHOT = REPO / "out" / "screenshots" / "extension.png"  # the docs' picture; the others are for review
WAIT_S = 60  # generous for 2 busy cores; every wait ends as soon as it succeeds
QUIET_S = 1.0  # longer than the debounce plus a completion: what has not happened by then will not
SUBJECT = "Quarterly report"
LINES = ["Hi Dana,", "", "Could you send me the rep"]
BODY = "\n".join(LINES)


def extension_id(path: Path) -> str:
    """Chromium's id of an unpacked extension: the SHA-256 of its path, 32 hex digits spelt a-p."""
    digest = hashlib.sha256(str(path).encode()).hexdigest()[:32]
    return "".join(chr(ord("a") + int(c, 16)) for c in digest)


# ----------------------------------------------------------------------------- the server, recorded


@dataclass
class Recorder:
    """An ASGI wrapper that notes each HTTP request (method, path, Origin, Authorization, JSON body, when it
    came: `start`), as it comes off the wire; for /v1/complete also the answer, and when it was sent (`end`).
    A signed request's body is sealed on the wire (`wire`, as bytes read as latin-1): `body` is it opened with
    the pairing's secret from `pairing_file`, as the gate opens it.

    With `pretend_context` its `Pretender`, inside the gate (so after the extension's signature is checked
    and before the server's proof of the answer is made), says on /health that the model reads context and
    takes `context` out of /v1/complete bodies before the routes see them: the tiny GRU reads none, and the
    test of the reply page checks what the extension sends to a model that does."""

    app: Any
    pairing_file: Path | None = None
    requests: list[dict[str, Any]] = field(default_factory=list)
    pretend_context: bool = False
    lock: threading.Lock = field(default_factory=threading.Lock)

    def since(self, mark: int, path: str | None = None) -> list[dict[str, Any]]:
        with self.lock:
            seen = self.requests[mark:]
        return [r for r in seen if path is None or r["path"] == path]

    def mark(self) -> int:
        with self.lock:
            return len(self.requests)

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = {k.decode().lower(): v.decode() for k, v in scope["headers"]}
        chunks: list[bytes] = []
        more = True
        while more:  # read the whole body here, then replay it to the app
            message = await receive()
            chunks.append(message.get("body", b""))
            more = message.get("more_body", False)
        raw = b"".join(chunks)
        plain = self._opened(scope, headers.get("authorization"), raw)
        try:
            body = json.loads(plain) if plain else None
        except ValueError:
            body = plain
        entry = {"method": scope["method"], "path": scope["path"], "origin": headers.get("origin"),
                 "authorization": headers.get("authorization"), "body": body, "wire": raw.decode("latin-1"),
                 "start": time.monotonic()}
        if self.pretend_context and scope["path"] == "/v1/complete" and isinstance(body, dict):
            entry["context"] = body.get("context")
        with self.lock:
            self.requests.append(entry)
        noted = self._noting_answer(entry, send) if scope["path"] == "/v1/complete" else send
        await self.app(scope, replay_body(raw, receive), noted)

    def _opened(self, scope: dict, authorization: str | None, raw: bytes) -> bytes:
        """A signed request's body opened with its pairing's secret (`sealing.open_sealed`); any other as sent."""
        signed = parse_signed(authorization or "")
        paired = PairingStore(self.pairing_file).lookup(signed.id) if signed and self.pairing_file else None
        if not raw or paired is None:
            return raw
        opened = open_sealed(paired.secret, scope["method"], scope["path"], signed.ts, signed.nonce, raw)
        return raw if opened is None else opened

    @staticmethod
    def _noting_answer(entry: dict[str, Any], send: Any) -> Any:
        """A `send` that also keeps the JSON answer in entry["answer"]: what the server suggested."""
        chunks: list[bytes] = []

        async def noting(message: dict) -> None:
            if message["type"] == "http.response.body":
                chunks.append(message.get("body", b""))
                if not message.get("more_body", False):
                    entry["end"] = time.monotonic()
                    try:
                        entry["answer"] = json.loads(b"".join(chunks))
                    except ValueError:
                        entry["answer"] = None
            await send(message)

        return noting


@dataclass
class Pretender:
    """The part of `Recorder` that pretends the model reads context (see there): a middleware inside the gate."""

    app: Any
    recorder: Recorder

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or not self.recorder.pretend_context:
            await self.app(scope, receive, send)
            return
        chunks: list[bytes] = []
        more = True
        while more:
            message = await receive()
            chunks.append(message.get("body", b""))
            more = message.get("more_body", False)
        raw = b"".join(chunks)
        if scope["path"] == "/v1/complete" and raw:
            body = json.loads(raw)
            body.pop("context", None)
            raw = json.dumps(body).encode()
            scope = {**scope, "headers": [(k, v) for k, v in scope["headers"] if k.lower() != b"content-length"]
                     + [(b"content-length", str(len(raw)).encode())]}
        if scope["path"] == "/health":
            await self.app(scope, replay_body(raw, receive), self._reading_context(send))
        else:
            await self.app(scope, replay_body(raw, receive), send)

    @staticmethod
    def _reading_context(send: Any) -> Any:
        start: dict = {}

        async def rewrite(message: dict) -> None:
            if message["type"] == "http.response.start":
                start.update(message)
                return
            data = json.loads(message.get("body", b"") or b"{}")
            if isinstance(data.get("model"), dict):
                data["model"]["cross_attention"] = True
            out = json.dumps(data).encode()
            headers = [(k, v) for k, v in start.get("headers", []) if k.lower() != b"content-length"]
            await send({**start, "headers": headers + [(b"content-length", str(len(out)).encode())]})
            await send({"type": "http.response.body", "body": out, "more_body": False})

        return rewrite


@dataclass
class Recorded:
    url: str
    pairing_url: str
    recorder: Recorder
    pairing_file: Path


@pytest.fixture(scope="module")
def server(browser_run_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Recorded]:
    """The server app on a free loopback port, --min-confidence 0 so that it always suggests, learning from
    sent mail (`serve --learn`) in a copy of the run, so what it learns stays in this module."""
    from seqlab.serving.app import ServerConfig
    from seqlab.serving.learner import LearnSettings

    run = tmp_path_factory.mktemp("learning") / "run"
    shutil.copytree(browser_run_dir, run, ignore=shutil.ignore_patterns("serve", "personal"))
    config = ServerConfig(run_dir=run, min_confidence=0.0, log_dir=tmp_path_factory.mktemp("serve"),
                          pairing_file=tmp_path_factory.mktemp("config") / "paired.json", learn=True,
                          learn_settings=LearnSettings(idle_s=30.0))  # kept, not learned, during the tests
    holder: dict[str, Recorder] = {}

    def wrap(app: Any) -> Recorder:
        holder["recorder"] = Recorder(app, config.pairing_file)
        app.user_middleware.append(Middleware(Pretender, recorder=holder["recorder"]))  # innermost: inside the gate
        return holder["recorder"]

    with running_server(config, wrap=wrap) as url:
        # what `seqlab serve` prints: http://127.0.0.1:PORT/?token=TOKEN
        yield Recorded(url, f"{url}/?token={config.token}", holder["recorder"], config.pairing_file)


@pytest.fixture(scope="module")
def site() -> Iterator[str]:
    """The fixture pages on a loopback port of their own: http://127.0.0.1:PORT (the site switched on)."""
    with static_site(FIXTURES) as url:
        yield url


@pytest.fixture(scope="module")
def driver(tmp_path_factory: pytest.TempPathFactory) -> Iterator[webdriver.Chrome]:
    require_browser()
    browser = chromium(tmp_path_factory.mktemp("chromium"), f"--load-extension={EXTENSION}",
                       f"--disable-extensions-except={EXTENSION}")
    try:
        yield browser
    finally:
        browser.quit()


def _options(driver: webdriver.Chrome) -> str:
    url = f"chrome-extension://{extension_id(EXTENSION)}/options.html"
    driver.get(url)
    WebDriverWait(driver, WAIT_S).until(lambda d: d.find_element(By.ID, "server-state").text != "…")
    return url


@pytest.fixture(scope="module")
def paired(driver: webdriver.Chrome, server: Recorded, site: str) -> str:
    """Pair through the options page as a person does, and switch the fixture site on; the extension id."""
    _options(driver)
    driver.find_element(By.ID, "pair-url").send_keys(server.pairing_url)
    driver.find_element(By.ID, "pair").click()
    WebDriverWait(driver, WAIT_S).until(lambda d: d.find_element(By.ID, "message").text == "paired")
    driver.find_element(By.ID, "site-origin").send_keys(site)
    driver.find_element(By.ID, "site-add").click()
    WebDriverWait(driver, WAIT_S).until(lambda d: d.find_element(By.ID, "message").text.startswith("on at"))
    return extension_id(EXTENSION)


# ----------------------------------------------------------------------------- helpers


def _drawn(driver: webdriver.Chrome) -> dict[str, Any]:
    """What the content script has drawn: {text, lines, inked, ink} from its isolated world (the ghost is
    pixels on a canvas, with no text in the DOM; `inked` counts the canvas's painted pixels and `ink` is
    their bounds in the window). Nothing drawn on a page where the script does not run."""
    try:
        return isolated_eval(driver, "globalThis.__seqlabGhost")
    except NoContentScript:
        return {"text": "", "lines": [], "inked": 0, "ink": None}


def _ghost(driver: webdriver.Chrome) -> str:
    """The ghost text on screen (empty when none), checked to be drawn: a ghost said to be shown with no
    painted pixels fails here."""
    try:  # the text changes at once, the pixels at the next frame: a loaded machine may read in between
        WebDriverWait(driver, WAIT_S).until(lambda d: not (got := _drawn(d))["text"] or got["inked"] > 0)
    except TimeoutException:
        pass
    drawn = _drawn(driver)
    assert not drawn["text"] or drawn["inked"] > 0, drawn
    return drawn["text"]


def _wait_for_ghost(driver: webdriver.Chrome) -> str:
    return WebDriverWait(driver, WAIT_S).until(lambda d: _ghost(d))


def _keys(driver: webdriver.Chrome, *keys: str) -> None:
    """Type into whatever has the focus, where its caret is (send_keys on an element moves the caret)."""
    ActionChains(driver).send_keys(*keys).perform()


def _chord(driver: webdriver.Chrome, modifier: str, key: str) -> None:
    ActionChains(driver).key_down(modifier).send_keys(key).key_up(modifier).perform()


def _type_lines(driver: webdriver.Chrome, lines: list[str]) -> None:
    for i, line in enumerate(lines):
        if i:
            _keys(driver, Keys.ENTER)
        if line:
            _keys(driver, line)


def _text(driver: webdriver.Chrome) -> str:
    """The compose box's own text, as the site would send it: a textarea's value, an editor's lines (one
    child element each, as the fixture editors and Chromium's Enter make them)."""
    return driver.execute_script(
        "const b = document.getElementById('body');"
        "if (b.tagName === 'TEXTAREA') return b.value;"
        "return Array.from(b.children, (c) => c.innerText.replace(/\\n$/, '')).join('\\n')"
        "  .replace(/\\u00a0/g, ' ');")


def _open_textarea(driver: webdriver.Chrome, site: str) -> None:
    driver.get(f"{site}/textarea.html")
    driver.find_element(By.ID, "subject").send_keys(SUBJECT)
    driver.find_element(By.ID, "body").click()
    _type_lines(driver, LINES)


def _caret_to_first_line(driver: webdriver.Chrome) -> None:
    driver.execute_script(
        "const b = document.getElementById('body'); b.focus();"
        "const r = document.createRange(); r.setStart(b.firstElementChild, 0); r.collapse(true);"
        "const s = getSelection(); s.removeAllRanges(); s.addRange(r);")


def _open_editor(driver: webdriver.Chrome, site: str) -> None:
    driver.get(f"{site}/editor.html")
    driver.find_element(By.ID, "to").send_keys("Dana Whitfield <dana.whitfield@harbourline.example>")
    driver.find_element(By.ID, "subject").send_keys(SUBJECT)
    _caret_to_first_line(driver)
    _type_lines(driver, LINES)


def _screenshot(driver: webdriver.Chrome, name: str) -> None:
    SCREENSHOT.parent.mkdir(parents=True, exist_ok=True)
    assert driver.save_screenshot(str(SCREENSHOT.parent / name))


def _settle(driver: webdriver.Chrome) -> None:
    """Leave the last page and let what it had on its way (a debounced question, an event) arrive, so that a
    test counting requests counts only its own."""
    driver.get("about:blank")
    time.sleep(QUIET_S)


def _event_kinds(server: Recorded, mark: int) -> list[str]:
    return [r["body"]["kind"] for r in server.recorder.since(mark, "/v1/events")]


def _wait_for_event(server: Recorded, mark: int, kind: str) -> None:
    WebDriverWait(None, WAIT_S).until(lambda _: kind in _event_kinds(server, mark))


# ----------------------------------------------------------------------------- tests


def test_the_options_page_pairs_and_shows_the_model(driver, server, site, paired):
    """Pairing proves the pasted token without sending it; every later request is signed once, no key sent."""
    token = server.pairing_url.split("token=")[1]
    pairs = [r for r in server.recorder.since(0) if r["path"].startswith("/v1/pair")]
    assert [(r["method"], r["path"]) for r in pairs] == [("POST", "/v1/pair/challenge"), ("POST", "/v1/pair")]
    assert all(r["origin"] == f"chrome-extension://{paired}" and r["authorization"] is None for r in pairs)
    assert pairs[1]["body"]["name"] == "seqlab extension in Chromium" and token not in json.dumps(pairs)
    kept = json.loads(server.pairing_file.read_text())["paired"]
    assert [p["origin"] for p in kept] == [f"chrome-extension://{paired}"]
    assert token not in server.pairing_file.read_text()
    _options(driver)
    WebDriverWait(driver, WAIT_S).until(lambda d: "gru" in d.find_element(By.ID, "server-model").text)
    # afterwards each request is signed with a nonce of its own: no token, no key, nothing to replay
    later = [r for r in server.recorder.since(0) if r["authorization"]]
    assert later and all(r["authorization"].startswith("SeqlabHMAC id=") and token not in r["authorization"]
                         and kept[0]["secret"] not in r["authorization"] for r in later)
    assert len({r["authorization"] for r in later}) == len(later)
    replayed = httpx.get(f"{server.url}/health", headers={"Authorization": later[-1]["authorization"]})
    assert replayed.status_code == 401  # a captured request, sent again
    _options(driver)
    WebDriverWait(driver, WAIT_S).until(lambda d: "gru" in d.find_element(By.ID, "server-model").text)
    assert driver.find_element(By.ID, "server-status").text == "ok"
    assert driver.find_element(By.ID, "server-base").text == server.url
    _screenshot(driver, "extension-options.png")
    site_switches = driver.find_elements(By.CSS_SELECTOR, "#sites input[type=checkbox]")
    on = [s.get_attribute("data-origin") for s in site_switches if s.is_selected()]
    assert on == [site]  # the fixture site alone; Gmail and the others listed stay off
    assert len(site_switches) > 1


def test_pairing_refuses_other_addresses_and_wrong_tokens(driver, server, paired):
    """A URL off this machine is refused before anything is sent; a wrong token is the server's 401. Either
    way the pairing made before stays."""
    _options(driver)
    mark = server.recorder.mark()
    field = driver.find_element(By.ID, "pair-url")
    field.send_keys("http://mail.example.org/?token=abc")
    driver.find_element(By.ID, "pair").click()
    WebDriverWait(driver, WAIT_S).until(lambda d: "this machine" in d.find_element(By.ID, "message").text)
    assert not server.recorder.since(mark)
    field.clear()
    field.send_keys(f"{server.url}/?token=not-the-token")
    driver.find_element(By.ID, "pair").click()
    WebDriverWait(driver, WAIT_S).until(lambda d: "401" in d.find_element(By.ID, "message").text)
    assert [r["path"] for r in server.recorder.since(mark)] == ["/v1/pair/challenge", "/v1/pair"]
    assert "not-the-token" not in json.dumps(server.recorder.since(mark))  # proven, never sent
    assert len(json.loads(server.pairing_file.read_text())["paired"]) == 1
    _options(driver)
    WebDriverWait(driver, WAIT_S).until(lambda d: d.find_element(By.ID, "server-status").text == "ok")


def test_textarea_tab_accepts_and_undo_takes_it_back(driver, server, site, paired):
    mark = server.recorder.mark()
    _open_textarea(driver, site)
    ghost = _wait_for_ghost(driver)
    assert _text(driver) == BODY  # shown, not written
    complete = server.recorder.since(mark, "/v1/complete")[-1]
    assert complete["body"]["prefix"] == BODY and complete["body"]["subject"] == SUBJECT
    assert complete["origin"] == f"chrome-extension://{paired}"
    # on the wire the text is sealed (only the paired server opens it), and no question waits for a /health
    assert set(json.loads(complete["wire"])) == {"iv", "ciphertext"} and "Dana" not in complete["wire"]
    asked = [r["path"] for r in server.recorder.since(mark)]
    assert asked.count("/health") < asked.count("/v1/complete") - 1, asked  # a /health each had asked as many
    assert "context" not in complete["body"]  # this page answers no message
    _screenshot(driver, "extension-textarea.png")
    _keys(driver, Keys.TAB)
    assert _text(driver) == BODY + ghost
    assert driver.switch_to.active_element.get_attribute("id") == "body"  # Tab took the ghost, not the focus
    assert _ghost(driver) == "" or not (BODY + ghost).endswith(_ghost(driver))
    _wait_for_event(server, mark, "shown")
    _wait_for_event(server, mark, "accepted")
    # the next question (each edit asks one) names the session the server issued with the last answer
    asked = WebDriverWait(driver, WAIT_S).until(lambda _: [r for r in server.recorder.since(mark, "/v1/complete")
                                                           if r["body"]["prefix"] == BODY + ghost])
    assert asked[0]["body"]["session"]
    _chord(driver, Keys.CONTROL, "z")
    assert _text(driver) == BODY


def test_textarea_ctrl_right_takes_one_word_and_typing_through_shrinks(driver, server, site, paired):
    _open_textarea(driver, site)
    ghost = _wait_for_ghost(driver)
    stripped = ghost.lstrip()
    word = ghost[: len(ghost) - len(stripped)] + stripped.split()[0]
    _chord(driver, Keys.CONTROL, Keys.ARROW_RIGHT)
    assert _text(driver) == BODY + word
    rest = ghost[len(word):]
    if len(rest) >= 1:
        assert _ghost(driver) == rest
        mark = server.recorder.mark()
        _keys(driver, rest[0])
        assert _ghost(driver) == rest[1:]
        time.sleep(QUIET_S)
        assert not server.recorder.since(mark, "/v1/complete")  # typing through asks nothing new
        assert _ghost(driver) == rest[1:]


def test_textarea_escape_dismisses_and_tab_then_moves_on(driver, server, site, paired):
    _open_textarea(driver, site)
    _wait_for_ghost(driver)
    mark = server.recorder.mark()
    _keys(driver, Keys.ESCAPE)
    assert _ghost(driver) == ""
    assert _text(driver) == BODY
    _wait_for_event(server, mark, "dismissed")
    _keys(driver, Keys.TAB)  # nothing shown: the site's Tab, to the next field
    assert driver.switch_to.active_element.get_attribute("id") == "password"
    assert _text(driver) == BODY


def test_a_ghost_wrapping_below_the_textareas_last_line_is_not_shown_nor_taken(driver, server, site, paired):
    """A ghost whose words fall on the line below a scrolled textarea's last visible one (the caret is at the
    end of a full line, the ghost's space hangs there) is not shown, and Tab is the site's; once the caret
    moves down, the next ghost is drawn."""
    _open_textarea(driver, site)
    # the last visible line filled with words to its end; the page writes all but the last two letters
    filled = driver.execute_script("""
        const b = document.getElementById('body');
        b.style.overflowY = 'scroll';  // a scrollbar from the start: one that comes with the overflow rewraps
        // exactly ten lines tall, no padding below them: the eleventh is wholly out of sight
        Object.assign(b.style, {boxSizing: 'content-box', paddingBottom: '0px',
                                height: `${10 * parseFloat(getComputedStyle(b).lineHeight)}px`});
        let v = b.value;
        for (;;) {
            b.value = v + ' the';
            if (b.scrollHeight > b.clientHeight) break;
            v = b.value;
        }
        b.value = v.slice(0, -2);
        b.setSelectionRange(v.length - 2, v.length - 2);
        return v;""")
    # the text is the person's again only after an edit of theirs: the next-to-last letter, then the last
    # (no other letter in between, which could be wider and wrap the line's last word)
    _keys(driver, filled[-2])
    mark = server.recorder.mark()
    _keys(driver, filled[-1])  # the person types the line's last letter: a question is asked
    try:
        answered = WebDriverWait(driver, WAIT_S).until(
            lambda _: [r for r in server.recorder.since(mark, "/v1/complete")
                       if r["body"]["prefix"] == filled and "answer" in r])[-1]  # asked, and answered
    except TimeoutException:
        asked = [r["body"]["prefix"][-30:] for r in server.recorder.since(mark, "/v1/complete")]
        raise AssertionError(f"not asked for the full line; asked: {asked}, box: {_text(driver)[-30:]!r}") from None
    assert answered["answer"]["text"].startswith(" ") and answered["answer"]["text"].strip(), answered["answer"]
    time.sleep(QUIET_S)
    assert _drawn(driver)["text"] == "", _drawn(driver)
    _keys(driver, Keys.TAB)
    assert driver.switch_to.active_element.get_attribute("id") == "password" and _text(driver) == filled
    driver.find_element(By.ID, "body").click()
    _chord(driver, Keys.CONTROL, Keys.END)
    _keys(driver, Keys.ENTER, "the")
    assert _wait_for_ghost(driver)  # drawn, with ink: the box scrolled to the caret's new line


def test_password_fields_get_nothing(driver, server, site, paired):
    _settle(driver)
    driver.get(f"{site}/textarea.html")
    mark = server.recorder.mark()
    driver.find_element(By.ID, "password").click()
    _keys(driver, "Could you send me the rep")
    time.sleep(QUIET_S)
    assert not server.recorder.since(mark, "/v1/complete")
    assert _ghost(driver) == ""


def test_contenteditable_ghost_is_never_the_page_text_and_tab_keeps_undo(driver, server, site, paired):
    _open_editor(driver, site)
    ghost = _wait_for_ghost(driver)
    page = driver.execute_script("return document.getElementById('body').outerHTML")
    assert ghost.strip() not in driver.execute_script("return document.body.innerText")
    assert "seqlab" not in page  # nothing of the extension inside the editor
    assert _text(driver).startswith(BODY + "\n")
    assert "Sam Okafor" in _text(driver)  # the signature below the caret, untouched
    _screenshot(driver, SCREENSHOT.name)
    _keys(driver, Keys.TAB)
    assert _text(driver).startswith(BODY + ghost.rstrip())
    assert _text(driver).endswith("\nSam Okafor\nHarbourline Logistics")
    _chord(driver, Keys.CONTROL, "z")
    assert _text(driver).startswith(BODY + "\n")
    assert ghost.strip() not in _text(driver)


def test_contenteditable_ctrl_right_typing_through_escape_and_tab(driver, server, site, paired):
    _open_editor(driver, site)
    ghost = _wait_for_ghost(driver)
    stripped = ghost.lstrip()
    word = ghost[: len(ghost) - len(stripped)] + stripped.split()[0]
    _chord(driver, Keys.CONTROL, Keys.ARROW_RIGHT)
    assert _text(driver).startswith(BODY + word + "\n")
    rest = ghost[len(word):]
    typed = ""
    if len(rest) >= 2:
        assert _ghost(driver) == rest
        mark = server.recorder.mark()
        typed = rest[0]
        _keys(driver, typed)  # typing through: the ghost shrinks and nothing is asked
        assert _ghost(driver) == rest[1:]
        time.sleep(QUIET_S)
        assert not server.recorder.since(mark, "/v1/complete") and _ghost(driver) == rest[1:]
    if _ghost(driver):
        _keys(driver, Keys.ESCAPE)
        assert _ghost(driver) == ""
    assert _text(driver).startswith(BODY + word + typed + "\n")
    _keys(driver, Keys.TAB)  # nothing shown: the site's Tab, out of the editor to the Send button
    assert driver.switch_to.active_element.get_attribute("id") == "send"


def test_a_reply_sends_its_subject_and_the_quoted_original(driver, server, site, paired):
    server.recorder.pretend_context = True
    try:
        _options(driver)  # the options page reads /health afresh: the worker learns the model reads context
        driver.get(f"{site}/reply.html")
        _caret_to_first_line(driver)
        mark = server.recorder.mark()
        _keys(driver, "Thanks Dana, I will send the rep")
        ghost = _wait_for_ghost(driver)
        asked = server.recorder.since(mark, "/v1/complete")[-1]
        _screenshot(driver, "extension-reply.png")
    finally:
        server.recorder.pretend_context = False
    assert asked["body"]["subject"] == "Re: Quarterly report"
    assert asked["body"]["prefix"] == "Thanks Dana, I will send the rep"
    assert "Could you send me the quarterly report by Friday?" in asked["context"]
    assert "Thanks Dana, I will send" not in asked["context"]
    _keys(driver, Keys.TAB)
    assert _text(driver).startswith("Thanks Dana, I will send the rep" + ghost.rstrip())
    assert "On Tue, Dana Whitfield wrote:" in _text(driver)


def test_a_site_not_switched_on_gets_nothing(driver, server, site, paired):
    other = site.replace("127.0.0.1", "localhost")  # the same pages, another origin
    _settle(driver)
    mark = server.recorder.mark()
    driver.get(f"{other}/textarea.html")
    driver.find_element(By.ID, "body").click()
    _type_lines(driver, LINES)
    time.sleep(QUIET_S)
    assert not server.recorder.since(mark)
    assert not isolated_contexts(driver) and _ghost(driver) == ""  # no content script, nothing drawn
    _keys(driver, Keys.TAB)
    assert driver.switch_to.active_element.get_attribute("id") == "password"


def test_a_hostile_page_cannot_reach_the_extension_or_the_server(driver, server, site, paired):
    _settle(driver)
    driver.get(f"{site}/hostile.html")
    mark = server.recorder.mark()
    driver.set_script_timeout(WAIT_S)
    report = driver.execute_async_script("attack(arguments[0]).then(arguments[1])", paired)
    time.sleep(QUIET_S)
    assert report["runtime"] == "none"  # no chrome.runtime for pages: nothing externally connectable
    assert report["sendMessage"] == []
    assert not server.recorder.since(mark)  # synthetic events and messages asked the server nothing
    assert report["shadowRoot"] in ("null", "no host")
    assert report["tabChanged"] == [False, False]
    pairs = server.recorder.since(0, "/v1/pair")
    secrets = [server.pairing_url.split("token=")[1]] + [p["secret"] for p in
                                                          json.loads(server.pairing_file.read_text())["paired"]]
    assert pairs and all(s not in report["html"] + report["storage"] for s in secrets)
    # with a ghost shown for the person's own typing, the page's synthetic keys still accept nothing
    driver.get(f"{site}/hostile.html")
    driver.find_element(By.ID, "body").click()
    _type_lines(driver, LINES)
    ghost = _wait_for_ghost(driver)
    for key in ("Tab", "ArrowRight"):
        driver.execute_script(
            "document.getElementById('body').dispatchEvent(new KeyboardEvent('keydown',"
            " {key: arguments[0], ctrlKey: arguments[0] === 'ArrowRight', bubbles: true, cancelable: true}))", key)
    assert _text(driver) == BODY and _ghost(driver) == ghost


def test_a_content_script_cannot_read_the_pairing_secret(driver, server, site, paired):
    """The pairing secret is a non-extractable CryptoKey in the extension's own IndexedDB; storage.local holds
    only the address and the public pairing id, and is closed to content scripts (TRUSTED_CONTEXTS)."""
    _settle(driver)
    driver.get(f"{site}/textarea.html")
    seen = WebDriverWait(driver, WAIT_S, ignored_exceptions=(NoContentScript,)).until(lambda d: isolated_eval(d, """
        (async () => {
          const out = {};
          try { out.local = JSON.stringify(await chrome.storage.local.get(null)); }
          catch (e) { out.local = "refused: " + e.message; }
          out.databases = JSON.stringify(await indexedDB.databases());
          return out;
        })()"""))
    print(json.dumps(seen))  # for the closing note
    secrets = [server.pairing_url.split("token=")[1]] + [p["secret"] for p in
                                                          json.loads(server.pairing_file.read_text())["paired"]]
    assert all(s not in json.dumps(seen) for s in secrets)
    assert seen["local"].startswith("refused: ")
    assert "seqlab" not in seen["databases"]  # the page's origin's databases: the extension's are not among them
    _options(driver)  # a trusted context: the worker's storage holds no secret either
    local = driver.execute_async_script("chrome.storage.local.get(null).then(arguments[0])")
    assert set(local["server"]) == {"base", "id"} and all(s not in json.dumps(local) for s in secrets)


def test_sending_the_email_hands_it_to_a_learning_server(driver, server, site, paired):
    """A trusted click on the page's Send button (and Ctrl+Enter) passes the box's text, subject and quoted
    original to `serve --learn`; the page's own scripted click on Send passes nothing."""
    _settle(driver)
    mark = server.recorder.mark()
    _open_editor(driver, site)
    _wait_for_ghost(driver)
    driver.execute_script("document.getElementById('send').click()")  # the page's script, not the person
    time.sleep(QUIET_S)
    assert server.recorder.since(mark, "/v1/sent") == []
    driver.find_element(By.ID, "send").click()
    WebDriverWait(None, WAIT_S).until(lambda _: server.recorder.since(mark, "/v1/sent"))
    sent = server.recorder.since(mark, "/v1/sent")
    assert len(sent) == 1 and sent[0]["origin"] == f"chrome-extension://{paired}"
    assert sent[0]["body"]["subject"] == SUBJECT and sent[0]["body"]["body"].startswith(BODY)
    mark = server.recorder.mark()
    _open_textarea(driver, site)
    _chord(driver, Keys.CONTROL, Keys.ENTER)
    WebDriverWait(None, WAIT_S).until(lambda _: server.recorder.since(mark, "/v1/sent"))
    assert server.recorder.since(mark, "/v1/sent")[0]["body"]["body"].startswith(BODY)


# ----------------------------------------------------------------------------- what a switched-on site can get


def _answers(server: Recorded, mark: int) -> list[str]:
    """What the server suggested since `mark` (the texts of its /v1/complete answers)."""
    return [r["answer"]["text"] for r in server.recorder.since(mark, "/v1/complete")
            if isinstance(r.get("answer"), dict) and r["answer"].get("text")]


def _asked(server: Recorded, mark: int) -> list[str]:
    """The prefixes the server was asked to complete since `mark`."""
    return [r["body"]["prefix"] for r in server.recorder.since(mark, "/v1/complete")]


def _click(driver: webdriver.Chrome, element_id: str) -> None:
    """The person's click at the middle of an element, on whatever lies on top there."""
    ActionChains(driver).move_to_element(driver.find_element(By.ID, element_id)).click().perform()


def _rect(driver: webdriver.Chrome, element_id: str) -> dict[str, float]:
    return driver.execute_script("return document.getElementById(arguments[0]).getBoundingClientRect().toJSON()",
                                 element_id)


def _ghost_grey_on_screen(driver: webdriver.Chrome, rect: dict[str, float]) -> int:
    """How many pixels of a screenshot (the page as the person sees it, at scale 1) inside `rect` have the
    ghost's grey (#8a8f98, the cores of its glyphs; the page's text is near-black)."""
    shot = driver.execute_cdp_cmd("Page.captureScreenshot", {"format": "png"})["data"]
    return driver.execute_async_script("""
        const [data, r, done] = arguments;
        const img = new Image();
        img.onload = () => {
          const c = document.createElement("canvas");
          [c.width, c.height] = [img.width, img.height];
          const ctx = c.getContext("2d");
          ctx.drawImage(img, 0, 0);
          const px = ctx.getImageData(Math.floor(r.left), Math.floor(r.top), Math.ceil(r.right - r.left),
                                      Math.ceil(r.bottom - r.top)).data;
          let n = 0;
          for (let i = 0; i < px.length; i += 4) {
            if (Math.abs(px[i] - 0x8a) < 24 && Math.abs(px[i + 1] - 0x8f) < 24 && Math.abs(px[i + 2] - 0x98) < 24) n++;
          }
          done(n);
        };
        img.src = "data:image/png;base64," + data;""", shot, rect)


def test_a_page_defining_the_ghost_element_gets_no_shadow_root(driver, server, site, paired):
    """ghost-elements.html defines custom elements under the names an overlay might take (seqlab-ghost first),
    each keeping the ElementInternals its constructor gets, whose shadowRoot is the element's root even when
    closed, and watches every element added to the page, looking into each every 3 ms. With a suggestion on
    screen, none of its constructors has run for the extension, and it has seen no text of the suggestion."""
    _settle(driver)
    mark = server.recorder.mark()
    driver.get(f"{site}/ghost-elements.html")
    driver.find_element(By.ID, "body").click()
    _type_lines(driver, LINES)
    ghost = _wait_for_ghost(driver)
    answer = _answers(server, mark)[-1]
    assert answer.strip() and ghost.strip() == answer.strip()
    time.sleep(QUIET_S)
    report = driver.execute_script("return report()")
    assert report["constructed"] == []
    assert "div" in report["added"] and report["roots"] == 0  # it saw the overlay's host, and no root in it
    assert all(answer.strip() not in seen for seen in report["seen"]), report["seen"]
    assert _ghost(driver) == ghost  # on screen all along


def test_window_find_never_finds_the_ghost(driver, server, site, paired):
    """find-ghost.html, told the suggestion on screen, searches for it with window.find() every 2 ms for a
    second, in a textarea and in a contenteditable editor: it never finds it, though the same search finds the
    page's own text. The ghost is drawn all the while: the canvas has inked pixels on the caret's line, after
    the typed text, inside the box, and a screenshot shows its grey there (none once Esc dismissed it)."""
    _settle(driver)
    driver.get(f"{site}/find-ghost.html")
    driver.set_script_timeout(WAIT_S)
    for box_id in ("body", "rich"):
        mark = server.recorder.mark()
        driver.find_element(By.ID, box_id).click()
        _type_lines(driver, LINES)
        ghost = _wait_for_ghost(driver)
        target = _answers(server, mark)[-1].strip()
        assert target == ghost.strip()
        assert target not in driver.execute_script(
            "return document.body.innerText + document.getElementById('body').value")
        drawn = _drawn(driver)
        box = _rect(driver, box_id)
        line = 15 * 1.5  # fixture.css: 15px/1.5, 12px padding at the top and 14px at the left
        ink = drawn["ink"]
        assert drawn["inked"] > 0 and box["left"] + 14 + 100 < ink["left"] and ink["right"] <= box["right"]
        assert box["top"] + 12 + 2 * line - 1 <= ink["top"] and ink["bottom"] <= box["top"] + 12 + 3 * line + 1
        hunt = driver.execute_async_script("hunt(arguments[0], 1000).then(arguments[1])", target)
        assert hunt["tries"] > 0 and hunt["found"] == 0, hunt
        assert _ghost(driver) == ghost  # still on screen: the page had its chance
        assert _ghost_grey_on_screen(driver, ink) > 0  # and seen there in a screenshot
        _keys(driver, Keys.ESCAPE)
        assert _ghost(driver) == "" and _ghost_grey_on_screen(driver, ink) == 0
    assert driver.execute_async_script("hunt('Looks like mail', 20).then(arguments[0])")["found"] > 0


def test_the_server_is_asked_only_the_text_the_person_can_see(driver, server, site, paired):
    """hidden-prefix.html puts text before the caret when the person has typed "thanks": hidden in twelve ways
    (display:none, visibility, aria-hidden, a transparent, a faint and a text-fill colour, opacity 0, font-size 0,
    off-screen, clipped, a zero-size box, content-visibility), at once in its own input listener (which runs
    before the extension's) or 60 ms later, while the extension waits to ask. The server is asked the visible
    text alone. Visible text the page puts there gets no question until the person types again."""
    for delay in (-1, 60):
        _settle(driver)
        driver.get(f"{site}/hidden-prefix.html")
        _caret_to_first_line(driver)
        driver.execute_script("arm('hidden', 'thanks', arguments[0])", delay)
        mark = server.recorder.mark()
        _keys(driver, "Hi Dana, thanks")
        WebDriverWait(None, WAIT_S).until(lambda _, m=mark: "Hi Dana, thanks" in _asked(server, m))
        time.sleep(QUIET_S)
        planted = driver.execute_script("return document.getElementById('body').textContent")
        assert planted.count("PIN") == 12 and planted.index("PIN") < planted.index("Sam Okafor")
        assert _asked(server, mark)[-1] == "Hi Dana, thanks"
        assert not any("PIN" in prefix for prefix in _asked(server, mark)), _asked(server, mark)
    for delay in (-1, 60):
        _settle(driver)
        driver.get(f"{site}/hidden-prefix.html")
        _caret_to_first_line(driver)
        driver.execute_script("arm('visible', 'thanks', arguments[0])", delay)
        mark = server.recorder.mark()
        _keys(driver, "Hi Dana, thanks")
        WebDriverWait(driver, WAIT_S).until(lambda d: "PIN" in d.find_element(By.ID, "body").text)
        time.sleep(QUIET_S)
        assert not any("PIN" in prefix for prefix in _asked(server, mark)), _asked(server, mark)
        _keys(driver, " 1")  # the person, who now sees the page's words, types on
        WebDriverWait(None, WAIT_S).until(lambda _, m=mark: any(p.endswith(" 1") for p in _asked(server, m)))
        assert _asked(server, mark)[-1] == "Hi Dana, thanks and the PIN of my bank card is 1"


def test_only_the_persons_own_email_and_send_reach_the_learner(driver, server, site, paired):
    """fake-send.html holds 1,960 characters of its own in a box and wants them stored as the person's
    writing. Nothing reaches /v1/sent when its script moves the focus into that box and the person clicks a
    Send it drew (a [role=button]); nor when the person types a word there and sends; nor when the page adds
    its text to the box the person wrote in; nor when the person clicks Save draft or Discard, each under a
    Send the person cannot see (opacity 0; transparent text and background). The person's own email, sent
    with the real Send, arrives, as its visible text (the page's hidden text in the box left out)."""
    _settle(driver)
    mark = server.recorder.mark()
    driver.get(f"{site}/fake-send.html")
    driver.execute_script("steal()")  # the page's script: the caret into the box holding its text
    _click(driver, "fake-send")
    time.sleep(QUIET_S)
    assert server.recorder.since(mark, "/v1/sent") == []
    driver.execute_script("steal()")
    _keys(driver, " ok")  # the person, thinking the caret is theirs, types a word and sends
    _click(driver, "send")
    time.sleep(QUIET_S)
    assert server.recorder.since(mark, "/v1/sent") == []
    driver.get(f"{site}/fake-send.html")
    driver.find_element(By.CSS_SELECTOR, "#body > div").click()
    _type_lines(driver, LINES)
    driver.execute_script("stuff()")  # the page adds its text to the person's
    _click(driver, "send")
    time.sleep(QUIET_S)
    assert server.recorder.since(mark, "/v1/sent") == []
    driver.get(f"{site}/fake-send.html")
    driver.find_element(By.CSS_SELECTOR, "#body > div").click()
    _type_lines(driver, LINES)
    for innocent in ("draft", "discard"):
        _click(driver, innocent)
    time.sleep(QUIET_S)
    assert server.recorder.since(mark, "/v1/sent") == []
    _click(driver, "send")
    WebDriverWait(None, WAIT_S).until(lambda _: server.recorder.since(mark, "/v1/sent"))
    sent = server.recorder.since(mark, "/v1/sent")
    assert len(sent) == 1 and sent[0]["body"]["body"] == BODY and sent[0]["body"]["subject"] == "Invoice"


def test_forget_unpairs_and_the_key_stops_working(driver, server, site, paired):
    """The options page's Forget deletes the pairing on the server; the compose box then goes quiet.
    First, a pairing dropped on the server's side is noticed by the options page, and pairing again mends it."""
    signed = [r["authorization"] for r in server.recorder.since(0, "/v1/complete")][-1]
    assert httpx.delete(f"{server.url}/v1/pair", headers={"Authorization": signed}).status_code == 401  # a replay
    server.pairing_file.write_text('{"paired": []}')  # dropped on the server's side (another server, by hand)
    _options(driver)
    WebDriverWait(driver, WAIT_S).until(lambda d: "no longer knows" in d.find_element(By.ID, "server-state").text)
    driver.find_element(By.ID, "pair-url").send_keys(server.pairing_url)
    driver.find_element(By.ID, "pair").click()
    WebDriverWait(driver, WAIT_S).until(lambda d: "gru" in d.find_element(By.ID, "server-model").text)
    mark = server.recorder.mark()
    driver.find_element(By.ID, "forget").click()
    WebDriverWait(driver, WAIT_S).until(lambda d: d.find_element(By.ID, "message").text.startswith("forgotten"))
    deletes = [r for r in server.recorder.since(mark, "/v1/pair") if r["method"] == "DELETE"]
    assert len(deletes) == 1 and deletes[0]["origin"] == f"chrome-extension://{paired}"
    assert deletes[0]["authorization"].startswith("SeqlabHMAC ")
    assert json.loads(server.pairing_file.read_text())["paired"] == []
    assert "Not paired" in driver.find_element(By.ID, "server-state").text
    _settle(driver)
    mark = server.recorder.mark()
    _open_textarea(driver, site)
    time.sleep(QUIET_S)
    assert not server.recorder.since(mark, "/v1/complete")  # no key, no call
    assert _ghost(driver) == ""


def test_only_https_sites_and_this_machine_can_be_switched_on(driver, server, paired):
    """A plain http site elsewhere is refused by the options page and by the worker; https and loopback pass."""
    _options(driver)
    check = "try { return siteOrigin(arguments[0]); } catch (e) { return 'refused: ' + e.message; }"
    for text, want in (("mail.example.org", "https://mail.example.org"),
                       ("https://mail.example.org/x", "https://mail.example.org"),
                       ("http://127.0.0.1:8080/mail", "http://127.0.0.1:8080"),
                       ("http://localhost:3000", "http://localhost:3000")):
        assert driver.execute_script(check, text) == want
    for text in ("http://mail.example.org", "http://192.168.1.5", "http://127.0.0.1.evil.example", "ftp://x.org"):
        assert driver.execute_script(check, text).startswith("refused: only https sites"), text
    driver.find_element(By.ID, "site-origin").send_keys("http://mail.example.org")
    driver.find_element(By.ID, "site-add").click()
    WebDriverWait(driver, WAIT_S).until(lambda d: "only https" in d.find_element(By.ID, "message").text)
    # the worker refuses it too, asked straight (the page's check skipped), and takes an https site
    ask = "chrome.runtime.sendMessage(arguments[0]).then(arguments[1])"
    refused = driver.execute_async_script(ask, {"type": "site", "origin": "http://mail.example.org", "on": True})
    assert "only https" in refused["error"]
    taken = driver.execute_async_script(ask, {"type": "site", "origin": "https://mail.example.org", "on": True})
    assert "https://mail.example.org" in taken["sites"]
    left = driver.execute_async_script(ask, {"type": "site", "origin": "https://mail.example.org", "on": False})
    assert "https://mail.example.org" not in left["sites"]
    assert json.loads((EXTENSION / "manifest.json").read_text())["optional_host_permissions"] == ["https://*/*"]


def test_an_old_key_and_http_sites_are_dropped_at_start_up(driver, server, site, paired):
    """What an older version kept: a bearer key (which went to whatever listened on the port) and a plain http
    site. At the worker's next start both are gone, and the options page says so and why."""
    _options(driver)
    driver.execute_async_script(
        "chrome.storage.local.get('sites').then(({sites}) => chrome.storage.local.set({"
        " server: {base: arguments[0], key: 'an-old-bearer-key', origin: location.origin},"
        " sites: [...sites, 'http://mail.example.org']})).then(arguments[1])", server.url)
    driver.get("about:blank")
    driver.execute_cdp_cmd("ServiceWorker.enable", {})
    driver.execute_cdp_cmd("ServiceWorker.stopAllWorkers", {})  # the worker starts afresh at the next message
    time.sleep(QUIET_S)
    _options(driver)
    notice = WebDriverWait(driver, WAIT_S).until(lambda d: d.find_element(By.ID, "notice").text)
    assert "old pairing was deleted" in notice and "Switched off http://mail.example.org" in notice
    assert "Not paired" in driver.find_element(By.ID, "server-state").text
    local = driver.execute_async_script("chrome.storage.local.get(null).then(arguments[0])")
    assert "server" not in local and "an-old-bearer-key" not in json.dumps(local)
    assert local["sites"] == [site]


FAKE_TEXT = " and my bank details are"


@contextmanager
def _fake_seqlab(port: int) -> Iterator[list[dict[str, Any]]]:
    """A program that took the paired port after the server stopped, answering as seqlab would (/health: ok,
    a model, learning; /v1/complete: a text of its own; a `Seqlab-Proof` it cannot make), and noting all it
    is sent."""
    seen: list[dict[str, Any]] = []

    class Fake(http.server.BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

        def answer(self) -> None:
            size = int(self.headers.get("content-length") or 0)
            seen.append({"method": self.command, "path": self.path, "body": self.rfile.read(size).decode("latin-1"),
                         "headers": {k.lower(): v for k, v in self.headers.items()}})
            data: dict[str, Any] = {"ok": True, "stored": True, "emails": 1}
            if self.path == "/health":
                data = {"status": "ok", "learning": {"emails": 3, "steps": 0},
                        "model": {"mixer": "gru", "params": 61000, "tokenizer": "byte", "cross_attention": True}}
            elif self.path == "/v1/complete":
                data = {"id": "fake", "text": FAKE_TEXT, "confidence": 0.99, "words": 4, "latency_ms": 1.0,
                        "cut_chars": 0, "threshold": 0.0, "session": "fake"}
            out = json.dumps(data).encode()
            self.send_response(200)
            for name, value in (("content-type", "application/json"), ("content-length", str(len(out))),
                                ("access-control-allow-origin", self.headers.get("origin") or "*"),
                                ("access-control-allow-headers", "authorization, content-type"),
                                ("access-control-allow-methods", "GET, POST, DELETE"),
                                ("access-control-expose-headers", "seqlab-proof"),
                                ("seqlab-proof", "A" * 43)):
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(out)

        do_GET = do_POST = do_DELETE = do_OPTIONS = answer

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", port), Fake)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield seen
    finally:
        httpd.shutdown()
        httpd.server_close()


def test_a_program_on_the_paired_port_gets_no_key_no_text_and_no_sent_mail(driver, site, paired, browser_run_dir,
                                                                           tmp_path):
    """Last (it pairs with a server of its own): paired with a real server, which then stops; a fake one takes
    its port. The person types and sends: the fake gets signed requests, worth nothing to the real server
    started again there, whose bodies are sealed (it reads none of the typed text, the subject or the sent
    mail in any byte it got); it shows no ghost of its own; and the options page says it is not the person's
    server."""
    from seqlab.serving.app import ServerConfig

    config = ServerConfig(run_dir=browser_run_dir, min_confidence=0.0, log_dir=tmp_path / "serve",
                          pairing_file=tmp_path / "paired.json")
    with running_server(config) as url:
        _options(driver)
        driver.find_element(By.ID, "pair-url").send_keys(f"{url}/?token={config.token}")
        driver.find_element(By.ID, "pair").click()
        WebDriverWait(driver, WAIT_S).until(lambda d: d.find_element(By.ID, "message").text == "paired")
        _open_textarea(driver, site)
        _wait_for_ghost(driver)  # the real server suggests
        _settle(driver)
    with _fake_seqlab(config.port) as fake:
        _open_editor(driver, site)
        time.sleep(QUIET_S)
        assert _ghost(driver) == "" and FAKE_TEXT not in _text(driver)
        _keys(driver, Keys.TAB)  # nothing to accept: the site's own Tab
        assert FAKE_TEXT not in _text(driver)
        driver.find_element(By.ID, "send").click()
        time.sleep(QUIET_S)
        _options(driver)
        WebDriverWait(driver, WAIT_S).until(
            lambda d: "not your seqlab server" in d.find_element(By.ID, "server-state").text)
        _screenshot(driver, "extension-not-ours.png")
    print(json.dumps([(r["method"], r["path"], r["headers"].get("authorization")) for r in fake]))  # closing note
    assert fake and all(r["path"] in ("/health", "/v1/complete", "/v1/events", "/v1/sent") for r in fake)
    posted = [r for r in fake if r["method"] == "POST"]
    assert all(set(json.loads(r["body"])) == {"iv", "ciphertext"} for r in posted), posted  # sealed, every one
    everything = json.dumps(fake)
    # each with a space or a comma, or long: none can turn up by chance in base64 of sealed bytes
    typed = [LINES[0], "Could you send me", "the rep", SUBJECT, "Sam Okafor", "Whitfield"]
    assert all(text not in everything for text in typed)
    kept = json.loads(config.pairing_file.read_text())["paired"][0]["secret"]
    assert config.token not in everything and kept not in everything and "bearer" not in everything.lower()
    # what it did get, sent on to the real server started again on the port while still fresh: 401
    with running_server(config, port=config.port) as url:
        for r in fake:
            header = r["headers"].get("authorization")
            if header:
                ts = int(header.split("ts=")[1].split(",")[0])
                assert time.time() * 1000 - ts < WINDOW_MS  # within its time window: refused for what it is
                got = httpx.request(r["method"], url + r["path"], content=r["body"].encode("latin-1"),
                                    headers={"authorization": header, "content-type": "application/json"})
                assert got.status_code == 401, got.text
        _options(driver)  # and the extension is at home again
        WebDriverWait(driver, WAIT_S).until(lambda d: d.find_element(By.ID, "server-status").text == "ok")
