"""The person's phrase model (`seqlab.generation.phrases`): its counts against a plain Counter, the file
round trip, the blend against the formula, incremental decoding against one full pass (GRU and attention,
greedy and beam), and `seqlab phrases` / `complete --phrases` end to end."""

from __future__ import annotations

import shutil
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import torch

from seqlab.cli.main import main
from seqlab.config import ModelConfig
from seqlab.data.tokenizer import ByteTokenizer
from seqlab.errors import UserError
from seqlab.generation.beam import beam_search_hypotheses
from seqlab.generation.complete import complete
from seqlab.generation.phrases import PHRASES, PhraseBlend, PhraseModel
from seqlab.models import build_model

TOK = ByteTokenizer()
MAIL = ["Hi Dana,\n\nplease find attached the report.\n\nKind regards,\nDavid",
        "Hi Tom,\n\nplease find attached the slides.\n\nKind regards,\nDavid",
        "Tom,\n\nsee you at noon.\n\nKind regards,\nDavid"]


def _emails() -> list[np.ndarray]:
    return [np.array(TOK.encode_email(m)) for m in MAIL]


def test_counts_equal_a_counter_of_ngrams_and_survive_the_file(tmp_path: Path) -> None:
    pm = PhraseModel.fit(_emails(), TOK, min_context=3, max_context=5, min_count=2)
    for L in (3, 4, 5):
        pairs: Counter = Counter()
        for e in _emails():
            pairs.update((tuple(e[i:i + L]), int(e[i + L])) for i in range(len(e) - L))
        contexts: Counter = Counter()
        for (ctx, _), c in pairs.items():
            contexts[ctx] += c
        expected = sorted(c for (ctx, _), c in pairs.items() if contexts[ctx] >= 2)
        assert sorted(pm.tables[L][2].tolist()) == expected
    # "regards,\n" was seen three times, always followed by "D": the longest match says so
    text = np.array(TOK.encode("Kind regards,\n"))
    hit = [m for m in pm.matches(text, 0) if m[0] == len(text) - 1]
    assert hit and hit[0][1].tolist() == [ord("D")] and hit[0][2].tolist() == [3]
    pm.save(tmp_path / PHRASES)
    again = PhraseModel.load(tmp_path / PHRASES, TOK, weight=0.5)
    assert again.meta == pm.meta and again.weight == 0.5
    for L in pm.tables:
        for a, b in zip(pm.tables[L], again.tables[L]):
            assert np.array_equal(a, b)


def test_a_bad_or_foreign_phrase_file_is_a_user_error(tmp_path: Path) -> None:
    from seqlab.data.prepare.tokenizer_fit import fit_tokenizer

    (tmp_path / PHRASES).write_bytes(b"not a zip")
    with pytest.raises(UserError, match="not a readable phrase file"):
        PhraseModel.load(tmp_path / PHRASES, TOK)
    with pytest.raises(UserError, match="seqlab phrases"):
        PhraseModel.load(tmp_path / "absent.npz", TOK)
    PhraseModel.fit(_emails(), TOK).save(tmp_path / PHRASES)
    with pytest.raises(UserError, match="another tokenizer"):
        PhraseModel.load(tmp_path / PHRASES, fit_tokenizer("bpe", MAIL * 10, vocab_size=280))


def _model(mixer: str) -> torch.nn.Module:
    torch.manual_seed(0)
    return build_model(ModelConfig(vocab_size=TOK.vocab_size, block_size=64, mixer=mixer,
                                   pos="rope" if mixer == "attention" else "none", n_layer=1, n_embd=16,
                                   n_head=2, mlp_ratio=0)).eval()


def test_the_blend_is_the_formula_and_weight_zero_is_the_model() -> None:
    model, pm = _model("gru"), PhraseModel.fit(_emails(), TOK, weight=0.4, alpha=2.0)
    idx = torch.tensor([TOK.encode_email("Bye,\n\nKind regards,\n")[:-1]])  # (1, T), no eos
    with torch.no_grad():
        raw, _ = model(idx)
        blended, _ = PhraseBlend(model, pm)(idx)
        p_model = raw[0, -1].softmax(-1)
    total = 3.0  # "regards,\n" (8 tokens, the longest context) was seen three times, then "D"
    lam = 0.4 * total / (total + 2.0)
    expected = (1 - lam) * p_model
    expected[ord("D")] += lam
    assert torch.allclose(blended[0, -1].exp(), expected, atol=1e-6)
    pm.weight = 0.0
    with torch.no_grad():
        assert torch.allclose(PhraseBlend(model, pm)(idx)[0].log_softmax(-1), raw.log_softmax(-1), atol=1e-5)


