"""Dedupe (seqlab/data/prepare/dedupe.py), threading (thread_keys.py and the union-find reference in
tests/slow_threads.py) and the leakage-free split by thread."""

from __future__ import annotations

import json
import random
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from slow_threads import assign_threads, check, split_corpus

from seqlab.data.layout import SPLITS
from seqlab.data.mail.records import Email
from seqlab.data.prepare.dedupe import MIN_DUPLICATE_BODY_CHARS, Deduper, normalize_body
from seqlab.data.prepare.thread_keys import ThreadMeta, normalize_subject, split_for_thread

WORDS = "report slides meeting budget friday review draft invoice contract schedule agenda notes".split()


def _email(mid: str, conv: str, subject: str, body: str, sender: str, to: str, **kw: object) -> Email:
    # `source` carries the generator's ground-truth conversation label for the leakage checks.
    return Email(id=mid, thread=mid, subject=subject, body=body, sender=sender, recipients=[to],
                 message_id=mid, source=conv, **kw)  # type: ignore[arg-type]


def make_corpus(n_conv: int, seed: int, prefix: str = "c") -> tuple[list[Email], Counter]:
    """Conversations with header-linked replies, header-less replies, forwards, re-sent exact
    duplicates and duplicate bodies under new subjects; returns the emails and expected drops."""
    rng = random.Random(seed)
    out: list[Email] = []
    expected: Counter = Counter()
    for c in range(n_conv):
        conv = f"{prefix}{c}"
        a, b = f"u{rng.randrange(50)}@ex.org", f"v{rng.randrange(50)}@ex.org"
        subject = f"{rng.choice(WORDS)} {rng.choice(WORDS)} {prefix}{c}"
        root = f"{conv}.0@ex.org"
        body0 = f"Hello, please send the {rng.choice(WORDS)} before the {rng.choice(WORDS)}. ref {conv}"
        out.append(_email(root, conv, subject, body0, a, b, date=f"2002-01-{1 + c % 28:02d}T10:00:00+00:00"))
        refs = [root]
        for r in range(1, rng.randrange(1, 5)):
            mid = f"{conv}.{r}@ex.org"
            short = r == 1 and rng.random() < 0.5  # at most one per conversation, else an exact duplicate
            body = "Thanks!" if short else f"Reply {r} about {rng.choice(WORDS)} in {conv}"
            out.append(_email(mid, conv, "Re: " + subject, body, b, a, in_reply_to=refs[-1], references=list(refs)))
            refs.append(mid)
        if rng.random() < 0.3:  # a reply from a client that drops threading headers
            out.append(_email(f"{conv}.h@ex.org", conv, "RE:  " + subject.upper(), f"headerless {conv}", b, a))
        if rng.random() < 0.3:  # re-sent: same sender, subject and body under a new Message-ID
            out.append(_email(f"{conv}.resent@ex.org", conv, subject, "  " + body0.upper(), a, b))
            expected["duplicate"] += 1
        if rng.random() < 0.2:  # the same long body sent to someone else under another subject
            out.append(_email(f"{conv}.dup@ex.org", f"{conv}-dup", "Fwd: " + subject + " x", body0,
                              "w@ex.org", "q@ex.org"))
            expected["duplicate_body"] += 1
        if rng.random() < 0.2:  # a forward is a new conversation with new participants
            out.append(_email(f"{conv}.fwd@ex.org", f"{conv}-fwd", "Fwd: " + subject,
                              f"FYI, see below {conv}", a, "boss@ex.org"))
    return out, expected


def split_ids(result: object) -> dict[str, list[str]]:
    return {name: [e.id for e in emails] for name, emails in result.splits.items()}  # type: ignore[attr-defined]


