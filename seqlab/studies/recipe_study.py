"""The small-budget recipe, measured: each option against the baseline at EQUAL TOKENS (or, with
`--minutes N`, at EQUAL QUIET TIME), in bits per byte.

Every variant is the `small` preset turned into a recipe of `studies/recipes.py` plus overrides, trained
for the same number of token positions (steps = tokens / (batch_size * block_size)), then scored on the
WHOLE val split by `evaluation.report.evaluate_run` (attention: windows of its block_size; recurrent and
hybrid models: each email read whole). Wall-clock is unreliable on shared cores, so the budget is tokens;
each variant's training tokens/s is reported too, measured with `--jobs` runs side by side (the
variants of one comparison are queued next to each other so they share the same load).

Comparisons (the baseline is attention with RoPE, AdamW, cosine, no average, no QK-norm, width 128,
block 128, batch 16):
  schedule   cosine | wsd (cooldown over the last 20%)
  ema        off | train.ema=0.999 (bias-corrected warm-up, so a short run is not stuck at the init)
  optimizer  adamw | muon (hidden matrices)
  qk_norm    off | on
  width      n_embd 64 | 96 | 128 | 192
  window     block_size 64 | 128 | 256 (fewer or more steps for the same tokens)
  window_same_steps  block_size 64 | 128 | 256 with batch_size 32 | 16 | 8: only the context changes
  batch      batch_size 8 | 16 | 32
  family     attention | gru | hybrid (gru, local attention over 64 tokens)
  stack      the winners together: wsd, wsd + batch 8, the GRU + wsd

    python -m seqlab.studies.recipe_study DATA_DIR [--out out/bench_recipe] [--tokens 768000] [--jobs 2]
                                               [--only schedule,ema,...] [--threads 1]
                                               [--minutes N [--ref-tokens-per-s R]]

Equal time (`--minutes N`): each variant gets the steps a QUIET N-minute run of it reaches (its speed
relative to the baseline "attn", measured interleaved in this process, anchored at attn's quiet rate R:
given, or else attn's fastest measured round here; `seqlab.studies.equal_time`). The ratio is also given
beside the ratio of model FLOPs per token (`training/flops.py`), which ignores how efficient each size's
matmuls are. Results of an equal-time run go to OUT/results-Nmin/.

This study chose the `small` preset's training recipe (the experiments index, experiments/README.md, has
its tables); a recipe table at equal quiet time is remade with `--minutes N`.

Writes one JSON per run (OUT/results/NAME.json, the run itself in OUT/results/runs/NAME) and the table
(OUT/table.md; OUT/results-Nmin/table.md for equal time); a finished run is not trained again, so an
interrupted study continues where it stopped.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import shutil
from pathlib import Path
from typing import Any

from seqlab.studies.equal_time import equal_time_steps, reference_tokens_per_s, step_rates

REF = "attn"  # the baseline whose quiet rate anchors an equal-time budget

# a few hundred steps: a short warmup; fp32, as attn's quiet anchor rate and the comparisons measured before
# train.precision existed (a bf16 variant overrides it)
BASE = ["train.warmup_steps=30", "train.lr=3e-3", "train.precision=fp32"]
# comparison -> [(variant name, recipe, overrides)]; the first variant of most is the baseline "attn"
COMPARISONS: dict[str, list[tuple[str, str, tuple[str, ...]]]] = {
    "schedule": [("attn", "attn-rope", ()), ("attn-wsd", "attn-rope", ("train.schedule=wsd",))],
    "ema": [("attn", "attn-rope", ()), ("attn-ema", "attn-rope", ("train.ema=0.999",))],
    "optimizer": [("attn", "attn-rope", ()), ("attn-muon", "attn-rope", ("train.optimizer=muon",))],
    "qk_norm": [("attn", "attn-rope", ()), ("attn-qknorm", "attn-rope", ("model.qk_norm=true",))],
    "width": [("attn-w64", "attn-rope", ("model.n_embd=64",)), ("attn-w96", "attn-rope", ("model.n_embd=96",)),
              ("attn", "attn-rope", ()), ("attn-w192", "attn-rope", ("model.n_embd=192", "model.n_head=6"))],
    "window": [("attn-t64", "attn-rope", ("model.block_size=64",)), ("attn", "attn-rope", ()),
               ("attn-t256", "attn-rope", ("model.block_size=256",))],
    # the window at equal steps too (batch * block fixed), so that only the context length changes
    "window_same_steps": [("attn-t64-b32", "attn-rope", ("model.block_size=64", "train.batch_size=32")),
                          ("attn", "attn-rope", ()),
                          ("attn-t256-b8", "attn-rope", ("model.block_size=256", "train.batch_size=8"))],
    "batch": [("attn-b8", "attn-rope", ("train.batch_size=8",)), ("attn", "attn-rope", ()),
              ("attn-b32", "attn-rope", ("train.batch_size=32",))],
    "family": [("attn", "attn-rope", ()), ("gru", "gru", ()), ("hybrid", "hybrid", ())],
    # the winners together: do they add up?
    "stack": [("attn-wsd", "attn-rope", ("train.schedule=wsd",)),
              ("attn-wsd-b8", "attn-rope", ("train.schedule=wsd", "train.batch_size=8")),
              ("gru-wsd", "gru", ("train.schedule=wsd",))],
}


def _config(recipe_name: str, overrides: tuple[str, ...], tokens: int, threads: int) -> Any:
    from seqlab.config import get_preset
    from seqlab.studies.recipes import apply_recipe

    cfg = apply_recipe(get_preset("small"), recipe_name, [*BASE, *overrides])
    steps = max(1, round(tokens / (cfg.train.batch_size * cfg.model.block_size)))
    budget = [f"train.max_steps={steps}", f"train.eval_every={steps}", f"train.ckpt_every={steps}",
              f"train.threads={threads}", "train.device=cpu"]
    return apply_recipe(get_preset("small"), recipe_name, [*BASE, *overrides, *budget])


def train_scored(data: Path, run: Path, cfg: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """Train `cfg` into a fresh `run` on DATA_DIR `data` and score its best checkpoint on the whole val split:
    (the trainer's summary, `evaluate_run`'s held-out keys). Shared with `tokenizer_study`."""
    from seqlab.evaluation.report import evaluate_run
    from seqlab.options import EvalOptions
    from seqlab.training.trainer import train

    shutil.rmtree(run, ignore_errors=True)
    summary = train(data, run, cfg, progress=False)
    return summary, evaluate_run(run, EvalOptions(data=data, split="val", completions=False), device="cpu")


def save_result(path: Path, result: dict[str, Any]) -> None:
    """One run's JSON, written once it is finished (a continued study skips it)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=2) + "\n")


