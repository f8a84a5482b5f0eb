"""Evaluation: bits per byte by hand, equal byte counts across tokenizers, compressors, full coverage of
every target, ExactMatch/coverage against an oracle, and a whole run evaluated end to end."""

from __future__ import annotations

import json
import math
import os
import random
from pathlib import Path

import pytest
import torch
from torch import nn

from seqlab.config import ModelConfig
from seqlab.data.prepare.token_files import TokenWriter
from seqlab.data.prepare.tokenizer_fit import fit_tokenizer
from seqlab.data.store import TokenStore
from seqlab.data.tokenizer import ByteTokenizer, Tokenizer
from seqlab.errors import UserError
from seqlab.evaluation.compressors import compressor_bpb, compressor_bpb_bytes, split_bytes, split_texts
from seqlab.evaluation.exact_match import (
    collect_proposals,
    sample_positions,
    score_proposals,
    threshold_for_coverage,
    word_boundaries,
)
from seqlab.evaluation.heldout import evaluate_lm
from seqlab.evaluation.report import evaluate_run, format_eval
from seqlab.generation.complete import Completion, split_words
from seqlab.models import build_model
from seqlab.options import EvalOptions

TEXTS = [
    "Lunch?\n\nShall we meet at noon, café downstairs?",
    "Re: report\n\nSend the report before the slides. Report first, slides second.",
    "ok",
    "Ünïcödé €uro\n\nThe budget is 5 € — see the attached sheet.\nThanks, Bob",
]


def make_data_dir(path: Path, tok: Tokenizer, texts: list[str], split: str = "test") -> Path:
    path.mkdir(parents=True)
    with TokenWriter(path, split, tok.vocab_size) as w:
        for t in texts:
            w.add(tok.encode_email(t))
    tok.save(path / "tokenizer.json")
    (path / "meta.json").write_text(json.dumps({"token_dtype": "uint16", "vocab_size": tok.vocab_size}))
    return path


class FixedLM(nn.Module):
    """Puts probability probs[k] on target[k] at position k of each sequence (uniform over the rest)."""

    def __init__(self, targets: list[int], probs: list[float], vocab: int, cfg: ModelConfig | None = None) -> None:
        super().__init__()
        self.targets, self.probs, self.vocab, self.cfg = targets, probs, vocab, cfg
        self.dummy = nn.Parameter(torch.zeros(1))

    def forward(self, idx: torch.Tensor, state: torch.Tensor | None = None, **_: object):
        B, T = idx.shape
        start = state if state is not None else torch.zeros(B, dtype=torch.long)
        logits = torch.full((B, T, self.vocab), 0.0)
        for b in range(B):
            for t in range(T):
                k = int(start[b]) + t
                if k < len(self.targets):
                    p = self.probs[k]
                    logits[b, t] = math.log((1 - p) / (self.vocab - 1))
                    logits[b, t, self.targets[k]] = math.log(p)
        return logits, start + T


@pytest.mark.parametrize("windows", [False, True])
def test_bits_per_byte_by_hand_on_three_targets(tmp_path: Path, windows: bool) -> None:
    tok = ByteTokenizer()
    store = TokenStore(make_data_dir(tmp_path / "d", tok, ["ab"]), "test")  # targets: a, b, eos
    cfg = ModelConfig(vocab_size=tok.vocab_size, block_size=4) if windows else None  # attention: windows
    model = FixedLM([ord("a"), ord("b"), tok.eos_id], [1 / 2, 1 / 4, 1 / 8], tok.vocab_size, cfg)
    r = evaluate_lm(model, store, block_size=4, batch_size=2, device="cpu", tokenizer=tok)
    # NLL = ln 2 + ln 4 + ln 8 = 6 ln 2 nats = 6 bits over 3 bytes ("a", "b", eos as one byte)
    assert r["tokens"] == 3 and r["bytes"] == 3
    assert r["loss"] == pytest.approx(2 * math.log(2))
    assert r["ppl"] == pytest.approx(4.0)
    assert r["bpb"] == pytest.approx(2.0)


