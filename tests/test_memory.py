"""The person's memory (`WritingMemory`), the reply copier and the choice between proposers.

Property tests: arbitrary text never crashes a lookup; a proposal is always text that followed the same
words in an added email; a prefix of an added email is continued by that email's own words. Worked
examples check the longest match, the shares and the line/sentence rules against hand counts.
"""

from __future__ import annotations

import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from seqlab.generation.complete import Completion, split_words
from seqlab.generation.gate import EXPECTED_CHARS, FIRST_WORD, kept_words
from seqlab.generation.memory import ALPHA, BETA, WritingMemory, chained, split_prompt
from seqlab.generation.reply_copy import ReplyCopy, salient
from seqlab.generation.sources import best_value, choose, gate, weighted

MAIL = [
    "Lunch\n\nHi Dana,\nThanks for the figures. I will send the file tomorrow.\nBest,\nSam",
    "Report\n\nHi Dana,\nThanks for the report. See you soon!\nBest,\nSam",
    "Plans\n\nHi Lee,\nCould you send me the file tomorrow?\nBest,\nSam",
]

# words from a small vocabulary, so that random emails share contexts; separators include line breaks
WORDS = st.sampled_from(["Hi", "Dana,", "the", "file", "figures.", "send", "I", "will", "x", "éa", "Best,", "a?"])
SEPS = st.sampled_from([" ", " ", " ", "\n", "  ", "\n\n", "\t"])


@st.composite
def emails(draw: st.DrawFn) -> str:
    words = draw(st.lists(WORDS, min_size=1, max_size=25))
    seps = draw(st.lists(SEPS, min_size=len(words), max_size=len(words)))
    body = "".join(w + s for w, s in zip(words, seps)).rstrip()
    return draw(st.sampled_from(["", "Re", "Lunch"])) + "\n\n" + body


def memory_of(texts: list[str], **kw: object) -> WritingMemory:
    m = WritingMemory(table_bits=10, **kw)  # type: ignore[arg-type]
    for i, t in enumerate(texts):
        m.add(t, f"email {i}")
    return m


def test_split_prompt_separates_the_word_being_typed() -> None:
    assert split_prompt("Re\n\nHi Da") == ("Hi ", "Da")
    assert split_prompt("Re\n\nHi Dana,\n") == ("Hi Dana,\n", "")
    assert split_prompt("Re\n\n") == ("", "")
    assert split_prompt("no blank line") == ("no blank ", "line")


def test_greeting_and_sign_off_after_their_first_letters() -> None:
    m = memory_of(MAIL)
    hi = m.propose("New\n\nH")
    # 3 earlier body starts; "Hi" follows all three, then "Dana," two (the newest of them names the email)
    # and "Lee," one: the most common goes on. Evidence: the body start (1 token) and 1 typed letter
    assert hi is not None and hi.text == "i Dana," and hi.source == "memory" and hi.origin == "email 1"
    first = 3 / (3 + ALPHA / 2**2)
    assert hi.word_confidences == pytest.approx([first, first * 2 / (3 + BETA / 3**2)])
    assert hi.word_confidences == pytest.approx(chained([3, 2], 3, 2))
    best = m.propose("New\n\nHi Lee,\nok\nBest,\n")  # evidence: "\n Best, \n" (3 tokens), no letter
    assert best is not None and best.text == "Sam" and best.word_confidences == pytest.approx([3 / (3 + ALPHA / 9)])


def test_longest_match_wins_and_the_sentence_is_offered_whole() -> None:
    m = memory_of(MAIL)
    # "send me the" and "send the" both end in "the"; the longer match ("you send me the") decides
    c = m.propose("x\n\nCould you send me the ")
    assert c is not None and c.text == "file tomorrow?" and c.origin == "email 2"
    whole = m.propose("x\n\nHi Dana,\n")  # two places agree on "Thanks for the", split on the last word
    assert whole is not None and whole.text == "Thanks for the report." and whole.origin == "email 1"
    # the match: body start, "Hi", "Dana,", line break (evidence 4); two places agree, then one
    assert whole.word_confidences == pytest.approx(chained([2, 2, 2, 1], 2, 4))
    assert whole.word_confidences[0] == pytest.approx(2 / (2 + ALPHA / 4**2))


def test_mid_word_and_a_word_typed_whole() -> None:
    m = memory_of(MAIL)
    mid = m.propose("x\n\nThanks for the fi")
    assert mid is not None and mid.text == "gures." and mid.words == ["gures."]
    after = m.propose("x\n\nThanks for the figures.")  # the sentence is typed whole: the next one follows
    assert after is not None and after.text == " I will send the file tomorrow."
    assert len(after.word_confidences) == len(after.words) == 6
    assert m.propose("x\n\nHi Dana,\nThanks for the zz") is None
    assert m.propose("x\n\nnever seen ") is None
    assert memory_of(MAIL).propose("x\n\nBest,\nSam") is None  # nothing follows on that line


def test_max_words_caps_a_proposal() -> None:
    c = memory_of(MAIL).propose("x\n\nHi Dana,\nThanks for the figures.", max_words=2)
    assert c is not None and c.text == " I will" and len(c.word_confidences) == 2


