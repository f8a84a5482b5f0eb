"""The message being answered, copied where the reply uses it: `ReplyCopy.propose(prompt, context)`.

A reply names the people, dates, figures and phrases of the message it answers ("Thanks, Dana", "the
4,500 you quoted", "on Tuesday at 3pm"). Two proposals come from the original (`context`: its plain text,
or the model's ContextBatch decoded with the run's tokenizer, so the saved-characters replay can hand every
proposer the same context), source "reply", origin None (the why panel says "the message being answered"):

- a phrase: the reply's last words (at least `min_match` of them, the body start not counting) match a
  place in the original, and what followed there is offered up to its sentence's or line's end. This is
  `WritingMemory` over the one original, started with `QUOTED` so the two bodies' starts never match.
- a name or figure being typed: the word being typed (two characters at least, one for a digit) is the
  start of a capitalised word, a number or an email address of the original; its rest is offered, and a
  name goes on through the capitalised words after it ("Dana" -> "Dana Whitfield").

Confidence of the first k words: for a phrase, the memory's (its shrinkage by evidence); for a name or
figure, the share of the original's places starting so that agree on them, agree / (places + name_alpha).
Neither is fitted on replies yet: the blend weight of "reply" rescales both. The better of the two by
expected saved characters is given. The last original's index is kept, so the keystrokes of one reply
index it once.
"""

from __future__ import annotations

import re
from collections import Counter

from seqlab.data.tokenizer import Tokenizer
from seqlab.generation.complete import Completion
from seqlab.generation.memory import ALPHA, QUOTED, WritingMemory, split_prompt
from seqlab.generation.sources import choose
from seqlab.models.context_encoder import ContextBatch

_WORD = re.compile(r"[^ \t\n\r\f\v]+")
_TRIM = re.compile(r"[,.;:!?)\]\"'>]+\Z")  # punctuation after a name or figure: not part of it
MAX_NAME_WORDS = 3


def salient(word: str) -> bool:
    """Whether a word of the original is worth copying: a capitalised word, a number, an email address."""
    core = _TRIM.sub("", word).lstrip("(\"'<")
    if len(core) < 2:
        return False
    return core[0].isupper() or any(ch.isdigit() for ch in core) or "@" in core[1:-1]


class ReplyCopy:
    """Proposals copied from the message being answered (module docstring)."""

    source = "reply"

    def __init__(self, *, alpha: float = ALPHA, name_alpha: float = 1.0, min_match: int = 2, max_words: int = 20,
                 tokenizer: Tokenizer | None = None) -> None:
        self.alpha, self.name_alpha, self.min_match, self.max_words = alpha, name_alpha, min_match, max_words
        self.tokenizer = tokenizer  # reads a context given as a ContextBatch (the model's), as `text_of` says
        self._batch: object = None  # the ContextBatch read last, and its text
        self._batch_text: str | None = None
        self._text: str | None = None
        self._memory: WritingMemory | None = None
        self._items: list[list[str]] = []

    def _read(self, text: str) -> None:
        """Index `text` (the original) unless it is the one read last."""
        if text == self._text:
            return
        memory = WritingMemory(alpha=self.alpha, min_match=self.min_match, max_words=self.max_words, table_bits=12)
        memory.source = self.source
        memory.add_body(text, None, start=QUOTED)
        words = _WORD.findall(text)
        items = []
        for i, w in enumerate(words):
            if not salient(w):
                continue
            item = [_TRIM.sub("", w)]
            j = i + 1  # a name goes on through the capitalised words right after it
            while (item[0][:1].isupper() and j < len(words) and len(item) < MAX_NAME_WORDS
                   and _TRIM.sub("", words[j - 1]) == words[j - 1] and salient(words[j]) and words[j][0].isupper()):
                item.append(_TRIM.sub("", words[j]))
                j += 1
            items.append(item)
        self._text, self._memory, self._items = text, memory, items

    def propose(self, prompt: str, context: object = None, *, max_words: int | None = None) -> Completion | None:
        """The best copy from `context` (the original's text) for the end of `prompt`; None without one."""
        text = self.text_of(context)
        if not text or not text.strip():
            return None
        self._read(text)
        assert self._memory is not None
        phrase = self._memory.propose(prompt, max_words=max_words)
        return choose([phrase, self._name(prompt, max_words or self.max_words)], {})

    def text_of(self, context: object) -> str | None:
        """The original's text: a str as it is; a ContextBatch (one lane, `reply.reply_context`) decoded from
        its first context's kept ids with `tokenizer` (the same batch is decoded once); else None."""
        if isinstance(context, str):
            return context
        if self.tokenizer is None or not isinstance(context, ContextBatch):
            return None
        if context is not self._batch:
            ids = context.ids[0, 0][context.keep[0, 0]].tolist()  # (Lc,) of the first lane's first context
            self._batch, self._batch_text = context, self.tokenizer.decode(ids)
        return self._batch_text

    def _name(self, prompt: str, cap: int) -> Completion | None:
        """The rest of the name or figure being typed, when the original has one starting so."""
        _, partial = split_prompt(prompt)
        if len(partial) < 2 and not partial[:1].isdigit():
            return None
        found = [tuple(item[:cap]) for item in self._items if item[0].startswith(partial) and item[0] != partial]
        if not found:
            return None
        counts = Counter(found)
        top = max(counts.values())
        pick = next(item for item in found if counts[item] == top)  # the first in the original on ties
        shares = [sum(1 for f in found if f[:k] == pick[:k]) / (len(found) + self.name_alpha)
                  for k in range(1, len(pick) + 1)]
        return Completion(" ".join(pick)[len(partial):], [], shares[0], shares, source=self.source)
