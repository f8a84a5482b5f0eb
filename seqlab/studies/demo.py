"""`seqlab demo` (and `make demo`): the whole path on real mail in about ten minutes on 2 CPU cores.

Prepare the SpamAssassin ham corpus (BPE with 1,024 tokens fitted on its train split), train the recipe table's
choice for this machine (what `seqlab train DATA --minutes N` picks) and a small multi-head RoPE attention model
for a few minutes each, evaluate both on the test split beside xz
(ExactMatch at 10% and 50% coverage), calibrate each run's suggestion threshold for 50% coverage on the
validation split (`seqlab calibrate`, so `seqlab serve` uses it), and print one table, a few completions and
the command that serves the better model. A completion is printed only when its confidence reaches the run's
calibrated threshold (else "withheld"), so what the demo shows is what a writer would see. Everything goes
under one output folder:

    OUT/data/              DATA_DIR (reused when it already holds the same corpus and tokenizer)
    OUT/runs/recipe/       RUN_DIR of the recipe table's choice for this machine (`seqlab train --minutes`)
    OUT/runs/attention/    RUN_DIR of the attention model
    OUT/demo.md            the table and the completions, as printed
    OUT/demo.json          the same numbers, machine-readable
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from seqlab.config import get_preset
from seqlab.data.prepare.meta_report import format_report
from seqlab.data.prepare.options import PrepareConfig
from seqlab.data.prepare.pipeline import prepare
from seqlab.data.store import load_meta
from seqlab.evaluation.calibration import calibrate_run, load_calibration
from seqlab.evaluation.report import evaluate_run
from seqlab.generation.complete import complete
from seqlab.generation.gate import FIRST_WORD
from seqlab.options import CalibrateOptions, EvalOptions
from seqlab.printed_command import printed_command
from seqlab.runs.load import load_run
from seqlab.studies.recipes import apply_recipe
from seqlab.training.curve_choice import recipe_here
from seqlab.training.recipe_table import PRECISION, minute_budget, recipe_config
from seqlab.training.trainer import train

# run name (the folder under OUT/runs and the table's model column) -> (recipe, overrides on top of it);
# None: the recipe table's choice for the demo's minutes on this machine, as `seqlab train DATA --minutes N`
MODELS: dict[str, tuple[str, tuple[str, ...]] | None] = {
    "recipe": None,
    # Attention beside it: it sees only its window, while a recurrent model carries its state across chunks
    # of a whole email. A 256-byte window was tried and scored worse at a demo's budget, at equal tokens and
    # even at equal steps (`python -m seqlab.studies.recipe_study --only window,window_same_steps`; the
    # experiments index).
    "attention": ("attn-rope", ("model.n_head=4",)),
}
# validation and checkpoints a little more often than the presets' 250 steps, so a few minutes keep a few
EVAL = ("train.eval_every=200", "train.ckpt_every=200")
# BPE fitted on the train split: a token covers a few bytes of this mail and costs a little more than a
# byte (a larger embedding and output layer), so a model reads more text in its minutes, and both families
# scored better than on bytes at equal quiet time (`python -m seqlab.studies.tokenizer_study --vocabs
# byte,1024 --minutes 3`; the experiments index).
TOKENIZER, VOCAB_SIZE = "bpe", 1024
OPENINGS = ("Hi all,\n\nI think we should", "Thanks for the", "Could you send me the", "The problem is that")
COVERAGE = 0.5  # the share of positions with a proposal the server is calibrated for; ExactMatch is read here
LOW_COVERAGE = 0.1  # ... and at the surest tenth of positions
# 3 word boundaries in each of 200 test emails: 600 positions, few enough for a demo's budget (`seqlab eval`
# defaults to 5 per email); at 10% coverage that is 60 shown, a 95% interval of about +-12 points.
COMPLETION_EMAILS, POSITIONS_PER_EMAIL = 200, 3


def _prepare(source: str, data: Path, progress: bool) -> dict:
    if (data / "meta.json").exists():
        meta = load_meta(data)
        tok = meta.get("tokenizer", {})
        if meta.get("source") == source and (tok.get("kind"), tok.get("vocab_size")) == (TOKENIZER, VOCAB_SIZE):
            print(f"reusing prepared corpus in {data}")
            return meta
    meta = prepare(PrepareConfig(source, tokenizer=TOKENIZER, vocab_size=VOCAB_SIZE, seed=0), data, progress=progress)
    print(format_report(meta))
    return meta


def _train(name: str, data: Path, run: Path, minutes: float, progress: bool) -> dict[str, Any]:
    if MODELS[name] is None:
        choice = recipe_here(data, minutes, [])
        cfg, recipe = recipe_config(choice, PRECISION[choice.machine], list(EVAL)), choice.as_dict()
        print(f"\n{choice.why}")
    else:
        mixer, overrides = MODELS[name]
        cfg, recipe = apply_recipe(get_preset("small"), mixer, [*overrides, *minute_budget(minutes), *EVAL]), None
    if run.exists():
        shutil.rmtree(run)  # a demo run starts fresh; `seqlab train --resume` is for continuing
    print(f"\ntraining {name} for {minutes:g} minutes ...")
    return train(data, run, cfg, progress=progress, recipe=recipe)


def table_row(name: str, summary: dict, val: dict, test: dict) -> dict[str, Any]:
    at = {round(r["target"], 6): r for r in test.get("by_coverage", [])}
    low, mid = at.get(LOW_COVERAGE, {}), at.get(COVERAGE, {})
    return {"model": name, "params": summary["params"], "tokens_per_s": summary["tokens_per_s"],
            "steps": summary["steps"], "val_bpb": val["bpb"], "test_bpb": test["bpb"], "test_ppl": test["ppl"],
            "xz_bpb": test["compressor_bpb"]["xz"], "em1_10": low.get("exact_match", {}).get("1"),
            "em3_10": low.get("exact_match", {}).get("3"), "em1": mid.get("exact_match", {}).get("1"),
            "em3": mid.get("exact_match", {}).get("3"), "coverage": mid.get("coverage"),
            "positions": test.get("completion_positions")}


def format_table(rows: list[dict[str, Any]]) -> str:
    def pct(x: float | None) -> str:
        return "    -" if x is None else f"{100 * x:5.1f}%"

    head = (f"{'model':<10} {'params':>8} {'tok/s':>7} {'steps':>6} {'val bpb':>8} {'test bpb':>9} "
            f"{'test ppl':>9} {'xz bpb':>7} {'EM@1 10%':>8} {'EM@3 10%':>8} {'EM@1 50%':>8} {'EM@3 50%':>8}")
    lines = [head, "-" * len(head)]
    for r in rows:
        lines.append(f"{r['model']:<10} {r['params']:>8,} {r['tokens_per_s']:>7.0f} {r['steps']:>6} "
                     f"{r['val_bpb']:>8.3f} "
                     f"{r['test_bpb']:>9.3f} {r['test_ppl']:>9.2f} {r['xz_bpb']:>7.3f} {pct(r.get('em1_10')):>8} "
                     f"{pct(r.get('em3_10')):>8} {pct(r['em1']):>8} {pct(r['em3']):>8}")
    return "\n".join(lines)


def sample_completions(run: Path) -> list[dict[str, Any]]:
    """Three suggestions per opening: greedy, beam search (3 beams) and a seeded sample, each shown only when
    its confidence reaches the run's calibrated threshold (calibration.json) and cut after its last word
    still sure enough as a phrase, as the server does (`complete(..., threshold=...)`)."""
    model, tok, _ = load_run(run)
    calibration = load_calibration(run)
    threshold = calibration["threshold"] if calibration else 0.0
    # the rule the threshold was chosen for: a coverage calibration gates the first word's probability
    rule = calibration.get("rule", FIRST_WORD) if calibration else FIRST_WORD
    out = []
    for prompt in OPENINGS:
        for how, kwargs in (("greedy", {}), ("beam 3", {"beam": 3}),
                            ("sample", {"temperature": 0.8, "top_p": 0.9, "seed": 0})):
            c = complete(model, tok, prompt, max_words=6, threshold=threshold, rule=rule, **kwargs)
            out.append({"prompt": prompt, "how": how, "completion": c.text, "confidence": round(c.confidence, 3),
                        "shown": bool(c.text), "threshold": round(threshold, 4),
                        # withheld because unsure, or because no whole word came (from the unrounded value)
                        "unsure": not c.text and 0.0 < c.confidence < threshold})
    return out


def describe_completion(c: dict[str, Any]) -> str:
    if c["shown"]:
        said = repr(c["completion"])
    elif c["unsure"]:
        said = f"(withheld: confidence {c['confidence']:.3g} < threshold {c['threshold']:.3g})"
    else:
        said = "(withheld: no whole word to suggest)"
    return f"  {c['how']:<7} {c['prompt']!r} -> {said}"


def demo(out: Path, *, source: str = "spamassassin", minutes: float = 3.5, progress: bool = True) -> dict[str, Any]:
    """Run the demo into `out`; return the table rows and completions (also written to demo.json)."""
    out = Path(out)
    data = out / "data"
    _prepare(source, data, progress)
    rows, completions = [], {}
    for name in MODELS:
        run = out / "runs" / name
        summary = _train(name, data, run, minutes, progress)
        val = evaluate_run(run, EvalOptions(data=data, split="val", completions=False))
        test = evaluate_run(run, EvalOptions(data=data, split="test", coverages=(LOW_COVERAGE, COVERAGE),
                                             completion_emails=COMPLETION_EMAILS,
                                             positions_per_email=POSITIONS_PER_EMAIL, saved=False))  # ExactMatch
        rows.append(table_row(name, summary, val, test))
        calibrate_run(run, CalibrateOptions(data=data, split="val", coverage=COVERAGE, emails=100))
        completions[name] = sample_completions(run)
    positions = min(r["positions"] or 0 for r in rows)
    report = [format_table(rows), "",
              f"bits per byte on the test split (lower is better); ExactMatch@N among the suggestions shown at "
              f"the threshold giving {LOW_COVERAGE:.0%} and {COVERAGE:.0%} coverage of {positions} word "
              f"boundaries (`seqlab eval` gives the 95% intervals)."]
    for name, items in completions.items():
        report += ["", f"completions by {name}, shown at its calibrated threshold ({COVERAGE:.0%} coverage):"]
        report += [describe_completion(c) for c in items]
    text = "\n".join(report)
    print("\n" + text)
    (out / "demo.md").write_text("```\n" + text + "\n```\n")
    result = {"rows": rows, "completions": completions}
    (out / "demo.json").write_text(json.dumps(result, indent=2) + "\n")
    best = min(rows, key=lambda r: r["test_bpb"])["model"]
    print(f"\neverything is under {out.resolve()}")
    print(f"write an email with the better model (suggestions as you type, Tab accepts):\n"
          f"  {printed_command('serve', out / 'runs' / best)}    # then open the link it prints (it works once; "
          "each use prints the next)")
    return result