@pytest.mark.parametrize("mixer", ["gru", "attention"])
def test_incremental_blend_equals_a_full_pass(mixer: str) -> None:
    blend = PhraseBlend(_model(mixer), PhraseModel.fit(_emails(), TOK))
    n = len(MAIL[1]) + 1  # bos and the text, no eos
    idx = torch.tensor([TOK.encode_email(MAIL[1])[:n], TOK.encode_email(MAIL[0])[:n]])  # (2, n)
    with torch.no_grad():
        full, _ = blend(idx)
        state, pieces = None, []
        for t in range(0, idx.shape[1], 5):  # in pieces of 5 tokens, state carried
            out, state = blend(idx[:, t:t + 5], state=state)
            pieces.append(out)
    assert torch.allclose(torch.cat(pieces, 1), full, atol=1e-5)


def test_beam_search_over_the_blend_scores_each_hypothesis_as_a_full_pass() -> None:
    blend = PhraseBlend(_model("gru"), PhraseModel.fit(_emails(), TOK, weight=0.8))
    prompt = TOK.encode_email("Thanks,\n\nKind regards,")[:-1]
    hyps = beam_search_hypotheses(blend, prompt, beam=3, max_new_tokens=6)
    for h in hyps:
        with torch.no_grad():
            logits, _ = blend(torch.tensor([prompt + h.ids]))
        logp = logits[0, len(prompt) - 1:-1].log_softmax(-1)
        assert sum(h.logps) == pytest.approx(float(logp.gather(1, torch.tensor(h.ids)[:, None]).sum()), abs=1e-4)


def test_a_strong_phrase_model_completes_the_persons_sign_off() -> None:
    model, pm = _model("gru"), PhraseModel.fit(_emails() * 5, TOK, weight=0.95, alpha=0.1)
    plain = complete(model, TOK, "Thanks,\n\nKind regards,\n", max_words=1)
    mine = complete(model, TOK, "Thanks,\n\nKind regards,\n", max_words=1, phrases=pm)
    assert mine.text == "David" and plain.text != "David"
    assert mine.confidence > 0.5


def test_cli_phrases_then_complete_with_them(word_run_dir: Path, tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    word_run_dir = Path(shutil.copytree(word_run_dir, tmp_path / "run"))  # the shared fixture stays as it was
    assert main(["phrases", str(word_run_dir), "--min-context", "3", "--max-context", "6"]) == 0
    assert (word_run_dir / PHRASES).is_file()
    capsys.readouterr()
    assert main(["complete", str(word_run_dir), "Hi Dana,\n\nThanks for the", "--phrases",
                 "--phrase-weight", "0.5", "--device", "cpu", "--show-confidence"]) == 0
    assert "confidence" in capsys.readouterr().out
    assert main(["phrases", str(word_run_dir), "--min-context", "7", "--max-context", "6"]) == 2


@pytest.mark.parametrize("fixture", ["word_run_dir", "gru_run_dir"])
def test_served_suggestion_with_phrases_equals_complete_with_phrases(fixture: str, request: pytest.FixtureRequest,
                                                                     tmp_path: Path,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    """`serve --phrases` answers a keystroke as `complete --phrases` answers the same prompt (the server's
    prompt is subject, blank line, body), from scratch and from a session kept across an edit (attention:
    a truncated cache; GRU: a kept copy), and /health says which phrases it blends."""
    from seqlab.serving.app import ServerConfig
    from tests.serving_helpers import ready_client

    run = Path(shutil.copytree(request.getfixturevalue(fixture), tmp_path / "run"))
    PhraseModel.fit(_emails() * 5, TOK).save(run / PHRASES)
    body = "Thanks,\n\nKind regards,\n"
    capsys.readouterr()
    assert main(["complete", str(run), "\n\n" + body, "--phrases", "--phrase-weight", "0.9", "--max-words", "3",
                 "--device", "cpu"]) == 0
    expected = capsys.readouterr().out[:-1]  # print's newline
    served = {}
    for phrases in (run / PHRASES, None):
        config = ServerConfig(run_dir=run, min_confidence=0.0, phrases=phrases, phrase_weight=0.9,
                              log_dir=tmp_path / "log")
        with ready_client(config) as client:
            health = client.get("/health").json()["model"]
            texts = [client.post("/v1/complete", json={"prefix": prefix, "subject": "", "session": session,
                                                       "max_words": 3}).json()["text"]
                     for prefix, session in ((body, None), (body + "Tom and D", "s"), (body, "s"))]
        served[phrases is not None] = texts
        if phrases is not None:
            assert health["phrases"]["path"] == str(run / PHRASES) and health["phrases"]["weight"] == 0.9
        else:
            assert health["phrases"] is None
    assert served[True][0] == served[True][2] == expected == "David"
    assert served[False][0] != "David"  # the phrases made the difference
    assert main(["serve", str(run), "--phrases", str(tmp_path / "absent.npz")]) == 2
