"""The compose page in a real browser: `seqlab serve` on a tiny trained GRU, driven by headless Chromium.

Debian's chromium and chromedriver are used as installed (`.ci/run` installs them); nothing downloads a
browser or a driver. Without them the module is skipped, unless SEQLAB_REQUIRE_BROWSER=1 (set by CI),
when it fails instead. The tests check what the writer sees and what the keys do: the ghost text, Tab,
Ctrl+Right, Esc, typing through a suggestion, Tab moving the focus on when nothing is suggested, and the
"why?" panel.
The "replying to" box is checked against a second server whose tiny GRU reads a context
(model.context=cross): its text goes with the request, and the page shows what a direct call with
that context answers; for the first model the box stays closed and says the model does not read it.
The printed link's one-time code is checked as someone who finds it in the history would use it, and a
service worker left on the port by another program's page (tests/browser_fixtures/) records what it sees.
The last test saves out/screenshots/compose.png for the README.
"""

from __future__ import annotations

import http.server
import json
import re
import shutil
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest
from selenium import webdriver
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.support.ui import WebDriverWait
from serving_helpers import Served, chromium, require_browser, served, static_site

REPO = Path(__file__).resolve().parents[1]
FIXTURES = Path(__file__).resolve().parent / "browser_fixtures"
SCREENSHOT = REPO / "out" / "screenshots" / "compose.png"
WHY_SCREENSHOT = REPO / "out" / "screenshots" / "why.png"
# Generous: the first completion loads the model on 2 shared CPU cores. Waits end as soon as they succeed.
WAIT_S = 60
SUBJECT = "Quarterly report"
REBOUND = "rebound.attacker.test"
# A web page on another origin that tries to read the person's model through their browser: a CORS fetch
# with a guessed token (preflighted), simple requests that need no preflight (text/plain, a form), a read
# of /health, and the compose page in a frame. It records what it could see in window.results.
HOSTILE_PAGE = """<!doctype html><html><body><h1>cute cats</h1><form id="f" method="post" target="sink"
action="SERVER/v1/complete" enctype="text/plain"><input name='{"prefix":"Hi","x":"' value='"}'></form>
<iframe name="sink"></iframe><iframe id="frame" src="SERVER/?token=TOKEN_GUESS"></iframe><script>
const S = "SERVER", out = {};
async function attempt(name, f) { try { out[name] = await f(); } catch (e) { out[name] = "blocked: " + e.name; } }
(async () => {
  await attempt("cors_json", async () => (await fetch(S + "/v1/complete", {method: "POST",
    headers: {"Content-Type": "application/json", "Authorization": "Bearer guess"},
    body: JSON.stringify({prefix: "Hi Dana, my password is"})})).status);
  await attempt("simple_text_plain", async () => (await fetch(S + "/v1/complete", {method: "POST",
    headers: {"Content-Type": "text/plain"}, body: JSON.stringify({prefix: "Hi"})})).status);
  await attempt("no_cors_blob", async () => (await fetch(S + "/v1/why", {method: "POST", mode: "no-cors",
    body: new Blob([JSON.stringify({prefix: "Hi", text: " a"})])})).type);
  await attempt("health", async () => JSON.stringify(await (await fetch(S + "/health")).json()));
  await attempt("rebound_health", async () => (await fetch("http://REBOUND:PORT/health")).status);
  document.getElementById("f").submit();
  window.results = out;
})();
</script></body></html>"""
BODY = "Hi Dana,\n\nCould you send me the rep"


