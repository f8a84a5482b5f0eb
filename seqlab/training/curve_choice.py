"""The recipe chosen by curves: each candidate read at the steps it reaches on this machine in the budget.

A table cell (`recipe_table.choose_recipe`) is one number per candidate, measured on the host the table was
made on; a slower machine reaches fewer steps, and another candidate may then be better. The table's curves
(`studies/recipe_curves.py`) are keyed by steps instead, which do not depend on the machine; this machine's
step rate of each candidate in each precision comes from the speed probe (`training/speed_probe.py`). So:

    steps(candidate) = rate here (its faster precision) x the seconds left once the probe is paid x TRAINER_SHARE
    choice = the candidate whose curve reads lowest at its steps (`training/curves.py`)

TRAINER_SHARE is the share of a bare training step's rate the real trainer keeps over a run (data, logging,
clipping, validation every eval_every steps, checkpoints): the table's "trainer_share", measured by timed runs.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from seqlab.config import RunConfig, apply_overrides, get_preset
from seqlab.training.curves import Reading, read_table_curve
from seqlab.training.recipe_table import CANDIDATES, Machine, RecipeChoice, data_notes
from seqlab.training.speed_probe import PROBE_MAX_S, PROBE_SHARE, forget, probe

TRAINER_SHARE = 0.85  # when the table has not measured its own (its "trainer_share")
# How far a run's steps may fall from the probe's prediction before the probe's cached rates are dropped: rates
# probed in a busy moment would otherwise mislead every later run on the machine (docs/training.md).
RATE_TOLERANCE = 0.1


def family(name: str) -> str:
    """The candidate's family for the curve's exponent: its mixer."""
    preset, overrides = CANDIDATES[name]
    mixers = [o.partition("=")[2] for o in overrides if o.startswith("model.mixer=")]
    return mixers[-1] if mixers else get_preset(preset).model.mixer


def precisions(machine: Machine) -> tuple[str, ...]:
    """The precisions a candidate may train in on `machine`'s class (bf16 only where the CPU has it)."""
    return ("bf16", "fp32") if machine.kind == "cpu-bf16" else ("fp32",)


def candidate_config(name: str, precision: str, vocab_size: int) -> RunConfig:
    """Candidate `name` as it trains: its preset and overrides, in `precision`, for the data's vocabulary."""
    preset, overrides = CANDIDATES[name]
    return apply_overrides(get_preset(preset), [*overrides, f"train.precision={precision}",
                                                f"model.vocab_size={vocab_size}", "train.device=cpu"])


def curve_names(table: Mapping[str, Any]) -> list[str]:
    """The candidates the table has curves for."""
    return [n for n in table.get("curves", {}) if n in CANDIDATES]


def probe_configs(table: Mapping[str, Any], machine: Machine, vocab_size: int) -> dict[str, dict[str, RunConfig]]:
    """What the speed probe times: each candidate with a curve, in each precision `machine` offers."""
    return {n: {p: candidate_config(n, p, vocab_size) for p in precisions(machine)} for n in curve_names(table)}


def choose_by_curves(minutes: float, machine: Machine, rates: Mapping[str, Mapping[str, float]],
                     probe_seconds: float, table: Mapping[str, Any], probe_note: str = "") -> RecipeChoice:
    """The candidate predicted best at the steps it reaches here in `minutes` (module doc). `rates` are the
    probe's steps per second, candidate -> precision -> rate; `probe_seconds` is what the probe cost."""
    curves = table["curves"]
    names = [n for n in curve_names(table) if rates.get(n)]
    share = float(table.get("trainer_share", TRAINER_SHARE))
    # the probe is paid from the budget (a probe that overran a budget of seconds leaves the run half of it)
    train_s = max(minutes * 30, minutes * 60 - probe_seconds)
    families = {n: family(n) for n in curves if n in CANDIDATES}
    rows: list[tuple[Reading, str, str]] = []
    for name in names:
        precision = max(rates[name], key=lambda p: rates[name][p])
        steps = max(1.0, rates[name][precision] * train_s * share)
        rows.append((read_table_curve(curves, name, steps, families, within=True), name, precision))
    rows.sort(key=lambda r: r[0].val_bpb)
    best, name, precision = rows[0]
    preset, overrides = CANDIDATES[name]
    reach = round(rates[name][precision] * train_s * share)
    prediction = {"steps": best.steps, "reachable_steps": reach, "val_bpb": round(best.val_bpb, 4),
                  "plus_minus": round(best.plus_minus, 4), "how": best.how, "trainer_share": share,
                  "candidates": {n: {"precision": p, "steps": r.steps, "val_bpb": round(r.val_bpb, 4),
                                     "plus_minus": round(r.plus_minus, 4), "how": r.how} for r, n, p in rows}}
    runner_up = f"; next {rows[1][1]} {rows[1][0].val_bpb:.3f} at {rows[1][0].steps:,} steps" if len(rows) > 1 else ""
    why = (f"recipe {name} ({precision}): {best.steps:,} steps in {train_s / 60:.1f} min here, predicted "
           f"{best.val_bpb:.3f} ± {best.plus_minus:.3f} val bits per byte ({best.how} on its curve, "
           f"{table['data']['label']}){runner_up}{probe_note}")
    stop = best.steps if best.steps < 0.98 * reach else 0  # its curve rises later: end at its lowest run
    if stop:
        why += f"; it stops at {stop:,} of the {reach:,} steps it could take, where its curve is lowest"
    return RecipeChoice(name, machine.kind, preset, overrides, minutes, f"curves/{machine.kind}/{machine.threads}",
                        best.how != "extrapolated", why, precision=precision, train_minutes=train_s / 60,
                        prediction=prediction, max_steps=stop)


