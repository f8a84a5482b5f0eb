"""Adaptation to one person on real mail: a general model, adapted, against one trained on the person alone.

The held-out people are the mailing-list regulars of SpamAssassin ham with the most mail of their own
(`PEOPLE`; a person is every From address they wrote from, so Matthias Saou's two and Justin Mason's three
addresses count as one writer). One general model is trained on everyone else (`prepare --exclude-sender`
with every held-out address, BPE 1,024 fitted on that rest), so none of them is seen by it. Each person's
mail is prepared alone (`--sender`) with the general run's tokenizer (`--tokenizer-from`) and split by
thread (default 0.5/0.2/0.3: few emails, so the test and val shares are larger than the corpus's 5%).
On each person's test split, at equal budget:

    general      the general model as it is
    adapted      the general model trained further on the person's train split (`train --init`)
    scratch      the same recipe trained on the person's train split alone, for the adaptation's steps
    scratch+     (--scratch-long) the same, for the general's and the adaptation's steps together (under
                 the wsd schedule it follows scratch step for step until scratch's cooldown, so it differs
                 only when a later checkpoint validates better; for Gary Murphy it did not: best step
                 100 of 1,892, the same weights and test bpb as scratch's)
    +phrases     the general and the adapted model with the person's phrase cache (`seqlab phrases` of the
                 train split) blended at decode time; bits per byte stay the model's own

Budgets are steps: those a QUIET N-minute run of the GRU reaches (`equal_time.py`, the anchor of
bench_bpe), so the figures do not depend on the load of the shared cores. A person's runs validate every
`--eval-every` steps and are evaluated at their best validation step: a person's train split is a few
dozen emails (one epoch is a few steps), so a run overfits long before its budget ends, and every arm gets
the same rule. Reported per person and pooled: bits per byte over the test split, ExactMatch@1/@3 at 10%
and 50% coverage with Wilson intervals (pooled: the hits and shown positions of each person's own
threshold, summed), and paired bootstrap intervals over emails (`context_scores.paired_bootstrap`) for
adapted - scratch and adapted - general.

    python benchmarks/bench_person.py [SOURCE] [--out out/bench_person] [--general-minutes 3]
                                      [--adapt-minutes 1] [--adapt-lr 3e-4] [--split 0.5,0.2,0.3]
                                      [--people saou,tom,...] [--scratch-long] [--threads 1]

Writes OUT/data/{rest,PERSON}, OUT/runs/{general,PERSON-adapted,PERSON-scratch,...}, one JSON per
evaluation (OUT/results/), OUT/person.json and OUT/table.md; a finished run or evaluation is not repeated.
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
from pathlib import Path
from typing import Any

from equal_time import REF_TOKENS_PER_S, equal_time_steps, step_rates

# the ham's most frequent senders who write their own mail (rssfeeds@, pudge@perl.org's newsletters and
# the article forwarders rah@ and eugen@ are left out), with every address each wrote from
PEOPLE: dict[str, tuple[str, ...]] = {
    "saou": ("matthias@egwn.net", "matthias@rpmforge.net"),
    "tom": ("tomwhore@slack.net",),
    "murphy": ("garym@canada.com",),
    "mason": ("yyyy@spamassassin.taint.org", "yyyyason@users.sourceforge.net", "yyyy@netnoteinc.com"),
    "garrigues": ("cwg-exmh@deepeddy.com",),
}
BASE = ["train.warmup_steps=30", "train.lr=3e-3"]  # bench_bpe's recipe: the small preset's GRU, short warmup
COVERAGES = (0.1, 0.5)


def seqlab(*args: str) -> None:
    subprocess.run([sys.executable, "-m", "seqlab", *args], check=True)


def prepare_all(source: str, out: Path, people: dict[str, tuple[str, ...]], vocab: int, split: str) -> dict[str, Path]:
    """OUT/data/rest (everyone but `people`, BPE fitted on it) and OUT/data/NAME (one person, rest's tokenizer)."""
    rest = out / "data" / "rest"
    if not (rest / "meta.json").exists():
        excluded = [a for addrs in people.values() for a in addrs]
        seqlab("prepare", source, "--out", str(rest), "--tokenizer", "bpe", "--vocab-size", str(vocab),
               "--workers", "1", "--quiet", *[x for a in excluded for x in ("--exclude-sender", a)])
    datas = {"rest": rest}
    for name, addrs in people.items():
        d = datas[name] = out / "data" / name
        if not (d / "meta.json").exists():
            # split by thread as the recorded results were (--sender alone now splits by date)
            seqlab("prepare", source, "--out", str(d), "--tokenizer-from", str(rest), "--split", split,
                   "--split-by", "thread", "--workers", "1", "--quiet", *[x for a in addrs for x in ("--sender", a)])
    return datas


def recipe(steps: int, eval_every: int, threads: int, vocab: int) -> Any:
    """The small preset's GRU (bench_bpe's recipe) for `steps` steps."""
    from seqlab.config import get_preset
    from seqlab.studies.recipes import apply_recipe

    return apply_recipe(get_preset("small"), "gru", [*BASE, *budget(steps, eval_every, threads),
                                                     f"model.vocab_size={vocab}"])


def budget(steps: int, eval_every: int, threads: int) -> list[str]:
    return [f"train.max_steps={steps}", f"train.eval_every={eval_every}", f"train.ckpt_every={eval_every}",
            f"train.threads={threads}", "train.device=cpu"]


def budgets(out: Path, args: argparse.Namespace, vocab: int) -> dict[str, int]:
    """Steps of a quiet --general-minutes and --adapt-minutes run of the GRU (measured once, kept in OUT)."""
    path = out / "steps.json"
    if path.exists():
        return json.loads(path.read_text())["steps"]
    from seqlab.config import get_preset
    from seqlab.studies.recipes import apply_recipe

    anchor = apply_recipe(get_preset("small"), "attn-rope", [*BASE, "model.vocab_size=259"])  # make demo's, bytes
    rates = step_rates({"anchor": anchor, "gru": recipe(1, 1, args.threads, vocab)}, args.threads)
    steps = {"general": equal_time_steps(rates, args.general_minutes, args.ref_tokens_per_s, "anchor")["gru"],
             "adapt": equal_time_steps(rates, args.adapt_minutes, args.ref_tokens_per_s, "anchor")["gru"]}
    path.write_text(json.dumps({"rates": rates, "steps": steps, "general_minutes": args.general_minutes,
                                "adapt_minutes": args.adapt_minutes, "threads": args.threads}, indent=2) + "\n")
    return steps


def train_once(data: Path, run: Path, cfg: Any, overrides: list[str] = (), init: Path | None = None) -> dict:
    """Train RUN once; a run with a run.json is finished and kept."""
    import shutil

    from seqlab.training.trainer import train

    if (run / "run.json").exists():
        return json.loads((run / "run.json").read_text())
    shutil.rmtree(run, ignore_errors=True)
    summary = train(data, run, cfg, overrides=list(overrides), progress=False, init=init)
    print(f"{run.name:22} {summary['steps']} steps, best val loss {summary['best_val_loss']:.4f} at step "
          f"{summary['best_step']}, {summary['elapsed_s']:.0f} s", flush=True)
    return summary


def evaluate(out: Path, name: str, run: Path, data: Path, positions: int, phrases: bool = False) -> dict:
    """`seqlab eval RUN --data DATA --split test [--phrases]`'s result, kept in OUT/results/NAME.json."""
    from seqlab.evaluation.run import evaluate_run
    from seqlab.generation.phrases import fit_phrases
    from seqlab.runs.load import load_run

    path = out / "results" / f"{name}.json"
    if path.exists():
        return json.loads(path.read_text())
    blend = fit_phrases(data, load_run(run, "cpu")[1]) if phrases else None  # the person's train split
    result = evaluate_run(run, data, "test", device="cpu", completion_emails=10_000,
                          positions_per_email=positions, coverages=COVERAGES, phrases=blend)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=2) + "\n")
    return result


