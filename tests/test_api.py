"""The public API (`import seqlab`): its names and signatures as a contract, its docs, that importing it stays light,
and that it and the command line are one path (the same data, weights, numbers and words).
"""

from __future__ import annotations

import inspect
import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

import seqlab
from seqlab.api.reference import members, public_objects, render, signature
from seqlab.cli.main import main

ROOT = Path(__file__).resolve().parent.parent
TINY = {"max_steps": 20, "threads": 1}

# The contract: a change here is a change of the public API (say so in the commit, and update docs/api.md).
# Generated once from the code, then kept by hand.
SIGNATURES: dict[str, str] = {
    'prepare': "(source: 'str | Path', out: 'str | Path', *, tokenizer: 'str | None' = None, vocab_size: 'int | None' = None, tokenizer_from: 'str | Path | None' = None, split: 'Sequence[float]' = (0.9, 0.05, 0.05), seed: 'int' = 0, keep_quotes: 'bool' = False, keep_signatures: 'bool' = False, mask_pii: 'bool' = False, limit: 'int | None' = None, count: 'int' = 2000, groups: 'Sequence[str] | None' = None, cache_dir: 'str | Path | None' = None, workers: 'int | None' = None, senders: 'Sequence[str]' = (), exclude_senders: 'Sequence[str]' = (), split_by: 'str | None' = None, folders: 'Sequence[str] | None' = None, progress: 'bool' = False, password_command: 'str | None' = None, oauth2: 'bool' = False, ca_file: 'str | Path | None' = None, insecure: 'bool' = False, update: 'bool' = False) -> 'DataDir'",  # noqa: E501
    'DataDir': "(path: 'Path', meta: 'dict[str, Any]') -> None",
    'DataDir.open': "(cls, path: 'str | Path') -> 'DataDir'",
    'DataDir.splits': 'property',
    'DataDir.vocab_size': 'property',
    'DataDir.tokenizer': "(self) -> 'Tokenizer'",
    'DataDir.report': "(self) -> 'str'",
    'DataDir.texts': "(self, split: 'str' = 'train', limit: 'int | None' = None) -> 'list[str]'",
    'DataDir.windows': "(self, split: 'str' = 'train', *, block_size: 'int' = 64, batch_size: 'int' = 8, seed: 'int' = 0) -> 'Iterator[tuple[Tensor, Tensor]]'",  # noqa: E501
    'thunderbird': "(source: 'str' = 'thunderbird', folders: 'Sequence[str] | None' = None) -> 'ThunderbirdMail'",  # noqa: E501
    'train': "(data: 'str | Path', out: 'str | Path', preset: 'str | None' = None, *, minutes: 'float | None' = None, resume: 'bool' = False, init: 'str | Path | None' = None, settings: 'Sequence[str]' = (), progress: 'bool' = False, on_step: 'Callable[[StepReport], None] | None' = None, say: 'Callable[[str], None] | None' = None, **overrides: 'Mapping[str, Any]') -> 'Run'",  # noqa: E501
    'StepReport': "(step: 'int', max_steps: 'int', loss: 'float', elapsed_s: 'float', tokens: 'int', val_loss: 'float | None' = None, val_bpb: 'float | None' = None) -> None",  # noqa: E501
    'load': "(run_dir: 'str | Path', *, device: 'str' = 'auto', summary: 'dict[str, Any] | None' = None) -> 'Run'",
    'Run': "(path: 'str | Path', *, device: 'str' = 'auto', summary: 'dict[str, Any] | None' = None) -> 'None'",
    'Run.model': 'property',
    'Run.tokenizer': 'property',
    'Run.config': 'property',
    'Run.summary': 'property',
    'Run.complete': "(self, prefix: 'str', *, max_words: 'int' = 5, temperature: 'float' = 0.0, top_k: 'int | None' = None, top_p: 'float | None' = None, beam: 'int' = 1, seed: 'int | None' = None, threshold: 'float | None' = None, phrases: 'bool' = False, phrase_weight: 'float' = 0.3, reply_to: 'str | Path | None' = None, rule: 'str' = 'chars-per-wrong') -> 'Completion'",  # noqa: E501
    'Run.next_tokens': "(self, prefix: 'str', k: 'int' = 5) -> 'list[NextToken]'",
    'Run.score': "(self, text: 'str') -> 'Score'",
    'Run.attention': "(self, text: 'str', *, layer: 'int | None' = None, head: 'int | None' = None, query: 'int | None' = None) -> 'Attention'",  # noqa: E501
    'Run.inspect': "(self, text: 'str') -> 'Inspection'",
    'Run.evaluate': "(self, split: 'str' = 'val', *, data: 'str | Path | None' = None, threshold: 'float' = 0.0, coverage: 'float | None' = None, coverages: 'Sequence[float]' = (0.05, 0.1, 0.2, 0.5, 1.0), completion_emails: 'int' = 200, positions_per_email: 'int' = 5, phrases: 'bool' = False, phrase_weight: 'float' = 0.3, precision: 'str' = 'run', completions: 'bool' = True, saved: 'bool' = True, saved_emails: 'int | None' = None, saved_words: 'int' = 50, rule: 'str | None' = None, saved_threshold: 'float | None' = None, max_wrong_per_100: 'float' = 3.0, dynamic: 'bool' = False, dynamic_lr: 'float | None' = None, dynamic_method: 'str' = 'rms', ask: 'str' = 'every-letter') -> 'dict[str, Any]'",  # noqa: E501
    'Run.calibrate': "(self, coverage: 'float' = 0.5, *, split: 'str' = 'val', emails: 'int' = 200, max_words: 'int | None' = None, data: 'str | Path | None' = None, target: 'str' = 'coverage', rule: 'str' = 'chars-per-wrong', max_wrong_per_100: 'float' = 3.0, words: 'int' = 50, ask: 'str' = 'every-letter') -> 'dict[str, Any]'",  # noqa: E501
    'Run.tradeoff': "(self, split: 'str' = 'val', *, data: 'str | Path | None' = None, emails: 'int' = 100, words: 'int' = 50, max_words: 'int' = 12, max_wrong_per_100: 'float' = 3.0, ask: 'str' = 'every-letter', mid_word: 'int' = 0) -> 'dict[str, Any]'",  # noqa: E501
    'Run.fit_phrases': "(self, *, data: 'str | Path | None' = None, min_context: 'int' = 4, max_context: 'int' = 8, min_count: 'int' = 2) -> 'dict[str, Any]'",  # noqa: E501
    'Completion': "(text: 'str', ids: 'list[int]' = <factory>, confidence: 'float' = 0.0, word_confidences: 'list[float]' = <factory>, source: 'str' = 'model', origin: 'str | None' = None) -> None",  # noqa: E501
    'Score': "(ids: 'list[int]', labels: 'list[str]', logprobs: 'np.ndarray', target_bytes: 'np.ndarray') -> None",
    'Score.bits': 'property',
    'Score.bits_per_byte': 'property',
    'Score.loss': 'property',
    'NextToken': "(id: 'int', text: 'str', probability: 'float') -> None",
    'Attention': "(maps: 'AttentionMaps', lookup: 'SoftLookup', title: 'str' = 'Attention') -> None",
    'Attention.weights': 'property',
    'Attention.labels': 'property',
    'Attention.ids': 'property',
    'Attention.figure': "(self) -> 'Figure'",
    'Attention.lookup_figure': "(self) -> 'Figure'",
    'Attention.save': "(self, out: 'str | Path') -> 'list[Path]'",
    'Inspection': "(sinusoidal: 'np.ndarray', position_similarity: 'np.ndarray | None', gates: 'list[tuple[list[str], np.ndarray, np.ndarray]]' = <factory>) -> None",  # noqa: E501
    'Inspection.figures': "(self) -> 'dict[str, Figure]'",
    'Inspection.save': "(self, out_dir: 'str | Path') -> 'list[Path]'",
    'lesson': "(name: 'str', out: 'str | Path | None' = None, *, size: 'str | None' = None, seed: 'int' = 0, progress: 'bool' = False) -> 'LessonResult'",  # noqa: E501
    'lesson_names': "() -> 'list[str]'",
    'softmax': "(scores: 'ArrayLike') -> 'np.ndarray'",
    'soft_lookup': "(query: 'ArrayLike', keys: 'ArrayLike', values: 'ArrayLike') -> 'LookupMath'",
    'attention_weights': "(queries: 'ArrayLike', keys: 'ArrayLike', *, causal: 'bool' = False, scale: 'bool' = True) -> 'np.ndarray'",  # noqa: E501
    'self_attention_layer': "(pos: 'str' = 'none', *, causal: 'bool' = False, n_embd: 'int' = 32, n_head: 'int' = 4, seed: 'int' = 0) -> 'Callable[[ArrayLike], np.ndarray]'",  # noqa: E501
    'state_numbers': "(state: 'Any') -> 'int'",
    'LessonResult': "(name: 'str', files: 'list[Path]', rows: 'list[dict[str, Any]]', paragraph: 'str', measured: 'dict[str, Any]' = <factory>, figure: 'Figure | None' = None) -> None",  # noqa: E501
    'LookupMath': "(scores: 'np.ndarray', weights: 'np.ndarray', contributions: 'np.ndarray', output: 'np.ndarray', norms: 'np.ndarray', shares: 'np.ndarray', bias: 'np.ndarray | None' = None) -> None",  # noqa: E501
    'preset': "(name: 'str' = 'small', *settings: 'str', **sections: 'Mapping[str, Any]') -> 'RunConfig'",
    'RunConfig': "(model: 'ModelConfig' = <factory>, data: 'DataConfig' = <factory>, train: 'TrainConfig' = <factory>) -> None",  # noqa: E501
    'ModelConfig': "(vocab_size: 'int' = 259, block_size: 'int' = 256, mixer: 'Mixer' = 'attention', n_layer: 'int' = 2, n_embd: 'int' = 128, n_head: 'int' = 4, pos: 'Position' = 'rope', dropout: 'float' = 0.0, bias: 'bool' = False, mlp_ratio: 'int' = 4, context: 'Context' = 'none', ctx_layers: 'int' = 1, ctx_block_size: 'int' = 256, tie_weights: 'bool' = True, fused_rnn: 'bool' = True, qk_norm: 'bool' = False, hybrid_pattern: 'str' = 'ra', hybrid_cell: 'HybridCell' = 'gru', attn_window: 'int' = 64) -> None",  # noqa: E501
    'DataConfig': "(mode: 'DataMode' = 'auto', min_window_tokens: 'int' = 2) -> None",
    'TrainConfig': "(max_steps: 'int' = 2000, max_minutes: 'float' = 0.0, batch_size: 'int' = 16, grad_accum: 'int' = 1, lr: 'float' = 0.003, min_lr_ratio: 'float' = 0.1, warmup_steps: 'int' = 100, weight_decay: 'float' = 0.1, beta1: 'float' = 0.9, beta2: 'float' = 0.95, grad_clip: 'float' = 1.0, eval_every: 'int' = 200, eval_batches: 'int' = 16, ckpt_every: 'int' = 200, log_every: 'int' = 10, early_stop: 'int' = 0, max_bad_steps: 'int' = 5, seed: 'int' = 1337, device: 'Device' = 'auto', schedule: 'Schedule' = 'cosine', cooldown_frac: 'float' = 0.2, ema: 'float' = 0.0, optimizer: 'Optimizer' = 'adamw', compile: 'bool' = False, threads: 'int' = 0, precision: 'Precision' = 'auto') -> None",  # noqa: E501
    'build_model': "(cfg: 'ModelConfig') -> 'LM'",
    'LM': "(cfg: 'ModelConfig') -> 'None'",
    'LMState': "(layers: 'list[Any]', cross: 'list[CrossKV | None]', pos: 'Tensor', copy: 'PointerKeys | None' = None) -> None",  # noqa: E501
    'lm_loss': "(logits: 'torch.Tensor', y: 'torch.Tensor', reduction: 'str' = 'mean') -> 'torch.Tensor'",
}