def test_no_id_thread_or_duplicate_body_in_two_splits() -> None:
    emails, expected = make_corpus(300, seed=1)
    result = split_corpus(emails, seed=7, fractions=(0.6, 0.2, 0.2))
    assert all(result.splits[name] for name in SPLITS)
    assert result.duplicates == expected
    kept = sum(result.counts().values())
    assert kept + sum(expected.values()) == len(emails)
    for key in ("id", "thread", "source"):  # source = ground-truth conversation of the generator
        owner: dict[str, str] = {}
        for name, group in result.splits.items():
            for e in group:
                assert owner.setdefault(getattr(e, key), name) == name, f"{key} {getattr(e, key)} in two splits"
    bodies: dict[str, str] = {}
    for name, group in result.splits.items():
        for e in group:
            nb = normalize_body(e.body)
            if len(nb) >= MIN_DUPLICATE_BODY_CHARS:
                assert bodies.setdefault(nb, name) == name
    # Short bodies ("Thanks!") are not duplicates: several are kept, documented behaviour.
    assert sum(e.body == "Thanks!" for g in result.splits.values() for e in g) > 1


def test_same_input_and_seed_give_identical_output() -> None:
    first = split_corpus(make_corpus(200, seed=2)[0], seed=3)
    second = split_corpus(make_corpus(200, seed=2)[0], seed=3)
    dump = lambda r: json.dumps({k: [e.to_dict() for e in v] for k, v in r.splits.items()})  # noqa: E731
    assert dump(first) == dump(second)
    assert first.threads == second.threads


def test_different_seed_gives_different_split() -> None:
    a = split_ids(split_corpus(make_corpus(200, seed=2)[0], seed=3))
    b = split_ids(split_corpus(make_corpus(200, seed=2)[0], seed=4))
    assert a != b


def test_adding_mail_does_not_move_existing_threads() -> None:
    old, _ = make_corpus(150, seed=5)
    before = split_corpus([Email(**e.to_dict()) for e in old], seed=9)
    where = {e.id: (name, e.thread) for name, g in before.splits.items() for e in g}
    new, _ = make_corpus(150, seed=6, prefix="n")  # unrelated threads
    rng = random.Random(0)
    # Interleave the new threads while old mail keeps its order (which copy of a duplicate is kept
    # depends on input order, as it must in a stream).
    mixed = [Email(**e.to_dict()) for e in old]
    for e in new:
        mixed.insert(rng.randrange(len(mixed) + 1), e)
    # Newer replies into existing threads, with and without headers, must not move them either.
    # Their ids sort before every existing id, so a "smallest id" key rule would fail here.
    for i, e in enumerate(rng.sample(old, 60)):
        links = {"in_reply_to": e.id, "references": [e.id]} if i % 2 else {"date": "2003-05-01T00:00:00Z"}
        mixed.append(_email(f"0late{i}.{e.id}", e.source, "Re: " + e.subject, f"late reply to {e.id}",
                            e.recipients[0], e.sender, **links))
    after = split_corpus(mixed, seed=9)
    now = {e.id: (name, e.thread) for name, g in after.splits.items() for e in g}
    assert {k: now[k] for k in where} == where


def test_missing_root_arriving_later_keeps_the_key() -> None:
    reply = ThreadMeta("b", "b", "a", ("a",), "hi", frozenset({"x", "y"}))
    root = ThreadMeta("a", "a", None, (), "hi", frozenset({"x", "y"}), date="2002-01-01T00:00:00")
    assert assign_threads([reply]) == ["a"]
    assert assign_threads([reply, root]) == ["a", "a"]


def test_threads_do_not_depend_on_input_order() -> None:
    emails, _ = make_corpus(120, seed=8)
    metas = [ThreadMeta.from_email(e) for e in emails]
    keys = dict(zip((m.id for m in metas), assign_threads(metas)))
    shuffled = metas[:]
    random.Random(1).shuffle(shuffled)
    assert dict(zip((m.id for m in shuffled), assign_threads(shuffled))) == keys


