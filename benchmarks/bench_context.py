"""What reading the message being answered is worth: one model family without a context and with it.

For each corpus (prepared DATA_DIRs given with --data NAME=DIR, e.g. the synthetic corpus and the
SpamAssassin ham), the same model (the family and size given by the overrides, attention by default)
is trained without a context ("plain") and once per --modes entry, the `model.context` it reads:
`cross` (a cross-attention in every block) or, for a recurrent family,
`init_state` (each recurrent layer starts an email from a state projected from the pooled context), or
`pointer` (only a copy head reads it: models/copy.py, See et al. 2017's pointer-generator). `MODE+copy`
adds the copy head to cross or init_state; `MODE+embed` sets model.ctx_layers=0, so the context's rows are
its token embeddings and positions with no encoder layer (`pointer+embed`: the cheapest copy model).
Every run gets the same wall-clock budget (`train.max_minutes`); with --equal-steps each context model
is also trained for the steps the plain model reached (equal work, not equal time). All are scored on
every target of the test split, per email (`seqlab.evaluation.context_scores.email_scores`), and
compared with the plain model on the same emails:

- bits per byte on the replies (emails with a context) and on the rest, each model;
- the difference (context - plain) on the replies with a 95% paired bootstrap interval over emails, and
  the same on the emails without a context (a gain there is not the context's: more parameters, the
  token embedding also trained through the encoder);
- each context model on the replies fed no context, and the difference (with - without) with its
  interval: what reading the context itself is worth;
- ExactMatch@1..3 at every sampled word boundary (no threshold) of up to --em-emails replies, each model
  reading what it can (a context model its email's context);
- with --examples N, for every context model: at those same boundaries, the count of first words right
  only with the context and only without it, against the plain model and against itself fed no context;
  the same at "copyable" boundaries (up to 6 per reply whose next word, 3+ characters, occurs in the
  original: where copying could be right), with the first words right there by each; and N of the
  suggestions the context made right (the original around the word, the reply so far, both proposals;
  those against itself at copyable boundaries first, since only they are the context's doing);
- with --greetings, the name after "Hi "/"Hey "/... in each reply, which in the synthetic corpus is the
  original's signer: completed right by each model, with and without its context.

Given `train.max_steps=N` among the overrides, every run trains N steps (no time budget: equal work).

Equal QUIET time (`--quiet-minutes N`): on shared cores a wall-clock budget measures the load, not the
model, so each run trains the steps a quiet N-minute run of its model reaches, by the step-equivalence
method of `bench_recipe.py` (`equal_time.py`'s `step_rates` and `equal_time_steps`, reused): the plain and the
context models' training steps are timed interleaved in this process beside bench_recipe's reference
("attn"), and their speed relative to it is anchored at the reference's quiet tokens/s. The context
models are timed with a full context in every row (ctx_block_size tokens), an upper bound on what a
batch of the corpus costs them. The rates and step counts are kept in OUT/quiet-rates.json.

Conditions are printed with the result: steps and tokens each run reached in its budget (the cores are
shared, so equal time is not equal work; the context model also spends time encoding contexts).

    python benchmarks/bench_context.py --data synth=out/data-synth --data sa=out/data-sa --out out/bench_context \\
        [--minutes 3 | --quiet-minutes 3] [--em-emails 40] [--modes cross,init_state] [--equal-steps] \\
        [--examples 3] [--greetings] [--modes pointer+embed,pointer,cross+copy] [model.mixer=gru model.pos=none ...]
"""

from __future__ import annotations

import argparse
import json
import random
import re
import sys
from pathlib import Path
from typing import Any

import numpy as np
import torch

from seqlab.config import CTX_MODES, apply_overrides, get_preset
from seqlab.data.store import TokenStore
from seqlab.evaluation.compressors import split_texts
from seqlab.evaluation.context_scores import EmailScores, email_scores, paired_bootstrap
from seqlab.evaluation.exact_match import Proposal, collect_proposals, score_proposals, word_boundaries
from seqlab.generation.complete import complete, split_words
from seqlab.models.context_encoder import ContextBatch
from seqlab.runs.load import load_run
from seqlab.training.trainer import train