def run_one(job: tuple[str, str, tuple[str, ...], str, str, int, int]) -> dict[str, Any]:
    """Train one variant and score it on the whole val split (in a worker process); `out` is the folder of
    this budget's results (OUT/results, or OUT/results-Nmin for equal time)."""
    name, recipe_name, overrides, data, out, tokens, threads = job
    result_path = Path(out) / f"{name}.json"
    if result_path.exists():
        return json.loads(result_path.read_text())
    summary, val = train_scored(Path(data), Path(out) / "runs" / name, _config(recipe_name, overrides, tokens, threads))
    result = {"name": name, "recipe": recipe_name, "overrides": list(overrides), "params": summary["params"],
              "steps": summary["steps"], "tokens": summary["tokens"], "tokens_per_s": summary["tokens_per_s"],
              "elapsed_s": summary["elapsed_s"], "val_bpb": val["bpb"], "val_loss": val["loss"]}
    save_result(result_path, result)
    print(f"{name:14} bpb {val['bpb']:.4f}  {summary['tokens_per_s']:8.0f} tok/s  {summary['elapsed_s']:.0f} s",
          flush=True)
    return result


def table(results: dict[str, dict[str, Any]], chosen: list[str],
          rates: dict[str, dict[str, float]] | None = None) -> str:
    """The markdown table; with `rates` (equal time), each variant's speed and FLOPs per token against "attn"."""
    extra = " speed / attn | FLOPs per token / attn |" if rates else ""
    lines = ["| comparison | variant | overrides | params | steps | val bpb | tokens/s |" + extra,
             "|---|---|---|---:|---:|---:|---:|" + ("---:|---:|" if rates else "")]
    for comp in chosen:
        for name, _, overrides in COMPARISONS[comp]:
            r = results.get(name)
            if r is None:
                continue
            row = (f"| {comp} | {name} | {' '.join(overrides) or '(baseline)'} | {r['params']:,} | "
                   f"{r['steps']} | {r['val_bpb']:.4f} | {r['tokens_per_s']:.0f} |")
            if rates:
                v, ref = rates[name], rates[REF]
                speed = v["steps_per_s"] * v["tokens_per_step"] / (ref["steps_per_s"] * ref["tokens_per_step"])
                row += f" {speed:.2f} | {v['flops_per_token'] / ref['flops_per_token']:.2f} |"
            lines.append(row)
    return "\n".join(lines) + "\n"


