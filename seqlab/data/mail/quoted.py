"""The context of a reply: the text it answers, taken from its own quoted part.

Cleaning (`clean.strip_quotes`) removes from a body what someone else wrote: `>` lines with their
`... wrote:` attribution, and everything from an `-----Original Message-----`, forwarded or embedded
reply-header block to the end. That removed text is, in a reply, the message being answered, which a
model that completes the reply may read through cross-attention (the lecture's slide
"Cross-attention gets queries and context from different sequences"). `clean_and_context`
recovers it beside the cleaned body:

- a cut block (Outlook/Notes style): the lines after the marker, with the `From:/Sent:/To:/Subject:`
  header lines at its top dropped;
- otherwise the `>` lines, one level of `>` (and the space after it) removed.

The recovered text is then cleaned like a body (`clean.clean_body`: its own nested quotes and its
signature go, PII is masked when asked) and cut to `MAX_CONTEXT_CHARS`, keeping its END, at a line start
when one is near. `prepare` falls back on the thread's previous message (by In-Reply-To) when an email
quotes nothing and the corpus holds its parent (`seqlab.data.prepare.reply_files`). Linear-time regex scans only,
as everywhere in cleaning.
"""

from __future__ import annotations

import re

from seqlab.data.mail.clean import (
    CleanOptions,
    clean_body,
    clean_normalized,
    cut_offset,
    normalize_text,
    quoted_runs,
)

MAX_CONTEXT_CHARS = 2000  # the model reads at most ctx_block_size tokens of it anyway (its end)
_MARKER_LINE = re.compile(r"[^\n]*\n?")
_HEADER_LINE = re.compile(r"[ \t]*(?:From|Sent|To|Cc|Subject|Date)[ \t]*:[^\n]*\n?", re.IGNORECASE)
_UNQUOTE_AFTER_NEWLINE = re.compile(r"\n[ \t]*> ?")  # one quoting level, at each line start after a "\n"


def _cut_block(text: str, cut: int) -> str:
    """The text below a cut marker (original message, forward, header block) at `cut` (clean.cut_offset),
    its header lines dropped; "" when there is none."""
    if cut >= len(text):
        return ""
    pos = cut
    first = _MARKER_LINE.match(text, pos)
    if first is not None and not _HEADER_LINE.match(text, pos):
        pos = first.end()  # the marker line itself ("-----Original Message-----")
    while True:  # the embedded header block: From:, Sent:, To:, Subject: ... lines
        m = _HEADER_LINE.match(text, pos)
        if m is None or m.end() == pos:
            break
        pos = m.end()
    return text[pos:]


def _quoted_lines(text: str) -> str:
    """The `>` lines of a body, one quoting level removed, in order.

    Every line of the runs starts with blanks and ">", so one level goes with a literal-led substitution
    on "\\n" + the runs (each line start then follows a "\\n"), the added "\\n" dropped after."""
    if ">" not in text:
        return ""
    quoted = "".join(text[start:end] for start, end in quoted_runs(text))
    return _UNQUOTE_AFTER_NEWLINE.sub("\n", "\n" + quoted)[1:]


def keep_end(text: str, limit: int = MAX_CONTEXT_CHARS) -> str:
    """At most `limit` characters: the end of `text`, starting at a line start when one is in the first
    fifth of the kept part (a cut mid-line reads worse than a slightly shorter context)."""
    if len(text) <= limit:
        return text
    tail = text[len(text) - limit:]
    nl = tail.find("\n", 0, limit // 5)
    return tail[nl + 1:] if nl >= 0 else tail


def _context_of(text: str, cut: int, opts: CleanOptions) -> str:
    """The replied-to text quoted in the normalized body `text` whose cut offset is `cut`, cleaned like a
    body; "" when none. A cut block (original message, forward) wins over `>` lines: a body with both holds
    the `>` lines inside the block (older quoting levels)."""
    quoted = _cut_block(text, cut) or _quoted_lines(text)
    if not quoted.strip():
        return ""
    cleaned = clean_body(quoted, CleanOptions(keep_quotes=False, keep_signatures=False, mask_pii=opts.mask_pii))
    return keep_end(cleaned)


def clean_and_context(body: str, opts: CleanOptions) -> tuple[str, str]:
    """`(clean_body(body, opts), the text the body quotes)`, normalizing the body and finding its cut (the
    lower-cased text, the marker search) once for both."""
    text = normalize_text(body)
    low = text.lower()
    cut = cut_offset(text, low)
    return clean_normalized(text, opts, low, cut), _context_of(text, cut, opts)
