"""The recipe `seqlab train DATA --minutes N` picks when no preset is named: the training recipe measured best
for this machine's class, its cores and the budget, read from the recipe table kept in the package.

The table (`recipe_table.json` beside this module) is written by `python -m seqlab.studies.recipe_measure`,
which trains every candidate below at equal quiet time on each machine class it can emulate and keeps,
per cell (machine class, threads, minutes), the candidate with the lowest validation bits per byte. A cell
the command could not measure on its machine (a CUDA device, a thread count it did not run) is in the table
too, marked not measured, with the measured cell it was extrapolated from. Names, not configs, are stored
per cell: a candidate's settings live here, in code, so a run records exactly what it trained.

A machine class is what decides a step's cost: a CUDA device; a CPU with native bf16 dot products (bf16
autocast makes the matmuls cheaper, `runs/precision.py`); a CPU without them (fp32 only). The table's
cells are keyed by threads 1 and 2: a run with more cores takes the 2-thread cell, since the recipes were
chosen for small CPUs (a larger machine is extrapolated, and the printed line says so).
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any, Literal

from seqlab.config import RunConfig, apply_overrides, get_preset
from seqlab.errors import UserError

TABLE = Path(__file__).with_name("recipe_table.json")

MachineClass = Literal["cpu-bf16", "cpu-fp32", "cuda"]
MACHINE_CLASSES: tuple[MachineClass, ...] = ("cpu-bf16", "cpu-fp32", "cuda")
# the train.precision each class trains in
PRECISION: dict[MachineClass, str] = {"cpu-bf16": "bf16", "cpu-fp32": "fp32", "cuda": "auto"}

# candidate -> (preset, overrides). The GRU recipes read 32 lanes of 64 tokens: a step's 2,048 tokens in half
# the sequential time steps of the preset's 16 x 128, and lr 2e-3 with beta2 0.99 won a screen of both
# (the experiments index). `small` is the preset as it is, so a chosen recipe is never one that lost to it.
_GRU = ("model.mixer=gru", "model.pos=none", "model.block_size=64", "train.batch_size=32", "train.lr=0.002",
        "train.beta2=0.99", "train.warmup_steps=30")
CANDIDATES: dict[str, tuple[str, tuple[str, ...]]] = {
    "gru-256": ("small", (*_GRU, "model.n_embd=256", "model.n_head=8")),
    "gru-192": ("small", (*_GRU, "model.n_embd=192", "model.n_head=6")),
    "gru-128": ("small", (*_GRU, "model.n_embd=128", "model.n_head=4")),
    "small": ("small", ()),
    "base": ("base", ()),
    # wider for budgets of an hour and more: a wider GRU, a deeper one, the hybrid (a GRU layer, then local
    # attention over 64 tokens) and attention at width 256
    "gru-384": ("small", (*_GRU, "model.n_embd=384", "model.n_head=8")),
    # runs of an hour see the corpus many times over: residual dropout against overfitting
    "gru-384-d1": ("small", (*_GRU, "model.n_embd=384", "model.n_head=8", "model.dropout=0.1")),
    # at the end of an hour's run gru-384-d1 still reads the train split far better than val: more dropout
    "gru-384-d2": ("small", (*_GRU, "model.n_embd=384", "model.n_head=8", "model.dropout=0.2")),
    "gru-256x3": ("small", (*_GRU, "model.n_embd=256", "model.n_head=8", "model.n_layer=3")),
    "hybrid-256": ("small", (*_GRU, "model.mixer=hybrid", "model.n_embd=256", "model.n_head=8")),
    "attn-256": ("small", ("model.n_embd=256", "model.n_head=8", "model.n_layer=4", "train.lr=0.002",
                           "train.beta2=0.99")),
}
# a clock budget: the step count so large that only the clock stops the run
UNBOUNDED_STEPS = 10_000_000


@dataclass(frozen=True)
class Machine:
    """What a recipe is chosen for: the machine class and the threads one run may use."""

    kind: MachineClass
    threads: int


@dataclass(frozen=True)
class RecipeChoice:
    """The picked candidate, the table cell it came from and the one-line reason printed and kept in run.json."""

    name: str
    machine: MachineClass  # the class of the machine it was chosen for
    preset: str
    overrides: tuple[str, ...]
    minutes: float
    cell: str  # "MACHINE/THREADS/MINUTES" of the table cell used
    measured: bool  # the cell was measured, not extrapolated
    why: str
    # chosen by curves (`choose_by_curves`): the precision that measured fastest here, the minutes left to train
    # once the probe is paid, and what each candidate was predicted to reach
    precision: str = ""
    train_minutes: float = 0.0
    prediction: dict[str, Any] | None = None
    max_steps: int = 0  # a step budget too, when the candidate's curve rises before the clock runs out

    def as_dict(self) -> dict[str, Any]:
        out = {"name": self.name, "machine": self.machine, "preset": self.preset, "overrides": list(self.overrides),
               "minutes": self.minutes, "cell": self.cell, "measured": self.measured, "why": self.why}
        if self.prediction is not None:
            out |= {"precision": self.precision, "train_minutes": round(self.train_minutes, 3),
                    "max_steps": self.max_steps, "prediction": self.prediction}
        return out


def cell_key(kind: str, threads: int, minutes: float) -> str:
    return f"{kind}/{threads}/{minutes:g}"


@cache
def load_table(path: Path = TABLE) -> dict[str, Any]:
    """The recipe table; its cells name candidates of CANDIDATES (tests/test_recipe_table.py holds both)."""
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise UserError(f"the recipe table {path} cannot be read ({exc.__class__.__name__}); reinstall seqlab or "
                        "name a --preset") from None


def this_machine(device: str = "auto") -> Machine:
    """This process's machine class and the threads a run here gets (the CPU cores it may run on, at most 2
    for the table's cells)."""
    import torch

    from seqlab.runs.precision import cpu_has_native_bf16
    from seqlab.training.cpu_threads import allowed_cpus

    if device in ("auto", "cuda") and torch.cuda.is_available():
        return Machine("cuda", 1)
    cores = len(allowed_cpus()) or os.cpu_count() or 1
    return Machine("cpu-bf16" if cpu_has_native_bf16() else "cpu-fp32", cores)