def per_email(run: Path, data: Path) -> Any:
    """Per-email NLL and bytes of RUN's best checkpoint on DATA's test split (for the paired bootstrap)."""
    from seqlab.data.store import TokenStore
    from seqlab.evaluation.context_scores import email_scores
    from seqlab.runs.load import load_run

    model, tok, cfg = load_run(run, "cpu")
    import torch

    return email_scores(model, TokenStore(data, "test"), cfg.model.block_size, 32, torch.device("cpu"), tok)


def person_arms(out: Path, name: str, data: Path, general: Path, steps: dict[str, int],
                args: argparse.Namespace, vocab: int) -> dict[str, Any]:
    """Train the person's runs and evaluate every arm on their test split: {arm: (result, run)}."""
    from seqlab.runs.init import init_config

    runs = out / "runs"
    every = min(args.eval_every, steps["adapt"])
    adapted = runs / f"{name}-adapted"
    train_once(data, adapted, init_config(general), init=general,
               overrides=[*budget(steps["adapt"], every, args.threads), f"train.lr={args.adapt_lr}",
                          "train.warmup_steps=30"])
    scratch = runs / f"{name}-scratch"
    train_once(data, scratch, recipe(steps["adapt"], every, args.threads, vocab))
    arms = {"general": general, "general+phrases": general, "adapted": adapted, "adapted+phrases": adapted,
            "scratch": scratch}
    if args.scratch_long:
        arms["scratch-long"] = runs / f"{name}-scratch-long"
        train_once(data, arms["scratch-long"], recipe(steps["general"] + steps["adapt"], every, args.threads, vocab))
    return {arm: (evaluate(out, f"{name}-{arm}", run, data, args.positions, phrases=arm.endswith("+phrases")), run)
            for arm, run in arms.items()}