def test_byte_counts_are_equal_for_byte_and_bpe_tokenizers(tmp_path: Path) -> None:
    byte, bpe = ByteTokenizer(), fit_tokenizer("bpe", TEXTS * 20, vocab_size=300)
    expected = sum(len(t.encode()) + 1 for t in TEXTS)
    counts = []
    for tok in (byte, bpe):
        store = TokenStore(make_data_dir(tmp_path / tok.kind, tok, TEXTS), "test")
        model = FixedLM([], [], tok.vocab_size)  # uniform: only the counts matter here
        r = evaluate_lm(model, store, block_size=8, batch_size=3, device="cpu", tokenizer=tok)
        assert r["tokens"] == int((store.lengths - 1).sum())
        assert r["bpb"] == pytest.approx(r["loss"] / math.log(2) * r["tokens"] / r["bytes"])
        assert len(split_bytes(store, tok)) == r["bytes"]
        assert split_texts(store, tok) == TEXTS
        counts.append(r["bytes"])
    assert counts == [expected, expected]
    assert bpe.vocab_size > byte.vocab_size  # BPE really merged something, so token counts differ


def test_compressor_bits_per_byte_is_sane() -> None:
    repetitive = compressor_bpb(["Send the report before the slides."] * 300)
    assert set(repetitive) == {"gzip", "bz2", "xz"}
    assert all(v < 0.5 for v in repetitive.values())
    rnd = compressor_bpb_bytes(random.Random(0).randbytes(20000))
    assert all(7.9 < v < 8.3 for v in rnd.values())
    rng = random.Random(1)
    letters = compressor_bpb("".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(200)) for _ in range(50))
    assert all(4.6 < v < 6.0 for v in letters.values())  # log2(26) = 4.70 bits of entropy per byte
    with pytest.raises(ValueError):
        compressor_bpb([])


def full_email_nll(model: nn.Module, store: TokenStore) -> float:
    total = 0.0
    with torch.no_grad():
        for i in range(store.num_emails):
            e = torch.from_numpy(store.email(i).astype("int64"))[None]  # (1, L)
            logits, _ = model(e[:, :-1])
            total += float(torch.nn.functional.cross_entropy(logits[0], e[0, 1:], reduction="sum"))
    return total


@pytest.mark.parametrize("mixer,pos", [("gru", "none"), ("attention", "rope")])
def test_evaluate_counts_every_target_once(tmp_path: Path, mixer: str, pos: str) -> None:
    tok = ByteTokenizer()
    store = TokenStore(make_data_dir(tmp_path / "d", tok, TEXTS), "test")
    torch.manual_seed(0)
    model = build_model(ModelConfig(vocab_size=tok.vocab_size, block_size=128, mixer=mixer, pos=pos,
                                    n_layer=1, n_embd=16, n_head=2, mlp_ratio=2)).eval()
    small = evaluate_lm(model, store, block_size=5, batch_size=3, device="cpu", tokenizer=tok)
    assert small["tokens"] == int((store.lengths - 1).sum())
    # One window per email (block_size >= the longest email) equals a plain full forward over each email.
    big = evaluate_lm(model, store, block_size=128, batch_size=1, device="cpu", tokenizer=tok)
    assert big["loss"] * big["tokens"] == pytest.approx(full_email_nll(model, store), rel=1e-5)
    if mixer == "gru":  # the hidden state runs through whole emails: window cuts cost nothing
        assert small["loss"] == pytest.approx(big["loss"], rel=1e-5)
    else:  # independent windows of 5 tokens see less context than whole emails
        assert small["loss"] != pytest.approx(big["loss"], rel=1e-5)


# ---------------------------------------------------------------- Smart-Compose-style completion quality


def oracle(email: str, answers: dict[int, tuple[str, float]]):
    """A model-free proposer: at offset i of `email` it proposes answers[i] with the given confidence."""

    def propose(prefix: str) -> Completion:
        assert email.startswith(prefix)
        text, conf = answers[len(prefix)]
        return Completion(text, [], conf)

    return propose


