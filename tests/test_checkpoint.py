"""Checkpoints: round trip, fallback on damage, refusal of pickle, atomic writes, tied weights, retention."""

from __future__ import annotations

import hashlib
import json
import os
import random
from pathlib import Path

import numpy as np
import pytest
import safetensors.torch
import torch
from torch import nn

from seqlab.errors import UserError
from seqlab.runs.checkpoint import (
    atomic_write_bytes,
    atomic_write_text,
    capture_rng_state,
    load_best,
    load_checkpoint,
    load_latest,
    load_trainer_state,
    load_weights,
    restore_rng_state,
    save_checkpoint,
    save_run_checkpoint,
)


class TinyLM(nn.Module):
    """Embedding -> dropout -> linear head whose weight IS the embedding matrix (weight tying)."""

    def __init__(self, vocab: int = 11, n_embd: int = 4) -> None:
        super().__init__()
        self.emb = nn.Embedding(vocab, n_embd)
        self.drop = nn.Dropout(0.1)
        self.head = nn.Linear(n_embd, vocab, bias=False)
        self.head.weight = self.emb.weight
        self.register_buffer("scale", torch.ones(1))

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        return self.head(self.drop(self.emb(idx))) * self.scale


def _trained(seed: int = 0, steps: int = 2) -> tuple[TinyLM, torch.optim.Optimizer]:
    torch.manual_seed(seed)
    model = TinyLM()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    idx = torch.randint(0, 11, (2, 5))  # (B, T)
    for _ in range(steps):
        loss = nn.functional.cross_entropy(model(idx).flatten(0, 1), idx.flatten())
        opt.zero_grad()
        loss.backward()
        opt.step()
    return model, opt


def _state(opt: torch.optim.Optimizer, step: int) -> dict:
    return {"step": step, "optimizer": opt.state_dict(), "rng": capture_rng_state(), "data_pos": [3, 7]}


def _save_steps(run_dir: Path, steps: list[int], keep: int = 2, best: tuple[int, ...] = ()) -> dict[int, TinyLM]:
    """Save one slightly different model per step; returns them so loads can be compared."""
    models = {}
    for s in steps:
        model, opt = _trained(seed=s, steps=1)
        save_run_checkpoint(run_dir, model, _state(opt, s), json.dumps({"step": s}), '{"tok": 1}',
                            is_best=s in best, keep=keep)
        models[s] = model
    return models


def _flip_byte(path: Path, offset: int = -5) -> None:
    data = bytearray(path.read_bytes())
    data[offset] ^= 0xFF
    path.write_bytes(bytes(data))


def _same_weights(a: nn.Module, b: nn.Module) -> bool:
    sa, sb = a.state_dict(), b.state_dict()
    return sa.keys() == sb.keys() and all(torch.equal(sa[k], sb[k]) for k in sa)


def _warnings(capsys: pytest.CaptureFixture[str]) -> list[str]:
    """The lines printed on stderr since the last read: each a plain `seqlab: warning:` sentence."""
    lines = capsys.readouterr().err.splitlines()
    for line in lines:
        assert line.startswith("seqlab: warning: "), line
        assert "Warning" not in line and ".py:" not in line, line  # no Python warning format, no source line
    return lines


def test_round_trip_weights_optimizer_and_rng(tmp_path: Path) -> None:
    model, opt = _trained()
    torch.manual_seed(1), np.random.seed(2), random.seed(3)
    state = _state(opt, 7)
    expected = (torch.rand(4), np.random.rand(4), [random.random() for _ in range(4)])
    save_run_checkpoint(tmp_path, model, state, '{"a": 1}', '{"t": 2}')

    torch.manual_seed(99), np.random.seed(99), random.seed(99)  # move every RNG somewhere else
    fresh, _ = _trained(seed=5)
    fresh_opt = torch.optim.AdamW(fresh.parameters(), lr=1e-2)
    assert not _same_weights(fresh, model)
    loaded = load_latest(tmp_path)
    assert loaded is not None and loaded.step == 7 and loaded.path == tmp_path / "checkpoints" / "step_000007"
    saved = (loaded.config_json, loaded.tokenizer_json, loaded.trainer_state["data_pos"])
    assert saved == ('{"a": 1}', '{"t": 2}', [3, 7])
    loaded.load_into(fresh)
    assert _same_weights(fresh, model)
    fresh_opt.load_state_dict(loaded.trainer_state["optimizer"])
    for p_new, p_old in zip(fresh.parameters(), model.parameters()):
        for key in ("exp_avg", "exp_avg_sq", "step"):
            assert torch.equal(fresh_opt.state[p_new][key], opt.state[p_old][key])
    restore_rng_state(loaded.trainer_state["rng"])
    got = (torch.rand(4), np.random.rand(4), [random.random() for _ in range(4)])
    assert torch.equal(got[0], expected[0]) and np.array_equal(got[1], expected[1]) and got[2] == expected[2]


