"""The optimizer side of training: the learning-rate schedules (`lr_at`) and the optimizers (`make_optimizer`).

Schedules (`train.schedule`): `cosine` (linear warmup, then cosine decay to lr * min_lr_ratio) and `wsd`
(warmup-stable-decay: linear warmup, a constant rate, then a linear cooldown to lr * min_lr_ratio over
the last `train.cooldown_frac` of the budget; Hu et al. 2024, "MiniCPM", section 4; Hägele et al. 2024,
"Scaling Laws and Compute-Optimal Training Beyond Fixed Training Durations"). Both are paced by steps or
by the elapsed share of a wall-clock budget, whichever runs out first.

Optimizers (`train.optimizer`): `adamw` (AdamW, weight decay on matrices only), or `muon`: Muon
(`torch.optim.Muon`; Jordan et al. 2024, "Muon: an optimizer for hidden layers in neural networks") for
the 2-D hidden matrices, AdamW for the embedding, the output head, position tables, gains and biases.
Muon's step is scaled to AdamW's update RMS (`adjust_lr_fn="match_rms_adamw"`, Liu et al. 2025, "Muon is
Scalable for LLM Training"), so one learning rate and one schedule drive both.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import nn

from seqlab.errors import UserError

SCHEDULES = ("cosine", "wsd")
OPTIMIZERS = ("adamw", "muon")


def lr_at(step: int, lr: float, warmup: int, max_steps: int, min_ratio: float, time_frac: float = 0.0,
          schedule: str = "cosine", cooldown_frac: float = 0.2) -> float:
    """The learning rate of `step`: linear warmup over `warmup` steps, then `schedule`.

    cosine: decay from lr to lr * min_ratio along half a cosine between warmup and max_steps.
    wsd: lr until the last `cooldown_frac` of the budget, then linear down to lr * min_ratio at its end.
    `time_frac` (elapsed / wall-clock budget, when there is one) moves the decay along with time, so a
    run stopped by train.max_minutes still ends at the low learning rate: whichever budget runs out first
    sets the pace. (A time-paced schedule is not bitwise repeatable; step-paced runs are. The elapsed time
    is a saved progress counter, so a resumed run continues on the same curve.)"""
    if warmup and step < warmup:
        return lr * (step + 1) / warmup
    if schedule == "wsd":
        # share of the whole budget (warmup included) used; the cooldown is its last cooldown_frac
        progress = min(1.0, max(step / max(1, max_steps), time_frac))
        into = (progress - (1.0 - cooldown_frac)) / cooldown_frac if cooldown_frac > 0 else 0.0
        return lr * (1.0 - (1.0 - min_ratio) * min(1.0, max(0.0, into)))
    if schedule != "cosine":
        raise ValueError(f"unknown schedule {schedule!r}; choose one of {', '.join(SCHEDULES)}")
    progress = min(1.0, max((step - warmup) / max(1, max_steps - warmup), time_frac))
    return lr * (min_ratio + (1 - min_ratio) * 0.5 * (1 + math.cos(math.pi * progress)))


def muon_params(model: nn.Module) -> tuple[list[nn.Parameter], list[nn.Parameter]]:
    """(hidden 2-D matrices for Muon, everything else for AdamW).

    Muon orthogonalises a matrix's update, which suits the maps between hidden activations; the token
    embedding and the output head (tied or not: rows are looked up or scored one token at a time),
    position tables, and every vector (gains, biases) stay with AdamW (Jordan et al. 2024)."""
    outer = set()
    for name in ("wte", "head", "pos"):
        sub = getattr(model, name, None)
        if isinstance(sub, nn.Module):
            outer.update(id(p) for p in sub.parameters())
    params = [p for p in model.parameters() if p.requires_grad]
    hidden = [p for p in params if p.dim() == 2 and id(p) not in outer]
    rest = [p for p in params if not (p.dim() == 2 and id(p) not in outer)]
    return hidden, rest


class MuonAdamW:
    """Muon on the hidden matrices and AdamW on the rest, stepped together as one optimizer.

    Exposes what the trainer uses of `torch.optim.Optimizer`: `param_groups` (all groups, so setting
    group["lr"] reaches both), `step`, `zero_grad`, `state_dict` and `load_state_dict`."""

    def __init__(self, muon: torch.optim.Optimizer, adamw: torch.optim.Optimizer) -> None:
        self.muon, self.adamw = muon, adamw

    @property
    def param_groups(self) -> list[dict[str, Any]]:
        return [*self.adamw.param_groups, *self.muon.param_groups]

    def step(self) -> None:
        self.muon.step()
        self.adamw.step()

    def zero_grad(self, set_to_none: bool = True) -> None:
        self.muon.zero_grad(set_to_none=set_to_none)
        self.adamw.zero_grad(set_to_none=set_to_none)

    def state_dict(self) -> dict[str, Any]:
        return {"muon": self.muon.state_dict(), "adamw": self.adamw.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if set(state) != {"muon", "adamw"}:
            raise UserError("the checkpoint's optimizer state is not Muon's: resume with the run's train.optimizer")
        self.muon.load_state_dict(state["muon"])
        self.adamw.load_state_dict(state["adamw"])


def _adamw(params: list[nn.Parameter], lr: float, weight_decay: float, betas: tuple[float, float],
           device: torch.device) -> torch.optim.AdamW:
    """AdamW with weight decay on matrices only (not on biases, norms' gains or other vectors)."""
    decay = [p for p in params if p.dim() >= 2]
    no_decay = [p for p in params if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    # the fused kernel (one pass over each tensor) on CPU too: the default for-each-parameter path is a
    # large share of a small model's training step on a CPU (seqlab bench; the experiments index)
    return torch.optim.AdamW(groups, lr=lr, betas=betas, fused=device.type in ("cpu", "cuda"))


def make_optimizer(model: nn.Module, lr: float, weight_decay: float, betas: tuple[float, float],
                   device: torch.device, kind: str = "adamw") -> torch.optim.AdamW | MuonAdamW:
    """AdamW over every parameter (`adamw`), or Muon for the hidden matrices plus AdamW (`muon`)."""
    if kind == "adamw":
        return _adamw([p for p in model.parameters() if p.requires_grad], lr, weight_decay, betas, device)
    if kind != "muon":
        raise ValueError(f"unknown optimizer {kind!r}; choose one of {', '.join(OPTIMIZERS)}")
    hidden, rest = muon_params(model)
    if not hidden:  # nothing for Muon (torch refuses an empty parameter list): AdamW alone
        return _adamw(rest, lr, weight_decay, betas, device)
    muon = torch.optim.Muon(hidden, lr=lr, weight_decay=weight_decay, adjust_lr_fn="match_rms_adamw")
    return MuonAdamW(muon, _adamw(rest, lr, weight_decay, betas, device))