def test_all_names_the_lazy_exports() -> None:
    assert seqlab.__all__[0] == "__version__"
    assert seqlab.__all__[1:] == list(seqlab._EXPORTS)  # one list, spelled twice for static tools
    assert set(seqlab.__all__) <= set(dir(seqlab))
    with pytest.raises(AttributeError, match="no attribute 'nothing_here'"):
        seqlab.nothing_here  # noqa: B018


def test_each_public_name_keeps_its_signature() -> None:
    got = {}
    for name, obj in public_objects():
        if name == "UserError":
            continue
        got[name] = signature(obj)
        if inspect.isclass(obj) and any(key.startswith(name + ".") for key in SIGNATURES):
            for member, value in members(obj):
                got[f"{name}.{member}"] = "property" if isinstance(value, property) else signature(value)
    assert got == SIGNATURES
    assert issubclass(seqlab.UserError, Exception)


def test_every_public_name_has_a_docstring_and_type_hints() -> None:
    missing = []
    for name, obj in public_objects():
        items = [(name, obj)]
        if inspect.isclass(obj):
            items += [(f"{name}.{m}", v.fget if isinstance(v, property) else v) for m, v in members(obj)]
        for label, item in items:
            if not (item.__doc__ or "").strip():
                missing.append(f"{label}: no docstring")
            if inspect.isclass(item):
                continue
            sig = inspect.signature(item)
            unhinted = [p for p in sig.parameters.values()
                        if p.name not in ("self", "cls") and p.annotation is inspect.Parameter.empty]
            if unhinted or sig.return_annotation is inspect.Signature.empty:
                missing.append(f"{label}: missing type hints ({', '.join(p.name for p in unhinted) or 'return'})")
    assert not missing, missing


