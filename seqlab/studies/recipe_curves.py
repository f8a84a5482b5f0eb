"""A candidate recipe's validation curve: its bits per byte after a whole run of S steps, for many S, at the
cost of little more than the longest run alone.

    python -m seqlab.studies.recipe_curves DATA_DIR --candidate gru-256 [--ends 1000,2000,4000,8000,16000]
        [--out out/recipe_curves] [--threads 1] [--precision bf16]

The candidates train on a warmup-stable-decay schedule (`training/optim.py`): a constant rate, then a linear
cooldown over the last 20% of the run. Before its cooldown a run of S steps is the same as any longer run
(the batch of step s is a pure function of the seed and s, and resume is exact), so one "trunk" trains at
the constant rate, stopping at 0.8 S of each end S, and a "branch" copied from it there cools down over the
remaining 0.2 S: that branch is, step for step, the S-step run (Hägele et al. 2024, "Scaling Laws and
Compute-Optimal Training Beyond Fixed Training Durations", section 3). Ends of 1k to 32k steps cost
1.2 x the longest run instead of 2 x.

Each branch is scored on the whole val split (the curve the recipe table predicts from) and the test split
(the report); the trunk's own validations (every --trunk-eval steps, before any cooldown) are kept too.
Results go to OUT/CANDIDATE/curve.json, a branch at a time, so an interrupted study continues where it
stopped; `--install` adds the curve to the package's recipe table (`training/recipe_table.py`).

    python -m seqlab.studies.recipe_curves DATA_DIR --add-run RUN_DIR

adds a run of `seqlab train DATA --minutes N` that trained to its clock to its candidate's curve (`run_end`):
an hour's run is a point past the branches, for the price of the run it already was.

Steps, not minutes, are the x-axis: the curve is the same on any machine that trains in the same precision,
so the runs may share the machine with other work; what a machine reaches in N minutes is the speed probe's
business (`training/speed_probe.py`).
"""

from __future__ import annotations

import argparse
import json
import shutil
import time
from pathlib import Path
from typing import Any

from seqlab.studies.recipe_measure import candidate_config, cpu_name, git_commit
from seqlab.training.recipe_table import CANDIDATES, TABLE

COOLDOWN = 0.2  # the candidates' train.cooldown_frac (the config's default, which they keep)
# a trunk's cooldown share: so small that its last step is still at the constant rate (train.cooldown_frac
# must be above 0), which makes a trunk stopped at step k the first k steps of every longer run
NO_COOLDOWN = 1e-9


def trunk_stop(end: int) -> int:
    """The trunk step a branch of `end` steps starts its cooldown from."""
    return round(end * (1 - COOLDOWN))


def _train(data: Path, run: Path, cfg: Any | None, overrides: list[str]) -> dict[str, Any]:
    from seqlab.training.trainer import Trainer

    trainer = Trainer(data, run, cfg, resume=cfg is None, overrides=overrides, progress=False, announce=False)
    try:
        summary = trainer.run()
    finally:
        trainer.close()
    if summary["stopped"] != "reached train.max_steps":  # a signal or a halt: never score a run cut short
        raise SystemExit(f"{run}: {summary['stopped']} at step {summary['steps']}; run the study again to continue")
    return summary


def trunk_to(data: Path, trunk: Path, cfg: Any, stop: int, every: int, threads: int = 1) -> list[dict[str, Any]]:
    """Train (or continue) the trunk at the constant rate to step `stop`; its validations so far."""
    # the threads are said again: a trunk continued keeps its saved config, which may be another session's
    overrides = [f"train.max_steps={stop}", f"train.cooldown_frac={NO_COOLDOWN}", f"train.eval_every={every}",
                 f"train.ckpt_every={every}", f"train.threads={threads}"]
    _train(data, trunk, None if trunk.is_dir() else cfg, overrides)
    return trunk_validations(trunk)


def trunk_validations(run: Path) -> list[dict[str, Any]]:
    """(step, val bits per byte) of every validation in the run's metrics log."""
    out = []
    for line in (run / "metrics.jsonl").read_text().splitlines():
        rec = json.loads(line)
        if "val_bpb" in rec:
            out.append({"step": rec["step"], "val_bpb": round(rec["val_bpb"], 4)})
    return list({r["step"]: r for r in out}.values())


