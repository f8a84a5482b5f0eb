"""Word-level completions for email autocomplete: `complete(model, tokenizer, prompt) -> Completion`.

The prompt is encoded as the model saw emails in training, `[bos] + encode(prompt)`, and continued
with `seqlab.generation.decode` (greedy by default, or sampled, or beam search) until the end of the email, a
newline, or the end of the N-th word. Words are runs of characters other than ASCII whitespace
(`split_words`), the same definition the ExactMatch evaluation uses.

Token healing. A prompt typed up to a word boundary ends with a space ("could you send me the "). A
byte-level BPE tokenizer glues a space to the word after it (" file" is one token), so a lone trailing
space is a token the model rarely saw before a word. When the prompt ends with a space we therefore drop
that space from the encoded prompt and require the first generated token to start with a space; its
probability is renormalised over the tokens that do (the user did type the space). For the byte
tokenizer this is exactly the same as feeding the space.

The same holds inside a word. A prompt typed up to "please find the fi" ends with a piece " fi" that BPE
merges into " file" or " figures" whenever the whole word is there, so the model rarely saw " fi" followed
by "le". For a tokenizer with merges, when the prompt ends with anything but whitespace we drop its last
token and require the first generated token to start with that token's bytes (" file", " fi", " figures"
all do); the suggestion is what comes after the typed bytes ("le, please"). This is token healing
(Lundberg, guidance, 2023); the byte tokenizer has nothing to heal (each byte is its own token).

Confidence. A suggestion's confidence is the model's probability of its first word: the product of the
probabilities of the tokens that carry any byte of the first word (its leading space included), each
taken from the model's own distribution (temperature 1, no filtering). The first word is where a
completion is most uncertain; later words are conditioned on it, and ExactMatch@N measures them. With a
`threshold`, a suggestion whose confidence is below it is withheld (empty text): it must earn its place.
`word_confidences` gives the same product for each prefix of the suggestion (its first k words as one
phrase); a shown suggestion keeps only the words whose prefix reaches the threshold too, and
`seqlab.evaluation.exact_match.phrase_coverage_table` gates N-word suggestions the same way. That is the
`first-word` rule; the default rule, `expected-chars`, gates on expected saved characters instead and
never shows lone punctuation (`seqlab.generation.gate`, measured in docs/suggestions.md).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

import torch
from torch import Tensor, nn

from seqlab.data.tokenizer import Tokenizer
from seqlab.generation.beam import beam_search_hypotheses
from seqlab.generation.decode import IncrementalDecoder, generate_with_logprobs
from seqlab.generation.gate import DEFAULT_RULE, EXPECTED_CHARS, VALUE_RULES, check_rule, kept_words
from seqlab.generation.phrases import PhraseBlend, PhraseModel
from seqlab.generation.stops import (
    WORD_BYTES,
    WORD_TOKENS,
    ValueStop,
    WordStop,
    cut_body,
    prefix_probability,
    token_starts,
)

_WORD = re.compile(r"[^ \t\n\r\f\v]+")
MAX_SENTENCE_WORDS = 12  # the cap on a suggestion that runs to the end of its sentence (`sentence=True`)
# Tokens a suggestion to the end of its sentence may take: 12 words of mail are about 15-25 BPE tokens; the
# budget is what a keystroke may spend on one suggestion (a run that never ends a word stops sooner, at
# `WORD_TOKENS`).
SENTENCE_TOKENS = 64


def token_budget(max_words: int, sentence: bool = False) -> int:
    """The default `max_new_tokens`: WORD_TOKENS per word + 8, at most SENTENCE_TOKENS for a sentence suggestion."""
    budget = WORD_TOKENS * max_words + 8
    return min(budget, SENTENCE_TOKENS) if sentence else budget


def split_words(text: str) -> list[str]:
    """Words of `text`: maximal runs of characters that are not ASCII whitespace."""
    return _WORD.findall(text)


@dataclass
class Completion:
    """A suggestion: its text (to append to the prompt; '' when withheld), token ids and confidence."""

    text: str
    ids: list[int] = field(default_factory=list)
    confidence: float = 0.0
    # P(first k words), k = 1..len(words): the probability of each prefix of the suggestion as a phrase,
    # non-increasing; word_confidences[0] == confidence. Empty when nothing is suggested.
    word_confidences: list[float] = field(default_factory=list)
    # where it came from: "model" (the network), "memory" (the person's own earlier mail, `origin` naming
    # the email) or "reply" (the message being answered); the why panel and the saved-characters counts
    # report each source apart
    source: str = "model"
    origin: str | None = None

    @property
    def words(self) -> list[str]:
        """The suggestion's words (runs of non-whitespace), as ExactMatch counts them."""
        return split_words(self.text)


