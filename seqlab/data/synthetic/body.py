"""The writing half of the synthetic email generator: the cast, and `BodyWriter`, which fills templates
from `words` and lays out one email body (greeting, reference, request or meeting, filler,
reference again, sign-off) at a requested length.

Values that a thread keeps fixed (its documents, meeting day, time and room, its reference code) are
drawn once per thread so that a reply answers what was asked; everything else is drawn per sentence.
"""

from __future__ import annotations

import functools
import random
import re
import textwrap
import unicodedata
from collections.abc import Sequence
from datetime import date, datetime, timedelta, timezone
from typing import NamedTuple

from seqlab.data.synthetic import words as W

_FALLBACK_ASK = "Could you {verb} the {doc}?"  # at most 8 words: the request when the body must be short
_FALLBACK_REPLY = "Will do."
_RECALL_CUE = "When you reply, please quote"
REF_RE = re.compile(r"\b[A-Z]{2,4}-[1-9][0-9]{3,5}\b")  # what a reference code looks like, e.g. INV-48213


class Person(NamedTuple):
    """One member of the synthetic cast."""

    index: int
    first: str
    last: str
    address: str
    title: str
    org: str
    phone: str
    signoff: str  # the sign-off this person uses most of the time
    tz: int  # UTC offset in hours

    @property
    def full(self) -> str:
        return f"{self.first} {self.last}"

    @property
    def zone(self) -> timezone:
        return timezone(timedelta(hours=self.tz))


@functools.cache
def cast() -> tuple[Person, ...]:
    """The people who write the synthetic mail, built from `words.PEOPLE`."""
    people = []
    for index, (first, last, org, title, signoff, tz) in enumerate(W.PEOPLE):
        org_name, domain, phone = W.ORGS[org]
        # Addresses stay ASCII: "Zoë" -> "zoe".
        local = unicodedata.normalize("NFKD", f"{first}.{last}".lower()).encode("ascii", "ignore").decode()
        people.append(Person(index, first, last, f"{local}@{domain}", title, org_name, phone, signoff, tz))
    return tuple(people)


def count_words(text: str) -> int:
    """Words as the length limits count them: whitespace-separated pieces holding a letter or digit."""
    return sum(1 for piece in text.split() if any(c.isalnum() for c in piece))


def wrap_paragraphs(text: str, rng: random.Random) -> str:
    """Hard-wrap each line the way many mail clients do, or (a third of the time) leave lines long."""
    if rng.random() < 0.33:
        return text
    width = rng.choice((66, 72, 76))
    # Never break inside a reference code like INV-48213, so it stays one string a model can copy.
    return "\n".join(
        textwrap.fill(line, width, break_long_words=False, break_on_hyphens=False) if line else ""
        for line in text.split("\n")
    )


def _new_ref(rng: random.Random) -> tuple[str, str]:
    prefix, noun = rng.choice(W.REF_KINDS)
    digits = rng.randint(4, 6)
    return f"{prefix}-{rng.randrange(10 ** (digits - 1), 10**digits)}", noun


class _Slots(dict):
    """A `format_map` mapping that draws a slot the first time a sentence uses it, then keeps it."""

    def __init__(self, writer: BodyWriter, fixed: dict[str, str]) -> None:
        super().__init__(fixed)
        self.writer = writer

    def __missing__(self, key: str) -> str:
        value = self.writer.draw(key, self)
        self[key] = value
        return value