def branch(data: Path, trunk: Path, run: Path, end: int, threads: int = 1) -> dict[str, Any]:
    """Copy the trunk (stopped at trunk_stop(end)) and cool it down to `end`; score it on val and test."""
    shutil.rmtree(run, ignore_errors=True)
    shutil.copytree(trunk, run, ignore=shutil.ignore_patterns(".lock"))
    every = max(1, end - trunk_stop(end))
    summary = _train(data, run, None, [f"train.max_steps={end}", f"train.cooldown_frac={COOLDOWN}",
                                       f"train.eval_every={every}", f"train.ckpt_every={every}",
                                       f"train.threads={threads}"])
    return {"steps": summary["steps"], **scores(data, run)}


def scores(data: Path, run: Path) -> dict[str, float]:
    """The run's bits per byte on the whole val split (what the curve predicts) and test split (the report)."""
    from seqlab.evaluation.report import evaluate_run
    from seqlab.options import EvalOptions

    return {f"{split}_bpb": round(evaluate_run(run, EvalOptions(data=data, split=split, completions=False),
                                               device="cpu")["bpb"], 4) for split in ("val", "test")}


def run_end(data: Path, run: Path) -> tuple[str, str, dict[str, Any]]:
    """A recipe run (`seqlab train DATA --minutes N`) as one more end of its candidate's curve: (candidate,
    precision, end). Its cooldown is the last 20% of its minutes, not of its steps; at a steady step rate that
    is the same run as a branch of its step count, so a run that trained to its clock is a point of the curve
    past the branches' last, measured on the machine the recipe is for."""
    try:
        info = json.loads((run / "run.json").read_text())
        train = json.loads((run / "config.json").read_text())["train"]
    except (OSError, ValueError, KeyError):
        raise SystemExit(f"{run} is not a finished run (no readable run.json and config.json)") from None
    recipe, summary = info.get("recipe") or {}, info.get("summary") or {}
    name = recipe.get("name")
    if name not in CANDIDATES or list(recipe.get("overrides", ())) != list(CANDIDATES[name][1]):
        raise SystemExit(f"{run} was not trained by a candidate recipe as the table now defines it")
    if summary.get("stopped") != "reached train.max_minutes":
        raise SystemExit(f"{run} did not train to its clock ({summary.get('stopped')}); its end is not a curve's")
    if train["schedule"] != "wsd" or train["cooldown_frac"] != COOLDOWN:
        raise SystemExit(f"{run} did not cool down over its last {COOLDOWN:.0%} as the curves' runs do")
    probe = (recipe.get("prediction") or {}).get("probe") or {}
    where = {"run": f"{recipe['minutes']:g}-minute recipe run", "cpu": probe.get("cpu") or cpu_name(),
             "date": time.strftime("%Y-%m-%d", time.gmtime((run / "run.json").stat().st_mtime))}
    return name, info["precision"], {"steps": int(summary["steps"]), **scores(data, run), **where}


def add_end(name: str, precision: str, end: dict[str, Any], table_path: Path = TABLE) -> None:
    """Put `end` into the curve of `name` in the recipe table; the table's curves are of one precision each."""
    table = json.loads(table_path.read_text())
    curve = table.get("curves", {}).get(name)
    if curve is None or curve["precision"] != precision:
        raise SystemExit(f"the table has no {precision} curve of {name} to add this run to")
    if any(e["steps"] == end["steps"] for e in curve["ends"]):
        raise SystemExit(f"the curve of {name} already has a run of {end['steps']} steps")
    curve["ends"] = sorted([*curve["ends"], end], key=lambda e: e["steps"])
    table_path.write_text(json.dumps(table, indent=2) + "\n")


