"""The ghost text's rules are written once: ghost_core.js, two byte-identical copies, loaded by both pages.

There is no build step, so the compose page (seqlab/serving/static/) and the extension's content script
(extension/) each ship their own copy; this keeps them the same, and checks that each page loads it before
its own script, which reads it at start.
"""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
EXTENSION = REPO / "extension"
STATIC = REPO / "seqlab" / "serving" / "static"
CORE = "ghost_core.js"


def test_the_two_copies_are_byte_identical() -> None:
    assert (EXTENSION / CORE).read_bytes() == (STATIC / CORE).read_bytes(), (
        f"extension/{CORE} and seqlab/serving/static/{CORE} differ: edit one, copy it over the other")


def test_the_compose_page_loads_it_before_compose_js() -> None:
    sources = re.findall(r'<script src="/static/([^"?]+)"', (STATIC / "compose.html").read_text())
    assert CORE in sources and "compose.js" in sources
    assert sources.index(CORE) < sources.index("compose.js"), sources


def test_the_extension_injects_it_before_content_js() -> None:
    background = (EXTENSION / "background.js").read_text()
    files = re.search(r"const CONTENT_SCRIPTS = (\[[^\]]*\]);", background)
    assert files and files.group(1) == f'["{CORE}", "content.js"]'
    # both ways in (the registration, and the tabs already open when a site is switched on) use the list
    assert "js: CONTENT_SCRIPTS" in background and "files: CONTENT_SCRIPTS" in background
    assert '"content.js"]' not in background.replace(files.group(0), "")


def test_both_scripts_read_the_one_namespace() -> None:
    core = (STATIC / CORE).read_text()
    assert 'Object.defineProperty(globalThis, "seqlabGhostCore"' in core
    for script in (STATIC / "compose.js", EXTENSION / "content.js"):
        text = script.read_text()
        assert "const core = globalThis.seqlabGhostCore;" in text, script.name
        # the shared rules are not written again beside it
        for rule in ("MIN_GAP_MS =", "const nextWord", 'split("i")', "function pump"):
            assert rule not in text, (script.name, rule)
