"""The person's memory: what they wrote before, offered again where it starts again (`WritingMemory`).

A writer's own mail repeats itself: greetings, sign-offs, the sentences they write every week. A
suffix-match memory finds the earlier places in their mail whose preceding words match the end of the
email being typed, and proposes what followed there, up to the end of its sentence or line. This is the
continuous cache idea (Grave et al. 2017, "Improving neural language models with a continuous cache")
over words instead of hidden states, and the per-user n-gram model Smart Compose blends in (Chen et al.
2019, section 6), reduced to what a suggestion needs: the longest earlier match wins, as in LZ77.

Words are runs of characters other than ASCII whitespace (`complete.split_words`); a newline is a token
of its own and the start of a body is a token (`BODY`), so a line start and a body start are context:
"Hi Dana," is offered after its first letters, a sign-off after the line above it. The word being typed
(`partial`, the prompt's last run of non-whitespace) constrains the next word: it must start with it, and
the suggestion begins with the rest of that word, exactly as the model's completions do.

Index: for each word position p of every added email, the hashes of the K = 1..3 tokens before it (alone,
and with the first character of the word at p) head a chain through earlier positions with the same
hash (`head[h]` the latest, `prev[p]` the one before: LZ77's hash chains, a few int32 per token, no dict
per n-gram). A lookup walks at most `chain` positions of the longest K that matches, newest first, checks
each against the real tokens (a hash collision is just skipped), and extends the matches backwards to
their full length; the longest matches are the evidence.

Confidence of the first k words: the share of those matches that go on with exactly those k words,
shrunk when the evidence is thin. The first word's,

    P(w1) = agree_1 / (matches + alpha / evidence**2),   evidence = L + min(letters typed, 3)

with L the match length in tokens and the letters those of the word being typed; each next word's, given
the words before it, is the share of the still agreeing matches that go on with it, shrunk by the evidence
grown by the words before it (each word matched is one more word of context):

    P(w1 .. wk) = P(w1 .. wk-1) * agree_k / (agree_k-1 + beta / (evidence + k - 1)**2)

A single earlier place after one matching word is a guess; after eight, or after a body start and three
typed letters, it is nearly certain, and the shrinkage says so (a plain agree / (matches + alpha) gives
both the same 0.5, and a lone place's twentieth word the same as its first). The forms, alpha = 16 and
beta = 8 were chosen on other people's mail than the replay's five (docs/memory.md has the fit and the
calibration). The proposal follows, word by word, the continuation most of the still agreeing matches
share (ties: the newest), so it is always the text that followed in one added email; `origin` is the
label of the newest agreeing email.

Only in memory: nothing is written anywhere (the person's writing stays where it was).
"""

from __future__ import annotations

import re
import threading
from array import array
from collections import Counter
from dataclasses import dataclass

import numpy as np

from seqlab.generation.complete import Completion, split_words

BODY = 0  # the start of a body: context for its first words
NEWLINE = 1  # a line break: a line start is context, and a suggestion never crosses one
QUOTED = 2  # the start of a text that is not the person's body (never in a prompt, so never matched)
MAX_K = 3  # longest hashed context; matches are extended beyond it by comparing tokens
MAX_MATCH = 16  # tokens a match is extended backwards to (longer ones rank alike)
TAIL_CHARS = 2000  # of the body typed so far, read for its last MAX_MATCH tokens
ALPHA = 16.0  # the shrinkage of a first word's confidence (module docstring)
BETA = 8.0  # ... and of each next word's
EVIDENCE_LETTERS = 3  # typed letters of the word being typed that count as evidence
MAX_WORDS = 20  # words of one proposal at most (it ends earlier at its sentence's or line's end)
_TOKEN = re.compile(r"\n|[^ \t\n\r\f\v]+")
_SENTENCE_END = re.compile(r"[.!?][\"')\]]*\Z")
_TRAILING_WORD = re.compile(r"[^ \t\n\r\f\v]+\Z")


def split_prompt(prompt: str) -> tuple[str, str]:
    """(body typed so far, without the word being typed; that word, '' after whitespace). The prompt is
    subject + "\\n\\n" + body (`engine.prompt_text`); without a blank line all of it is the body."""
    _, sep, body = prompt.partition("\n\n")
    if not sep:
        body = prompt
    m = _TRAILING_WORD.search(body)
    return (body[: m.start()], m.group()) if m else (body, "")


def ends_sentence(word: str) -> bool:
    """Whether a word closes its sentence ("today.", "right?", "(ok.)")."""
    return bool(_SENTENCE_END.search(word))


def chained(counts: list[int], matches: int, evidence: int, alpha: float = ALPHA, beta: float = BETA) -> list[float]:
    """P(first k words) for k = 1..len(counts), from the matches agreeing on the first k words (counts,
    non-increasing) among `matches` after `evidence` (module docstring): the first word's shrunk share, then
    each next word's share among those still agreeing, shrunk by the evidence grown by the words before it."""
    out: list[float] = []
    for k, agree in enumerate(counts):
        if k == 0:
            out.append(agree / (matches + alpha / evidence**2))
        else:
            out.append(out[-1] * agree / (counts[k - 1] + beta / (evidence + k) ** 2))
    return out


