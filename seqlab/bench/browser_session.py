"""Headless Chromium for the browser latency benchmark (`latency_browser`): the browser, the compose page of a
`seqlab serve` child, and a webmail-shaped page with the extension paired to that server.

Debian's chromium and chromedriver, as the browser tests use them; nothing downloads a browser or a driver
(SE_OFFLINE keeps Selenium Manager off the network). `BrowserMissing` says what is missing, and the
benchmark then gives one skipped row. The extension's ghost is drawn in the content script's isolated world,
which the page's scripts (and Selenium's `execute_script`) cannot see: `isolated_eval` evaluates there
through the tab's DevTools socket, as tests/extension_harness.py does for the tests.
"""

from __future__ import annotations

import functools
import hashlib
import http.server
import itertools
import json
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
EXTENSION = Path(__file__).resolve().parents[2] / "extension"  # the repository's unpacked extension
EXTENSION_NAME = "seqlab autocomplete"  # manifest.json's name: Chromium names the isolated world after it
WAIT_S = 60.0
# A webmail-shaped compose form: a subject field and a contenteditable body, as the extension meets them.
WEBMAIL = """<!doctype html><html><head><meta charset="utf-8"><title>Compose</title><style>
body { font: 15px/1.4 sans-serif; margin: 24px; } input { width: 600px; font: inherit; }
#body { width: 600px; min-height: 200px; border: 1px solid #bbb; padding: 8px; margin-top: 12px; }
</style></head><body><form><input id="subject" name="subject" placeholder="Subject">
<div id="body" contenteditable="true" role="textbox" aria-label="Message body"><div><br></div></div>
<button id="send" type="button">Send</button></form></body></html>"""
_ids = itertools.count(1)


class BrowserMissing(RuntimeError):
    """No chromium, chromedriver, selenium or extension to measure with."""


def require_browser() -> None:
    missing = [str(p) for p in (CHROMIUM, CHROMEDRIVER) if not p.is_file()]
    if not (EXTENSION / "manifest.json").is_file():
        missing.append(str(EXTENSION))
    try:
        import selenium  # noqa: F401
        import websocket  # noqa: F401
    except ImportError as exc:
        missing.append(f"python package {exc.name} (pip install -e '.[dev]')")
    if missing:
        raise BrowserMissing(f"the browser benchmark needs {', '.join(missing)}")


def chromium(profile: Path, with_extension: bool) -> Any:
    """Headless Chromium with a fresh profile, 1000x700 at scale 1, the extension loaded if asked."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    os.environ["SE_OFFLINE"] = "true"
    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    args = ["--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu", "--no-first-run",
            "--disable-background-networking", "--disable-component-update", "--disable-sync",
            "--window-size=1000,700", "--force-device-scale-factor=1", f"--user-data-dir={profile}"]
    if with_extension:
        args += [f"--load-extension={EXTENSION}", f"--disable-extensions-except={EXTENSION}"]
    for arg in args:
        options.add_argument(arg)
    return webdriver.Chrome(service=Service(executable_path=str(CHROMEDRIVER)), options=options)


@contextmanager
def webmail_site(folder: Path) -> Iterator[str]:
    """WEBMAIL as compose.html on a loopback port of its own (another origin than the server's)."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "compose.html").write_text(WEBMAIL, encoding="utf-8")

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Quiet, directory=str(folder)))
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()


def extension_id() -> str:
    """Chromium's id of the unpacked extension: the SHA-256 of its path, 32 hex digits spelt a-p."""
    digest = hashlib.sha256(str(EXTENSION).encode()).hexdigest()[:32]
    return "".join(chr(ord("a") + int(c, 16)) for c in digest)


def pair(driver: Any, pairing_url: str, site: str) -> None:
    """Pair the extension through its options page as a person does, and switch `site` on."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    driver.get(f"chrome-extension://{extension_id()}/options.html")
    WebDriverWait(driver, WAIT_S).until(lambda d: d.find_element(By.ID, "server-state").text != "…")
    driver.find_element(By.ID, "pair-url").send_keys(pairing_url)
    driver.find_element(By.ID, "pair").click()
    WebDriverWait(driver, WAIT_S).until(lambda d: d.find_element(By.ID, "message").text == "paired")
    driver.find_element(By.ID, "site-origin").send_keys(site)
    driver.find_element(By.ID, "site-add").click()
    WebDriverWait(driver, WAIT_S).until(lambda d: d.find_element(By.ID, "message").text.startswith("on at"))


def _socket_url(driver: Any) -> str:
    import httpx

    address = driver.capabilities["goog:chromeOptions"]["debuggerAddress"]
    targets = [t for t in httpx.get(f"http://{address}/json", timeout=10).json() if t.get("type") == "page"]
    handle = driver.current_window_handle.upper()
    for target in targets:
        if target["id"].upper() in handle or target.get("url") == driver.current_url:
            return target["webSocketDebuggerUrl"]
    raise BrowserMissing(f"no DevTools target for {driver.current_url}")


def cdp_call(ws: Any, method: str, params: dict[str, Any] | None = None,
             events: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """Send one DevTools command and wait for its answer; the events that arrive meanwhile go to `events`."""
    ident = next(_ids)
    ws.send(json.dumps({"id": ident, "method": method, "params": params or {}}))
    while True:
        message = json.loads(ws.recv())
        if message.get("id") == ident:
            if "error" in message:
                raise RuntimeError(f"{method}: {message['error']}")
            return message.get("result", {})
        if events is not None and "method" in message:
            events.append(message)


def isolated_eval(driver: Any, expression: str) -> Any:
    """Evaluate `expression` in the extension's content-script world of the driver's tab; its JSON value."""
    import websocket

    ws = websocket.create_connection(_socket_url(driver), timeout=10, suppress_origin=True)
    try:
        events: list[dict[str, Any]] = []
        cdp_call(ws, "Runtime.enable", events=events)
        top = cdp_call(ws, "Page.getFrameTree")["frameTree"]["frame"]["id"]
        contexts = [e["params"]["context"] for e in events if e["method"] == "Runtime.executionContextCreated"]
        ours = [c for c in contexts if c.get("name") == EXTENSION_NAME
                and c.get("auxData", {}).get("type") == "isolated" and c.get("auxData", {}).get("frameId") == top]
        if not ours:
            raise RuntimeError(f"no content script in {driver.current_url}")
        result = cdp_call(ws, "Runtime.evaluate", {"expression": expression, "contextId": ours[-1]["id"],
                                                "returnByValue": True, "awaitPromise": True})
        if "exceptionDetails" in result:
            raise RuntimeError(f"{expression}: {result['exceptionDetails'].get('text')}")
        return result["result"].get("value")
    finally:
        ws.close()
