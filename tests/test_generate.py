"""Decoding: greedy/sampling/beam search against full forward passes, and word-level completions."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
from torch import nn

from seqlab.config import ModelConfig
from seqlab.data.tokenizer import ByteTokenizer
from seqlab.generation.beam import beam_search
from seqlab.generation.complete import Completion, complete, split_words
from seqlab.generation.decode import (
    IncrementalDecoder,
    context_limit,
    filter_logits,
    generate,
    generate_with_logprobs,
    select_state,
)
from seqlab.generation.gate import kept_words, prefix_values
from seqlab.models import build_model

V = 259  # byte tokenizer vocabulary
MODELS = {
    "rnn": dict(mixer="rnn", pos="none"),
    "gru": dict(mixer="gru", pos="none"),
    "mingru": dict(mixer="mingru", pos="none"),
    "attn-rope": dict(mixer="attention", pos="rope"),
    "attn-learned": dict(mixer="attention", pos="learned"),
    "attn-alibi": dict(mixer="attention", pos="alibi"),
}


def tiny(name: str, block_size: int = 8, seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    cfg = ModelConfig(vocab_size=V, block_size=block_size, n_layer=2, n_embd=16, n_head=2, mlp_ratio=2,
                      **MODELS[name])
    model = build_model(cfg).eval()
    with torch.no_grad():  # sharpen the random model so its next-token choices are not near-ties
        model.wte.weight.mul_(40.0)
    return model


def reference_logits(model: nn.Module, seq: list[int], prompt_len: int) -> list[torch.Tensor]:
    """Next-token logits after each prefix seq[:n], n >= prompt_len, each from a full forward pass over
    the window the decoder is documented to use (all of it, or a sliding window for attention)."""
    limit, start, out = context_limit(model), 0, []
    for n in range(prompt_len, len(seq) + 1):
        if limit is not None:
            if n == prompt_len:
                start = max(0, n - limit)
            elif n - start > limit:
                start = n - max(1, limit // 2)  # the re-encode of the last block_size // 2 tokens
        with torch.no_grad():
            logits, _ = model(torch.tensor([seq[start:n]]))
        out.append(logits[0, -1])
    return out


@pytest.mark.parametrize("name", list(MODELS))
def test_incremental_decoder_equals_full_forward(name: str) -> None:
    model = tiny(name)
    g = torch.Generator().manual_seed(1)
    seq = torch.randint(0, 256, (1, 30), generator=g)[0].tolist()  # 30 > 3 * block_size: windows slide
    dec = IncrementalDecoder(model, torch.tensor([seq[:3]]), context_limit(model))
    got = [dec.logits[0]]
    with torch.no_grad():
        for tok in seq[3:]:
            got.append(dec.step(torch.tensor([tok]))[0])
    ref = reference_logits(model, seq, 3)
    assert len(got) == len(ref)
    for a, b in zip(got, ref):
        torch.testing.assert_close(a, b, atol=2e-4, rtol=1e-4)


@pytest.mark.parametrize("name", list(MODELS))
def test_generate_matches_full_forward_on_growing_sequence(name: str) -> None:
    model = tiny(name)
    prompt = [256, 72, 105, 32]
    new, logps = generate_with_logprobs(model, prompt, max_new_tokens=20, greedy=True)
    assert len(new) == 20
    ref = reference_logits(model, prompt + new, len(prompt))
    for tok, lp, r in zip(new, logps, ref):
        assert r[tok] >= r.max() - 1e-4  # the chosen token is the full forward's argmax
        assert lp == pytest.approx(float(r.log_softmax(-1)[tok]), abs=2e-4)


def test_greedy_is_deterministic_and_top_k_1_equals_greedy() -> None:
    model = tiny("attn-rope")
    prompt = [256, 100, 101]
    a = generate(model, prompt, max_new_tokens=15, greedy=True)
    b = generate(model, prompt, max_new_tokens=15, greedy=True)
    assert a == b
    for seed in (0, 1, 2):
        assert generate(model, prompt, max_new_tokens=15, top_k=1, seed=seed, temperature=0.7) == a


def test_seeded_sampling_is_reproducible_and_seeds_differ() -> None:
    model = tiny("gru")
    with torch.no_grad():
        model.wte.weight.div_(40.0)  # a flat distribution, so different seeds surely diverge
    prompt = [256, 100]
    runs = {seed: generate(model, prompt, max_new_tokens=30, temperature=1.0, seed=seed) for seed in (0, 1)}
    assert generate(model, prompt, max_new_tokens=30, temperature=1.0, seed=0) == runs[0]
    assert runs[0] != runs[1]
    nucleus = generate(model, prompt, max_new_tokens=30, top_p=0.9, top_k=50, seed=3)
    assert nucleus == generate(model, prompt, max_new_tokens=30, top_p=0.9, top_k=50, seed=3)


def test_filter_logits_top_k_and_top_p() -> None:
    logits = torch.log(torch.tensor([[0.5, 0.3, 0.15, 0.05]]))
    kept = lambda t: torch.isfinite(t)[0].tolist()  # noqa: E731
    assert kept(filter_logits(logits, top_k=2)) == [True, True, False, False]
    assert kept(filter_logits(logits, top_p=0.5)) == [True, False, False, False]
    assert kept(filter_logits(logits, top_p=0.8)) == [True, True, False, False]
    assert kept(filter_logits(logits, top_p=0.81)) == [True, True, True, False]


def test_generation_stops_at_eos_and_at_stop() -> None:
    model = tiny("gru")
    prompt = [256, 65]
    free = generate(model, prompt, max_new_tokens=12, greedy=True)
    eos = free[4]  # pretend the 5th token is the end of the email
    assert generate(model, prompt, max_new_tokens=12, greedy=True, eos_id=eos) == free[: free.index(eos) + 1]
    assert generate(model, prompt, max_new_tokens=12, greedy=True, stop=lambda ids: len(ids) == 3) == free[:3]


@pytest.mark.parametrize("name", ["gru", "attn-learned"])
def test_beam_1_equals_greedy(name: str) -> None:
    model = tiny(name)
    prompt = [256, 80, 81]
    greedy = generate(model, prompt, max_new_tokens=20, greedy=True)
    [(ids, score)] = beam_search(model, prompt, beam=1, max_new_tokens=20)
    assert ids == greedy
    eos = greedy[6]
    [(ids, _)] = beam_search(model, prompt, beam=1, max_new_tokens=20, eos_id=eos)
    assert ids == generate(model, prompt, max_new_tokens=20, greedy=True, eos_id=eos)


@pytest.mark.parametrize("name", ["rnn", "attn-rope"])
def test_beam_scores_are_sorted_log_probs_of_a_full_forward(name: str) -> None:
    model = tiny(name, block_size=32)
    with torch.no_grad():
        model.wte.weight.div_(10.0)  # several plausible continuations
    prompt = [256, 72, 105]
    results = beam_search(model, prompt, beam=4, max_new_tokens=6, eos_id=10)
    assert len(results) == 4
    scores = [s for _, s in results]
    assert scores == sorted(scores, reverse=True)
    assert len({tuple(ids) for ids, _ in results}) == 4
    for ids, score in results:
        with torch.no_grad():
            logits, _ = model(torch.tensor([prompt + ids]))
        logp = logits[0].log_softmax(-1)  # (T, V)
        full = sum(float(logp[len(prompt) - 1 + i, t]) for i, t in enumerate(ids))
        assert score == pytest.approx(full, abs=1e-4)
    greedy = generate(model, prompt, max_new_tokens=6, greedy=True, eos_id=10)
    greedy_logp = beam_search(model, prompt, beam=1, max_new_tokens=6, eos_id=10)[0][1]
    assert scores[0] >= greedy_logp - 1e-6 or results[0][0] == greedy


def test_select_state_maps_nested_states() -> None:
    state = {"h": torch.arange(6).view(3, 2), "layers": [(torch.arange(3), 7), None]}
    picked = select_state(state, torch.tensor([2, 0]))
    assert picked["h"].tolist() == [[4, 5], [0, 1]]
    assert picked["layers"][0][0].tolist() == [2, 0] and picked["layers"][0][1] == 7


# ---------------------------------------------------------------- word-level completions


class ScriptedLM(nn.Module):
    """A stand-in model that, after the prompt, predicts the bytes of `script` with logit `a` (0 elsewhere)."""

    def __init__(self, prompt_len: int, script: list[int], a: float = 3.0) -> None:
        super().__init__()
        self.prompt_len, self.script, self.a = prompt_len, script, a
        self.dummy = nn.Parameter(torch.zeros(1))

    def forward(self, idx: torch.Tensor, state: torch.Tensor | None = None, **_: object):
        B, T = idx.shape
        start = state if state is not None else torch.zeros(B, dtype=torch.long)
        logits = torch.zeros(B, T, V)
        for b in range(B):
            for t in range(T):
                k = int(start[b]) + t + 1 - self.prompt_len  # index into the script of the next token
                if 0 <= k < len(self.script):
                    logits[b, t, self.script[k]] = self.a
        return logits, start + T


def p_of(a: float = 3.0) -> float:
    return math.exp(a) / (math.exp(a) + V - 1)


def scripted(prompt: str, script: str, eos: bool = False) -> tuple[ScriptedLM, ByteTokenizer]:
    tok = ByteTokenizer()
    healed = prompt[:-1] if prompt.endswith(" ") else prompt
    ids = list(script.encode()) + ([tok.eos_id] if eos else [])
    return ScriptedLM(1 + len(healed.encode()), ids), tok


def test_complete_stops_after_n_words_and_scores_the_first_word() -> None:
    model, tok = scripted("Hi", " hello big world foo bar baz qux\nnext ")
    c = complete(model, tok, "Hi", max_words=2)
    assert c.text == " hello big" and c.words == ["hello", "big"]
    assert c.confidence == pytest.approx(p_of() ** 6)  # " hello": six byte tokens
    # each prefix as a phrase: " hello" then " hello big" (four more byte tokens)
    assert c.word_confidences == pytest.approx([p_of() ** 6, p_of() ** 10])
    assert complete(model, tok, "Hi", max_words=10).text == " hello big world foo bar baz qux"  # newline
    assert complete(model, tok, "Hi", max_words=10, stop_at_newline=False).words[-1] == "next"


def test_complete_heals_a_trailing_space_and_stops_at_eos() -> None:
    model, tok = scripted("Hi ", " see you", eos=True)
    c = complete(model, tok, "Hi ", max_words=5)
    assert c.text == "see you"
    # the forced space is renormalised to probability 1: only "see" counts
    assert c.confidence == pytest.approx(p_of() ** 3)
    assert c.word_confidences == pytest.approx([p_of() ** 3, p_of() ** 7])
    assert c.ids == list(b" see you")


def test_complete_threshold_withholds_unsure_suggestions() -> None:
    model, tok = scripted("Hi ", " see you ")
    conf, both = p_of() ** 3, p_of() ** 7  # "see", then "see you" as one phrase
    assert complete(model, tok, "Hi ", threshold=both * 0.9, rule="first-word").text == "see you"
    # sure of "see" but not of "see you" together: the unsure tail is cut, ids and confidences with it
    cut = complete(model, tok, "Hi ", threshold=conf * 0.9, rule="first-word")
    assert cut.text == "see" and cut.ids == list(b" see") and cut.word_confidences == pytest.approx([conf])
    withheld = complete(model, tok, "Hi ", threshold=conf * 1.1, rule="first-word")
    assert withheld == Completion("", [], withheld.confidence) and withheld.confidence == pytest.approx(conf)


def test_expected_chars_rule_keeps_the_prefix_worth_most_characters() -> None:
    model, tok = scripted("Hi ", " see you ")
    conf, both = p_of() ** 3, p_of() ** 7
    see, see_you = conf * (3 - 1), both * (7 - 1)  # P(prefix) * (its characters - the accepting keystroke)
    best, other = (("see you", see_you), ("see", see)) if see_you >= see else (("see", see), ("see you", see_you))
    assert complete(model, tok, "Hi ", threshold=best[1] * 0.99).text == best[0]  # the default rule
    assert complete(model, tok, "Hi ", threshold=best[1] * 1.01).text == ""
    assert complete(model, tok, "Hi ", threshold=0.0).word_confidences == pytest.approx(
        [conf, both][: len(best[0].split())])
    # the same numbers from the gate alone
    assert kept_words("see you", [conf, both], "expected-chars", best[1] * 0.99) == len(best[0].split())
    assert prefix_values("see you", [conf, both]) == pytest.approx([see, see_you])
    assert other[1] != best[1]


def test_lone_punctuation_is_never_shown_by_the_default_rule() -> None:
    model, tok = scripted("Hi there", ". ")
    assert complete(model, tok, "Hi there", rule="first-word").text == "."
    assert complete(model, tok, "Hi there").text == ""
    assert complete(model, tok, "Hi there", threshold=0.0).text == ""
    assert kept_words(", -", [0.9, 0.8], "expected-chars", None) == 0
    assert kept_words(", and", [0.9, 0.8], "expected-chars", None) == 2


def test_a_threshold_out_of_its_rules_range_is_refused() -> None:
    model, tok = scripted("Hi ", " see you ")
    with pytest.raises(ValueError, match="threshold"):
        complete(model, tok, "Hi ", threshold=1.5, rule="first-word")
    assert complete(model, tok, "Hi ", threshold=1e-9).text  # characters: any number of 0 or more
    with pytest.raises(ValueError, match="rule"):
        complete(model, tok, "Hi ", rule="loudest")


def test_complete_drops_a_word_cut_by_the_token_budget() -> None:
    model, tok = scripted("Hi", " hello wonderful ")
    assert complete(model, tok, "Hi", max_new_tokens=10).text == " hello"
    assert complete(model, tok, "Hi", beam=3, max_words=1).text == " hello"


def test_a_word_of_too_many_tokens_ends_the_decoding() -> None:
    """A run that never ends a word (a rule of carets) is decoded WORD_TOKENS + 1 tokens deep, not to the
    budget, and the words before it are still suggested."""
    from seqlab.generation.stops import WORD_TOKENS, open_word_tokens

    assert open_word_tokens([b" a", b"b", b"c"]) == 3 and open_word_tokens([b"x ", b"ab"]) == 1
    assert open_word_tokens([b"a "]) == 0 and open_word_tokens([]) == 0
    model, tok = scripted("Hi", " hello " + "^" * 40 + " world ")
    calls = []
    forward = model.forward
    model.forward = lambda idx, state=None, **k: (calls.append(idx.shape[1]), forward(idx, state, **k))[1]
    c = complete(model, tok, "Hi", max_words=3, max_new_tokens=200)
    assert c.text == " hello"
    # the prompt's one call, then one per generated token: " hello " and the carets until the cap
    assert len(calls) - 1 <= len(" hello ") + WORD_TOKENS + 1
    assert complete(model, tok, "Hi", max_words=1, max_new_tokens=200).text == " hello"


def test_complete_runs_a_real_model_and_splits_words() -> None:
    assert split_words(" a\tb\nc  d ") == ["a", "b", "c", "d"]
    model, tok = tiny("attn-rope"), ByteTokenizer()
    c = complete(model, tok, "Hi Bob, could you send me the ", max_words=3, temperature=0.8, seed=5)
    assert c == complete(model, tok, "Hi Bob, could you send me the ", max_words=3, temperature=0.8, seed=5)
    assert len(c.words) <= 3 and 0.0 <= c.confidence <= 1.0


def test_token_healing_with_a_bpe_tokenizer() -> None:
    from seqlab.data.prepare.tokenizer_fit import fit_tokenizer
    from seqlab.generation.complete import encode_prompt

    tok = fit_tokenizer("bpe", ["could you send me the file, please"] * 30, vocab_size=300)
    ids, allowed, skip = encode_prompt(tok, "could you send me the ")
    assert ids == [tok.bos_id, *tok.encode("could you send me the")] and skip == 1
    assert allowed is not None and allowed.shape == (tok.vocab_size,)
    the = tok.encode(" the")
    assert len(the) == 1 and bool(allowed[the[0]])  # " the" is one merged token, and it may come first
    assert not bool(allowed[tok.encode("the")[0]])
    # a prompt ending inside a word heals its last token too (tests/test_token_healing.py)
    ids, allowed, skip = encode_prompt(tok, "could you")
    assert ids == [tok.bos_id, *tok.encode("could")] and skip == len(b" you") and bool(allowed[tok.encode(" you")[0]])
    torch.manual_seed(0)
    model = build_model(ModelConfig(vocab_size=tok.vocab_size, block_size=16, mixer="gru", pos="none",
                                    n_layer=1, n_embd=16, mlp_ratio=0)).eval()
    c = complete(model, tok, "could you send me the ", max_words=2, beam=2)
    assert len(c.words) <= 2 and not c.text.startswith(" ")


def test_greedy_and_sampled_completions_stop_one_step_early_with_the_same_answer(
        word_run_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """WordStop(early=True) ends a single sequence once word N is followed by whitespace instead of once
    word N+1 starts: the suggestion, its ids and confidence are the same, with fewer decoding steps.
    A trained model (a random one never ends a word, so both would run to the token budget)."""
    import seqlab.generation.complete as C
    from seqlab.runs.load import load_run

    model, tok, _ = load_run(word_run_dir, "cpu")
    prompts = ["Dear Ann, the report ", "thanks for the notes on the", "a", "Hi Bo,\n\nsee you "]
    steps = {"early": 0, "late": 0}

    def answers(mode: str) -> list[Completion]:
        real_step = IncrementalDecoder.step

        def counted(self: IncrementalDecoder, tokens: torch.Tensor) -> torch.Tensor:
            steps[mode] += 1
            return real_step(self, tokens)

        with monkeypatch.context() as m:
            m.setattr(IncrementalDecoder, "step", counted)
            if mode == "late":
                real_init = C.WordStop.__init__
                m.setattr(C.WordStop, "__init__", lambda self, *a, early=False, **k: real_init(self, *a, **k))
            return [complete(model, tok, p, max_words=w, temperature=t, seed=5, max_new_tokens=40)
                    for p in prompts for w in (1, 3) for t in (0.0, 1.0)]

    early, late = answers("early"), answers("late")
    assert [(c.text, c.ids) for c in early] == [(c.text, c.ids) for c in late]
    assert [c.confidence for c in early] == pytest.approx([c.confidence for c in late], rel=1e-6)
    assert steps["early"] < steps["late"]