def em_at(result: dict[str, Any], coverage: float, n: int) -> tuple[int, int]:
    """(hits, shown positions with >= n words of truth) of ExactMatch@n at the threshold for `coverage`."""
    row = next(r for r in result["by_coverage"] if abs(r["target"] - coverage) < 1e-9)
    shown = row["exact_match_counts"][str(n)]
    return round((row["exact_match"][str(n)] or 0.0) * shown), shown


def _em(hits: int, n: int) -> str:
    from seqlab.evaluation.exact_match import wilson_interval

    ci = wilson_interval(hits, n)
    return "-" if ci is None else f"{100 * hits / n:.0f}% [{100 * ci[0]:.0f}-{100 * ci[1]:.0f}] ({n})"


def _bootstrap(a: Any, b: Any) -> dict[str, float]:
    from seqlab.evaluation.context_scores import paired_bootstrap

    return paired_bootstrap(a, b, samples=4000)


def _concat(scores: list[Any]) -> Any:
    import numpy as np

    from seqlab.evaluation.context_scores import EmailScores

    return EmailScores(*(np.concatenate([getattr(s, f) for s in scores]) for f in ("nll", "tokens", "bytes",
                                                                                   "has_context")))


def report(people: dict[str, dict[str, Any]], steps: dict[str, int], datas: dict[str, Path]) -> tuple[str, dict]:
    """The per-person and pooled tables (markdown) and the JSON summary."""
    arms = list(next(iter(people.values()))["arms"])
    head = ("| person | arm | best step | test bpb | EM@1 10% | EM@3 10% | EM@1 50% | EM@3 50% |\n"
            "|---|---|---:|---:|---|---|---|---|")
    lines, summary = [head], {"steps": steps, "people": {}, "pooled": {}}
    for name, p in people.items():
        meta = json.loads((datas[name] / "meta.json").read_text())["splits"]
        summary["people"][name] = {"splits": meta, "arms": {}, "bootstrap": p["bootstrap"]}
        for arm, (result, run) in p["arms"].items():
            best = json.loads((Path(run) / "run.json").read_text())["summary"]["best_step"]
            ems = [em_at(result, c, n) for c in COVERAGES for n in (1, 3)]
            summary["people"][name]["arms"][arm] = {"bpb": result["bpb"], "best_step": best, "run": str(run),
                                                    "em_hits_shown": ems}
            lines.append(f"| {name} ({meta['test']['emails']} emails, {meta['test']['bytes']:,} B) | {arm} | "
                         f"{best} | {result['bpb']:.3f} | " + " | ".join(_em(*e) for e in ems) + " |")
    lines += ["", "Pooled over the people (bits per byte over all their test bytes; ExactMatch: each person's "
              "own threshold, hits and shown positions summed):", "", head]
    for arm in arms:
        rows = [s["arms"][arm] for s in summary["people"].values()]
        ems = [tuple(map(sum, zip(*(r["em_hits_shown"][i] for r in rows)))) for i in range(4)]
        own = arm.split("+")[0]  # the model's own scores: phrases change no bits per byte
        nll = sum(people[n]["scores"][own].nll.sum() for n in people) / math.log(2)
        nbytes = sum(int(people[n]["scores"][own].bytes.sum()) for n in people)
        summary["pooled"][arm] = {"bpb": nll / nbytes, "em_hits_shown": ems}
        lines.append(f"| all | {arm} | | {nll / nbytes:.3f} | " + " | ".join(_em(*e) for e in ems) + " |")
    lines += ["", "Paired bootstrap over test emails (95%, 4,000 resamples), difference in bits per byte:", ""]
    pooled = {arm: _concat([people[n]["scores"][arm] for n in people]) for arm in ("general", "adapted", "scratch")}
    summary["pooled"]["bootstrap"] = {f"adapted-{b}": _bootstrap(pooled["adapted"], pooled[b])
                                      for b in ("scratch", "general")}
    for name, boot in [*((n, p["bootstrap"]) for n, p in people.items()), ("all", summary["pooled"]["bootstrap"])]:
        lines.append(f"- {name}: " + "; ".join(f"{k} {v['diff']:+.3f} [{v['low']:+.3f}, {v['high']:+.3f}] "
                                                f"over {v['emails']} emails" for k, v in boot.items()))
    return "\n".join(lines) + "\n", summary


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("source", nargs="?", default="spamassassin", help="mail for `seqlab prepare`")
    ap.add_argument("--out", default="out/bench_person")
    ap.add_argument("--people", default=",".join(PEOPLE), help=f"held-out people, of {', '.join(PEOPLE)}")
    ap.add_argument("--split", default="0.5,0.2,0.3", help="train,val,test fractions of a person's mail")
    ap.add_argument("--vocab", type=int, default=1024, help="BPE vocabulary fitted on the rest")
    ap.add_argument("--general-minutes", type=float, default=3.0, help="quiet minutes of the general model")
    ap.add_argument("--adapt-minutes", type=float, default=1.0, help="quiet minutes of adaptation and scratch")
    ap.add_argument("--adapt-lr", type=float, default=3e-4, help="peak learning rate of the adaptation")
    ap.add_argument("--eval-every", type=int, default=25, help="validation interval of a person's runs")
    ap.add_argument("--positions", type=int, default=20, help="word boundaries scored per test email")
    ap.add_argument("--scratch-long", action="store_true", help="also scratch for general + adaptation steps")
    ap.add_argument("--ref-tokens-per-s", type=float, default=REF_TOKENS_PER_S)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    out = Path(args.out)
    names = [n.strip() for n in args.people.split(",") if n.strip()]
    if unknown := [n for n in names if n not in PEOPLE]:
        raise SystemExit(f"unknown person {', '.join(unknown)}; choose from {', '.join(PEOPLE)}")
    people = {n: PEOPLE[n] for n in names}
    datas = prepare_all(args.source, out, people, args.vocab, args.split)
    from seqlab.data.tokenizer import load_tokenizer

    vocab = load_tokenizer(datas["rest"] / "tokenizer.json").vocab_size
    steps = budgets(out, args, vocab)
    print(f"steps of a quiet run: general {steps['general']}, adaptation {steps['adapt']}", flush=True)
    general = out / "runs" / "general"
    train_once(datas["rest"], general, recipe(steps["general"], steps["general"], args.threads, vocab))
    evaluate(out, "general-rest", general, datas["rest"], 5)  # the general model on everyone else's test split
    results = {}
    for name in people:
        arms = person_arms(out, name, datas[name], general, steps, args, vocab)
        # bits per byte with phrases are the model's own: the arm without them is scored once
        scores = {arm: per_email(run, datas[name]) for arm, (_, run) in arms.items() if "+" not in arm}
        results[name] = {"arms": arms, "scores": scores,
                         "bootstrap": {f"adapted-{b}": _bootstrap(scores["adapted"], scores[b])
                                       for b in ("scratch", "general")}}
    text, summary = report(results, steps, datas)
    rest = json.loads((out / "results" / "general-rest.json").read_text())
    text = (f"GRU, small preset, BPE {vocab} fitted on the rest; general {steps['general']} steps (a quiet "
            f"{args.general_minutes:g} minutes), adaptation (lr {args.adapt_lr:g}) and scratch {steps['adapt']} "
            f"steps (a quiet {args.adapt_minutes:g}); person split {args.split}; the general model's test bpb on "
            f"the rest's test split: {rest['bpb']:.3f}.\n\n" + text)
    summary["general_rest_test_bpb"] = rest["bpb"]
    (out / "person.json").write_text(json.dumps(summary, indent=2) + "\n")
    (out / "table.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