def test_a_single_match_is_trusted_more_the_longer_it_is() -> None:
    one = ["a\n\nplease find attached the slides"]
    assert memory_of(one, alpha=0.0, beta=0.0).propose("b\n\nplease find ").word_confidences == [1.0, 1.0, 1.0]
    # body start, "please", "find": 3 tokens of evidence
    assert memory_of(one, alpha=9.0, beta=0.0).propose("b\n\nplease find ").word_confidences == [0.5, 0.5, 0.5]
    # "find" alone (the body started otherwise) with two typed letters: 1 + 2
    assert memory_of(one, alpha=9.0, beta=0.0).propose("b\n\nso find at").word_confidences == [0.5, 0.5, 0.5]
    # "find" alone, at a word start: 1 token, the share shrinks by alpha whole
    assert memory_of(one, alpha=9.0, beta=0.0).propose("b\n\nso find ").word_confidences == [0.1, 0.1, 0.1]
    # each next word of a lone place is less sure, the less the longer the evidence: 1/(1 + 16/(3+k)^2)
    later = memory_of(one, alpha=0.0, beta=16.0).propose("b\n\nplease find ").word_confidences
    assert later == pytest.approx([1.0, 1 / (1 + 16 / 16), 1 / (1 + 16 / 16) / (1 + 16 / 25)])


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.text(max_size=80), max_size=5), st.text(max_size=80))
def test_arbitrary_text_never_crashes(texts: list[str], prompt: str) -> None:
    m = memory_of(texts)
    for p in (prompt, "x\n\n" + prompt):
        c = m.propose(p)
        if c is not None:
            assert c.text and "\n" not in c.text
            assert len(c.word_confidences) == len(c.words) >= 1
            assert all(0.0 < q <= 1.0 for q in c.word_confidences)
            assert c.word_confidences == sorted(c.word_confidences, reverse=True)


def _followed(texts: list[str], prompt: str, text: str) -> bool:
    """Whether `text` followed the prompt's last word and the whitespace before it in an added email."""
    _, partial = split_prompt(prompt)
    bodies = [t.partition("\n\n")[2] for t in texts]
    return any((partial + text) in b and re.search(r"(?:^|\s)" + re.escape(partial + text), b) for b in bodies)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(emails(), min_size=1, max_size=6), st.data())
def test_a_proposal_is_text_that_followed_in_an_added_email(texts: list[str], data: st.DataObject) -> None:
    m = memory_of(texts)
    body = data.draw(st.sampled_from(texts)).partition("\n\n")[2]
    prompt = "Re\n\n" + body[: data.draw(st.integers(0, len(body)))]
    c = m.propose(prompt)
    if c is not None:
        assert _followed(texts, prompt, c.text), (prompt, c.text)


UNIQUE = st.lists(st.sampled_from([f"{w}{end}" for w in ("ab", "cd", "ef", "gh", "ij", "kl", "mn", "op")
                                   for end in ("", ".", ",", "?")]), min_size=1, max_size=20, unique=True)
ONE_BREAK = st.sampled_from([" ", " ", "  ", "\t", "\n", " \n"])  # never two line breaks in a row


def continuation(body: str, cut: int, cap: int = 20) -> str | None:
    """What follows `cut` in `body`, computed directly: the rest of the word being typed, then words up to
    the end of the line or of a sentence (a whole typed word does not end it), at most `cap` words."""
    before, partial = split_prompt("\n\n" + body[:cut])
    tokens = list(re.finditer(r"\n|[^ \t\n\r\f\v]+", body))
    at = next((i for i, t in enumerate(tokens) if t.start() >= cut - len(partial)), None)
    if at is None or tokens[at].group() == "\n":
        return None
    out = []
    for t in tokens[at:]:
        if t.group() == "\n" or len(out) == cap + 1:
            break
        out.append(t)
        if re.search(r"[.!?]\Z", t.group()) and (len(out) > 1 or t.group() != partial):
            break
    if out[0].group() != partial:
        out = out[:cap]
    text = body[out[0].start() + len(partial): out[-1].end()]
    return text if split_words(text) else None


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(UNIQUE, st.data(), st.integers(1, 20))
def test_a_prefix_of_an_added_email_is_continued_by_its_own_words(words: list[str], data: st.DataObject,
                                                                  cap: int) -> None:
    seps = data.draw(st.lists(ONE_BREAK, min_size=len(words), max_size=len(words)))
    body = "".join(w + s for w, s in zip(words, seps)).rstrip()
    m = memory_of(["Subject\n\n" + body], alpha=0.0, beta=0.0)
    cut = data.draw(st.integers(0, len(body)))
    c = m.propose("Re\n\n" + body[:cut], max_words=cap)
    expected = continuation(body, cut, cap)
    assert (c.text if c is not None else None) == expected
    if c is not None:
        assert c.word_confidences == [1.0] * len(c.words) and c.origin == "email 0"