def test_docs_api_md_is_up_to_date() -> None:
    assert (ROOT / "docs" / "api.md").read_text() == render(), \
        "regenerate it: .venv/bin/python -m seqlab.api.reference > docs/api.md"


def test_import_seqlab_and_prepare_do_not_import_torch(tmp_path: Path) -> None:
    """The data side avoids torch (seconds of import time and hundreds of MB): `import seqlab`, the config and
    `prepare`, from Python and from the command line, must not pull it in through the package's __init__."""
    code = (
        "import sys, seqlab, seqlab.config\n"
        "assert 'torch' not in sys.modules, 'import seqlab'\n"
        "seqlab.prepare('synthetic', sys.argv[1], count=20, workers=1)\n"
        "assert 'torch' not in sys.modules, 'seqlab.prepare'\n"
        "from seqlab.cli.main import main\n"
        "argv = ['prepare', 'synthetic', '--out', sys.argv[2], '--count', '20', '--workers', '1', '--quiet']\n"
        "assert main(argv) == 0\n"
        "assert 'torch' not in sys.modules, 'seqlab prepare'\n"
    )
    done = subprocess.run([sys.executable, "-c", code, str(tmp_path / "a"), str(tmp_path / "b")],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


# ---------------------------------------------------------------- behaviour: the API and the CLI are one path


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> seqlab.DataDir:
    return seqlab.prepare("synthetic", tmp_path_factory.mktemp("api") / "data", count=120, split=(0.8, 0.1, 0.1),
                          workers=1)


@pytest.fixture(scope="module")
def trained(data: seqlab.DataDir, tmp_path_factory: pytest.TempPathFactory) -> tuple[seqlab.Run, list]:
    reports: list[seqlab.StepReport] = []
    run = seqlab.train(data, tmp_path_factory.mktemp("api") / "run", preset="tiny", train=TINY, on_step=reports.append)
    return run, reports


def test_prepare_writes_what_the_cli_writes(data: seqlab.DataDir, tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "cli"
    assert main(["prepare", "synthetic", "--out", str(out), "--count", "120", "--split", "0.8,0.1,0.1",
                 "--workers", "1", "--quiet"]) == 0
    assert capsys.readouterr().out == f"{data.report()}\nwrote {out}\n"
    for name in ("meta.json", "train.bin", "val.idx", "tokenizer.json", "emails.jsonl"):
        assert (out / name).read_bytes() == (data.path / name).read_bytes(), name
    assert seqlab.DataDir.open(out).splits == data.splits


def test_train_reports_every_step_and_equals_cli_training(data: seqlab.DataDir, trained: tuple[seqlab.Run, list],
                                                           tmp_path: Path) -> None:
    run, reports = trained
    assert [r.step for r in reports] == list(range(1, 21))
    assert [r.step for r in reports if r.val_loss is not None] == [10, 20]  # the tiny preset validates every 10
    logged = [json.loads(line) for line in (run.path / "metrics.jsonl").read_text().splitlines()]
    validated = {r["step"]: r["val_loss"] for r in logged if "val_loss" in r}  # metrics.jsonl rounds to 5 places
    assert {r.step: round(r.val_loss, 5) for r in reports if r.val_loss is not None} == validated
    assert all(math.isfinite(r.loss) and r.tokens > 0 for r in reports)
    cli = tmp_path / "cli-run"
    assert main(["train", str(data.path), "--out", str(cli), "--preset", "tiny", "train.max_steps=20",
                 "train.threads=1", "--quiet"]) == 0
    theirs = seqlab.load(cli, device="cpu").model.state_dict()
    for key, value in run.model.state_dict().items():
        assert torch.equal(value.cpu(), theirs[key]), key


def test_evaluate_equals_seqlab_eval(trained: tuple[seqlab.Run, list], capsys: pytest.CaptureFixture[str]) -> None:
    run, _ = trained
    capsys.readouterr()
    assert main(["eval", str(run.path), "--json", "--completion-emails", "5"]) == 0
    cli = json.loads(capsys.readouterr().out)
    api = run.evaluate("val", completion_emails=5)
    assert json.loads(json.dumps(api, sort_keys=True)) == cli


def test_complete_equals_seqlab_complete(trained: tuple[seqlab.Run, list], capsys: pytest.CaptureFixture[str]) -> None:
    run, _ = trained
    prompt = "Hi Dana, could you send me the"
    capsys.readouterr()
    assert main(["complete", str(run.path), prompt, "--max-words", "3", "--show-confidence"]) == 0
    c = run.complete(prompt, max_words=3)
    assert capsys.readouterr().out == f"{c.text}\t(confidence {c.confidence:.3f})\n"


def test_score_of_every_email_adds_up_to_eval(data: seqlab.DataDir, trained: tuple[seqlab.Run, list]) -> None:
    """Scoring each held-out email alone, in half-overlapping windows, is `seqlab eval`'s bits per byte."""
    run, _ = trained
    scores = [run.score(text) for text in data.texts("val")]
    assert all(len(s.logprobs) == len(s.ids) - 1 for s in scores)
    assert max(len(s.ids) for s in scores) > 2 * run.config.model.block_size  # the windows were exercised
    bits = sum(s.bits for s in scores)
    nbytes = sum(int(s.target_bytes.sum()) for s in scores)
    assert bits / nbytes == pytest.approx(run.evaluate("val", completions=False)["bpb"], rel=1e-4)


def test_score_and_next_tokens_agree_with_one_forward_pass(trained: tuple[seqlab.Run, list]) -> None:
    run, _ = trained
    text = "Thanks, see you"
    s = run.score(text)
    x = torch.tensor([s.ids])
    with torch.no_grad():
        logits, _ = run.model(x[:, :-1])
    nll = float(seqlab.lm_loss(logits, x[:, 1:], reduction="sum"))
    assert -s.logprobs.sum() == pytest.approx(nll, rel=1e-5)
    top = run.next_tokens(text, k=4)
    probs = torch.softmax(logits[0, -1], dim=-1)  # the last input is the text's last token: it predicts the next
    assert [t.id for t in top] == torch.topk(probs, 4).indices.tolist()
    assert [t.probability for t in top] == pytest.approx(torch.topk(probs, 4).values.tolist(), rel=1e-5)


def test_attention_returns_arrays_and_figures(trained: tuple[seqlab.Run, list]) -> None:
    run, _ = trained
    view = run.attention("Send the report.", query=3)
    assert set(view.weights) == {(0, 0), (0, 1)}
    a = view.weights[(0, 1)]
    assert a.shape == (len(view.labels),) * 2 and np.allclose(a.sum(1), 1, atol=1e-5) and not np.triu(a, 1).any()
    assert view.lookup.query_pos == 3
    assert np.allclose(view.lookup.math.output, view.lookup.head_output, atol=1e-4)
    assert view.figure().axes and view.lookup_figure().axes


def test_resume_lock_and_refusals_are_user_errors(data: seqlab.DataDir, trained: tuple[seqlab.Run, list],
                                                  tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run, _ = trained
    with pytest.raises(seqlab.UserError, match="already holds a run"):
        seqlab.train(data, run.path, preset="tiny", train=TINY)
    with pytest.raises(seqlab.UserError, match="unknown preset"):
        seqlab.train(data, tmp_path / "x", preset="huge")
    with pytest.raises(seqlab.UserError, match="unknown config field 'model.nope'"):
        seqlab.train(data, tmp_path / "y", preset="tiny", model={"nope": 1})
    with pytest.raises(seqlab.UserError, match="is not a run folder"):
        seqlab.load(tmp_path / "nothing")
    with pytest.raises(seqlab.UserError, match="sum to 1"):
        seqlab.prepare("synthetic", tmp_path / "z", split=(0.5, 0.5, 0.5))
    with pytest.raises(seqlab.UserError, match="no complete checkpoint"):
        seqlab.train(data, tmp_path / "fresh", resume=True)
    resumed = seqlab.train(data, tmp_path / "more", preset="tiny", train=TINY)
    more = seqlab.train(data, resumed.path, resume=True, train={"max_steps": 30})
    assert more.summary["steps"] == 30 and more.summary["resumed_at"] == 20
    assert capsys.readouterr() == ("", "")  # nothing printed unless asked


def test_preset_and_model_contract_for_a_loop_of_ones_own(data: seqlab.DataDir) -> None:
    cfg = seqlab.preset("tiny", "model.mixer=gru", model={"vocab_size": data.vocab_size})
    assert isinstance(cfg, seqlab.RunConfig) and cfg.model.mixer == "gru" and cfg.model.pos == "none"
    torch.manual_seed(0)
    model = seqlab.build_model(cfg.model)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    batches = data.windows("train", block_size=16, batch_size=4, seed=0)
    losses = []
    for _ in range(30):
        x, y = next(batches)
        logits, _ = model(x)
        loss = seqlab.lm_loss(logits, y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert np.mean(losses[-5:]) < np.mean(losses[:5])
    with pytest.raises(seqlab.UserError, match="unknown preset"):
        seqlab.preset("huge")