class BodyWriter:
    """Writes the bodies of one thread; `rng` is shared with the caller so one seed fixes everything."""

    CORE_MAX_WORDS = 20  # greeting (<= 4) + fallback request (<= 8) + sign-off and full name (<= 5)
    RECALL_CUE_WORDS = 5  # "When you reply, please quote"

    def __init__(self, rng: random.Random, members: Sequence[Person], start: datetime, topic: str) -> None:
        self.rng, self.members, self.topic = rng, tuple(members), topic
        self.outsiders = tuple(p.first for p in cast() if p not in self.members)
        self.date = start
        self.fixed = self._thread_values(start.date())

    def _thread_values(self, start: date) -> dict[str, str]:
        rng = self.rng
        doc, doc2 = (rng.choice(W.DOC_MODIFIERS) + d for d in rng.sample(W.DOCS, 2))
        day = start + timedelta(days=rng.randint(1, 9))
        while day.weekday() >= 5:
            day += timedelta(days=1)
        name, month = W.DAY_NAMES[day.weekday()], W.MONTH_NAMES[day.month - 1]
        suffix = "th" if 10 <= day.day % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(day.day % 10, "th")
        phrase = rng.choice((name, f"{name} {day.day} {month}", f"{name}, {month} {day.day}", f"{day.day} {month}",
                             f"the {day.day}{suffix}"))
        ref, refkind = _new_ref(rng)
        return {"doc": doc, "doc2": doc2, "verb": rng.choice(W.DOC_VERBS), "order": rng.choice(W.ORDER_WORDS),
                "project": rng.choice(W.PROJECTS), "meeting": rng.choice(W.MEETINGS), "room": rng.choice(W.ROOMS),
                "time": rng.choice(W.TIMES), "day": phrase, "weekday": name, "ref": ref, "refkind": refkind}

    def at(self, when: datetime) -> None:
        self.date = when

    def say(self, template: str, fresh_docs: bool = False) -> str:
        """Fill one template and capitalise it; slots the thread does not fix are drawn for this sentence
        (documents too when `fresh_docs`, so filler talks about more than the thread's two documents)."""
        fixed = {k: v for k, v in self.fixed.items() if not (fresh_docs and k in ("doc", "doc2"))}
        text = template.format_map(_Slots(self, fixed))
        return text[:1].upper() + text[1:]

    def draw(self, key: str, slots: _Slots) -> str:
        rng = self.rng
        if key[0].isupper():  # {Doc}, {Meeting}, {Refkind}: the same value, capitalised for a subject line
            value = slots[key.lower()]
            return value[:1].upper() + value[1:]
        if key == "verb_ing":
            return W.VERB_ING[slots["verb"]]
        if key == "doc":
            return rng.choice(W.DOC_MODIFIERS) + rng.choice(W.DOCS)
        if key == "doc2":
            return rng.choice(W.DOC_MODIFIERS) + rng.choice([d for d in W.DOCS if not slots["doc"].endswith(d)])
        if key in ("is", "does", "s", "s2"):  # verb agreement: "the slides are", "the report is"
            plural = slots["doc2" if key == "s2" else "doc"].endswith(W.PLURAL_DOCS)
            return {"is": ("is", "are"), "does": ("does", "do"), "s": ("s", ""), "s2": ("s", "")}[key][plural]
        if key == "amount":
            return f"{rng.choice(W.AMOUNT_SYMBOLS)}{rng.randint(12, 4800) * 10:,}"
        if key in ("page", "count"):
            return str(rng.randint(2, 24))
        if key == "count2":
            return str(int(slots["count"]) + rng.randint(1, 20))
        if key == "time2":
            return rng.choice([t for t in W.TIMES if t != slots["time"]])
        if key == "person":
            return rng.choice(self.outsiders)
        if key == "deadline":
            return rng.choice(W.DEADLINES).format_map(slots)
        if key == "status":
            return rng.choice(W.STATUSES).format_map(slots)
        table = {"team": W.TEAMS, "project": W.PROJECTS, "meeting": W.MEETINGS, "room": W.ROOMS}
        if key in table:
            return rng.choice(table[key])
        raise KeyError(f"unknown template slot {{{key}}}")

    def greeting(self, to: Sequence[Person]) -> str:
        if len(to) == 1:
            return self.rng.choice(W.GREETINGS_ONE).format(name=to[0].first)
        if len(to) == 2:
            return self.rng.choice(W.GREETINGS_TWO).format(name=to[0].first, name2=to[1].first)
        return self.rng.choice(W.GREETINGS_MANY)

    def signoff(self, sender: Person) -> str:
        words = sender.signoff if self.rng.random() < 0.8 else self.rng.choice(W.SIGNOFFS)
        return f"{words}\n{sender.first if self.rng.random() < 0.85 else sender.full}"

    def signature(self, sender: Person) -> str:
        """A `-- ` signature block for a third of the cast (always the same people), else nothing."""
        if sender.index % 3:
            return ""
        extension = 1000 + sender.index * 7919 % 9000  # a fixed, made-up number per person
        return f"\n\n-- \n{sender.full}\n{sender.title}, {sender.org}\n{sender.phone} {extension}"

    def _main(self, reply: bool) -> list[str]:
        """The point of the email: a request and/or a meeting, or the answer to them in a reply."""
        rng = self.rng
        asks = {"request": [W.REQUESTS], "meeting": [W.MEETING_ASKS], "both": [W.REQUESTS, W.MEETING_ASKS]}
        answers = {"request": [W.REQUEST_REPLIES], "meeting": [W.MEETING_REPLIES],
                   "both": rng.sample([W.REQUEST_REPLIES, W.MEETING_REPLIES], rng.randint(1, 2))}
        return [self.say(rng.choice(pool)) for pool in (answers if reply else asks)[self.topic]]

    def _fillers(self, need: int, room: int) -> list[str]:
        """Filler sentences totalling at least `need` words and never more than `room` (tiny ones close gaps).
        No template repeats until all have been used, so long emails do not loop."""
        out: list[str] = []
        have = 0
        unused = list(W.FILLERS)
        while have < need:
            template = unused.pop(self.rng.randrange(len(unused)))
            unused = unused or list(W.FILLERS)
            sentence = self.say(template, fresh_docs=self.rng.random() < 0.5)
            if have + count_words(sentence) > room:
                sentence = self.rng.choice([t for t in W.TINY_FILLERS if count_words(t) <= room - have])
            out.append(sentence)
            have += count_words(sentence)
        return out

    def body(self, sender: Person, to: Sequence[Person], *, reply: bool, target: int, max_words: int) -> str:
        """The sender's own text, paragraphs separated by blank lines, with `target` to `max_words` words
        (fewer than `target` only when even the bare greeting, request and sign-off exceed `max_words`)."""
        rng = self.rng
        greeting, main, signoff = self.greeting(to), self._main(reply), self.signoff(sender)
        used = count_words(greeting) + count_words(" ".join(main)) + count_words(signoff)
        if used > max_words:
            main = [self.say(_FALLBACK_REPLY if reply else _FALLBACK_ASK)]
            used = count_words(greeting) + count_words(main[0]) + count_words(signoff)
        if reply and rng.random() < 0.3:  # replies keep the thread's code, switch to a new one, or drop it
            self.fixed["ref"], self.fixed["refkind"] = _new_ref(rng) if rng.random() < 0.5 else ("", "")
        head: list[str] = []
        tail: list[str] = []
        if self.fixed["ref"]:
            pair = [self.say(rng.choice(W.REF_INTROS)), self.say(rng.choice(W.REF_REPEATS))]
            if used + count_words(" ".join(pair)) <= max_words:
                head, tail = [pair[0]], [pair[1]]
                used += count_words(" ".join(pair))
        for pool, part in ((W.OPENERS, head), (W.CLOSERS, tail)):
            extra = self.say(rng.choice(pool))
            if rng.random() < 0.5 and used + count_words(extra) <= target:
                part.insert(0 if pool is W.OPENERS else len(part), extra)
                used += count_words(extra)
        fillers = self._fillers(target - used, max_words - used)
        paragraphs = [head + main]
        while fillers:
            take = rng.randint(1, 4)
            paragraphs.append(fillers[:take])
            fillers = fillers[take:]
        paragraphs.append(tail)
        text = "\n\n".join(" ".join(p) for p in paragraphs if p)
        return f"{greeting}\n\n{text}\n\n{signoff}"

    def recall_body(self, sender: Person, recipient: Person, distance_words: int) -> tuple[str, str]:
        """A body whose reference recurs exactly `distance_words` words after its first use (see memory_email)."""
        rng = self.rng
        ref = self.fixed["ref"]
        intro = self.say(rng.choice(W.REF_INTROS))
        after = count_words(intro[intro.index(ref) + len(ref) :])
        if after > distance_words - self.RECALL_CUE_WORDS:
            intro, after = self.say("This is about ref {ref}."), 0
        gap = distance_words - self.RECALL_CUE_WORDS - after
        fillers = self._fillers(gap, gap)
        paragraphs = [[intro] + fillers[:2]]
        fillers = fillers[2:]
        while fillers:
            take = rng.randint(2, 5)
            paragraphs.append(fillers[:take])
            fillers = fillers[take:]
        paragraphs[-1].append(f"{_RECALL_CUE} {ref}.")
        text = "\n\n".join(" ".join(p) for p in paragraphs)
        return f"{self.greeting([recipient])}\n\n{text}\n\n{self.signoff(sender)}", ref