def choose_recipe(minutes: float, machine: Machine, data_meta: dict[str, Any],
                  table: dict[str, Any] | None = None) -> RecipeChoice:
    """The table cell nearest to (machine, threads, minutes), its candidate and why (module doc).

    Minutes are matched on a log scale (3 and 10 minutes are as far apart as 10 and 33); the cell's class must
    be the machine's. The data decides only what the reason says: a corpus tokenized otherwise than the
    table's, or far smaller, is a reading of the table beyond what it measured."""
    if not minutes > 0:
        raise UserError(f"--minutes must be more than 0, not {minutes:g}")
    table = table or load_table()
    cells = [c for c in table["cells"] if c["machine"] == machine.kind]
    if not cells:
        raise UserError(f"the recipe table has no recipe for a {machine.kind} machine; name a --preset.")
    threads = min(machine.threads, max(c["threads"] for c in cells))
    cells = [c for c in cells if c["threads"] == threads] or cells
    cell = min(cells, key=lambda c: (abs(math.log(c["minutes"] / minutes)), -c["minutes"]))
    name = cell["choice"]
    preset, overrides = CANDIDATES[name]
    key = cell_key(cell["machine"], cell["threads"], cell["minutes"])
    return RecipeChoice(name, machine.kind, preset, overrides, minutes, key, bool(cell["measured"]),
                        _why(name, cell, minutes, machine, data_meta, table))


