"""What the lessons that train models share (`gradient-path`, `memory`): the four architectures the
lecture compares, their base config, one call into the trainer, and a DATA_DIR written from plain texts.

The architectures are the recipes `LECTURE_ARCHS` of `seqlab.studies.recipes`: an Elman RNN and a GRU (the
lecture's state chain h_1 -> h_2 -> ... -> h_L), a minGRU (gates from the input only, parallel scan) and
causal self-attention with rotary positions ("direct connections"). They differ only in the sequence
mixer (and the position kind it needs); everything else (width, depth, MLP, budget, data, seed) comes
from one base config, so differences come from the mixer.
"""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Sequence
from pathlib import Path

import torch

from seqlab.config import RunConfig, apply_overrides, get_preset
from seqlab.data.prepare.token_files import TokenWriter
from seqlab.data.prepare.tokenizer_fit import fit_tokenizer
from seqlab.data.store import token_dtype
from seqlab.data.tokenizer import Tokenizer
from seqlab.models import LM, build_model
from seqlab.studies.recipes import LECTURE_ARCHS, apply_recipe
from seqlab.training.trainer import Trainer

ARCHS = LECTURE_ARCHS
ATTENTION = "attn-rope"  # the one attention model among ARCHS
RECURRENT = tuple(a for a in ARCHS if a != ATTENTION)


def base_config(preset: str, overrides: Sequence[str], seed: int) -> RunConfig:
    """A lesson's base config: `preset` as the attention model, then the lesson's `overrides` and `seed`.
    Applied to attention first because only attention checks head counts (n_embd % n_head); each
    architecture is then `apply_recipe(base, arch)`."""
    return apply_recipe(get_preset(preset), ATTENTION, [*overrides, f"train.seed={seed}"])


def initial_model(cfg: RunConfig, vocab_size: int) -> LM:
    """The model exactly as the trainer starts it (same seed, same init), before any step."""
    model_cfg = apply_overrides(cfg, [f"model.vocab_size={vocab_size}"]).model
    torch.manual_seed(cfg.train.seed)  # Trainer._setup seeds the same way right before build_model
    return build_model(model_cfg).eval()


def train_arch(data_dir: Path, run_dir: Path, cfg: RunConfig, *,
               progress: bool = True) -> tuple[LM, dict[str, float]]:
    """Train `cfg` on `data_dir` into `run_dir` (replaced if a previous lesson run left one there) with
    the project's one trainer; return the final model (eval mode) and what the lesson reports of the run:
    params, steps, best_val_loss and seconds (wall clock, training and its evaluations)."""
    run_dir = Path(run_dir)
    start = time.perf_counter()
    if any((run_dir / name).exists() for name in ("run.json", "trainer_state.pt", "config.json")):
        shutil.rmtree(run_dir)  # a run this lesson wrote into its own work folder before (maybe interrupted)
    trainer = Trainer(data_dir, run_dir, cfg, progress=progress)
    summary = trainer.run()
    info = {key: summary[key] for key in ("params", "steps", "best_val_loss")}
    return trainer.model.eval(), {**info, "seconds": round(time.perf_counter() - start, 1)}


def write_text_data_dir(out: Path, splits: dict[str, list[str]]) -> Tokenizer:
    """A DATA_DIR of byte tokens from plain texts, one email per text: `{split}.bin/.idx`,
    `tokenizer.json` and a `meta.json` the trainer reads (the probes need byte offsets to map to tokens,
    hence the byte tokenizer)."""
    out.mkdir(parents=True, exist_ok=True)
    tok = fit_tokenizer("byte", [])
    tok.save(out / "tokenizer.json")
    counts = {}
    for split, texts in splits.items():
        with TokenWriter(out, split, tok.vocab_size) as w:
            for text in texts:
                w.add(tok.encode_email(text))
            counts[split] = {"emails": w.num_emails, "tokens": w.num_tokens}
    meta = {"source": "lesson texts", "splits": counts, "token_dtype": str(token_dtype(tok.vocab_size)),
            "tokenizer": {"kind": tok.kind, "vocab_size": tok.vocab_size, "sha256": tok.sha256(),
                          "bos_id": tok.bos_id, "eos_id": tok.eos_id, "pad_id": tok.pad_id}}
    (out / "meta.json").write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n")
    return tok
