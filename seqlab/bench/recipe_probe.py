"""The recipe choice's own costs: what the speed probe takes of a 10-minute budget, and how much of the probe's
bare step rate the real trainer keeps (the table's trainer share, which turns a rate into the steps a run
reaches)."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from seqlab.bench.harness import row

BUDGET_MIN = 10.0


def rows(cache: Path, quick: bool, threads: int) -> list[dict[str, Any]]:
    from seqlab.training.curve_choice import probe_configs
    from seqlab.training.recipe_table import load_table, this_machine
    from seqlab.training.speed_probe import PROBE_MAX_S, PROBE_SHARE, probe

    table = load_table()
    if not table.get("curves"):
        return [row("recipe", "skipped: the recipe table has no curves", "", 0.0, "skipped")]
    machine = this_machine("cpu")
    machine = type(machine)(machine.kind, threads)
    vocab = table["data"]["vocab_size"]
    configs = probe_configs(table, machine, vocab)
    measured = probe(configs, threads, min(PROBE_MAX_S, PROBE_SHARE * BUDGET_MIN * 60), use_cache=False)
    out = [row("recipe", f"speed probe of {len(configs)} candidates: share of a {BUDGET_MIN:g}-minute budget",
               "seconds the uncached probe took (building, warming up, timing) / the budget",
               100 * measured.seconds / (BUDGET_MIN * 60), "%", "< 2", seconds=round(measured.seconds, 2),
               rates=measured.as_dict()["rates"])]
    name = "gru-192" if "gru-192" in configs else next(iter(configs))
    precision = max(measured.rates[name], key=measured.rates[name].get)
    share, probed = _trainer_share(cache, name, precision, threads, 40 if quick else 120)
    out.append(row("recipe", f"real trainer / probe, {name} {precision}", "the trainer's steps per second "
                   "(data, clipping, logging; no validation) over the probe's bare step rate, same data", share, "x",
                   table_share=table.get("trainer_share"), probe_steps_per_s=round(probed, 3)))
    return out


def bench_data(cache: Path) -> Path:
    """The bench's offline synthetic corpus (prepared once, kept in the bench's cache)."""
    from seqlab.bench.latency_runs import ensure_data

    return ensure_data(cache)


def _trainer_share(cache: Path, name: str, precision: str, threads: int, steps: int) -> tuple[float, float]:
    """(the real trainer's steps per second / the probe's, the probe's rate) for one candidate on the bench's
    synthetic corpus."""
    from seqlab.config import apply_overrides
    from seqlab.data.layout import load_meta
    from seqlab.training.curve_choice import candidate_config
    from seqlab.training.speed_probe import probe
    from seqlab.training.trainer import train

    data = bench_data(cache)
    cfg = candidate_config(name, precision, load_meta(data)["tokenizer"]["vocab_size"])
    rate = probe({name: {precision: cfg}}, threads, 5.0, use_cache=False).rates[name][precision]
    cfg = apply_overrides(cfg, [f"train.max_steps={steps}", f"train.threads={threads}",
                                f"train.eval_every={steps * 10}", f"train.ckpt_every={steps * 10}"])
    with tempfile.TemporaryDirectory(prefix="seqlab-bench-recipe-") as tmp:
        summary = train(data, Path(tmp) / "run", cfg, progress=False)
    return summary["tokens_per_s"] / (cfg.train.batch_size * cfg.model.block_size) / rate, rate
