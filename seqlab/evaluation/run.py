"""Held-out evaluation of a trained run: loss, perplexity, bits per byte, classical compressors, completions.

Every target of the split is scored once (not a sample):

- Attention models (and any model with learned positions) see windows of at most `block_size` tokens
  inside one email, overlapping by half (`seqlab.data.batches.iter_eval_windows` with stride block_size // 2):
  each window after an email's first scores only the targets no earlier window scored, so every such
  target is predicted with at least half a window of context, as it would be while typing. Side-by-side
  windows would make the first tokens of every window guess with almost no context, a handicap of the
  evaluation, not of the model. The last window is aligned to the email's end.
- Recurrent models read each email from its first token to its last in chunks of `block_size`, with
  the hidden state carried from chunk to chunk (emails are the batch lanes, sorted by length), so a
  window cut never costs them context; the result does not depend on `block_size` or the batch size.

Bits per byte (bpb) = (sum of target NLL in nats / ln 2) / (UTF-8 bytes those targets stand for), the
tokenizer-independent measure of Gao et al. (2020, "The Pile", section 5) and of text compression. The
targets of an email `[bos] + text + [eos]` are `text + [eos]`; a text token counts its own bytes
(`token_bytes`) and eos counts as one byte, a terminator like a newline. Every email therefore counts
len(text.encode()) + 1 bytes whatever the tokenizer, so byte- and BPE-tokenized models divide by the
same number, and the compressors read exactly those bytes: the texts, each followed by b"\\n".
"""

from __future__ import annotations

import bz2
import gzip
import lzma
import math
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from seqlab.data.batches import iter_eval_windows
from seqlab.data.store import TokenStore
from seqlab.data.streams import iter_eval_streams
from seqlab.data.tokenizer import Tokenizer, load_tokenizer
from seqlab.errors import UserError
from seqlab.evaluation.exact_match import completion_quality, threshold_for_coverage  # noqa: F401 (re-exported)
from seqlab.generation.decode import context_limit
from seqlab.runs.load import load_run, resolve_device, run_data_dir

SEPARATOR = b"\n"  # what an email's eos stands for when bytes are counted and compressors read the split


def token_byte_lengths(tokenizer: Tokenizer) -> torch.Tensor:
    """(V,) int64: bytes each token counts for as a target; eos counts 1, bos and pad count 0.

    Index it with the non-ignored targets of a batch to get their byte count (also used by the trainer's
    validation, so its bits per byte are the same quantity as here)."""
    lengths = torch.tensor([len(tokenizer.token_bytes(i)) for i in range(tokenizer.vocab_size)], dtype=torch.long)
    lengths[tokenizer.eos_id] = len(SEPARATOR)
    lengths[tokenizer.bos_id] = lengths[tokenizer.pad_id] = 0
    return lengths


