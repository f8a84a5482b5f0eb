"""The named models every study builds: name -> label, colour and the config overrides of that architecture.

One registry serves `seqlab compare` (its `--models` vocabulary is the registry's names), the lessons that
train models and the demo, so a name means the same model, drawn in the same colour, everywhere.

    rnn             vanilla RNN (Elman), no position input: order comes from the recurrence itself
    gru             GRU, no position input
    mingru          minGRU (parallel scan), no position input
    attn1           single-head causal attention, rotary positions
    attn-none       multi-head attention (the base config's n_head) without any position information
    attn-learned    ... with learned absolute position embeddings
    attn-sinusoidal ... with the fixed sinusoidal table of Vaswani et al. (2017)
    attn-rope       ... with rotary positions (Su et al. 2021)
    attn-alibi      ... with ALiBi distance biases (Press et al. 2022)
    hybrid          GRU layers with local attention among them (models/hybrid.py: the config's
                    hybrid_pattern, attn_window), no position input, as in Griffin / SHA-RNN

A recipe changes only the sequence mixer and what it needs (position kind, head count); width, depth,
budget and data come from the base config it is applied to. Recurrent mixers take no rotary or ALiBi
positions (the config refuses them): the order of the tokens is already in the recurrence.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from seqlab.config import RunConfig, apply_overrides


@dataclass(frozen=True)
class Recipe:
    """One named architecture: how plots and tables label it, its colour, and the overrides that make it."""

    name: str
    label: str
    color: str  # a matplotlib colour name
    overrides: tuple[str, ...]


def _recurrent(name: str, label: str, color: str) -> Recipe:
    return Recipe(name, label, color, (f"model.mixer={name}", "model.pos=none"))


def _attention(pos: str, label: str, color: str) -> Recipe:
    return Recipe(f"attn-{pos}", label, color, ("model.mixer=attention", f"model.pos={pos}"))


# in report order; the colours of rnn, gru, mingru and attn-rope are the lessons' four architectures
RECIPES: dict[str, Recipe] = {r.name: r for r in (
    _recurrent("rnn", "RNN", "tab:red"),
    _recurrent("gru", "GRU", "tab:orange"),
    _recurrent("mingru", "minGRU", "tab:green"),
    Recipe("attn1", "attention, 1 head (RoPE)", "tab:cyan",
           ("model.mixer=attention", "model.n_head=1", "model.pos=rope")),
    _attention("none", "attention (no positions)", "tab:brown"),
    _attention("learned", "attention (learned)", "tab:purple"),
    _attention("sinusoidal", "attention (sinusoidal)", "tab:pink"),
    _attention("rope", "attention (RoPE)", "tab:blue"),
    _attention("alibi", "attention (ALiBi)", "tab:olive"),
    Recipe("hybrid", "hybrid (GRU + local attention)", "tab:gray", ("model.mixer=hybrid", "model.pos=none")),
)}

# the architectures the lecture contrasts: the state chain (RNN, GRU), the parallel scan (minGRU) and
# direct connections (attention)
LECTURE_ARCHS: tuple[str, ...] = ("rnn", "gru", "mingru", "attn-rope")


def recipe(name: str) -> Recipe:
    """The recipe called `name`; ValueError naming the choices for any other name."""
    try:
        return RECIPES[name]
    except KeyError:
        raise ValueError(f"unknown model {name!r}; choose from {', '.join(RECIPES)}") from None


def apply_recipe(base: RunConfig, name: str, overrides: Sequence[str] = ()) -> RunConfig:
    """`base` turned into model `name`, then `overrides` applied (ValueError for a config it refuses)."""
    return apply_overrides(base, [*recipe(name).overrides, *overrides])