@dataclass
class Match:
    """An earlier place whose preceding tokens match the prompt's end: where its next word is, how many
    tokens matched, and the token ids that follow it (up to its sentence's or line's end)."""

    pos: int
    length: int
    follow: tuple[int, ...]


class WritingMemory:
    """A suffix-match memory of one person's emails (module docstring): `add(text, origin)`, `propose(prompt)`.

    `alpha` and `beta` shrink confidences toward 0 when few places match after short evidence; `chain` bounds the
    earlier places one lookup reads (newest first); `min_match` is the fewest context tokens a match needs
    (the body start and line starts count); `table_bits` sizes the hash tables (2**bits int32 entries
    each, six tables).
    Safe to share between threads: `add` and `propose` take a lock."""

    source = "memory"

    def __init__(self, *, alpha: float = ALPHA, beta: float = BETA, chain: int = 64, min_match: int = 1,
                 max_words: int = MAX_WORDS, table_bits: int = 20) -> None:
        if alpha < 0 or beta < 0 or chain < 1 or min_match < 1 or max_words < 1:
            raise ValueError("alpha and beta must be 0 or more; chain, min_match and max_words at least 1")
        self.alpha, self.beta, self.chain, self.min_match, self.max_words = alpha, beta, chain, min_match, max_words
        self._mask = (1 << table_bits) - 1
        self._lock = threading.Lock()
        self._ids: dict[str, int] = {"\x00body": BODY, "\n": NEWLINE, "\x00quoted": QUOTED}
        self._words: list[str] = ["", "\n", ""]
        self._closes: list[bool] = [False, False, False]  # whether each word id ends a sentence
        self._tokens = array("i")  # word id of each token, all emails one after the other
        self._email = array("i")  # which email each token is in
        self._start = array("i")  # where each token starts in its email's body (characters)
        self._end = array("i")  # ... and ends
        self._first = array("i")  # token index of each email's BODY token
        self._bodies: list[str] = []
        self._origins: list[str | None] = []
        # chains: [K-1] by the K tokens before a word, [MAX_K + K-1] by those and the word's first character
        self._heads = [np.full(1 << table_bits, -1, dtype=np.int32) for _ in range(2 * MAX_K)]
        self._prev = [array("i") for _ in range(2 * MAX_K)]

    def __len__(self) -> int:
        """Emails added."""
        return len(self._bodies)

    @property
    def tokens(self) -> int:
        """Tokens indexed (words, line breaks and one body start per email)."""
        return len(self._tokens)

    def add(self, text: str, origin: str | None = None) -> None:
        """Index one email the person wrote: `text` is subject, blank line, body (only the body is indexed;
        without a blank line all of it is); `origin` names it (a label or an id the caller resolves)."""
        _, sep, body = text.partition("\n\n")
        self.add_body(body if sep else text, origin)

    def add_body(self, body: str, origin: str | None = None, *, start: int = BODY) -> None:
        """Index one body; `start` is the token before its first word (`BODY`; `QUOTED` for a text whose
        start must not match the start of the body being typed, as the message being answered)."""
        with self._lock:
            email = len(self._bodies)
            self._bodies.append(body)
            self._origins.append(origin)
            self._first.append(len(self._tokens))
            self._append(start, email, 0, 0, None)
            for m in _TOKEN.finditer(body):
                word = m.group()
                wid = self._ids.setdefault(word, len(self._words))
                if wid == len(self._words):
                    self._words.append(word)
                    self._closes.append(ends_sentence(word))
                self._append(wid, email, m.start(), m.end(), None if wid == NEWLINE else word[0])

    def _append(self, wid: int, email: int, start: int, end: int, first_char: str | None) -> None:
        """Add one token; a word (first_char given) is linked into the chains of the tokens before it."""
        p = len(self._tokens)
        self._tokens.append(wid)
        self._email.append(email)
        self._start.append(start)
        self._end.append(end)
        floor = self._first[email]
        for k in range(1, MAX_K + 1):
            plain, lettered = self._prev[k - 1], self._prev[MAX_K + k - 1]
            if first_char is None or p - k < floor:
                plain.append(-1)
                lettered.append(-1)
                continue
            ctx = tuple(self._tokens[p - k: p])
            for table, chain, key in ((k - 1, plain, ctx), (MAX_K + k - 1, lettered, (*ctx, first_char))):
                h = hash(key) & self._mask
                chain.append(int(self._heads[table][h]))
                self._heads[table][h] = p

    def propose(self, prompt: str, context: object = None, *, max_words: int | None = None) -> Completion | None:
        """What followed the longest earlier matches of the prompt's end (subject + "\\n\\n" + body so far),
        as text to append to the prompt; None when no earlier place matches. `context` is not read (the
        proposers share one signature; `reply_copy` reads it)."""
        before, partial = split_prompt(prompt)
        cap = min(max_words or self.max_words, self.max_words)
        with self._lock:
            ctx = self._context(before)
            matches = self._matches(ctx, partial, cap)
            if not matches:
                return None
            return self._consensus(matches, partial, cap)

    def matches(self, before: str, partial: str) -> list[Match]:
        """The longest earlier matches `propose` reads for a body typed up to `before` + `partial` (its
        evidence, for studies of the confidences: seqlab.studies.memory_study)."""
        with self._lock:
            return self._matches(self._context(before), partial, self.max_words)

    def _context(self, before: str) -> list[int]:
        """The last MAX_MATCH token ids of the body typed so far (-1: a word never added), the body start
        first when it is among them. Only the body's tail is read: a long body costs no more than a short one."""
        tail = before[-TAIL_CHARS:]
        words = _TOKEN.findall(tail)
        if len(tail) == len(before):
            words = ["\x00body", *words]
        elif words and not tail[0].isspace():
            words = words[1:]  # the tail may start inside a word
        return [self._ids.get(w, -1) for w in words[-MAX_MATCH:]]

    def _matches(self, ctx: list[int], partial: str, cap: int) -> list[Match]:
        """The longest earlier matches of `ctx` whose next word starts with `partial` (newest first)."""
        for k in range(min(MAX_K, len(ctx)), 0, -1):
            tail = ctx[-k:]
            if -1 in tail:
                continue  # a word never seen before: no longer context can match
            key = (*tail, partial[0]) if partial else tuple(tail)
            table = MAX_K + k - 1 if partial else k - 1
            p = int(self._heads[table][hash(key) & self._mask])
            found: list[tuple[int, int]] = []  # (position, match length), newest first
            for _ in range(self.chain):
                if p < 0:
                    break
                if self._fits(p, tail, partial):
                    length = self._extend(p, ctx, k)
                    if length >= self.min_match:
                        found.append((p, length))
                p = self._prev[table][p]
            if found:
                best = max(length for _, length in found)
                return [Match(p, best, self._follow(p, cap, partial)) for p, length in found if length == best]
        return []

    def _fits(self, p: int, tail: list[int], partial: str) -> bool:
        """Whether the k tokens before position p are `tail` (within p's email) and its word starts with
        `partial` (a hash collision fails here)."""
        k = len(tail)
        if p - k < self._first[self._email[p]]:
            return False
        return self._tokens[p - k: p].tolist() == tail and self._words[self._tokens[p]].startswith(partial)

    def _extend(self, p: int, ctx: list[int], k: int) -> int:
        """How many tokens before p match the end of ctx (at least k, which `_fits` checked)."""
        floor = self._first[self._email[p]]
        n = k
        while n < len(ctx) and p - n - 1 >= floor and self._tokens[p - n - 1] == ctx[-n - 1]:
            n += 1
        return n

    def _follow(self, p: int, cap: int, partial: str) -> tuple[int, ...]:
        """Token ids from p on: up to `cap` words, ending after a word that closes a sentence (not the word
        at p when it is typed whole: the next sentence is then offered), before a line break, or at the end
        of the email."""
        out: list[int] = []
        email, n = self._email[p], len(self._tokens)
        while p < n and len(out) < cap + 1 and self._email[p] == email:
            wid = self._tokens[p]
            if wid in (BODY, NEWLINE, QUOTED):
                break
            out.append(wid)
            if self._closes[wid] and (len(out) > 1 or self._words[wid] != partial):
                break
            p += 1
        return tuple(out)

    def _consensus(self, matches: list[Match], partial: str, cap: int) -> Completion | None:
        """Follow the continuation most agreeing matches share, word by word (ties: the newest), and turn it
        into a Completion with the confidences of `chained` (module docstring)."""
        agreeing = matches  # newest first
        counts: list[int] = []  # matches agreeing on the first k words
        chosen: list[int] = []
        for k in range(cap + 1):  # one more: a word typed whole is not offered again
            options = Counter(m.follow[k] if len(m.follow) > k else None for m in agreeing)
            top = max(options.values())
            pick = next(o for o in (m.follow[k] if len(m.follow) > k else None for m in agreeing)
                        if options[o] == top)  # the newest of the most common
            if pick is None:
                break
            agreeing = [m for m in agreeing if len(m.follow) > k and m.follow[k] == pick]
            chosen.append(pick)
            counts.append(len(agreeing))
        if not chosen:
            return None
        if self._words[chosen[0]] == partial:  # the word is typed whole: the suggestion starts after it
            counts = counts[1:]
        else:
            chosen, counts = chosen[:cap], counts[:cap]
        evidence = matches[0].length + min(len(partial), EVIDENCE_LETTERS)  # every match has the same length
        shares = chained(counts, len(matches), evidence, self.alpha, self.beta)
        newest = agreeing[0]
        body = self._bodies[self._email[newest.pos]]
        first, last = newest.pos, newest.pos + len(chosen) - 1
        text = body[self._start[first] + len(partial): self._end[last]]
        if not shares or len(split_words(text)) != len(shares):
            return None
        return Completion(text, [], shares[0], shares, source=self.source,
                          origin=self._origins[self._email[newest.pos]])
