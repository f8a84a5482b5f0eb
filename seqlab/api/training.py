"""`seqlab.train`: DATA_DIR in, RUN_DIR out, from Python, through the one trainer `seqlab train` uses.

The CLI (`seqlab/cli/training.py`) parses its arguments and calls `train` here, so resume, the RUN_DIR lock
(one trainer per folder), the non-finite-step guards and `--init` behave the same from both. Settings are the
CLI's `section.field=value` overrides, given either as those strings (`settings=["model.mixer=gru"]`) or as
one mapping per config section (`model={"mixer": "gru"}, train={"max_steps": 60}`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from seqlab.errors import UserError
from seqlab.private_files import private_umask, warn_if_open

if TYPE_CHECKING:
    from seqlab.api.runs import Run
    from seqlab.training.progress import StepReport

SECTIONS = ("model", "data", "train")


def override_strings(sections: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """`{"model": {"mixer": "gru"}}` -> `["model.mixer=gru"]`: the CLI's override text of each value, so that a
    mapping and the command line are parsed and checked by the same code (`seqlab.config.apply_overrides`)."""
    out = []
    for section, fields in sections.items():
        if section not in SECTIONS:
            raise UserError(f"unknown config section {section!r}; the sections are model, data and train.")
        if not isinstance(fields, Mapping):
            raise UserError(f"{section}= expects a mapping of field names to values, like "
                            f"{section}={{'seed': 1}}, not {fields!r}.")
        for name, value in fields.items():
            text = "none" if value is None else str(value).lower() if isinstance(value, bool) else str(value)
            out.append(f"{section}.{name}={text}")
    return out


@private_umask()
def train(data: str | Path, out: str | Path, preset: str | None = None, *, minutes: float | None = None,
          resume: bool = False, init: str | Path | None = None, settings: Sequence[str] = (),
          progress: bool = False, on_step: Callable[[StepReport], None] | None = None,
          say: Callable[[str], None] | None = None, **overrides: Mapping[str, Any]) -> Run:
    """Train a model on DATA_DIR `data` into RUN_DIR `out` and return the trained `Run`.

    `minutes` is a wall-clock budget. With it and no `preset` (nor `init`, `resume`), the recipe table picks the
    model and its training for this machine: on a CPU the candidate predicted best at the steps it reaches here
    (`seqlab.training.curve_choice`, after a speed probe of seconds, cached), elsewhere the table's cell for the
    machine's class; the choice and its prediction are recorded in RUN_DIR/run.json as "recipe"; with a preset,
    that preset trains for the minutes. `preset`
    is "tiny", "small" (default without `minutes`) or "base". `model=`, `data=` and `train=` mappings (and
    `settings`, the CLI's "section.field=value" strings) override its fields, e.g. `train={"max_steps": 60}`.
    `resume` continues the run in `out` from its last good checkpoint with its saved config (only train.* and data.*
    may change); `init` starts a new run from a trained one's weights, tokenizer and model settings.
    `say(line)` is given the recipe's one-line reason before training starts, when the table chose it (and
    one after, when the run missed the speed probe's steps: `check_recipe_probe`).
    `on_step(report)` is called after every step with a `StepReport` (step, loss, elapsed seconds, tokens,
    and the validation loss on steps that ran it); `progress` shows the terminal bar. Refusals (a folder
    another process is training into, a run already there without `resume`, a run halted on non-finite
    steps) are a `UserError` with the CLI's sentence. Every file written is readable by this user only (0600,
    folders 0700); an `OpenToOthersWarning` names `data`, `out` or `init` when other users can read it.
    """
    from seqlab.api.runs import Run, load
    from seqlab.config import get_preset
    from seqlab.runs.init import init_config
    from seqlab.training.distributed import launched_rank
    from seqlab.training.trainer import train as run_trainer

    if init is not None and (resume or preset is not None):
        raise UserError("--init starts a new run with the init run's settings; it cannot be combined with "
                        f"--{'resume' if resume else 'preset'}.")
    if launched_rank() == 0:  # under torchrun one warning, not one per process
        warn_if_open(data, out, init)
    strings = [*settings, *override_strings(overrides)]
    recipe = None
    if minutes is not None and resume:
        raise UserError("--minutes sets a new run's budget; a resumed run keeps its own (raise "
                        "train.max_minutes to give it more).")
    if minutes is not None and preset is None and init is None:
        base, recipe = recipe_base(Path(data), minutes, strings, say=say)
        strings = []  # already applied on top of the recipe
    else:
        if minutes is not None:
            from seqlab.training.recipe_table import minute_budget

            strings = [*minute_budget(minutes), *strings]
        try:
            base = None if resume else init_config(Path(init)) if init is not None else get_preset(preset or "small")
        except ValueError as exc:
            raise UserError(str(exc)) from None
    summary = run_trainer(Path(data), Path(out), base, resume=resume, overrides=strings, progress=progress,
                          init=Path(init) if init is not None else None, on_step=on_step, recipe=recipe,
                          announce=False)  # nothing printed unless asked: the summary says `resumed_at`
    if summary["failed"]:  # halted on non-finite steps or weights: the reason says which checkpoint is good
        raise UserError(summary["stopped"])
    if launched_rank() != 0:  # under torchrun only rank 0 writes RUN_DIR (maybe on another machine): not loaded
        return Run(out, summary=summary)
    check_recipe_probe(recipe, summary, say)
    return load(out, summary=summary)


def recipe_choice(data: Path, minutes: float, settings: Sequence[str]) -> Any:
    """The recipe for `minutes` of training on DATA_DIR `data` on this machine (`RecipeChoice`; the settings
    `train.device=`, `train.precision=fp32` and `train.threads=` say which machine the run is on):
    `seqlab.training.curve_choice.recipe_here`."""
    from seqlab.training.curve_choice import recipe_here

    return recipe_here(data, minutes, settings)


def check_recipe_probe(recipe: dict[str, Any] | None, summary: dict[str, Any],
                       say: Callable[[str], None] | None) -> None:
    """After a run the recipe chose (`recipe`; None when a preset trained): its steps against the speed probe's
    prediction, the cached rates dropped when far off (`seqlab.training.curve_choice.check_probe`), told to
    `say`."""
    from seqlab.training.curve_choice import check_probe

    note = check_probe(recipe, summary) if recipe is not None else None
    if note is not None and say is not None:
        say(note)


def recipe_base(data: Path, minutes: float, settings: list[str], say: Callable[[str], None] | None = None
                ) -> tuple[Any, dict[str, Any]]:
    """The recipe table's config for `minutes` on this machine, with `settings` on top, and its record."""
    from seqlab.training.recipe_table import PRECISION, recipe_config

    choice = recipe_choice(data, minutes, settings)
    if say is not None:
        say(choice.why)
    return recipe_config(choice, PRECISION[choice.machine], settings), choice.as_dict()