BASE = ["model.n_layer=2", "model.n_embd=64", "model.n_head=4", "model.block_size=64", "model.ctx_block_size=128",
        "train.batch_size=16", "train.max_steps=100000", "train.eval_every=100", "train.ckpt_every=100000",
        "train.log_every=50", "train.threads=1"]
MAX_WORDS, PER_EMAIL = 3, 3  # ExactMatch@1..3 at 3 sampled word boundaries per reply


def _config(extra: list[str]) -> Any:
    return apply_overrides(get_preset("tiny"), [*BASE, *extra])


def quiet_steps(out: Path, minutes: float, ref_tokens_per_s: float, configs: dict[str, Any]) -> dict[str, int]:
    """The steps a quiet `minutes` run of each config reaches (`equal_time.equal_time_steps`), from step
    rates measured interleaved with bench_recipe's reference (module docstring); kept in OUT so that a
    continued benchmark keeps its step counts."""
    from bench_recipe import REF, _config
    from equal_time import equal_time_steps, step_rates

    path = out / "quiet-rates.json"
    rates = json.loads(path.read_text())["rates"] if path.exists() else step_rates(
        {REF: _config("attn-rope", (), 1, 1), **configs}, threads=1)
    steps = equal_time_steps(rates, minutes, ref_tokens_per_s, REF)
    out.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"minutes": minutes, "ref_tokens_per_s": ref_tokens_per_s, "threads": 1,
                                "rates": rates, "steps": steps}, indent=2) + "\n")
    for name, r in rates.items():
        print(f"{name:12} {r['steps_per_s']:.3f} steps/s here, {steps[name]} steps for a quiet {minutes:g} minutes",
              flush=True)
    return {name: n for name, n in steps.items() if name != REF}


def _train(data: Path, run: Path, minutes: float, extra: list[str]) -> dict:
    if (run / "run.json").exists() and "summary" in json.loads((run / "run.json").read_text()):
        return json.loads((run / "run.json").read_text())["summary"]
    budget = [] if any(e.startswith("train.max_steps=") for e in extra) else [f"train.max_minutes={minutes}"]
    return train(data, run, _config([*budget, *extra]), progress=False)


COPY_FLAGS = ("copy", "embed")  # MODE+copy: a copy head too; MODE+embed: no encoder layer (ctx_layers=0)


def mode_overrides(mode: str) -> list[str]:
    """A --modes entry as overrides: the model.context, then `+copy` (a copy head, models/copy.py; implied by
    `pointer`, where it alone reads the context) and `+embed` (the context's rows are its embeddings and
    positions, no encoder layer: the cheap keys)."""
    base, *flags = mode.split("+")
    copy = "+copy" if base != "pointer" and "copy" in flags else ""
    over = [f"model.context={base}{copy}"]
    if "embed" in flags:
        over.append("model.ctx_layers=0")
    return over


def valid_mode(mode: str) -> bool:
    base, *flags = mode.split("+")
    return base in CTX_MODES and set(flags) <= set(COPY_FLAGS)


def _proposals(run: Path, store: TokenStore, emails: np.ndarray, seed: int, use_context: bool = True
               ) -> tuple[list[Proposal], list[str]]:
    """Greedy proposals at the sampled word boundaries of `emails`, and the texts they were made in."""
    model, tok, cfg = load_run(run, "cpu")
    texts = split_texts(store, tok, emails)
    contexts = None
    if cfg.model.reads_context and use_context:
        assert store.contexts is not None
        contexts = [ContextBatch.from_lists([store.contexts.context(int(i), cfg.model.ctx_block_size).tolist()])
                    for i in emails]

    def propose(prefix: str, context: Any = None) -> Any:
        return complete(model, tok, prefix, max_words=MAX_WORDS, temperature=0.0, context=context)

    return collect_proposals(texts, propose, max_words=MAX_WORDS, positions_per_email=PER_EMAIL, seed=seed,
                             contexts=contexts), texts