@lru_cache(maxsize=8)
def _space_led(tokenizer: Tokenizer) -> Tensor:
    """(V,) bool: tokens whose bytes start with a space (the allowed first tokens of a healed prompt)."""
    return torch.tensor([tokenizer.token_bytes(i).startswith(b" ") for i in range(tokenizer.vocab_size)])


@lru_cache(maxsize=8)
def _vocabulary(tokenizer: Tokenizer) -> tuple[bytes, ...]:
    """The bytes of every token, in id order (read once: healing tests each of them at many prompts)."""
    return tuple(tokenizer.token_bytes(i) for i in range(tokenizer.vocab_size))


@lru_cache(maxsize=4096)  # the pieces of the words being typed: an evaluation typing every letter meets thousands
def _extending(tokenizer: Tokenizer, piece: bytes) -> Tensor:
    """(V,) bool: tokens whose bytes start with `piece` (the allowed first tokens after healing `piece`)."""
    return torch.tensor([b.startswith(piece) for b in _vocabulary(tokenizer)])


def encode_prompt(tokenizer: Tokenizer, prompt: str) -> tuple[list[int], Tensor | None, int]:
    """(prompt ids, allowed first tokens or None, bytes of the generation that belong to the prompt)."""
    if prompt.endswith(" "):
        allowed = _space_led(tokenizer)
        if bool(allowed.any()):
            return [tokenizer.bos_id, *tokenizer.encode(prompt[:-1])], allowed, 1
    ids = [tokenizer.bos_id, *tokenizer.encode(prompt)]
    if tokenizer.kind != "byte" and len(ids) > 1 and not prompt[-1].isspace():
        piece = tokenizer.token_bytes(ids[-1])  # the end of the word being typed, as one token
        return ids[:-1], _extending(tokenizer, piece), len(piece)
    return ids, None, 0


def finish(tokenizer: Tokenizer, ids: list[int], logps: list[float], *, skip: int, max_words: int,
           stop_at_newline: bool, threshold: float | None = None, rule: str = DEFAULT_RULE,
           sentence: bool = False) -> Completion:
    """Turn generated ids into a suggestion of at most `max_words` whole words.

    `rule` and `threshold` decide how many of its words are shown (`seqlab.generation.gate.kept_words`;
    withheld, empty, at 0). Under `first-word` the suggestion keeps only its words that are sure enough
    TOGETHER: the longest prefix whose probability as a phrase reaches the threshold, so an unsure tail
    ("the problem the problem") is never shown behind a sure first word; under `expected-chars` the prefix
    worth the most expected saved characters, when that reaches the threshold, and never lone punctuation.
    With `sentence`, nothing after the first sentence end is kept (`seqlab.generation.stops`)."""
    ended = bool(ids) and ids[-1] == tokenizer.eos_id
    if ended:
        ids, logps = ids[:-1], logps[:-1]
    pieces = [tokenizer.token_bytes(i) for i in ids]
    starts = token_starts(pieces)  # byte offset of each token
    body, cut = cut_body(b"".join(pieces)[skip:], stop_at_newline, sentence)
    ended = ended or cut
    words = list(WORD_BYTES.finditer(body))
    # The last word is whole only if something followed it (space, newline, end of email, next word).
    if words and not ended and len(words) <= max_words and words[-1].end() == len(body):
        words.pop()
    words = words[:max_words]
    if not words:
        return Completion("", [], 0.0)
    by_word = [prefix_probability(starts, logps, skip + w.end()) for w in words]
    shown = kept_words(body[: words[-1].end()].decode("utf-8", errors="replace"), by_word, rule, threshold)
    if shown == 0:
        return Completion("", [], by_word[0])
    words, by_word = words[:shown], by_word[:shown]
    end = skip + words[-1].end()
    kept = [i for i, s in zip(ids, starts) if s < end]
    return Completion(body[: words[-1].end()].decode("utf-8", errors="replace"), kept, by_word[0], by_word)