def _equal_time_budgets(variants: list[tuple[str, str, tuple[str, ...]]], args: argparse.Namespace,
                        results_dir: Path) -> tuple[dict[str, int], dict[str, dict[str, float]], float]:
    """Token budgets (steps x tokens per step) of a quiet --minutes run of each variant, the measured rates
    and the reference's quiet tokens/s; all kept in results_dir/rates.json so that a continued study keeps
    its step counts."""
    path = results_dir / "rates.json"
    if path.exists():
        kept = json.loads(path.read_text())
        rates, ref_rate = kept["rates"], args.ref_tokens_per_s or kept["ref_tokens_per_s"]
    else:
        rates = step_rates({name: _config(recipe_name, overrides, 1, args.threads)
                            for name, recipe_name, overrides in variants}, args.threads)
        ref_rate = reference_tokens_per_s(rates, REF, args.ref_tokens_per_s)
    steps = equal_time_steps(rates, args.minutes, ref_rate, REF)
    results_dir.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"minutes": args.minutes, "ref_tokens_per_s": ref_rate,
                                "ref_rate_given": args.ref_tokens_per_s is not None,
                                "threads": args.threads, "rates": rates, "steps": steps}, indent=2) + "\n")
    for name, r in rates.items():
        print(f"{name:14} {r['steps_per_s']:.3f} steps/s here, {steps[name]} steps for a quiet "
              f"{args.minutes:g} minutes", flush=True)
    return {name: int(steps[name] * rates[name]["tokens_per_step"]) for name in rates}, rates, ref_rate


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m seqlab.studies.recipe_study", description=__doc__.split("\n")[0])
    ap.add_argument("data_dir")
    ap.add_argument("--out", default="out/bench_recipe")
    ap.add_argument("--tokens", type=int, default=768_000, help="token positions each variant trains on")
    ap.add_argument("--jobs", type=int, default=2, help="runs side by side")
    ap.add_argument("--threads", type=int, default=1, help="torch threads per run")
    ap.add_argument("--only", default=",".join(COMPARISONS), help="comma-separated comparisons")
    ap.add_argument("--minutes", type=float, default=None,
                    help="equal quiet time instead of equal tokens: the steps a quiet N-minute run reaches")
    ap.add_argument("--ref-tokens-per-s", type=float, default=None,
                    help="the baseline's quiet training tokens/s that anchors --minutes (default: its fastest "
                         "round measured here)")
    return ap.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    """Train every variant of the chosen comparisons and write the table (module doc)."""
    args = parse_args(argv)
    chosen = [c.strip() for c in args.only.split(",") if c.strip()]
    unknown = [c for c in chosen if c not in COMPARISONS]
    if unknown:
        raise SystemExit(f"unknown comparison(s) {', '.join(unknown)}; choose from {', '.join(COMPARISONS)}")
    variants: dict[str, tuple[str, str, tuple[str, ...]]] = {}
    for comp in chosen:
        for name, recipe_name, overrides in COMPARISONS[comp]:
            variants.setdefault(name, (name, recipe_name, overrides))
    Path(args.out).mkdir(parents=True, exist_ok=True)
    rates = None
    if args.minutes is None:
        results_dir = Path(args.out) / "results"
        budgets = {name: args.tokens for name in variants}
        head = f"{args.tokens:,} token positions per variant"
    else:
        results_dir = Path(args.out) / f"results-{args.minutes:g}min"
        timed = [variants.get(REF, (REF, "attn-rope", ())), *(v for n, v in variants.items() if n != REF)]
        budgets, rates, ref_rate = _equal_time_budgets(timed, args, results_dir)
        head = (f"the steps a quiet {args.minutes:g}-minute run of each variant reaches (speeds relative to attn "
                f"measured interleaved in one process, {args.threads} thread(s), anchored at attn's quiet "
                f"{ref_rate:,.0f} tokens/s, {'given' if args.ref_tokens_per_s else 'measured here'})")
    jobs = [(name, recipe_name, overrides, args.data_dir, str(results_dir), budgets[name], args.threads)
            for name, recipe_name, overrides in variants.values()]
    with mp.get_context("spawn").Pool(args.jobs, maxtasksperchild=1) as pool:
        results = {r["name"]: r for r in pool.imap(run_one, jobs)}
    text = (f"{head}, `small` preset + {' '.join(BASE)}, {args.jobs} runs side by side, {args.threads} thread(s) "
            f"each; val bpb on the whole val split.\n\n" + table(results, chosen, rates))
    (Path(args.out) / "table.md" if rates is None else results_dir / "table.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