def _why(name: str, cell: dict[str, Any], minutes: float, machine: Machine, data_meta: dict[str, Any],
         table: dict[str, Any]) -> str:
    """One line: what was chosen, from which cell, measured or extrapolated, and where the data differs."""
    where = f"{cell['machine']} at {cell['threads']} thread{'s' * (cell['threads'] > 1)}, {cell['minutes']:g} min"
    if cell["measured"]:
        score = cell["results"][name]["val_bpb"]
        how = f"best of {len(cell['results'])} measured ({score:.3f} val bits per byte, {table['data']['label']})"
    else:
        how = f"extrapolated from {cell['from']} ({cell['reason']})"
    notes = []
    if machine.kind != "cuda" and machine.threads > cell["threads"]:
        notes.append(f"{machine.threads} cores here")
    if abs(math.log(cell["minutes"] / minutes)) > 0.1:
        notes.append(f"{minutes:g} min asked")
    notes += data_notes(data_meta, table)
    return f"recipe {name}: {how} for {where}" + (f"; {', '.join(notes)}" if notes else "")


def data_notes(data_meta: dict[str, Any], table: dict[str, Any]) -> list[str]:
    """Where the data differs from the table's: the choice is then a reading beyond what was measured."""
    notes = []
    tok, ref = data_meta.get("tokenizer", {}), table["data"]
    if (tok.get("kind"), tok.get("vocab_size")) != (ref["tokenizer"], ref["vocab_size"]):
        notes.append(f"data tokenized {tok.get('kind')} {tok.get('vocab_size')}, the table's {ref['tokenizer']} "
                     f"{ref['vocab_size']}")
    train_tokens = ((data_meta.get("splits") or {}).get("train") or {}).get("tokens") or 0
    if train_tokens and train_tokens * 10 < ref["train_tokens"]:
        notes.append(f"a corpus a tenth the table's or less ({train_tokens:,} train tokens)")
    return notes


def minute_budget(minutes: float) -> list[str]:
    """The overrides of a clock budget: `minutes` of training, and a step count that never stops it first."""
    if not minutes > 0:
        raise UserError(f"--minutes must be more than 0, not {minutes:g}")
    return [f"train.max_minutes={minutes:g}", f"train.max_steps={UNBOUNDED_STEPS}"]


def recipe_config(choice: RecipeChoice, precision: str, settings: list[str]) -> RunConfig:
    """The run's config: the candidate on its preset, trained for the chosen minutes (less the probe's) in the
    chosen precision (else the class's), then the user's own settings on top (they win over the recipe)."""
    try:
        base = get_preset(choice.preset)
    except ValueError as exc:
        raise UserError(str(exc)) from None
    budget = [*minute_budget(choice.train_minutes or choice.minutes),
              f"train.precision={choice.precision or precision}"]
    if choice.max_steps:  # the candidate is best stopped sooner (its curve rises): a run of that many steps
        budget.append(f"train.max_steps={choice.max_steps}")
    return apply_overrides(base, [*choice.overrides, *budget, *settings])


def made_by(run_dir: Path) -> str:
    """What made the run in `run_dir`, for `seqlab serve` to say: the recipe table's choice recorded in run.json,
    else that its settings were named (a preset and overrides, or an init run)."""
    try:
        recipe = json.loads((run_dir / "run.json").read_text()).get("recipe")
    except (OSError, ValueError, AttributeError):
        recipe = None
    if not recipe:
        return "trained with named settings (a preset and overrides), not the recipe table"
    if recipe.get("prediction"):
        p = recipe["prediction"]
        return (f"trained by recipe {recipe['name']} for {recipe['minutes']:g} minutes (chosen by the table's curves: "
                f"predicted {p['val_bpb']:.3f} ± {p['plus_minus']:.3f} val bits per byte at {p['steps']:,} steps)")
    kind = "measured" if recipe.get("measured") else "extrapolated"
    return f"trained by recipe {recipe['name']} for {recipe['minutes']:g} minutes (table cell {recipe['cell']}, {kind})"
