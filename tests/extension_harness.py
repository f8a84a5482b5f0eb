"""Reading the extension's content script from a test: its isolated world, through the DevTools protocol.

A content script runs in an isolated world of its own: the page's scripts share its DOM but not its
globals, so what the script exposes on its `globalThis` (the ghost it draws, say) is out of the page's
reach. Selenium evaluates only in the page's main world; this opens a second DevTools connection to the
tab, lists its execution contexts (`Runtime.enable` announces every existing one), picks the isolated world
named after the extension in the top frame, and evaluates there.
"""

from __future__ import annotations

from typing import Any

import httpx
import websocket

from seqlab.bench.browser_session import cdp_call

EXTENSION_NAME = "seqlab autocomplete"  # manifest.json's name: Chromium names the isolated world after it


class NoContentScript(LookupError):
    """The tab has no isolated world of the extension: its content script is not running there."""


def _page_socket(driver: Any) -> str:
    """The DevTools websocket of the tab the driver is on (the target whose id is its window handle, else
    the first page showing its URL)."""
    address = driver.capabilities["goog:chromeOptions"]["debuggerAddress"]
    targets = [t for t in httpx.get(f"http://{address}/json", timeout=10).json() if t.get("type") == "page"]
    handle = driver.current_window_handle.upper()
    for target in targets:
        if target["id"].upper() in handle:
            return target["webSocketDebuggerUrl"]
    url = driver.current_url
    for target in targets:
        if target.get("url") == url:
            return target["webSocketDebuggerUrl"]
    raise LookupError(f"no DevTools target for {url}")


def isolated_contexts(driver: Any, name: str = EXTENSION_NAME) -> list[dict]:
    """The isolated worlds named `name` in the top frame of the driver's tab (the newest last)."""
    ws = websocket.create_connection(_page_socket(driver), timeout=10, suppress_origin=True)
    try:
        return _contexts(ws, name)
    finally:
        ws.close()


def _contexts(ws: websocket.WebSocket, name: str) -> list[dict]:
    events: list[dict] = []
    cdp_call(ws, "Runtime.enable", events=events)
    top = cdp_call(ws, "Page.getFrameTree")["frameTree"]["frame"]["id"]
    found = []
    for event in events:
        if event["method"] != "Runtime.executionContextCreated":
            continue
        context = event["params"]["context"]
        aux = context.get("auxData", {})
        if aux.get("type") == "isolated" and context.get("name") == name and aux.get("frameId") == top:
            found.append(context)
    return found


def isolated_eval(driver: Any, expression: str, name: str = EXTENSION_NAME) -> Any:
    """Evaluate `expression` in the extension's content-script world of the driver's tab (the newest such
    world, should the script have been injected twice), awaiting a promise; its value as JSON."""
    ws = websocket.create_connection(_page_socket(driver), timeout=10, suppress_origin=True)
    try:
        contexts = _contexts(ws, name)
        if not contexts:
            raise NoContentScript(f"no content script of {name!r} in {driver.current_url}")
        result = cdp_call(ws, "Runtime.evaluate", {"expression": expression, "contextId": contexts[-1]["id"],
                                                "returnByValue": True, "awaitPromise": True})
        if "exceptionDetails" in result:
            raise RuntimeError(f"{expression}: {result['exceptionDetails'].get('text')}: "
                               f"{result['exceptionDetails'].get('exception', {}).get('description')}")
        return result["result"].get("value")
    finally:
        ws.close()