COPYABLE_PER_EMAIL = 6  # word boundaries per reply whose next word the original holds, for --examples
_PUNCT = ".,;:!?()[]<>\"'"


def _bare(word: str) -> str:
    return word.strip(_PUNCT)


def copyable_positions(texts: list[str], originals: list[str], per_email: int, seed: int) -> list[tuple[int, int]]:
    """(email, offset) word boundaries whose next word (3+ characters, punctuation stripped) occurs in the
    email's original: where a copy could be right. Up to `per_email` per reply, drawn with `seed`."""
    rng = random.Random(seed)
    picked: list[tuple[int, int]] = []
    for e, (text, original) in enumerate(zip(texts, originals)):
        held = {_bare(w) for w in split_words(original)}
        bounds = [i for i in word_boundaries(text)
                  if (w := split_words(text[i:].split("\n", 1)[0])[:1]) and len(_bare(w[0])) >= 3
                  and _bare(w[0]) in held]
        picked += [(e, i) for i in sorted(rng.sample(bounds, min(per_email, len(bounds))))]
    return picked


def _proposals_at(run: Path, store: TokenStore, emails: np.ndarray, texts: list[str],
                  positions: list[tuple[int, int]], use_context: bool = True) -> list[Proposal]:
    """Greedy proposals at given (email, offset) boundaries of `texts` (the texts of `emails`)."""
    model, tok, cfg = load_run(run, "cpu")
    out = []
    for e, i in positions:
        ctx = None
        if cfg.model.reads_context and use_context:
            assert store.contexts is not None
            ctx = ContextBatch.from_lists([store.contexts.context(int(emails[e]), cfg.model.ctx_block_size).tolist()])
        c = complete(model, tok, texts[e][:i], max_words=MAX_WORDS, temperature=0.0, context=ctx)
        truth = split_words(texts[e][i:].split("\n", 1)[0])[:MAX_WORDS]
        out.append(Proposal(e, i, truth, c.words[:MAX_WORDS], c.confidence if c.words else 0.0,
                            c.word_confidences[:MAX_WORDS]))
    return out