@pytest.fixture(scope="module")
def server(browser_run_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """`seqlab serve` on a free local port as a person starts it; --min-confidence 0 so it always suggests.
    The page is opened from the URL it printed (with the token)."""
    with served(browser_run_dir, tmp_path_factory.mktemp("serve"), "--min-confidence", "0", timeout=WAIT_S) as s:
        yield s


@pytest.fixture(scope="module")
def reply_server(tiny_data_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """`seqlab serve` on a tiny GRU that reads the message being answered (model.context=cross)."""
    require_browser()
    from seqlab.config import apply_overrides, get_preset
    from seqlab.training.trainer import train

    run = tmp_path_factory.mktemp("runs") / "browser-reply"
    cfg = apply_overrides(get_preset("tiny"), [
        "model.mixer=gru", "model.pos=none", "model.context=cross", "model.ctx_layers=1",
        "train.max_steps=120", "train.eval_every=60", "train.ckpt_every=60", "train.threads=1",
    ])
    train(tiny_data_dir, run, cfg, progress=False)
    with served(run, tmp_path_factory.mktemp("serve-reply"), "--min-confidence", "0", timeout=WAIT_S) as s:
        yield s


@pytest.fixture(scope="module")
def driver(server: Served, tmp_path_factory: pytest.TempPathFactory) -> Iterator[webdriver.Chrome]:
    browser = chromium(tmp_path_factory.mktemp("chromium"),
                       # DNS rebinding without DNS: the attacker's name resolves to this machine
                       f"--host-resolver-rules=MAP {REBOUND} 127.0.0.1",
                       capabilities={"goog:loggingPrefs": {"browser": "ALL"}})  # what the page's console said
    try:
        yield browser
    finally:
        browser.quit()


# ----------------------------------------------------------------------------- helpers


def _open(driver: webdriver.Chrome, server: Served, to: str = ""):
    """Load a fresh page from the printed URL, fill the header fields, type BODY and return the body textarea."""
    driver.get(server.page)
    driver.find_element(By.ID, "to").send_keys(to)
    driver.find_element(By.ID, "subject").send_keys(SUBJECT)
    area = driver.find_element(By.ID, "body")
    area.click()
    area.send_keys(BODY)
    return area


def _ghost(driver: webdriver.Chrome) -> str:
    # textContent, not .text: WebDriver's visible text trims the leading space a suggestion often has.
    return driver.execute_script("return document.getElementById('ghost').textContent")


def _wait_for_ghost(driver: webdriver.Chrome) -> str:
    return WebDriverWait(driver, WAIT_S).until(lambda d: _ghost(d))


def _value(driver: webdriver.Chrome) -> str:
    return driver.execute_script("return document.getElementById('body').value")


def _stats(server: Served) -> dict:
    return server.get("/v1/stats")


def _wait_for_event(server: Served, kind: str, before: dict) -> None:
    """The page's events are fire and forget: wait until the server has counted one more of `kind`."""
    WebDriverWait(None, WAIT_S).until(lambda _: _stats(server)[kind] > before[kind])


def _requests(driver: webdriver.Chrome) -> str:
    return driver.find_element(By.ID, "body").get_attribute("data-requests")


# What the page sends: every request body the compose page passes to fetch, kept in window.sent.
RECORD_FETCH = """const real = window.fetch; window.sent = [];
window.fetch = (url, options = {}) => { window.sent.push([String(url), options.body || null]);
  return real(url, options); };"""
ORIGINAL = "Subject: Thursday\n\nHi Sam, can we meet in room 5 on Thursday at 10?"


def _sent_completions(driver: webdriver.Chrome) -> list[dict]:
    return [json.loads(body) for url, body in driver.execute_script("return window.sent")
            if url.endswith("/v1/complete")]


def _ready(driver: webdriver.Chrome) -> None:
    WebDriverWait(driver, WAIT_S).until(lambda d: "ready" in d.find_element(By.ID, "model").get_attribute("class"))


# ----------------------------------------------------------------------------- tests


def test_the_replying_to_box_sends_the_original_to_a_model_that_reads_it(driver, reply_server):
    driver.get(reply_server.page)
    _ready(driver)
    box, text = driver.find_element(By.ID, "reply"), driver.find_element(By.ID, "reply-to")
    assert not box.get_attribute("open") and text.is_enabled()
    driver.find_element(By.ID, "reply-summary").click()  # the box opens onto its textarea
    assert box.get_attribute("open") and text.is_displayed()
    text.send_keys(ORIGINAL)
    driver.execute_script(RECORD_FETCH)
    driver.find_element(By.ID, "subject").send_keys(SUBJECT)
    area = driver.find_element(By.ID, "body")
    area.click()
    area.send_keys(BODY)
    ghost = _wait_for_ghost(driver)
    asked = _sent_completions(driver)[-1]
    assert asked["context"] == ORIGINAL and asked["prefix"] == BODY
    # the page shows what the server answers for that body with that original
    direct = httpx.post(f"{reply_server.url}/v1/complete", headers=reply_server.headers(), timeout=30,
                        json={"prefix": BODY, "subject": SUBJECT, "max_words": 12, "sentence": True,
                                  "context": ORIGINAL}).json()
    assert direct["text"] == ghost


def test_the_replying_to_box_offers_the_originals_names_to_any_model(driver, server):
    """A model trained without a context does not read the original, but the server still copies its names
    and figures where the reply starts typing them: the box is open to every model and its text is sent."""
    driver.get(server.page)
    _ready(driver)
    text = driver.find_element(By.ID, "reply-to")
    assert text.is_enabled()
    driver.find_element(By.ID, "reply-summary").click()
    text.send_keys(ORIGINAL)
    driver.execute_script(RECORD_FETCH)
    driver.find_element(By.ID, "subject").send_keys("Re: Thursday")
    area = driver.find_element(By.ID, "body")
    area.click()
    area.send_keys("Hi Sam,\n\nYes, see you on Thu")
    ghost = _wait_for_ghost(driver)
    asked = _sent_completions(driver)[-1]
    assert asked["context"] == ORIGINAL
    direct = httpx.post(f"{server.url}/v1/complete", headers=server.headers(), timeout=30,
                        json={"prefix": "Hi Sam,\n\nYes, see you on Thu", "subject": "Re: Thursday",
                              "max_words": 12, "sentence": True, "context": ORIGINAL}).json()
    assert direct["source"] == "reply" and direct["text"].startswith("rsday") and ghost == direct["text"]


def test_tab_accepts_the_whole_suggestion(driver, server):
    before = _stats(server)
    area = _open(driver, server)
    ghost = _wait_for_ghost(driver)
    assert "%" in driver.find_element(By.ID, "status").text  # the confidence is shown
    area.send_keys(Keys.TAB)
    assert _value(driver) == BODY + ghost
    assert driver.switch_to.active_element == area  # Tab took the suggestion, not the focus
    _wait_for_event(server, "displayed", before)
    _wait_for_event(server, "accepted", before)


def test_ctrl_right_accepts_one_word(driver, server):
    area = _open(driver, server)
    ghost = _wait_for_ghost(driver)
    stripped = ghost.lstrip()
    word = ghost[: len(ghost) - len(stripped)] + stripped.split()[0]
    area.send_keys(Keys.CONTROL, Keys.ARROW_RIGHT)
    assert _value(driver) == BODY + word
    assert _ghost(driver) == ghost[len(word):]


def test_escape_dismisses(driver, server):
    area = _open(driver, server)
    _wait_for_ghost(driver)
    before = _stats(server)
    area.send_keys(Keys.ESCAPE)
    assert _ghost(driver) == ""
    assert _value(driver) == BODY
    _wait_for_event(server, "dismissed", before)


def test_typing_through_shrinks_the_ghost_without_asking_again(driver, server):
    area = _open(driver, server)
    ghost = _wait_for_ghost(driver)
    assert len(ghost) >= 2, f"a suggestion of one character cannot show typing through: {ghost!r}"
    shown_id = driver.find_element(By.ID, "ghost").get_attribute("data-id")
    asked = _requests(driver)
    area.send_keys(ghost[0])
    assert _ghost(driver) == ghost[1:]
    # Longer than the debounce plus a completion: a new request would have replaced the suggestion by now.
    time.sleep(1.0)
    assert _ghost(driver) == ghost[1:]
    assert driver.find_element(By.ID, "ghost").get_attribute("data-id") == shown_id
    assert _requests(driver) == asked
    assert _value(driver) == BODY + ghost[0]


def test_tab_without_a_suggestion_moves_the_focus(driver, server):
    area = _open(driver, server)
    _wait_for_ghost(driver)
    area.send_keys(Keys.ESCAPE)
    area.send_keys(Keys.TAB)
    assert driver.switch_to.active_element.get_attribute("id") == "copy"
    assert _value(driver) == BODY  # no tab character, no suggestion


def test_why_panel_shows_the_alternatives_and_where_the_model_looked(driver, server):
    area = _open(driver, server)
    ghost = _wait_for_ghost(driver)
    why = driver.find_element(By.ID, "why")
    assert why.is_enabled()  # enabled with the suggestion
    why.click()
    panel = driver.find_element(By.ID, "why-panel")
    WebDriverWait(driver, WAIT_S).until(
        lambda d: panel.is_displayed() and d.find_elements(By.CSS_SELECTOR, "#why-panel .why-alts li"))
    alternatives = driver.find_elements(By.CSS_SELECTOR, "#why-panel .why-alts li")
    assert len(alternatives) == 5 and all("%" in li.text for li in alternatives)
    assert driver.find_elements(By.CSS_SELECTOR, "#why-panel mark.why-hit")  # the GRU's rewritten positions
    assert ghost.strip() in driver.find_element(By.ID, "why-title").text
    # the button kept the focus in the body, so the suggestion is still there to accept
    assert driver.switch_to.active_element == area and _ghost(driver) == ghost
    WHY_SCREENSHOT.parent.mkdir(parents=True, exist_ok=True)
    assert driver.save_screenshot(str(WHY_SCREENSHOT))
    driver.find_element(By.ID, "why-close").click()
    assert not panel.is_displayed()


def _code(link: str) -> str:
    return re.search(r"[?&]code=([A-Za-z0-9_-]+)", link).group(1)


def _exchange(base: str, code: str) -> httpx.Response:
    """What anyone who found the code (in the history, say) would try: trade it for a page credential."""
    return httpx.post(f"{base}/login", json={"code": code}, headers={"Origin": base}, timeout=10)


def test_the_printed_link_works_once_and_the_history_keeps_nothing_usable(driver, server):
    link = server.page
    _open(driver, server)
    _wait_for_ghost(driver)
    # the address bar, and so the history entry, lost the code; the code itself is spent
    assert "code=" not in driver.current_url and "token" not in driver.current_url
    driver.get("about:blank")
    driver.back()
    assert driver.current_url == server.url + "/"
    assert _exchange(server.url, _code(link)).status_code == 401
    # the terminal (and server.json) got the next link, which works once too
    fresh = server.page
    assert fresh != link and _code(fresh) != _code(link)
    # a tab opened again from the old link says so, and asks for nothing
    driver.execute_script("sessionStorage.clear()")
    driver.get(link)
    WebDriverWait(driver, WAIT_S).until(lambda d: "used already" in d.find_element(By.ID, "status").text)
    assert "seqlab serve" in driver.find_element(By.ID, "status").text
    assert "down" in driver.find_element(By.ID, "model").get_attribute("class")
    assert driver.execute_script("return sessionStorage.length") == 0
    # a page without any link says what to open
    driver.get(server.url + "/")
    WebDriverWait(driver, WAIT_S).until(lambda d: "not logged in" in d.find_element(By.ID, "status").text)
    # the code is good for one exchange only, from the page's own origin
    code = _code(server.page)
    assert httpx.post(f"{server.url}/login", json={"code": code}, timeout=10).status_code == 403  # no Origin
    first, second = _exchange(server.url, code), _exchange(server.url, code)
    assert first.status_code == 200 and second.status_code == 401
    credential = first.json()["credential"]
    assert httpx.get(f"{server.url}/v1/stats", headers={"Authorization": f"Bearer {credential}"},
                     timeout=10).status_code == 200  # the page credential counts as the person


@contextmanager
def _collector() -> Iterator[tuple[int, list[dict]]]:
    """A loopback HTTP server that keeps every JSON body posted to it: what the service worker reports."""
    seen: list[dict] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            seen.append(json.loads(self.rfile.read(int(self.headers.get("content-length", 0)))))
            self.send_response(204)
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        yield httpd.server_address[1], seen
    finally:
        httpd.shutdown()
        httpd.server_close()


def _registrations(driver: webdriver.Chrome) -> int:
    return driver.execute_async_script(
        "navigator.serviceWorker.getRegistrations().then((r) => arguments[0](r.length))")


def test_a_service_worker_left_on_the_port_gets_nothing_usable(driver, browser_run_dir, tmp_path):
    """Another app served on a port registered a worker that records every request and answer; seqlab then
    runs on that same port and the person opens the link it printed. The page refuses to log in while the
    worker watches and says why; the worker gets the link (whose code the page spends after the reload it
    asks for), the page's files, and no credential, call or text."""
    run = tmp_path / "run"
    shutil.copytree(browser_run_dir, run, ignore=shutil.ignore_patterns("serve", "personal"))
    with _collector() as (collector, seen):
        with static_site(FIXTURES) as site:
            port = int(site.rsplit(":", 1)[1])
            driver.get(f"{site}/sw_register.html?collector={collector}")
            WebDriverWait(driver, WAIT_S).until(lambda d: d.title == "registered")
        with served(run, tmp_path / "log", "--port", str(port), "--min-confidence", "0", timeout=WAIT_S) as s:
            link = s.page
            driver.get(link)
            status = WebDriverWait(driver, WAIT_S).until(
                lambda d: "service worker" in d.find_element(By.ID, "status").text
                and d.find_element(By.ID, "status").text)
            assert f"127.0.0.1:{port}" in status and "reload" in status and "clear the site data" in status
            assert "down" in driver.find_element(By.ID, "model").get_attribute("class")
            assert driver.execute_script("return sessionStorage.length") == 0  # nothing kept
            assert _registrations(driver) == 0  # the page removed the worker
            WebDriverWait(driver, WAIT_S).until(lambda _: len(seen) >= 5)  # each is posted once answered
            time.sleep(0.5)  # and anything more it saw would be posted by now
            watched = sorted(r["url"] for r in seen)
            # the worker saw the page load, and nothing else: no login, no call
            pages = ("compose.css", "ghost_core.js", "compose.js", "why.js", "learn.js")
            assert watched == sorted([link, *(f"{s.url}/static/{name}" for name in pages)]), watched
            # the recovery the page names: the reload is no longer watched, and the page logs in with the code
            driver.refresh()
            _ready(driver)
            assert not driver.execute_script("return navigator.serviceWorker.controller")
            area = driver.find_element(By.ID, "body")
            area.click()
            area.send_keys(BODY)
            _wait_for_ghost(driver)
            credential = driver.execute_script("return sessionStorage.getItem('seqlab-credential')")
            # the code the worker saw is spent: trading it now, as the worker would, is refused
            assert _exchange(s.url, _code(link)).status_code == 401
            assert len(seen) == len(watched)  # and it saw nothing more
            everything = json.dumps(seen)
            assert credential and credential not in everything and s.token not in everything
            assert not any("authorization" in r["headers"] for r in seen) and BODY[:20] not in everything


def test_a_hostile_page_reads_nothing(driver, server, tmp_path):
    """Another origin's page, and the compose page under a rebound name, get nothing out of the server."""
    before = _stats(server)
    port = server.url.rsplit(":", 1)[1]
    page = tmp_path / "index.html"
    page.write_text(HOSTILE_PAGE.replace("SERVER", server.url).replace("REBOUND", REBOUND).replace("PORT", port))
    with static_site(tmp_path) as site:
        driver.get_log("browser")  # forget what earlier pages said
        driver.get(site.replace("127.0.0.1", REBOUND) + "/index.html")
        results = WebDriverWait(driver, WAIT_S).until(lambda d: d.execute_script("return window.results"))
        time.sleep(0.5)  # the form's post and the frame, which report nothing to the page
        frame = driver.find_element(By.ID, "frame")
        driver.switch_to.frame(frame)
        framed = driver.execute_script("return document.body ? document.body.innerText : ''")
        driver.switch_to.default_content()
    # the preflight of the guessed-token call got 403; the simple requests got 403 (415 had they passed the
    # Origin rule) without a CORS header to read them by; the blind no-cors post is stopped by the
    # Cross-Origin-Resource-Policy; the rebound name got 421
    assert all(str(v).startswith("blocked") for v in results.values()), results
    assert "New message" not in framed  # the compose page never renders in a frame
    said = "\n".join(e["message"] for e in driver.get_log("browser"))
    assert "frame-ancestors 'none'" in said and "NotSameOrigin" in said, said
    after = _stats(server)
    assert after["completions"] == before["completions"]  # nothing reached the model
    # and the compose page opened under the rebound name is refused before any route runs
    driver.get(f"http://{REBOUND}:{port}/?token={server.token}")
    assert "answers only to" in driver.find_element(By.TAG_NAME, "body").text
    assert _stats(server)["completions"] == before["completions"]


def test_mark_as_sent_keeps_the_email_only_on_a_learning_server(driver, server, browser_run_dir, tmp_path):
    _open(driver, server)
    _wait_for_ghost(driver)
    assert not driver.find_element(By.ID, "sent").is_displayed()  # this server does not learn: no button
    run = tmp_path / "run"
    shutil.copytree(browser_run_dir, run, ignore=shutil.ignore_patterns("serve", "personal"))
    with served(run, tmp_path / "log", "--learn", "--min-confidence", "0", timeout=WAIT_S) as learning:
        _open(driver, learning)
        sent = WebDriverWait(driver, WAIT_S).until(lambda d: d.find_element(By.ID, "sent").is_displayed()
                                                   and d.find_element(By.ID, "sent"))
        sent.click()
        WebDriverWait(driver, WAIT_S).until(lambda d: "kept for learning" in d.find_element(By.ID, "status").text)
        assert _value(driver) == ""  # a clean form, as after sending
        kept = [json.loads(line) for line in (run / "personal" / "sent.jsonl").read_text().splitlines()]
        assert [(k["subject"], k["body"]) for k in kept] == [(SUBJECT, BODY)]


def test_screenshot_of_a_suggestion(driver, server):
    _open(driver, server, to="Dana Whitfield <dana.whitfield@harbourline.example>")
    _wait_for_ghost(driver)
    # The status line (confidence, latency) is filled in with the suggestion; the model badge by /health.
    WebDriverWait(driver, WAIT_S).until(lambda d: "ready" in d.find_element(By.ID, "model").get_attribute("class"))
    SCREENSHOT.parent.mkdir(parents=True, exist_ok=True)
    assert driver.save_screenshot(str(SCREENSHOT))
    assert SCREENSHOT.stat().st_size > 10_000