def test_thread_rules() -> None:
    people = frozenset({"a@x", "b@x"})
    metas = [
        ThreadMeta("r", "<r>", None, (), "plan", people, "2002-01-01T00:00:00+02:00"),
        ThreadMeta("s", "s", "<r>", ("<r>",), "plan", people),  # header reply, brackets ignored
        ThreadMeta("h", "h", None, (), "plan", people, "2002-01-03T00:00:00Z"),  # header-less, same subject
        ThreadMeta("o", "o", None, (), "plan", frozenset({"c@x"})),  # other participants: own thread
        ThreadMeta("e1", "e1", None, (), "", people),  # empty subjects never join by subject
        ThreadMeta("e2", "e2", None, (), "", people),
        ThreadMeta("q", "q", None, ("gone", "p"), "x", people),  # root only referenced
        ThreadMeta("y1", "y1", "y2", (), "c", people),  # a reference cycle still gets a key
        ThreadMeta("y2", "y2", "y1", (), "c", people),
    ]
    assert assign_threads(metas) == ["r", "r", "r", "o", "e1", "e2", "gone", "y1", "y1"]


def test_deduper_kinds_and_counts() -> None:
    d = Deduper()
    base = Email(id="1", thread="1", subject="Re: Budget", body="The budget is  attached, see page 2.", sender="A@x")
    assert check(d, base) is None
    same = Email(id="2", thread="2", subject="budget", body="the budget is attached,\nsee page 2.", sender="a@x ")
    assert check(d, same) == "duplicate"
    other = Email(id="3", thread="3", subject="Numbers", body=base.body, sender="c@x")
    assert check(d, other) == "duplicate_body"
    for i in range(3):  # short bodies are allowed to repeat under new subjects
        assert check(d, Email(id=f"t{i}", thread="t", subject=f"s{i}", body="Thanks!", sender="c@x")) is None
    assert d.counts == Counter({"kept": 4, "duplicate": 1, "duplicate_body": 1})
    assert d.counts["duplicate"] + d.counts["duplicate_body"] == 2


def test_split_proportions_and_zero_fractions() -> None:
    keys = [f"thread-{i}" for i in range(10_000)]
    got = Counter(split_for_thread(k, 0, (0.8, 0.15, 0.05)) for k in keys)
    for name, f in zip(SPLITS, (0.8, 0.15, 0.05)):
        assert abs(got[name] / len(keys) - f) < 0.015, got
    assert {split_for_thread(k, 1, (1.0, 0.0, 0.0)) for k in keys} == {"train"}
    assert {split_for_thread(k, 1, (0.0, 0.5, 0.5)) for k in keys} == {"val", "test"}
    assert {split_for_thread(k, 1, (0.3, 0.7, 0.0)) for k in keys} == {"train", "val"}
    # A different seed reassigns threads independently.
    assert sum(split_for_thread(k, 0, (0.5, 0.25, 0.25)) != split_for_thread(k, 1, (0.5, 0.25, 0.25))
               for k in keys) > 3000


@pytest.mark.parametrize("bad", [(0.5, 0.5), (0.5, 0.6, 0.1), (-0.1, 0.6, 0.5), (float("nan"), 0.5, 0.5)])
def test_bad_fractions_raise(bad: tuple[float, ...]) -> None:
    with pytest.raises(ValueError, match="fractions"):
        split_for_thread("k", 0, bad)


@pytest.mark.parametrize(
    ("raw", "norm"),
    [
        ("Re: Hello", "hello"),
        ("RE: Fwd: re:  [SAtalk] Re[2]: Hello   World", "hello world"),
        ("AW: SV: Fw: WG: Antw: Re(3): x", "x"),
        ("[list] [other] Re: y", "y"),
        ("Regarding: the plan", "regarding: the plan"),  # "Re" must be the whole prefix word
        ("   ", ""),
    ],
)
def test_normalize_subject_examples(raw: str, norm: str) -> None:
    assert normalize_subject(raw) == norm


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=st.sampled_from(list("ReFwdAWSVgntr:[]() \t\n2xſKİß")) | st.characters(), max_size=40))
def test_normalize_subject_is_idempotent(s: str) -> None:
    once = normalize_subject(s)
    assert normalize_subject(once) == once
    assert normalize_body(normalize_body(s)) == normalize_body(s)
