"""Equal QUIET time on busy cores: the steps a quiet N-minute run of each model reaches (shared by
`recipe_study --minutes N` and `tokenizer_study --minutes N`).

On 2 cores shared by other work a wall-clock budget would measure the load, not the model, so each model
gets the number of steps a QUIET N-minute run of it reaches:

    steps_v = N * 60 * (ref_tokens_per_s / ref_tokens_per_step) * (rate_v / rate_ref)

rate_v / rate_ref is the model's training speed relative to the reference (`step_rates`, measured in
this process): every model and optimizer is built, then in each of a few rounds each model runs a few
training steps in turn (random tokens of its batch x window and vocabulary; a step's cost does not depend
on the values), so every model sees the same load, and the fastest round of each is compared: under load a
round's time is its own cost plus whatever the other work took from it, so the fastest of many rounds is
the closest to the quiet cost (a median would carry the load into the ratio).
ref_tokens_per_s is the reference's quiet rate: given (`--ref-tokens-per-s`, e.g. the tokens/s a `seqlab
train` run of the reference reached on the quiet machine, in its run.json), or else the reference's
fastest round here (`reference_tokens_per_s`), which is the quiet rate only on a quiet machine. The
reference is timed with train.precision=fp32 (REF_PRECISION), the number format the reference rates of the
experiments index were measured in, and every other model with its own train.precision (bf16 autocast
around the forward pass, as the trainer does; `runs/precision.py`).
"""

from __future__ import annotations

import statistics
import time
from typing import Any

REF_PRECISION = "train.precision=fp32"  # the override that times the reference in the format of its quiet rate


def step_rates(configs: dict[str, Any], threads: int, rounds: int = 12, steps: int = 3) -> dict[str, dict[str, float]]:
    """Training steps per second of each RunConfig in `configs` (name -> config; its model.vocab_size is
    the vocabulary it is timed with), measured interleaved in this process (module doc), with its tokens
    per step and model FLOPs per token. A model that reads reply contexts (model.context) gets a
    context of model.ctx_block_size random tokens in every row, as a batch of long replies does: an upper
    bound on its cost."""
    import torch
    import torch.nn.functional as F

    from seqlab.models import build_model
    from seqlab.models.context_encoder import ContextBatch
    from seqlab.runs.precision import autocast_for
    from seqlab.training.flops import flops_per_token
    from seqlab.training.optim import make_optimizer

    torch.set_num_threads(threads)
    gen = torch.Generator().manual_seed(0)
    setups = {}
    for name, cfg in configs.items():
        torch.manual_seed(0)
        model = build_model(cfg.model).train()
        t = cfg.train
        opt = make_optimizer(model, t.lr, t.weight_decay, (t.beta1, t.beta2), torch.device("cpu"), t.optimizer)
        x = torch.randint(0, cfg.model.vocab_size, (t.batch_size, cfg.model.block_size + 1), generator=gen)  # (B, T+1)
        extra = {}
        if cfg.model.reads_context:  # (B, 1, Lc) context ids, all real
            ids = torch.randint(0, cfg.model.vocab_size, (t.batch_size, 1, cfg.model.ctx_block_size), generator=gen)
            extra["context"] = ContextBatch(ids, torch.ones_like(ids, dtype=torch.bool))
        extra["autocast"] = autocast_for(t.precision, torch.device("cpu"))  # bf16 or nothing, as the trainer
        setups[name] = (model, opt, x, extra, flops_per_token(model, cfg.model, cfg.model.block_size))

    def step(model: Any, opt: Any, x: Any, extra: dict[str, Any]) -> None:
        kwargs = {k: v for k, v in extra.items() if k != "autocast"}
        with extra["autocast"]():
            logits, _ = model(x[:, :-1], **kwargs)  # (B, T, V)
        loss = F.cross_entropy(logits.flatten(0, 1).float(), x[:, 1:].flatten())
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    times: dict[str, list[float]] = {name: [] for name in setups}
    for r in range(rounds + 1):
        for name, (model, opt, x, extra, _) in setups.items():
            t0 = time.perf_counter()
            for _ in range(steps if r else 1):  # round 0 warms each model up and is not counted
                step(model, opt, x, extra)
            if r:
                times[name].append((time.perf_counter() - t0) / steps)
    return {name: {"steps_per_s": 1.0 / min(times[name]), "median_steps_per_s": 1.0 / statistics.median(times[name]),
                   "tokens_per_step": float(x.shape[0] * (x.shape[1] - 1)), "flops_per_token": flops}
            for name, (_, _, x, _, flops) in setups.items()}


def equal_time_steps(rates: dict[str, dict[str, float]], minutes: float, ref_tokens_per_s: float,
                     ref: str) -> dict[str, int]:
    """The steps a quiet `minutes` run of each model reaches (module doc), from `step_rates`; `ref` names
    the model whose quiet rate is ref_tokens_per_s."""
    base = rates[ref]
    ref_steps_per_s = ref_tokens_per_s / base["tokens_per_step"]
    return {name: max(1, round(minutes * 60 * ref_steps_per_s * r["steps_per_s"] / base["steps_per_s"]))
            for name, r in rates.items()}


def reference_tokens_per_s(rates: dict[str, dict[str, float]], ref: str, given: float | None) -> float:
    """The reference's quiet training tokens/s: `given`, else its fastest round in `step_rates` (module doc)."""
    if given is not None:
        if not given > 0:
            raise ValueError(f"the reference's tokens/s must be positive, not {given}")
        return given
    return rates[ref]["steps_per_s"] * rates[ref]["tokens_per_step"]