def test_coverage_and_exact_match_against_an_oracle() -> None:
    email = "a b c d e f"
    assert word_boundaries(email) == [2, 4, 6, 8, 10]  # true continuations of 5, 4, 3, 2, 1 words
    answers = {2: ("b c d e f", 0.9), 4: ("c X e f", 0.5), 6: ("d e f", 0.9), 8: ("X f", 0.2), 10: ("", 0.0)}
    props = collect_proposals([email], oracle(email, answers), max_words=5, positions_per_email=10)
    r = score_proposals(props, threshold=0.0)
    assert r["coverage"] == pytest.approx(4 / 5)
    assert r["exact_match"] == pytest.approx({"1": 3 / 4, "2": 2 / 4, "3": 2 / 3, "4": 1 / 2, "5": 1.0})
    r = score_proposals(props, threshold=0.5)
    assert r["coverage"] == pytest.approx(3 / 5)
    assert r["exact_match"]["1"] == 1.0 and r["exact_match"]["2"] == pytest.approx(2 / 3)
    assert score_proposals(props, threshold=0.95)["exact_match"]["1"] is None
    assert threshold_for_coverage(props, 0.6) == 0.5
    assert threshold_for_coverage(props, 0.4) == 0.9
    assert threshold_for_coverage(props, 1.0) == 0.2  # the most coverage reachable is 4/5


def test_positions_are_seeded_word_boundaries_with_a_true_next_word() -> None:
    emails = TEXTS * 3
    a = sample_positions(emails, 2, seed=7)
    assert a == sample_positions(emails, 2, seed=7) and a != sample_positions(emails, 2, seed=8)
    for e, i in a:
        assert emails[e][i - 1] == " " and not emails[e][i - 2].isspace() and split_words(emails[e][i:])


# ---------------------------------------------------------------- a whole run


@pytest.fixture(scope="module")
def trained_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(RUN_DIR, DATA_DIR): a tiny attention model trained for a few steps by the real trainer."""
    from seqlab.config import apply_overrides, get_preset
    from seqlab.training.trainer import train

    root, tok, rng = tmp_path_factory.mktemp("evalrun"), ByteTokenizer(), random.Random(0)
    data = make_data_dir(root / "data", tok, [])
    for split in ("train", "val", "test"):
        with TokenWriter(data, split, tok.vocab_size) as w:
            for _ in range(40 if split == "train" else 6):
                w.add(tok.encode_email(" ".join(rng.choice(TEXTS).split()[:12])))
    cfg = apply_overrides(get_preset("tiny"), ["train.max_steps=10", "train.threads=1", "train.eval_every=5"])
    train(data, root / "run", cfg, progress=False)
    return root / "run", data


def test_evaluate_run_end_to_end(trained_run: tuple[Path, Path], tmp_path: Path) -> None:
    run_dir, data_dir = trained_run
    r = evaluate_run(run_dir, EvalOptions(split="test", completion_emails=4, positions_per_email=2, threshold=0.1,
                                          coverage=0.5))
    json.dumps(r, allow_nan=False)
    for key in ("split", "loss", "ppl", "bpb", "tokens", "bytes", "compressor_bpb", "exact_match", "coverage",
                "threshold", "params"):
        assert key in r
    assert r["split"] == "test" and r["threshold"] == 0.1 and set(r["exact_match"]) == {"1", "2", "3", "4", "5"}
    store = TokenStore(data_dir, "test")
    assert r["tokens"] == int((store.lengths - 1).sum())
    assert r["bytes"] == len(split_bytes(store, ByteTokenizer()))
    assert r["bpb"] == pytest.approx(r["loss"] * r["tokens"] / math.log(2) / r["bytes"])
    assert r["completion_positions"] == r["at_coverage"]["positions"] > 0
    table = format_eval(r)
    assert "xz -9e" in table and "EM@5" in table
    # The data folder is taken from run.json; without one, the user must name it.
    bare = tmp_path / "bare"
    bare.mkdir()
    for f in os.listdir(run_dir):
        if (run_dir / f).is_file() and f != "run.json":
            (bare / f).write_bytes((run_dir / f).read_bytes())
    with pytest.raises(UserError, match="--data"):
        evaluate_run(bare, EvalOptions(split="test", completions=False))
    assert evaluate_run(bare, EvalOptions(data=data_dir, split="test", completions=False))["tokens"] == r["tokens"]
    other = make_data_dir(tmp_path / "bpe", fit_tokenizer("bpe", TEXTS * 20, vocab_size=300), TEXTS)
    with pytest.raises(UserError, match="different tokenizer"):
        evaluate_run(run_dir, EvalOptions(data=other, split="test", completions=False))