def test_rng_round_trip_keeps_cached_gaussians() -> None:
    np.random.seed(4), random.seed(5)
    np.random.randn(1), random.gauss(0, 1)  # leaves a cached second normal in both generators
    state = capture_rng_state()
    expected = (np.random.randn(3), [random.gauss(0, 1) for _ in range(3)])
    np.random.seed(0), random.seed(0)
    restore_rng_state(state)
    assert np.array_equal(np.random.randn(3), expected[0]) and [random.gauss(0, 1) for _ in range(3)] == expected[1]


def test_contract_files_mirror_the_latest_checkpoint(tmp_path: Path) -> None:
    models = _save_steps(tmp_path, [1, 2])
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    assert manifest["step"] == 2 and (tmp_path / "config.json").read_text() == '{"step": 2}'
    assert (tmp_path / "tokenizer.json").exists() and (tmp_path / "trainer_state.pt").exists()
    model = TinyLM()
    load_weights(tmp_path / "model.safetensors", model)
    assert _same_weights(model, models[2])
    assert load_trainer_state(tmp_path / "trainer_state.pt")["step"] == 2


def test_tied_weights_survive(tmp_path: Path) -> None:
    model, opt = _trained()
    with pytest.raises(RuntimeError):  # the problem being solved: safetensors refuses shared storage
        safetensors.torch.save(model.state_dict())
    save_checkpoint(tmp_path / "ck", model, _state(opt, 1), "{}", None)
    stored = safetensors.torch.load((tmp_path / "ck" / "model.safetensors").read_bytes())
    assert len(stored) == 2  # emb.weight (head.weight saved once, as a tie) + scale
    fresh = TinyLM()
    loaded = load_checkpoint(tmp_path / "ck")
    assert loaded.tokenizer_json is None
    loaded.load_into(fresh)
    assert fresh.head.weight is fresh.emb.weight and _same_weights(fresh, model)


