"""`seqlab compare`: train several architectures on one prepared corpus under one budget, then report.

    compare(DATA_DIR, OUT, preset="small", models=None, minutes=None, tokens=None, seed=0)

What is trained (model names, matched budget, matched parameter count) is planned in
`seqlab.studies.compare.plan`. Each model is trained by the one trainer (`seqlab.training.trainer.train`)
in its own child process (`seqlab.studies.compare.worker`, so its peak memory is measured alone) into
OUT/runs/<name>, then evaluated in this process by `seqlab.evaluation.report.evaluate_run` (the run's best
checkpoint by the trainer's validation loss) on the whole val split (loss, perplexity, bits per byte) and
the whole test split (the same, plus ExactMatch@1..3 of greedy completions at the threshold that shows a
proposal at one common coverage, 0.5 by default, so models are compared at equal coverage, and ExactMatch@1
and @3 at 10% coverage, with the 95% Wilson interval of EM@1 there).
`seqlab.studies.compare.report` writes report.md,
results.csv, results.json and a self-contained report.html.

Interrupting and re-running: OUT/runs/<name> holding a finished run with the same config, trained on the
same DATA_DIR, is reused, not retrained; an unfinished one (interrupted by Ctrl-C or killed) is resumed
from its last checkpoint; one with a different config is refused with a message (nothing is deleted). So
re-running compare after adding a model trains only the new one. Evaluation is always redone.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from seqlab.config import RunConfig, apply_overrides, get_preset
from seqlab.data.tokenizer import load_tokenizer
from seqlab.errors import UserError
from seqlab.evaluation.report import evaluate_run
from seqlab.options import EvalOptions
from seqlab.studies.compare.plan import Budget, PlannedRun, apply_budget, parse_models, plan_runs
from seqlab.studies.compare.report import format_table, write_report
from seqlab.studies.compare.worker import MEMORY, REQUEST

__all__ = ["compare", "format_table"]

COVERAGE = 0.5  # the completion coverage every model's ExactMatch is read at (em1..em3)
LOW_COVERAGE = 0.1  # ... and the surest tenth of word boundaries (em1_low, em3_low): what a cautious UI shows
EM_WORDS = 3  # ExactMatch@1..3


def _say(progress: bool, text: str) -> None:
    if progress:
        print(text, file=sys.stderr, flush=True)


# ---------------------------------------------------------------- one run: reuse, resume or train


def run_status(run_dir: Path, cfg: RunConfig, data_dir: Path) -> str:
    """'new', 'resume' or 'finished' for RUN_DIR and this config; a different run there is a UserError."""
    if not (run_dir / "trainer_state.pt").exists():
        return "new"
    try:
        saved = json.loads((run_dir / "config.json").read_text())
        saved = RunConfig.from_dict(saved).to_dict()  # a run saved with older fields, read as today's config
        info = json.loads((run_dir / "run.json").read_text())
    except (OSError, ValueError, TypeError, AttributeError):
        saved, info = None, {}
    if saved != cfg.to_dict() or info.get("data_dir") != str(data_dir.resolve()):
        raise UserError(f"{run_dir} holds a run with another config or data folder; delete it or choose "
                        f"another --out")
    summary = info.get("summary")
    finished = summary is not None and not str(summary.get("stopped", "")).startswith("stopped by")
    return "finished" if finished else "resume"


def _train_child(data_dir: Path, run_dir: Path, cfg: RunConfig, resume: bool, progress: bool) -> None:
    """Train in a child process (see seqlab.studies.compare.worker); wait for it even through Ctrl-C."""
    if not resume:
        # a run folder without a checkpoint holds at most the log of a run that never saved: start clean
        (run_dir / "metrics.jsonl").unlink(missing_ok=True)
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / REQUEST).write_text(cfg.to_json())
    (run_dir / MEMORY).unlink(missing_ok=True)
    package_root = str(Path(__file__).resolve().parent.parent)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [package_root, os.environ.get("PYTHONPATH")]))}
    cmd = [sys.executable, "-m", "seqlab.studies.compare.worker", str(data_dir), str(run_dir)]
    cmd += ["--resume"] * resume + ["--quiet"] * (not progress)
    log = None if progress else (run_dir / "train.log").open("a")
    proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=log)
    try:
        code = proc.wait()
    except KeyboardInterrupt:
        # Ctrl-C reached the child too: its trainer finishes the step and saves; wait for that, then stop
        proc.wait()
        raise
    finally:
        if log is not None:
            log.close()
    _check_child(run_dir, code)


def _check_child(run_dir: Path, code: int) -> None:
    try:
        error = json.loads((run_dir / MEMORY).read_text()).get("error")
    except (OSError, json.JSONDecodeError):
        error = None
    if error:
        raise UserError(f"training in {run_dir} failed: {error}")
    if code != 0:
        where = "the output above" if not (run_dir / "train.log").exists() else run_dir / "train.log"
        raise UserError(f"training in {run_dir} failed with exit code {code}; see {where}")
    info = json.loads((run_dir / "run.json").read_text())
    stopped = info.get("summary", {}).get("stopped", "")
    if stopped.startswith("stopped by"):
        raise UserError(f"training in {run_dir} was {stopped}; run compare again to resume it")


# ---------------------------------------------------------------- measuring a trained run


def _curve(run_dir: Path) -> list[list[float]]:
    """[step, elapsed training seconds, val_bpb] of every validation line of metrics.jsonl."""
    points = []
    for line in (run_dir / "metrics.jsonl").read_text().splitlines():
        rec = json.loads(line) if line.strip() else {}
        if "val_bpb" in rec:
            points.append([rec["step"], rec.get("elapsed", 0.0), rec["val_bpb"]])
    return points


def _measure(plan: PlannedRun, run_dir: Path, data_dir: Path, coverage: float, seed: int, reused: bool,
             completion_emails: int) -> tuple[dict[str, Any], dict[str, float]]:
    """The report row of one trained run, and the xz bits per byte of val and test."""
    summary = json.loads((run_dir / "run.json").read_text())["summary"]
    try:
        memory = json.loads((run_dir / MEMORY).read_text())
    except (OSError, json.JSONDecodeError):
        memory = {}
    device = plan.cfg.train.device
    val = evaluate_run(run_dir, EvalOptions(data=data_dir, split="val", completions=False), device, seed=seed)
    # its report reads ExactMatch; `seqlab tradeoff` measures saved characters
    test = evaluate_run(run_dir, EvalOptions(data=data_dir, split="test", coverage=coverage,
                                             completion_emails=completion_emails, coverages=(LOW_COVERAGE,),
                                             saved=False), device, max_words=EM_WORDS, seed=seed)
    at, low = test["at_coverage"], test["by_coverage"][0]
    m = plan.cfg.model
    row: dict[str, Any] = {
        "model": plan.name, "mixer": m.mixer, "pos": m.pos, "n_layer": m.n_layer, "n_embd": m.n_embd,
        "n_head": m.n_head, "params": plan.params, "params_ratio": round(plan.ratio, 4),
        "steps": summary["steps"], "tokens": summary["tokens"], "tokens_per_s": summary["tokens_per_s"],
        "train_s": summary["elapsed_s"], "peak_mem_mb": memory.get("peak_mem_mb"),
        "val_loss": val["loss"], "val_ppl": val["ppl"], "val_bpb": val["bpb"],
        "test_loss": test["loss"], "test_ppl": test["ppl"], "test_bpb": test["bpb"],
        **{f"em{n}": at["exact_match"].get(str(n)) for n in range(1, EM_WORDS + 1)},
        "coverage": at["coverage"], "threshold": at["threshold"],
        "em1_low": low["exact_match"].get("1"), "em3_low": low["exact_match"].get("3"),
        "em1_low_ci95": low["exact_match_ci95"].get("1"), "coverage_low": low["coverage"],
        "positions": at["positions"], "stopped": summary["stopped"],
        "reused": reused, "run_dir": str(run_dir),
    }
    return row, {"val": val["compressor_bpb"]["xz"], "test": test["compressor_bpb"]["xz"]}


# ---------------------------------------------------------------- the comparison


def _base_config(preset: str, overrides: Sequence[str], seed: int, data_dir: Path) -> RunConfig:
    try:
        base = apply_overrides(get_preset(preset), [f"train.seed={seed}", *overrides])
    except ValueError as exc:
        raise UserError(str(exc)) from None
    if not (data_dir / "tokenizer.json").is_file():
        raise UserError(f"{data_dir} is not a prepared data folder (no tokenizer.json); run `seqlab prepare`")
    vocab_size = load_tokenizer(data_dir / "tokenizer.json").vocab_size  # as the trainer sets it
    base = dataclasses.replace(base, model=dataclasses.replace(base.model, vocab_size=vocab_size))
    return base


def _prepare_plans(data_dir: Path, preset: str, models: Sequence[str] | None, minutes: float | None,
                   tokens: int | None, seed: int, overrides: Sequence[str],
                   match_params: bool) -> tuple[list[PlannedRun], Budget]:
    base = _base_config(preset, overrides, seed, data_dir)
    try:
        base, budget = apply_budget(base, minutes=minutes, tokens=tokens, overrides=list(overrides))
    except ValueError as exc:
        raise UserError(str(exc)) from None
    names = parse_models(list(models) if models is not None else None)
    return plan_runs(base, names, match_params=match_params), budget


def compare(data_dir: Path, out: Path, *, preset: str = "small", models: Sequence[str] | None = None,
            minutes: float | None = None, tokens: int | None = None, seed: int = 0, progress: bool = True,
            overrides: Sequence[str] = (), coverage: float = COVERAGE, match_params: bool = True,
            completion_emails: int = 100) -> dict:
    """Train (or reuse) every model under the matched budget, evaluate, write the report; return results.

    The returned dict (also results.json) holds: preset, budget, seed, coverage, reference_params,
    match_params, data_dir, xz {val, test}, rows (one per model, see `_measure`), curves {model: [[step,
    elapsed_s, val_bpb], ...]} and files (the report files written). `overrides` (section.field=value)
    apply to every model before its spec; `completion_emails` test emails are scored for ExactMatch."""
    data_dir, out = Path(data_dir), Path(out)
    if not 0.0 < coverage <= 1.0:
        raise UserError(f"the completion coverage must be in (0, 1], not {coverage}")
    plans, budget = _prepare_plans(data_dir, preset, models, minutes, tokens, seed, overrides, match_params)
    rows, curves, xz = [], {}, {}
    for i, plan in enumerate(plans, 1):
        run_dir = out / "runs" / plan.name
        status = run_status(run_dir, plan.cfg, data_dir)
        action = {"new": "training", "resume": "resuming its training", "finished": "reusing the finished run"}
        _say(progress, f"[{i}/{len(plans)}] {plan.name}: {plan.params:,} parameters ({plan.ratio:.3f} x the "
                       f"reference), {action[status]} in {run_dir}")
        if status != "finished":
            _train_child(data_dir, run_dir, plan.cfg, status == "resume", progress)
        row, xz = _measure(plan, run_dir, data_dir, coverage, seed, status == "finished", completion_emails)
        rows.append(row)
        curves[plan.name] = _curve(run_dir)
    results = {"preset": preset, "budget": {**budget.__dict__, "description": budget.describe()}, "seed": seed,
               "coverage": coverage, "low_coverage": LOW_COVERAGE, "reference_params": plans[0].reference,
               "match_params": match_params,
               "overrides": list(overrides), "data_dir": str(data_dir.resolve()), "xz": xz, "rows": rows,
               "curves": curves}
    results["files"] = [str(p) for p in write_report(out, results)]
    return results