def _excerpt(original: str, word: str, width: int = 160) -> str:
    """The part of the original around the first occurrence of `word` (its end when absent)."""
    at = original.find(_bare(word)) if word and _bare(word) else -1
    if at < 0:
        return original[-width:]
    lo = max(0, at - width // 2)
    return original[lo:lo + width]


def _first_right(p: Proposal) -> bool:
    return bool(p.truth) and p.words[:1] == p.truth[:1]


def _made_right(with_ctx: list[Proposal], without: list[Proposal], texts: list[str], originals: list[str],
                n: int) -> dict:
    """Boundaries whose first word is right only with the context / only without; n examples of the first."""
    only_with = [(a, b) for a, b in zip(with_ctx, without) if _first_right(a) and not _first_right(b)]
    only_without = sum(1 for a, b in zip(with_ctx, without) if _first_right(b) and not _first_right(a))
    examples = [{"context_end": originals[a.email][-160:],
                 "context_excerpt": _excerpt(originals[a.email], a.truth[0] if a.truth else ""),
                 "reply_so_far": texts[a.email][max(0, a.offset - 100):a.offset], "truth": a.truth,
                 "with_context": a.words, "without_context": b.words} for a, b in only_with[:n]]
    return {"boundaries": len(with_ctx), "right_only_with_context": len(only_with),
            "right_only_without_context": only_without, "examples": examples}


GREETING = re.compile(r"\n\n(?:Hi|Hey|Hello|Dear|Good morning|Morning) ([A-Z][a-z]+)")


def greeting_names(runs: dict[str, Path], store: TokenStore) -> dict:
    """The synthetic corpus's replies greet the original's sender, whose name signs the original: after
    "Hey " the context holds the answer. Per model (a context model with and without its context): the
    greeting names completed right, and those right only with the context / only without."""
    assert store.contexts is not None
    items: list[tuple[int, str, str]] = []
    out: dict[str, Any] = {}
    for kind, run in runs.items():
        model, tok, cfg = load_run(run, "cpu")
        if not items:
            for i in np.flatnonzero(store.contexts.lengths > 0):
                text = tok.decode(np.asarray(store.tokens[store.starts[i]:store.ends[i]]).tolist())
                if m := GREETING.search(text):
                    items.append((int(i), text[:m.start(1)], m.group(1)))
        got = {}
        for use in (False, True) if cfg.model.reads_context else (False,):
            words = []
            for i, prefix, _ in items:
                ctx = (ContextBatch.from_lists([store.contexts.context(i, cfg.model.ctx_block_size).tolist()])
                       if use else None)
                w = complete(model, tok, prefix, max_words=1, temperature=0.0, context=ctx).words
                words.append(w[0].rstrip(",") if w else "")
            got[use] = [a == t for a, (_, _, t) in zip(words, items)]
        out[kind] = {"right": sum(got.get(True, got[False])), "right_without_context": sum(got[False])}
        if True in got:
            out[kind]["right_only_with_context"] = sum(a and not b for a, b in zip(got[True], got[False]))
            out[kind]["right_only_without_context"] = sum(b and not a for a, b in zip(got[True], got[False]))
    return {"greetings": len(items), **out}


def _scores(run: Path, store: TokenStore, use_context: bool = True) -> EmailScores:
    model, tok, cfg = load_run(run, "cpu")
    return email_scores(model, store, cfg.model.block_size, 32, torch.device("cpu"), tok, use_context)


def measure(name: str, data: Path, out: Path, minutes: float, em_emails: int, extra: list[str],
            equal_steps: bool = False, modes: tuple[str, ...] = ("cross",), examples: int = 0,
            greetings: bool = False, steps: dict[str, int] | None = None) -> dict:
    """Train, score and compare one corpus's runs (module docstring); `steps` (kind -> steps): equal
    quiet time, each run trains its own count."""
    def budget(kind: str) -> list[str]:
        return [f"train.max_steps={steps[kind]}"] if steps else []

    runs = {"plain": out / f"{name}-plain"}
    summaries = {"plain": _train(data, runs["plain"], minutes, [*extra, *budget("plain")])}
    for mode in modes:
        over = [*mode_overrides(mode), *extra]
        runs[mode] = out / f"{name}-{mode}"
        summaries[mode] = _train(data, runs[mode], minutes, [*over, *budget(mode)])
        if equal_steps:  # the plain model's steps, no time budget
            runs[f"{mode}@steps"] = out / f"{name}-{mode}-steps"
            summaries[f"{mode}@steps"] = _train(data, runs[f"{mode}@steps"], minutes,
                                                [*over, f"train.max_steps={summaries['plain']['steps']}"])
    store = TokenStore(data, "test")
    scores = {kind: _scores(run, store) for kind, run in runs.items()}
    has = scores["plain"].has_context
    steps_given = any(e.startswith("train.max_steps=") for e in extra)  # then every run has the same steps
    kind_of_budget = "quiet time" if steps else "steps" if steps_given else "time"
    result: dict[str, Any] = {
        "corpus": name, "data": str(data), "test_emails": int(store.num_emails), "replies": int(has.sum()),
        "extra": extra, "minutes": None if steps_given else minutes, "budget": kind_of_budget,
        "variants": [k for k in runs if k != "plain"],
        "train": {k: {key: s[key] for key in ("steps", "tokens", "elapsed_s", "params")} for k, s in summaries.items()}}
    for kind, s in scores.items():
        result[kind] = {"bpb_replies": s.bpb(has), "bpb_others": s.bpb(~has), "bpb_all": s.bpb()}
        if kind != "plain":
            result[kind]["diff_replies"] = paired_bootstrap(s, scores["plain"], has, samples=4000)
            result[kind]["diff_others"] = paired_bootstrap(s, scores["plain"], ~has, samples=4000)
            # the same model fed no context: what reading the context itself is worth on the replies
            blind = _scores(runs[kind], store, use_context=False)
            result[kind]["bpb_replies_without_context"] = blind.bpb(has)
            result[kind]["diff_own_replies"] = paired_bootstrap(s, blind, has, samples=4000)
    replies = np.flatnonzero(has)
    picked = np.sort(np.random.default_rng([7]).choice(replies, size=min(em_emails, len(replies)), replace=False))
    proposals = {kind: _proposals(run, store, picked, seed=3) for kind, run in runs.items()}
    for kind, (props, _) in proposals.items():
        q = score_proposals(props, 0.0, MAX_WORDS)
        result[kind]["exact_match"] = {"exact_match": q["exact_match"], "counts": q["exact_match_counts"],
                                       "positions": len(props)}
    if examples and len(runs) > 1:
        assert store.contexts is not None
        _, tok, _ = load_run(runs["plain"], "cpu")
        originals = [tok.decode(store.contexts.context(int(i), 10**9).tolist()) for i in picked]
        texts = proposals["plain"][1]
        copyable = copyable_positions(texts, originals, COPYABLE_PER_EMAIL, seed=5)
        plain_copyable = _proposals_at(runs["plain"], store, picked, texts, copyable)
        result["copyable_boundaries"] = len(copyable)
        result["made_right"] = {}
        for kind in (k for k in runs if k != "plain"):
            ctx_props, plain_props = proposals[kind][0], proposals["plain"][0]
            blind, _ = _proposals(runs[kind], store, picked, seed=3, use_context=False)
            at_copy = _proposals_at(runs[kind], store, picked, texts, copyable)
            at_copy_blind = _proposals_at(runs[kind], store, picked, texts, copyable, use_context=False)
            result["made_right"][kind] = {
                "against_plain": _made_right(ctx_props, plain_props, texts, originals, examples),
                "against_itself_without": _made_right(ctx_props, blind, texts, originals, examples),
                "copyable_against_plain": _made_right(at_copy, plain_copyable, texts, originals, examples),
                "copyable_against_itself_without": _made_right(at_copy, at_copy_blind, texts, originals, examples),
                "copyable_first_word_right": {"with_context": sum(map(_first_right, at_copy)),
                                              "without_context": sum(map(_first_right, at_copy_blind)),
                                              "plain": sum(map(_first_right, plain_copyable))}}
    if greetings:
        result["greeting_names"] = greeting_names(runs, store)
    return result


def _table(results: list[dict]) -> str:
    lines = [f"{'corpus':8} {'variant':18} {'replies':>7} {'plain bpb':>9} {'ctx bpb':>8} {'ctx - plain [95% CI]':>28} "
             f"{'others: ctx - plain':>20} {'own, no ctx':>11} {'ctx - no ctx [95% CI]':>28} {'EM@1 plain/ctx':>15} "
             f"{'steps plain/ctx':>16}"]
    for r in results:
        em_plain = r["plain"]["exact_match"]["exact_match"]["1"] or 0
        for kind in r["variants"]:
            v, d, o, w = r[kind], r[kind]["diff_replies"], r[kind]["diff_others"], r[kind]["diff_own_replies"]
            em = f"{100 * em_plain:.1f}%/{100 * (v['exact_match']['exact_match']['1'] or 0):.1f}%"
            steps = f"{r['train']['plain']['steps']}/{r['train'][kind]['steps']}"
            budget = ("=steps" if kind.endswith("@steps") or r.get("budget") == "steps"
                      else "=quiet" if r.get("budget") == "quiet time" else "=time")
            lines.append(f"{r['corpus']:8} {kind.split('@')[0] + ' ' + budget:18} {r['replies']:>7} "
                         f"{r['plain']['bpb_replies']:9.3f} {v['bpb_replies']:8.3f} {d['diff']:+9.3f} "
                         f"[{d['low']:+.3f}, {d['high']:+.3f}] {o['diff']:+20.3f} "
                         f"{v['bpb_replies_without_context']:11.3f} {w['diff']:+9.3f} "
                         f"[{w['low']:+.3f}, {w['high']:+.3f}] {em:>15} {steps:>16}")
    return "\n".join(lines)


def _examples(results: list[dict]) -> str:
    lines = []
    for r in results:
        if "greeting_names" in r:
            lines.append(f"{r['corpus']}: greeting names (of the original's signer): {json.dumps(r['greeting_names'])}")
        for kind, m in r.get("made_right", {}).items():
            for against in ("against_plain", "against_itself_without", "copyable_against_plain",
                            "copyable_against_itself_without"):
                c = m[against]
                lines.append(f"{r['corpus']}: {kind} {against.replace('_', ' ')}: of {c['boundaries']} boundaries, "
                             f"first word right only with the context {c['right_only_with_context']}, "
                             f"only without {c['right_only_without_context']}")
            lines.append(f"{r['corpus']}: {kind} first word right at the copyable boundaries: "
                         f"{json.dumps(m['copyable_first_word_right'])}")
            shown = (m["copyable_against_itself_without"]["examples"] or m["against_itself_without"]["examples"])
            for e in shown:
                lines += [f"  original: ...{e['context_excerpt']!r}...", f"  reply so far: {e['reply_so_far'][-80:]!r}",
                          f"  truth {e['truth']}  with context {e['with_context']}  without {e['without_context']}"]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", action="append", required=True, help="NAME=DATA_DIR (repeatable)")
    p.add_argument("--out", type=Path, default=Path("out/bench_context"))
    p.add_argument("--minutes", type=float, default=3.0, help="wall-clock training budget of each run")
    p.add_argument("--quiet-minutes", type=float, default=None,
                   help="equal quiet time instead: the steps a quiet N-minute run of each model reaches")
    p.add_argument("--ref-tokens-per-s", type=float, default=None,
                   help="bench_recipe's reference quiet tokens/s that anchors --quiet-minutes (its default)")
    p.add_argument("--em-emails", type=int, default=40, help="replies whose word boundaries ExactMatch samples")
    p.add_argument("--modes", default="cross",
                   help=f"context models to train, comma-separated: {', '.join(CTX_MODES)}, each maybe followed by "
                   "+copy (a copy head; pointer: the copy head alone) and +embed (no encoder layer)")
    p.add_argument("--equal-steps", action="store_true",
                   help="also train each context model for the plain model's steps (equal work, not equal time)")
    p.add_argument("--examples", type=int, default=0, help="suggestions the context made right to print")
    p.add_argument("--greetings", action="store_true",
                   help="also complete the greeting names of the replies (synthetic corpus: the original's signer)")
    p.add_argument("overrides", nargs="*", help="extra key=value config overrides for every run")
    args = p.parse_args(argv)
    modes = tuple(m for m in args.modes.split(",") if m)
    if not modes or not all(map(valid_mode, modes)):
        p.error(f"--modes takes {', '.join(CTX_MODES)}, each maybe with +copy and +embed, not {args.modes!r}")
    steps = None
    if args.quiet_minutes is not None:
        from bench_recipe import REF_TOKENS_PER_S

        configs = {"plain": _config(args.overrides),
                   **{m: _config([*mode_overrides(m), *args.overrides]) for m in modes}}
        steps = quiet_steps(args.out, args.quiet_minutes, args.ref_tokens_per_s or REF_TOKENS_PER_S, configs)
    results = []
    for item in args.data:
        name, _, folder = item.partition("=")
        results.append(measure(name, Path(folder), args.out, args.minutes, args.em_emails, args.overrides,
                               args.equal_steps, modes, args.examples, args.greetings, steps))
        print(_table(results[-1:]), flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "results.json").write_text(json.dumps(results, indent=2) + "\n")
    print(_table(results))
    print(_examples(results))
    budget = ("equal steps" if all(r["budget"] == "steps" for r in results)
              else f"the steps of a quiet {args.quiet_minutes:g} minutes per run" if steps
              else f"{args.minutes} min per =time run")
    print(f"torch threads 1, {budget}, conditions and counts in {args.out / 'results.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
