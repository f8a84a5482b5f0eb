"""An HTML part as plain text (`html_to_text`): block tags become line breaks, cells a space, scripts and
styles are dropped, entities unescaped, whitespace collapsed. Linear in the input: the patterns cannot
backtrack catastrophically and the scan moves forward only; callers cap the markup (`mime.MAX_HTML_CHARS`).
"""

from __future__ import annotations

import html
import re

from seqlab.data.mail.clean import normalize_text

__all__ = ["html_to_text"]

_BLOCK_TAGS = frozenset(
    "p div br li ul ol tr table h1 h2 h3 h4 h5 h6 blockquote pre hr section article header footer "
    "address dl dt dd form title center".split()
)
_CELL_TAGS = frozenset(("td", "th"))
_SKIP_TAGS = frozenset(("script", "style", "head", "noscript", "template", "xml"))
_TAG = re.compile(r"<(/?)([a-zA-Z][a-zA-Z0-9:-]{0,40})")
_MARKUP_START = re.compile(r"<(?:/?[a-zA-Z]|!|\?)")  # where a tag, comment or declaration can begin
_WS = re.compile(r"[ \t\r\n\f\u00a0]+")
# The lookbehind makes a match start only at the beginning of a run of blanks: without it a long run not
# followed by a line break would be rescanned from every position in it (quadratic time).
_LINE_WS = re.compile(r"(?<![ \t])[ \t]*\n[ \t]*")


def _text(chunk: str) -> str:
    # \x01 is the marker for a tag-made line break (below), so it must not come from the text itself.
    return html.unescape(chunk).replace("\x01", "")


def html_to_text(markup: str) -> str:
    """Text of an HTML body: script/style/head dropped, a line break per block element, entities unescaped.

    A hand-written scanner rather than `html.parser`: on Python 3.11 `HTMLParser` takes quadratic time on
    unterminated constructs (400 kB of `<!--` takes minutes), and hostile mail must stay bounded. Each
    search for a terminator either moves `pos` past what it scanned or ends the loop, so the work is linear.
    """
    out: list[str] = []
    pos, n = 0, len(markup)
    while pos < n:
        start = _MARKUP_START.search(markup, pos)
        if start is None:
            out.append(_text(markup[pos:]))
            break
        lt = start.start()
        out.append(_text(markup[pos:lt]))
        if markup.startswith("<!--", lt):
            end = markup.find("-->", lt + 4)
            if end < 0:
                break  # an unterminated comment hides the rest, as in a browser
            pos = end + 3
            continue
        m = _TAG.match(markup, lt)
        gt = markup.find(">", lt)
        if gt < 0:  # an unterminated tag hides the rest, as in a browser
            if m is None:
                out.append(_text(markup[lt:]))
            break
        pos = gt + 1
        if m is None:
            continue  # <!DOCTYPE ...>, <?xml ...?>
        closing, name = m.group(1), m.group(2).lower()
        if name in _SKIP_TAGS and not closing:
            end_tag = re.compile(rf"</{name}\s*>", re.IGNORECASE).search(markup, pos)
            pos = n if end_tag is None else end_tag.end()
            out.append("\x01")
        elif name in _BLOCK_TAGS:
            out.append("\x01")
        elif name in _CELL_TAGS:
            out.append(" ")
    # Source newlines are plain whitespace (as in a browser); only tag-made breaks (\x01) end lines.
    text = _WS.sub(" ", "".join(out)).replace("\x01", "\n")
    return normalize_text(_LINE_WS.sub("\n", text))