def test_corrupt_weights_fall_back_to_previous_loudly(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    models = _save_steps(tmp_path, [1, 2])
    capsys.readouterr()
    bad = tmp_path / "checkpoints" / "step_000002" / "model.safetensors"
    _flip_byte(bad)
    loaded = load_latest(tmp_path)
    assert _warnings(capsys) == [f"seqlab: warning: skipping checkpoint {bad.parent}: {bad} is corrupt "
                                 "(its sha256 does not match the manifest); trying an older one"]
    assert loaded is not None and loaded.path == tmp_path  # the mirror holds an intact copy of step 2
    _flip_byte(tmp_path / "model.safetensors")
    loaded = load_latest(tmp_path)
    messages = _warnings(capsys)
    assert len(messages) == 2 and str(bad) in messages[0] and str(tmp_path / "model.safetensors") in messages[1]
    assert loaded is not None and loaded.step == 1
    fresh = TinyLM()
    loaded.load_into(fresh)
    assert _same_weights(fresh, models[1])


def test_missing_file_falls_back(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _save_steps(tmp_path, [1, 2])
    (tmp_path / "checkpoints" / "step_000002" / "trainer_state.pt").unlink()
    (tmp_path / "manifest.json").unlink()  # an interrupted mirror update: never committed
    capsys.readouterr()
    loaded = load_latest(tmp_path)
    messages = " | ".join(_warnings(capsys))
    assert "step_000002/trainer_state.pt is missing" in messages and "manifest.json is missing" in messages
    assert loaded is not None and loaded.step == 1


def test_best_is_the_last_resort_and_none_when_nothing_verifies(tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    assert load_latest(tmp_path) is None and load_latest(tmp_path / "absent") is None
    _save_steps(tmp_path, [1, 2, 3], best=(1,))
    assert load_best(tmp_path).step == 1 and _warnings(capsys) == []
    for path in [*tmp_path.glob("checkpoints/step_*/config.json"), tmp_path / "config.json"]:
        _flip_byte(path, 0)
    loaded = load_latest(tmp_path)
    assert len(_warnings(capsys)) == 3  # two step directories and the mirror
    assert loaded is not None and loaded.path == tmp_path / "best" and loaded.step == 1
    _flip_byte(tmp_path / "best" / "config.json", 0)
    assert load_latest(tmp_path) is None
    assert _warnings(capsys)[-1].startswith(f"seqlab: warning: skipping checkpoint {tmp_path / 'best'}: ")
    with pytest.raises(UserError, match="corrupt"):
        load_checkpoint(tmp_path / "best")


class _Payload:
    """Unpickling this runs `exec`, which would create the marker file: the attack being refused."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):  # noqa: ANN204 - pickle protocol
        return (exec, (f"open({str(self.marker)!r}, 'w').close()",))


def _rewrite_manifest(ckpt_dir: Path) -> None:
    """Make the manifest vouch for whatever is in the directory now, as an attacker would."""
    manifest = json.loads((ckpt_dir / "manifest.json").read_text())
    for name, entry in manifest["files"].items():
        data = (ckpt_dir / name).read_bytes()
        entry.update(size=len(data), sha256=hashlib.sha256(data).hexdigest())
    (ckpt_dir / "manifest.json").write_text(json.dumps(manifest))


def test_pickle_payload_is_refused_and_never_runs(tmp_path: Path) -> None:
    control = tmp_path / "control_marker"
    torch.save({"step": 1, "x": _Payload(control)}, tmp_path / "control.pt")
    torch.load(tmp_path / "control.pt", weights_only=False)  # the payload is live: unpickling runs it
    assert control.exists()

    marker = tmp_path / "marker"
    _save_steps(tmp_path / "run", [1, 2])
    for ckpt in (tmp_path / "run" / "checkpoints" / "step_000002", tmp_path / "run"):
        torch.save({"step": 2, "x": _Payload(marker)}, ckpt / "trainer_state.pt")
        _rewrite_manifest(ckpt)
    with pytest.raises(UserError, match="refusing .*trainer_state.pt"):
        load_latest(tmp_path / "run")
    with pytest.raises(UserError, match="refusing"):
        load_trainer_state(tmp_path / "run" / "trainer_state.pt")
    assert not marker.exists()


def test_trainer_state_must_be_plain(tmp_path: Path) -> None:
    model, _ = _trained()
    with pytest.raises(ValueError, match=r"trainer_state\['sched'\] is a \w*Path"):
        save_run_checkpoint(tmp_path, model, {"step": 1, "sched": Path("x")}, "{}", None)
    with pytest.raises(ValueError, match="step"):
        save_run_checkpoint(tmp_path, model, {"optimizer": {}}, "{}", None)
    assert list(tmp_path.iterdir()) == []  # refused before anything was written


def test_atomic_write_leaves_no_temp_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "f.json"
    atomic_write_text(target, "old")
    atomic_write_bytes(target, b"new")
    assert target.read_bytes() == b"new" and os.listdir(tmp_path) == ["f.json"]

    def boom(src: object, dst: object) -> None:
        raise OSError("disk gone")

    monkeypatch.setattr(os, "replace", boom)
    with pytest.raises(OSError, match="disk gone"):
        atomic_write_bytes(target, b"half")
    monkeypatch.undo()
    assert target.read_bytes() == b"new" and os.listdir(tmp_path) == ["f.json"]
    _save_steps(tmp_path / "run", [1, 2], best=(2,))
    assert [p for p in (tmp_path / "run").rglob("*") if p.name.endswith(".tmp")] == []


def test_retention_keeps_k_and_best(tmp_path: Path) -> None:
    _save_steps(tmp_path, [1, 2, 3, 4, 5], keep=2, best=(2,))
    names = sorted(p.name for p in (tmp_path / "checkpoints").iterdir())
    assert names == ["step_000004", "step_000005"]
    assert load_best(tmp_path).step == 2 and load_latest(tmp_path).step == 5
    assert sorted(p.name for p in tmp_path.iterdir() if p.is_dir()) == ["best", "checkpoints"]
    _save_steps(tmp_path, [6], keep=3)
    assert len(list((tmp_path / "checkpoints").iterdir())) == 3


def test_abandoned_later_steps_are_removed_loudly(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _save_steps(tmp_path, [1, 2, 3], keep=3)
    assert _warnings(capsys) == []
    _save_steps(tmp_path, [2], keep=3)  # resumed from step 1 and saved step 2 again
    assert _warnings(capsys) == [f"seqlab: warning: removing {tmp_path / 'checkpoints' / 'step_000003'}: "
                                 "it is newer than the resumed run's step 2"]
    assert sorted(p.name for p in (tmp_path / "checkpoints").iterdir()) == ["step_000001", "step_000002"]
    assert load_latest(tmp_path).step == 2


def test_load_weights_mismatch_is_a_user_error(tmp_path: Path) -> None:
    model, opt = _trained()
    save_checkpoint(tmp_path, model, _state(opt, 1), "{}", None)
    with pytest.raises(UserError, match=r"shape \(file vs model\): emb.weight \(11, 4\) vs \(11, 6\)"):
        load_weights(tmp_path / "model.safetensors", TinyLM(n_embd=6))
    with pytest.raises(UserError, match="missing: 0.emb.weight.*unexpected: emb.weight"):
        load_weights(tmp_path / "model.safetensors", nn.Sequential(TinyLM()))
    (tmp_path / "junk.safetensors").write_bytes(b"not a safetensors file at all")
    with pytest.raises(UserError, match="not a safetensors file"):
        load_weights(tmp_path / "junk.safetensors", TinyLM())
    with pytest.raises(UserError, match="cannot read weights"):
        load_weights(tmp_path / "absent.safetensors", TinyLM())