def test_reply_copy_offers_names_figures_and_phrases() -> None:
    original = ("Hi Sam,\nCould we meet on Tuesday at 3pm in the small room? The quote was 4,500 EUR.\n"
                "Dana Whitfield\ndana@example.org")
    r = ReplyCopy()
    name = r.propose("Re\n\nHi Da", original)
    assert name is not None and name.text == "na Whitfield" and name.source == "reply" and name.origin is None
    assert r.propose("Re\n\nThe 4,", original).text == "500"
    assert r.propose("Re\n\nwrite to da", original).text == "na@example.org"
    phrase = r.propose("Re\n\nYes, we can meet on ", original)
    assert phrase is not None and phrase.text == "Tuesday at 3pm in the small room?"
    assert r.propose("Re\n\nHi ", original) is None  # the body starts never match each other
    assert r.propose("Re\n\nHi Da", None) is None and r.propose("Re\n\nHi Da", 3) is None
    assert salient("4,500") and salient("Dana,") and salient("a@b.org") and not salient("the") and not salient("I")


def test_choose_takes_the_most_expected_characters_after_the_weights() -> None:
    model = Completion("the report", [], 0.5, [0.5, 0.4])  # values 0.5*2=1.0, 0.4*9=3.6
    memory = Completion("the report is attached", [], 0.6, [0.6, 0.6, 0.3, 0.3], source="memory", origin="e")
    assert best_value(model) == pytest.approx(3.6)
    assert best_value(memory) == pytest.approx(max(0.6 * 2, 0.6 * 9, 0.3 * 12, 0.3 * 21))
    assert choose([model, memory], {"memory": 1.0}).source == "memory"
    assert choose([model, memory], {"memory": 0.5}).source == "model"  # halved, its best is 0.15 * 21 < 3.6
    assert weighted(memory, {"memory": 3.0}).word_confidences == pytest.approx([1.0, 1.0, 0.9, 0.9])  # capped at 1
    assert choose([None, Completion("")], {}) is None


@pytest.mark.parametrize("rule,threshold", [(EXPECTED_CHARS, 2.0), (EXPECTED_CHARS, 50.0), (FIRST_WORD, 0.55),
                                            (FIRST_WORD, None), (EXPECTED_CHARS, None)])
def test_gate_cuts_as_kept_words_counts(rule: str, threshold: float | None) -> None:
    c = Completion("the report is attached", [], 0.6, [0.6, 0.6, 0.3, 0.3], source="memory")
    shown = gate(c, rule, threshold)
    assert len(shown.words) == kept_words(c.text, c.word_confidences, rule, threshold)
    assert c.text.startswith(shown.text) and len(shown.word_confidences) == len(shown.words)


@st.composite
def proposals(draw: st.DrawFn, source: str) -> Completion | None:
    words = draw(st.lists(st.sampled_from(["a", "the", "report", ",", "attached.", "Dana", "é"]), max_size=5))
    if not words:
        return None if draw(st.booleans()) else Completion("", source=source)
    confs = sorted(draw(st.lists(st.floats(0.0, 1.0), min_size=len(words), max_size=len(words))), reverse=True)
    return Completion(draw(st.sampled_from(["", " "])) + " ".join(words), [], confs[0], confs, source=source)


@settings(max_examples=300, deadline=None)
@given(proposals("model"), proposals("memory"), proposals("reply"),
       st.fixed_dictionaries({"memory": st.sampled_from([0.0, 0.5, 1.0, 2.0]),
                              "reply": st.sampled_from([0.0, 1.0, 3.0])}))
def test_the_server_chooses_as_the_saved_characters_replay_does(model: Completion | None, memory: Completion | None,
                                                                 reply: Completion | None,
                                                                 weights: dict[str, float]) -> None:
    from seqlab.evaluation.typing_sim import Boundary, Candidate
    from seqlab.evaluation.typing_sim import choose as replay_choose

    mine = choose([model, memory, reply], weights)
    boundary = Boundary(0, {c.source: Candidate.of(c) for c in (model, memory, reply) if c is not None})
    theirs = replay_choose(boundary, weights)
    assert (mine is None) == (theirs is None)
    if mine is not None and theirs is not None:
        assert (mine.source, mine.text) == (theirs.source, theirs.text)
        assert mine.word_confidences == pytest.approx(theirs.word_confidences)


def test_reply_copy_reads_the_models_context_batch_as_its_text() -> None:
    from seqlab.data.tokenizer import ByteTokenizer
    from seqlab.models.context_encoder import ContextBatch

    tok = ByteTokenizer()
    original = "Could we meet on Tuesday at 3pm? Dana Whitfield"
    batch = ContextBatch.from_lists([tok.encode(original)])
    as_batch = ReplyCopy(tokenizer=tok).propose("Re\n\nSure, we can meet on ", batch)
    as_text = ReplyCopy().propose("Re\n\nSure, we can meet on ", original)
    assert as_batch == as_text and as_text is not None and as_text.text == "Tuesday at 3pm?"
    assert ReplyCopy().propose("Re\n\nSure, we can meet on ", batch) is None  # no tokenizer: no text to read