def complete(
    model: nn.Module, tokenizer: Tokenizer, prompt: str, *, max_words: int = 5, stop_at_newline: bool = True,
    temperature: float = 0.0, top_k: int | None = None, top_p: float | None = None, beam: int = 1,
    seed: int | None = None, threshold: float | None = None, max_new_tokens: int | None = None,
    phrases: PhraseModel | None = None,
    context: Any = None, rule: str = DEFAULT_RULE, sentence: bool = False, value_stop: bool = False,
) -> Completion:
    """Suggest how `prompt` (the email typed so far) goes on: up to `max_words` words.

    temperature 0 is greedy; a positive temperature samples (with top_k / top_p, reproducible with
    `seed`); beam > 1 runs beam search (deterministic, temperature ignored) and keeps the beam with the
    best mean log-probability per token (length_penalty=1, so a beam cut short by a newline is not
    preferred merely for being short).
    Generation stops at the end of the email, at a newline (`stop_at_newline`), or once word
    `max_words + 1` starts; `max_new_tokens` (default `token_budget`) bounds it. `rule` says what
    `threshold` gates (`seqlab.generation.gate`): under `expected-chars` (the default) a suggestion is shown
    when its best prefix's P(words) * (characters - 1) reaches it, lone punctuation never; under
    `first-word` a suggestion whose confidence (the first word's probability) is below it comes back empty,
    and a shown one is cut after its last word whose prefix (as a phrase) still reaches it. With
    `phrases`, the person's phrase model is blended into every next-token distribution
    (`seqlab.generation.phrases`), confidence included. `context` (a ContextBatch,
    `seqlab.generation.reply.reply_context`) is the message being answered, read through cross-attention.
    With `sentence`, a suggestion also ends at the end of its sentence (". ", "! ", "? "), so `max_words`
    is a cap (up to `MAX_SENTENCE_WORDS` makes sense) and the rule picks how much to show. With `value_stop`
    (greedy, under `expected-chars`), decoding stops once no longer prefix could be worth more than the best
    so far (`seqlab.generation.stops.ValueStop`): the gate shows the same words, found in fewer steps.
    """
    if phrases is not None:
        model = PhraseBlend(model, phrases)
    ids, allowed, skip = encode_prompt(tokenizer, prompt)
    return complete_encoded(model, tokenizer, ids, allowed, skip, max_words=max_words,
                            stop_at_newline=stop_at_newline, temperature=temperature, top_k=top_k, top_p=top_p,
                            beam=beam, seed=seed, threshold=threshold, max_new_tokens=max_new_tokens,
                            context=context, rule=rule, sentence=sentence, value_stop=value_stop)


def complete_encoded(
    model: nn.Module, tokenizer: Tokenizer, ids: list[int], allowed: Tensor | None, skip: int, *,
    max_words: int = 5, stop_at_newline: bool = True, temperature: float = 0.0, top_k: int | None = None,
    top_p: float | None = None, beam: int = 1, seed: int | None = None, threshold: float | None = None,
    max_new_tokens: int | None = None, decoder: IncrementalDecoder | None = None, context: Any = None,
    rule: str = DEFAULT_RULE, sentence: bool = False, value_stop: bool = False,
) -> Completion:
    """`complete` from a prompt already turned into (ids, allowed, skip) by `encode_prompt`.

    With `decoder` (the same prompt already run through the model, `IncrementalDecoder.resume`), nothing
    is encoded again: this is how the server answers a keystroke from the state it kept."""
    if max_words < 1:
        raise ValueError(f"max_words must be at least 1, not {max_words}")
    if beam < 1:
        raise ValueError(f"beam must be at least 1, not {beam}")
    check_rule(rule, threshold)
    budget = max_new_tokens if max_new_tokens is not None else token_budget(max_words, sentence)
    stop = WordStop(tokenizer, max_words, stop_at_newline, skip, early=beam == 1, sentence=sentence)
    # the value bound holds for one greedy sequence under a gate showing the prefix of the largest value
    # (stops.ValueStop); its shortcut below the threshold only where the threshold is in characters alone
    bound = (ValueStop(tokenizer, max_words, budget, skip, stop_at_newline, sentence,
                       threshold if rule == EXPECTED_CHARS else None)
             if value_stop and beam == 1 and temperature <= 0 and rule in VALUE_RULES else None)
    if beam > 1:
        best = beam_search_hypotheses(model, ids, beam=beam, max_new_tokens=budget, eos_id=tokenizer.eos_id,
                                      stop=stop, length_penalty=1.0, first_allowed=allowed, decoder=decoder,
                                      context=context)[0]
        new, logps = best.ids, best.logps
    else:
        new, logps = generate_with_logprobs(
            model, ids, max_new_tokens=budget, temperature=temperature if temperature > 0 else 1.0,
            top_k=top_k, top_p=top_p, greedy=temperature <= 0, seed=seed, stop=stop,
            eos_id=tokenizer.eos_id, first_allowed=allowed, decoder=decoder, context=context, bound=bound)
    return finish(tokenizer, new, logps, skip=skip, max_words=max_words, stop_at_newline=stop_at_newline,
                  threshold=threshold, rule=rule, sentence=sentence)