def evaluate_lm(model: nn.Module, store: TokenStore, block_size: int, batch_size: int,
                device: str | torch.device, tokenizer: Tokenizer) -> dict[str, float | int]:
    """Loss per token (nats), perplexity, bits per byte, target tokens and bytes over the whole split."""
    if store.num_emails == 0 or int((store.lengths - 1).sum()) == 0:
        raise UserError(f"the {store.split} split of {store.data_dir} has no tokens to evaluate.")
    dev = device if isinstance(device, torch.device) else resolve_device(device)
    byte_len = token_byte_lengths(tokenizer)
    carry = context_limit(model) is None  # recurrent: state runs through whole emails
    if carry:
        batches = iter_eval_streams(store, block_size, batch_size, tokenizer.pad_id)
    else:
        stride = max(1, block_size // 2)  # overlap by half: scored targets keep context (module docstring)
        batches = ((True, x, y) for x, y in iter_eval_windows(store, block_size, batch_size, tokenizer.pad_id,
                                                               stride=stride))
    nll, tokens, nbytes, state = 0.0, 0, 0, None
    was_training = model.training
    model.eval()
    try:
        with torch.inference_mode():
            for first, x, y in batches:
                logits, new_state = model(x.to(dev), state=None if first else state)  # (B, T, V)
                state = new_state if carry else None
                nll += float(F.cross_entropy(logits.float().flatten(0, 1), y.to(dev).flatten(),
                                             ignore_index=-1, reduction="sum"))
                real = y[y >= 0]
                tokens += int(real.numel())
                nbytes += int(byte_len[real].sum())
    finally:
        model.train(was_training)
    loss = nll / tokens
    return {"loss": loss, "ppl": math.exp(min(loss, 700.0)), "bpb": nll / math.log(2) / nbytes,
            "tokens": tokens, "bytes": nbytes, "nll_nats": nll}


def split_bytes(store: TokenStore, tokenizer: Tokenizer) -> bytes:
    """The split's text as the model is scored on it: each email's bytes followed by SEPARATOR."""
    table = [tokenizer.token_bytes(i) for i in range(tokenizer.vocab_size)]
    special = {tokenizer.bos_id, tokenizer.eos_id, tokenizer.pad_id}
    parts = []
    for i in range(store.num_emails):
        parts.extend(table[t] for t in store.email(i).tolist() if t not in special)
        parts.append(SEPARATOR)
    return b"".join(parts)


def split_texts(store: TokenStore, tokenizer: Tokenizer, emails: Iterable[int] | None = None) -> list[str]:
    """Texts ("subject\\n\\nbody") of the split's emails, decoded from their stored tokens."""
    picked = range(store.num_emails) if emails is None else emails
    return [tokenizer.decode(store.email(int(i)).tolist()) for i in picked]


def compressor_bpb_bytes(data: bytes) -> dict[str, float]:
    """8 * compressed size / raw size for gzip -9, bz2 -9 and xz -9e on `data`."""
    if not data:
        raise ValueError("cannot compute bits per byte of empty text")
    sizes = {
        "gzip": len(gzip.compress(data, compresslevel=9, mtime=0)),
        "bz2": len(bz2.compress(data, compresslevel=9)),
        "xz": len(lzma.compress(data, format=lzma.FORMAT_XZ, preset=9 | lzma.PRESET_EXTREME)),
    }
    return {name: 8.0 * size / len(data) for name, size in sizes.items()}


def compressor_bpb(texts: Iterable[str]) -> dict[str, float]:
    """Bits per byte of gzip, bz2 and xz at their strongest settings on the texts joined as the model
    is scored (each text's UTF-8 bytes followed by one separator byte)."""
    return compressor_bpb_bytes(b"".join(t.encode("utf-8", errors="replace") + SEPARATOR for t in texts))


def _check_same_tokenizer(tok: Tokenizer, data_dir: Path, run_dir: Path) -> None:
    """The run must have been trained on ids from this DATA_DIR's tokenizer, or the numbers are noise."""
    data_tok = load_tokenizer(data_dir / "tokenizer.json")
    if data_tok.sha256() != tok.sha256():
        raise UserError(f"{run_dir} was trained with a different tokenizer than {data_dir}; "
                        f"evaluate it on the data folder it was trained on.")


def evaluate_run(
    run_dir: Path | str, data_dir: Path | str | None = None, split: str = "val", device: str = "auto", *,
    completion_threshold: float = 0.0, target_coverage: float | None = None, completion_emails: int = 100,
    positions_per_email: int = 2, max_words: int = 5, batch_size: int = 32, seed: int = 0,
    completions: bool = True,
) -> dict[str, Any]:
    """Evaluate RUN_DIR's best checkpoint on a split of its DATA_DIR; one flat JSON-able dict.

    Keys: split, loss, ppl, bpb, tokens, bytes, compressor_bpb {gzip, bz2, xz}, params, mixer,
    run_dir, data_dir, emails; with `completions`: exact_match {"1".."max_words"}, coverage, threshold,
    completion_positions, and with `target_coverage` also at_coverage {target, threshold, coverage,
    exact_match, ...}. Completions are scored on up to `completion_emails` emails drawn with `seed`.
    """
    if split not in ("train", "val", "test"):
        raise UserError(f"split must be train, val or test, not {split!r}.")
    if not 0.0 <= completion_threshold <= 1.0:
        raise UserError(f"the completion threshold must be in [0, 1], not {completion_threshold}.")
    if target_coverage is not None and not 0.0 < target_coverage <= 1.0:
        raise UserError(f"the target coverage must be in (0, 1], not {target_coverage}.")
    run_dir = Path(run_dir)
    dev = resolve_device(device)
    model, tok, cfg = load_run(run_dir, dev)
    data = run_data_dir(run_dir, data_dir)
    _check_same_tokenizer(tok, data, run_dir)
    store = TokenStore(data, split)
    lm = evaluate_lm(model, store, cfg.model.block_size, batch_size, dev, tok)
    raw = split_bytes(store, tok)
    result: dict[str, Any] = {
        "split": split, "loss": lm["loss"], "ppl": lm["ppl"], "bpb": lm["bpb"], "tokens": lm["tokens"],
        "bytes": lm["bytes"], "compressor_bpb": compressor_bpb_bytes(raw),
        "params": sum(p.numel() for p in model.parameters()), "mixer": cfg.model.mixer,
        "run_dir": str(run_dir), "data_dir": str(data), "emails": store.num_emails,
    }
    if completions:
        rng = np.random.default_rng([seed])
        picked = np.sort(rng.choice(store.num_emails, size=min(completion_emails, store.num_emails), replace=False))
        quality = completion_quality(model, tok, split_texts(store, tok, picked), max_words=max_words,
                                     threshold=completion_threshold, positions_per_email=positions_per_email,
                                     seed=seed, target_coverage=target_coverage)
        result.update(exact_match=quality["exact_match"], coverage=quality["coverage"],
                      threshold=quality["threshold"], completion_positions=quality["positions"])
        if "at_coverage" in quality:
            result["at_coverage"] = quality["at_coverage"]
    return result


def _pct(x: float | None) -> str:
    return "    -" if x is None else f"{100 * x:5.1f}%"


def format_eval(result: dict[str, Any]) -> str:
    """A small human-readable table of an `evaluate_run` result."""
    lines = [
        f"{result['split']} split: {result['tokens']:,} target tokens, {result['bytes']:,} bytes"
        + (f", {result['emails']:,} emails" if "emails" in result else ""),
        f"  {'':10} {'bits/byte':>9} {'loss/token':>10} {'perplexity':>10}",
        f"  {'model':10} {result['bpb']:9.3f} {result['loss']:10.3f} {result['ppl']:10.2f}"
        + (f"   ({result['params']:,} parameters)" if "params" in result else ""),
    ]
    for name, label in (("gzip", "gzip -9"), ("bz2", "bz2 -9"), ("xz", "xz -9e")):
        lines.append(f"  {label:10} {result['compressor_bpb'][name]:9.3f}")
    blocks = []
    if "exact_match" in result:
        blocks.append((f"threshold {result['threshold']:.3f}", result["coverage"], result["exact_match"]))
    if "at_coverage" in result:
        at = result["at_coverage"]
        blocks.append((f"threshold {at['threshold']:.3f} (target coverage {100 * at['target']:.0f}%)",
                       at["coverage"], at["exact_match"]))
    if blocks:
        lines.append(f"  completions at {result.get('completion_positions', 0)} word boundaries:")
        for label, coverage, exact in blocks:
            em = "  ".join(f"EM@{n} {_pct(v)}" for n, v in exact.items())
            lines.append(f"    {label}: coverage {_pct(coverage)}  {em}")
    return "\n".join(lines)