def recipe_here(data: Path, minutes: float, settings: Sequence[str]) -> RecipeChoice:
    """The recipe for `minutes` of training on DATA_DIR `data` on this machine (`RecipeChoice`): on a CPU, by the
    table's curves at the steps each candidate reaches here (`training/curve_choice.py`, after the speed probe,
    `training/speed_probe.py`); on a CUDA device, under torchrun or with no curves, by the table's cells. The
    settings `train.device=`, `train.precision=fp32` and `train.threads=` say which machine the run is on."""
    from seqlab.data.layout import load_meta
    from seqlab.training.distributed import launched_world_size
    from seqlab.training.recipe_table import choose_recipe, load_table, this_machine

    given = {k.strip(): v.strip() for k, _, v in (s.partition("=") for s in settings)}
    machine = this_machine(given.get("train.device", "auto"))
    # the settings that change the class a run is in: fp32 on a bf16 CPU trains as the fp32-only class does,
    # and a thread count is the cores the run gets
    if machine.kind == "cpu-bf16" and given.get("train.precision") == "fp32":
        machine = dataclasses.replace(machine, kind="cpu-fp32")
    if given.get("train.threads", "0").isdigit() and int(given.get("train.threads", "0")) > 0:
        machine = dataclasses.replace(machine, threads=int(given["train.threads"]))
    try:
        meta = load_meta(data)
    except (OSError, ValueError):
        meta = {}  # the trainer says what is wrong with the folder
    table = load_table()
    # every rank of a torchrun must build the same model: a probe per rank could disagree, the cells cannot
    if machine.kind != "cuda" and table.get("curves") and minutes > 0 and launched_world_size() == 1:
        return curve_choice(minutes, machine, meta, table)
    return choose_recipe(minutes, machine, meta)


def curve_choice(minutes: float, machine: Machine, meta: dict[str, Any], table: dict[str, Any]) -> RecipeChoice:
    """Probe this machine's step rates (cached) and choose by the curves (`recipe_here`)."""
    vocab = int((meta.get("tokenizer") or {}).get("vocab_size") or table["data"]["vocab_size"])
    seconds = min(PROBE_MAX_S, PROBE_SHARE * minutes * 60)
    measured = probe(probe_configs(table, machine, vocab), machine.threads, seconds)
    how = "rates cached from an earlier probe" if measured.cached else f"speed probe {measured.seconds:.1f} s"
    notes = "; ".join([how, *data_notes(meta, table)])
    choice = choose_by_curves(minutes, machine, measured.rates, measured.seconds, table, probe_note=f"; {notes}")
    return dataclasses.replace(choice, prediction={**(choice.prediction or {}), "probe": measured.as_dict()})


def check_probe(recipe: Mapping[str, Any], summary: Mapping[str, Any]) -> str | None:
    """After a run the curves chose that trained to the end of its minutes: when the steps it took are more
    than RATE_TOLERANCE from the steps the probe's rates predicted, the cached rates are dropped, so the next
    run on this machine measures them again (the probe or the run met another load than the other, or the
    machine changed), and a line says so; None when they agree or nothing can be compared."""
    prediction = recipe.get("prediction") or {}
    reach, key = prediction.get("reachable_steps"), (prediction.get("probe") or {}).get("key")
    steps = summary.get("steps")
    if summary.get("failed") or not reach or not key or not steps or recipe.get("max_steps") \
            or summary.get("stopped") != "reached train.max_minutes":
        return None  # stopped early by design or by failure: its steps say nothing of the rate
    off = steps / reach - 1.0
    if abs(off) <= RATE_TOLERANCE:
        return None
    dropped = forget(str(key))
    return (f"this run took {steps:,} steps where the speed probe's rates gave {reach:,} ({off:+.0%})"
            + ("; those cached rates are dropped and the next run here measures them again" if dropped else ""))
