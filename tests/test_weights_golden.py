"""The trained weights of every model family, pinned: a refactor of configs, models or the trainer that
changes a single step of training shows up here.

Each case trains a tiny model for a few steps through `seqlab.train` (the path the CLI takes: preset,
overrides, validation, the trainer) on a small synthetic DATA_DIR, with a fixed seed, one thread and fp32
(bf16 autocast rounds differently on CPUs with and without native bf16). The fingerprint kept in
`tests/golden/weights.json` is, per tensor, the sum and the sum of squares of its values, and the last
step's loss: not the bytes, because another CPU's kernels (a different SIMD width, another BLAS) may sum in a
different order and move the last bits. Those moves are far below a relative 1e-4 after a few steps, while
any real change (a different init, a skipped step, another mixer) moves a fingerprint far more.

`SEQLAB_GOLDEN_WRITE=1` rewrites the file from the current code: only when a change of weights is meant.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import pytest

GOLDEN = Path(__file__).parent / "golden" / "weights.json"
STEPS = 8
COMMON = [f"train.max_steps={STEPS}", "train.threads=1", "train.precision=fp32", "train.seed=7",
          "train.eval_every=100", "train.ckpt_every=100", "train.log_every=100", "model.ctx_block_size=32"]
CASES: dict[str, list[str]] = {
    "gru": ["model.mixer=gru", "model.pos=none"],
    "rnn": ["model.mixer=rnn", "model.pos=none"],
    "mingru": ["model.mixer=mingru", "model.pos=none"],
    "attention-rope": ["model.mixer=attention", "model.pos=rope"],
    "hybrid": ["model.mixer=hybrid", "model.n_layer=2", "model.pos=none", "model.attn_window=8"],
    "attention-cross-copy": ["model.context=cross+copy"],
    "gru-init-state": ["model.mixer=gru", "model.pos=none", "model.context=init_state"],
    "mingru-pointer": ["model.mixer=mingru", "model.pos=none", "model.context=pointer", "model.ctx_layers=0"],
}


@pytest.fixture(scope="module")
def golden_data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from preparing import prepare

    out = tmp_path_factory.mktemp("golden") / "data"
    prepare("synthetic", out, count=60, seed=3, split=(0.8, 0.1, 0.1), progress=False)
    return out


def _fingerprint(data_dir: Path, out: Path, settings: list[str]) -> dict[str, object]:
    from safetensors.torch import load_file

    import seqlab

    losses: list[float] = []
    seqlab.train(data_dir, out, "tiny", settings=[*COMMON, *settings], on_step=lambda r: losses.append(r.loss))
    weights = load_file(str(out / "model.safetensors"))
    tensors = {name: [float(t.double().sum()), float(t.double().square().sum())]
               for name, t in sorted(weights.items())}
    return {"loss": losses[-1], "steps": len(losses), "tensors": tensors}


def _close(got: float, want: float, scale: float) -> bool:
    # a sum can be near zero while its terms are not: its tolerance is relative to sqrt(sum of squares)
    return math.isclose(got, want, rel_tol=1e-4, abs_tol=1e-4 * scale)


@pytest.mark.parametrize("name", list(CASES))
def test_weights_match_golden(name: str, golden_data_dir: Path, tmp_path: Path) -> None:
    got = _fingerprint(golden_data_dir, tmp_path / name, CASES[name])
    if os.environ.get("SEQLAB_GOLDEN_WRITE") == "1":
        table = json.loads(GOLDEN.read_text()) if GOLDEN.exists() else {}
        table[name] = got
        GOLDEN.write_text(json.dumps(table, indent=1, sort_keys=True) + "\n")
        return
    want = json.loads(GOLDEN.read_text())[name]
    assert got["steps"] == want["steps"] == STEPS
    assert _close(got["loss"], want["loss"], abs(want["loss"])), (got["loss"], want["loss"])
    assert sorted(got["tensors"]) == sorted(want["tensors"])
    for tensor, (s, sq) in want["tensors"].items():
        gs, gsq = got["tensors"][tensor]
        assert _close(gsq, sq, sq), (name, tensor, "sum of squares", gsq, sq)
        assert _close(gs, s, math.sqrt(sq)), (name, tensor, "sum", gs, s)