def measure(data: Path, out: Path, name: str, ends: list[int], precision: str, threads: int,
            trunk_eval: int) -> dict[str, Any]:
    """The curve of `name` at `ends` (module doc), continued from OUT/NAME/curve.json when it exists."""
    from seqlab.data.layout import load_meta

    folder = out / name
    path = folder / "curve.json"
    vocab = load_meta(data)["tokenizer"]["vocab_size"]
    machine = "cpu-bf16" if precision == "bf16" else "cpu-fp32"
    cfg = candidate_config(name, machine, vocab, ["train.max_steps=1", f"train.threads={threads}"])
    curve: dict[str, Any] = json.loads(path.read_text()) if path.exists() else {
        "candidate": name, "precision": precision, "params": None, "ends": [], "trunk": [],
        "cooldown_frac": COOLDOWN, "cpu": cpu_name(), "commit": git_commit(), "date": time.strftime("%Y-%m-%d")}
    done = {e["steps"] for e in curve["ends"]}
    folder.mkdir(parents=True, exist_ok=True)
    for end in sorted(set(ends) - done):
        curve["trunk"] = trunk_to(data, folder / "trunk", cfg, trunk_stop(end), trunk_eval, threads)
        result = branch(data, folder / "trunk", folder / f"end-{end}", end, threads)
        shutil.rmtree(folder / f"end-{end}", ignore_errors=True)  # the score is what is kept
        curve["ends"] = sorted([*curve["ends"], result], key=lambda e: e["steps"])
        curve["params"] = curve["params"] or _params(folder / "trunk")
        path.write_text(json.dumps(curve, indent=2) + "\n")
        print(f"{name:10} {end:6} steps  val {result['val_bpb']:.4f}  test {result['test_bpb']:.4f}", flush=True)
    return curve


def _params(run: Path) -> int:
    return int(json.loads((run / "run.json").read_text())["params"])


def install(curve: dict[str, Any], table_path: Path = TABLE) -> None:
    """Put `curve` into the package's recipe table under its candidate (the other candidates' are kept)."""
    table = json.loads(table_path.read_text())
    keep = ("precision", "params", "cooldown_frac", "cpu", "commit", "date", "ends", "trunk")
    table.setdefault("curves", {})[curve["candidate"]] = {k: curve[k] for k in keep}
    table_path.write_text(json.dumps(table, indent=2) + "\n")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m seqlab.studies.recipe_curves", description=__doc__.split("\n")[0])
    ap.add_argument("data_dir", type=Path)
    ap.add_argument("--candidate", choices=sorted(CANDIDATES), help="the candidate whose curve to measure")
    ap.add_argument("--add-run", type=Path, metavar="RUN_DIR",
                    help="instead: add a recipe run trained to its clock to its candidate's curve in the table")
    ap.add_argument("--ends", default="1000,2000,4000,8000,16000",
                    help="the run lengths in steps, comma-separated (default: %(default)s)")
    ap.add_argument("--out", type=Path, default=Path("out/recipe_curves"))
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--precision", choices=("bf16", "fp32"), default="bf16")
    ap.add_argument("--trunk-eval", type=int, default=500, help="steps between the trunk's validations")
    ap.add_argument("--install", action="store_true", help="add the curve to the package's recipe table")
    ap.add_argument("--table", type=Path, default=TABLE, help=argparse.SUPPRESS)  # where --install writes
    return ap.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.add_run is not None:
        name, precision, end = run_end(args.data_dir, args.add_run)
        add_end(name, precision, end, args.table)
        print(f"{name}: added its {end['steps']:,}-step run (val {end['val_bpb']:.4f}, test {end['test_bpb']:.4f}) "
              f"to its curve in {args.table}")
        return 0
    if args.candidate is None:
        raise SystemExit("name the --candidate whose curve to measure, or --add-run a recipe run")
    try:
        ends = sorted({int(e) for e in args.ends.split(",") if e.strip()})
    except ValueError:
        raise SystemExit(f"--ends takes whole step counts separated by commas, not {args.ends!r}") from None
    if not ends or ends[0] * (1 - COOLDOWN) < 1:
        raise SystemExit("--ends needs run lengths of at least 2 steps")
    curve = measure(args.data_dir, args.out, args.candidate, ends, args.precision, args.threads, args.trunk_eval)
    if args.install:
        install(curve, args.table)
        print(f"installed the curve of {args.candidate} in {args.table}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
