"""What `seqlab compare` trains: the models, the matched budget and the matched parameter count.

Models: the names of `seqlab.studies.recipes` (the CLI vocabulary of `--models`), each a recipe applied
to the base config (preset + overrides), all of them by default.

Matched budget: every model gets the same optimizer steps of the same batch_size x block_size x grad_accum
token positions (`--tokens N` is turned into `train.max_steps = ceil(N / that)`), or the same wall-clock
training minutes (`--minutes M`: `train.max_minutes = M` and a `max_steps` so large that only the clock
stops the run; the cosine schedule then stays at its peak rate after warmup), or, by default, the preset's
`max_steps`. Recurrent models read a continuous stream and attention models read windows inside one email,
so the non-padding tokens actually seen differ; the report gives those counts.

Matched size: the reference is the preset's attention model. Each model's `n_embd` is searched (multiples of
the head count, or of twice it for rotary positions, which needs an even head width; any width for
recurrent models, preferring multiples of 8) so that `LM.num_params()` is as close as possible to the
reference's, counted on the meta device without allocating or training anything.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import torch

from seqlab.config import RECURRENT_MIXERS, ModelConfig, RunConfig, apply_overrides
from seqlab.errors import UserError
from seqlab.models import build_model
from seqlab.studies.recipes import RECIPES, apply_recipe

DEFAULT_MODELS = tuple(RECIPES)
PARAM_TOLERANCE = 0.10  # two models count as the same size when their parameter counts differ by at most 10%
UNBOUNDED_STEPS = 1_000_000_000  # max_steps under a minutes budget: only the clock stops training


def parse_models(models: str | list[str] | tuple[str, ...] | None) -> list[str]:
    """A list of model names from 'rnn,gru' or a sequence; duplicates dropped, each name checked."""
    if models is None:
        return list(DEFAULT_MODELS)
    items = models.split(",") if isinstance(models, str) else list(models)
    names: list[str] = []
    for item in (m.strip() for m in items):
        if item and item not in names:
            if item not in RECIPES:
                raise UserError(f"unknown model {item!r}; choose from {', '.join(RECIPES)}")
            names.append(item)
    if not names:
        raise UserError("--models names no model; give a comma-separated list such as rnn,gru,attn-rope")
    return names


# ---------------------------------------------------------------- parameter matching


def count_params(cfg: ModelConfig) -> int:
    """`LM.num_params()` of the model `cfg` describes, built on the meta device (no memory, no init cost)."""
    with torch.device("meta"):
        return build_model(cfg).num_params()


def _with_width(cfg: ModelConfig, width: int) -> ModelConfig:
    return dataclasses.replace(cfg, n_embd=width)


def width_steps(cfg: ModelConfig) -> tuple[int, int]:
    """(finest legal width step, preferred step) for the family of `cfg`."""
    if cfg.mixer in RECURRENT_MIXERS:
        # cross-attention and the hybrid's local attention split the width into heads
        fine = cfg.n_head if cfg.reads_context or cfg.mixer == "hybrid" else 1
        return fine, math.lcm(fine, 8)
    fine = cfg.n_head * (2 if cfg.pos == "rope" else 1)  # rotary pairs the channels of each head
    return fine, math.lcm(fine, 8)


def _crossing(cfg: ModelConfig, target: int, step: int, top: int) -> int:
    """The smallest multiple k*step (1 <= k <= top) whose parameter count reaches `target` (or top*step).
    num_params grows with n_embd, so a binary search over k suffices."""
    lo, hi = 1, top
    while lo < hi:
        mid = (lo + hi) // 2
        if count_params(_with_width(cfg, mid * step)) >= target:
            hi = mid
        else:
            lo = mid + 1
    return lo


def match_width(cfg: ModelConfig, reference: int, tolerance: float = PARAM_TOLERANCE) -> tuple[ModelConfig, int]:
    """The width of `cfg`'s family whose parameter count is closest to `reference`; (config, count).

    Widths on the preferred grid (multiples of 8 and of the head constraint) win when one is within
    `tolerance`; otherwise the closest width on the finest legal grid is taken, within tolerance or not
    (the caller reports the ratio)."""
    best: tuple[float, ModelConfig, int] | None = None
    for step in reversed(width_steps(cfg)):  # preferred grid first, then the finest
        top = 4 * cfg.n_embd // step + 8  # widths up to ~4x the preset's: far past any family's match
        k = _crossing(cfg, reference, step, top)
        for width in {max(step, (k - 1) * step), k * step}:
            c = _with_width(cfg, width)
            n = count_params(c)
            err = abs(n - reference) / reference
            if best is None or err < best[0]:
                best = (err, c, n)
        if best[0] <= tolerance:
            break
    assert best is not None
    return best[1], best[2]


# ---------------------------------------------------------------- budget


@dataclass
class Budget:
    """What every model gets: `kind` is tokens | minutes | steps (the preset's or an override)."""

    kind: str
    value: float
    max_steps: int
    tokens_per_step: int
    max_minutes: float = 0.0

    def describe(self) -> str:
        if self.kind == "minutes":
            return f"{self.value:g} training minutes per model"
        return (f"{self.max_steps:,} steps x {self.tokens_per_step:,} token positions "
                f"= {self.max_steps * self.tokens_per_step:,} per model")


def apply_budget(cfg: RunConfig, *, minutes: float | None, tokens: int | None,
                 overrides: list[str] | tuple[str, ...] = ()) -> tuple[RunConfig, Budget]:
    """`cfg` with the matched budget applied, and its description."""
    if minutes is not None and tokens is not None:
        raise UserError("give a budget in --minutes or in --tokens, not both")
    budget_keys = {o.partition("=")[0].strip() for o in overrides} & {"train.max_steps", "train.max_minutes"}
    if (minutes is not None or tokens is not None) and budget_keys:
        raise UserError(f"{', '.join(sorted(budget_keys))} conflicts with --minutes/--tokens; use one of them")
    t = cfg.train
    per_step = t.batch_size * cfg.model.block_size * t.grad_accum
    if minutes is not None:
        if not minutes > 0:
            raise UserError(f"--minutes must be positive, not {minutes}")
        cfg = apply_overrides(cfg, [f"train.max_minutes={minutes}", f"train.max_steps={UNBOUNDED_STEPS}"])
        return cfg, Budget("minutes", minutes, UNBOUNDED_STEPS, per_step, minutes)
    if tokens is not None:
        if tokens < 1:
            raise UserError(f"--tokens must be a positive number of tokens, not {tokens}")
        steps = math.ceil(tokens / per_step)
        # a short budget still gets about ten validation points for the curves and a warmup inside it
        eval_every = min(t.eval_every, max(1, steps // 10))
        cfg = apply_overrides(cfg, [f"train.max_steps={steps}", f"train.eval_every={eval_every}",
                                    f"train.log_every={min(t.log_every, eval_every)}",
                                    f"train.warmup_steps={min(t.warmup_steps, steps // 10)}"])
        return cfg, Budget("tokens", tokens, steps, per_step)
    return cfg, Budget("steps", t.max_steps, t.max_steps, per_step, t.max_minutes)


# ---------------------------------------------------------------- the plan


@dataclass
class PlannedRun:
    """One model of a comparison: its name, full config and parameter count against the reference."""

    name: str
    cfg: RunConfig
    params: int
    reference: int

    @property
    def ratio(self) -> float:
        return self.params / self.reference

    @property
    def matched(self) -> bool:
        return abs(self.ratio - 1.0) <= PARAM_TOLERANCE


def reference_config(base: RunConfig) -> ModelConfig:
    """The size reference: the base (preset + overrides) model as an attention model."""
    return apply_overrides(base, ["model.mixer=attention"]).model


def plan_runs(base: RunConfig, models: list[str], *, match_params: bool = True) -> list[PlannedRun]:
    """The config of every model: its recipe applied to `base`, then (optionally) its width matched."""
    reference = count_params(reference_config(base))
    plans = []
    for name in models:
        try:
            cfg = apply_recipe(base, name)
        except ValueError as exc:
            raise UserError(f"model {name}: {exc}") from None
        if match_params:
            model, params = match_width(cfg.model, reference)
            cfg = dataclasses.replace(cfg, model=model)
        else:
            params = count_params(cfg.model)
        plans.append(PlannedRun(name, cfg, params, reference))
    return plans
