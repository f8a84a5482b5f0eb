"""Bytes against BPE at 512-2k tokens, for attention and for the GRU, compared in bits per byte.

One mailbox (SpamAssassin ham by default) is prepared once per tokenizer: bytes, and BPE fitted on the
train split at each vocabulary size. Every model is the `small` preset's recipe (attention with RoPE, or
the GRU) and trains on the same number of TRAINING BYTES: steps = bytes / (batch_size * block_size *
bytes per token of that DATA_DIR's train split). So a BPE model reads the same text as the byte model in
fewer positions, each of which costs about the same (a larger embedding and output layer aside), and the
window of block_size tokens covers more text. Val bits per byte on the whole val split are comparable
across tokenizers (bits over the UTF-8 bytes of the same text: `evaluation.heldout`).

Wall-clock is unreliable on shared cores, so the budget is bytes. Each run's training bytes/s is reported
too, measured with `--jobs` runs side by side, so the last column says how much more text a BPE model
reads in the same time as the byte model of its family (its bytes/s over the byte model's).

    python -m seqlab.studies.tokenizer_study [SOURCE] [--out out/bench_bpe] [--bytes 2000000]
        [--vocabs byte,512,1024,2048] [--families attention,gru] [--jobs 2] [--threads 1]
        [--minutes N [--ref-tokens-per-s R]] [--widths 64,96,128] [--layers 2]
        [--variant NAME=KEY=VALUE[,KEY=VALUE...]] ...

Equal time (`--minutes N`, instead of equal bytes): each run gets the steps a QUIET N-minute run of it
reaches (`seqlab.studies.equal_time`): every model's training speed is measured interleaved in this process
with its own vocabulary, relative to the anchor (`make demo`'s attention model on bytes, whose quiet rate
is R, given, or else its fastest round measured here), so a BPE model's larger embedding and output layer
are paid for in steps.

This study chose the demo's tokenizer (`studies/demo.py`: BPE fitted on train at 1,024 tokens); the
experiments index (experiments/README.md) has its tables.
`--widths` / `--layers` sweep the model size (n_embd with a head of 32 dimensions; n_layer) of every
(family, tokenizer); the `small` preset's 128 x 2 is named without a suffix. Each `--variant NAME=OVERRIDES`
(repeatable; comma-separated config overrides, e.g. `lr5=train.lr=5e-3` or `cd40=train.cooldown_frac=0.4`)
adds the runs of every (family, tokenizer, size) with those overrides, named with the suffix -NAME; without
any, only the recipe itself runs. A variant that changes the step's cost (batch size, precision) is timed
with it, as every run is.

Writes DATA_DIRs under OUT/data/, one JSON per run (OUT/results/NAME-BYTES.json, or NAME-Nmin.json at
equal time) and the table (OUT/table.md, or OUT/table-Nmin.md); a finished run is not trained again, so an
interrupted study continues where it stopped.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import subprocess
import sys
from pathlib import Path
from typing import Any

from seqlab.studies.equal_time import REF_PRECISION, equal_time_steps, reference_tokens_per_s, step_rates
from seqlab.studies.recipe_study import save_result, train_scored

# studies/recipes.py names of the small preset's families; the hybrid is its default pattern "ra" (a GRU
# layer, then local attention over model.attn_window tokens)
RECIPES = {"attention": "attn-rope", "gru": "gru", "hybrid": "hybrid"}
# as recipe_study: a short warmup; fp32, as the runs named before train.precision existed
# (a bf16 run is a variant: --variant bf16=train.precision=bf16)
BASE = ["train.warmup_steps=30", "train.lr=3e-3", "train.precision=fp32"]


def prepare(source: str, out: Path, vocab: int) -> Path:
    """The DATA_DIR of one tokenizer (vocab 0: bytes), written once by `seqlab prepare`."""
    data = out / "data" / (f"bpe{vocab}" if vocab else "byte")
    if (data / "meta.json").exists():
        return data
    tok = ["--tokenizer", "bpe", "--vocab-size", str(vocab)] if vocab else ["--tokenizer", "byte"]
    subprocess.run([sys.executable, "-m", "seqlab", "prepare", source, "--out", str(data), "--quiet", *tok],
                   check=True)
    return data


def bytes_per_token(data: Path) -> float:
    """UTF-8 bytes per token of the train split (what one training position reads on average)."""
    from seqlab.data.store import TokenStore
    from seqlab.data.tokenizer import load_tokenizer
    from seqlab.evaluation.heldout import token_byte_lengths

    store, tok = TokenStore(data, "train"), load_tokenizer(data / "tokenizer.json")
    ids = store.tokens  # (N,) every train token, email after email
    lengths = token_byte_lengths(tok).numpy()
    return float(lengths[ids].sum() / max(len(ids), 1))


def _config(family: str, size: tuple[str, ...], steps: int, threads: int, vocab_size: int) -> Any:
    """The `small` preset's recipe of `family` at model `size` (overrides) for `steps` steps."""
    from seqlab.config import get_preset
    from seqlab.studies.recipes import apply_recipe

    budget = [f"train.max_steps={steps}", f"train.eval_every={steps}", f"train.ckpt_every={steps}",
              f"train.threads={threads}", "train.device=cpu", f"model.vocab_size={vocab_size}"]
    return apply_recipe(get_preset("small"), RECIPES[family], [*BASE, *size, *budget])


def run_one(job: tuple[str, str, tuple[str, ...], str, float, str, int, str, int]) -> dict[str, Any]:
    """Train one (family, tokenizer, size) for `steps` steps and score it on the whole val split; `tag`
    names the budget (training bytes, or minutes of equal quiet time)."""
    name, family, size, data, bpt, out, steps, tag, threads = job
    from seqlab.data.tokenizer import load_tokenizer

    result_path = Path(out) / "results" / f"{name}-{tag}.json"
    if result_path.exists():
        return json.loads(result_path.read_text())
    cfg = _config(family, size, steps, threads, load_tokenizer(Path(data) / "tokenizer.json").vocab_size)
    run = Path(out) / "runs" / f"{name}-{tag}"
    summary, val = train_scored(Path(data), run, cfg)
    train_bytes = round(summary["tokens"] * bpt)
    result = {"name": name, "family": family, "size": list(size), "budget": tag, "train_bytes": train_bytes,
              "data": data, "bytes_per_token": bpt, "params": summary["params"],
              "steps": summary["steps"], "tokens": summary["tokens"], "tokens_per_s": summary["tokens_per_s"],
              "bytes_per_s": summary["tokens_per_s"] * bpt, "elapsed_s": summary["elapsed_s"],
              "val_bpb": val["bpb"], "val_loss": val["loss"], "run": str(run)}
    save_result(result_path, result)
    print(f"{name:24} bpb {val['bpb']:.4f}  {steps} steps  {result['bytes_per_s']:8.0f} B/s  "
          f"{summary['elapsed_s']:.0f} s", flush=True)
    return result


def table(results: list[dict[str, Any]], seconds: float | None = None) -> str:
    """The markdown table; at equal time (`seconds` of quiet training) the bytes/s are those of the quiet
    run the step count stands for, else the measured ones."""
    how = "quiet bytes/s" if seconds else "training bytes/s"
    lines = [f"| family | tokenizer | training bytes | bytes/token | params | steps | val bpb | {how} "
             "| bytes/s vs bytes |", "|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    for r in results:
        r["shown_bytes_per_s"] = r["train_bytes"] / seconds if seconds else r["bytes_per_s"]
    for family in dict.fromkeys(r["family"] for r in results):
        rows = [r for r in results if r["family"] == family]
        base = next((r for r in rows if r["name"].endswith("-byte")), None)
        for r in rows:
            ratio = f"{r['shown_bytes_per_s'] / base['shown_bytes_per_s']:.2f} x" if base else ""
            lines.append(f"| {family} | {r['name'].split('-', 1)[1]} | {r['train_bytes']:,} | "
                         f"{r['bytes_per_token']:.2f} | {r['params']:,} | {r['steps']} | {r['val_bpb']:.4f} | "
                         f"{r['shown_bytes_per_s']:.0f} | {ratio} |")
    return "\n".join(lines) + "\n"


def _variants(specs: list[str] | None) -> list[tuple[str, tuple[str, ...]]]:
    """(name suffix, overrides) of every --variant; the recipe alone ("", ()) when none is given."""
    out = []
    for spec in specs or []:
        name, sep, overrides = spec.partition("=")
        if not sep or not name or "." in name:
            raise SystemExit(f"--variant {spec!r}: give NAME=KEY=VALUE[,KEY=VALUE...]")
        out.append((f"-{name}", tuple(o.strip() for o in overrides.split(",") if o.strip())))
    return out or [("", ())]


def _sizes(widths: str, layers: str) -> list[tuple[str, tuple[str, ...]]]:
    """(name suffix, overrides) of every size asked for; the small preset's 128 x 2 has no suffix."""
    out = []
    for w in [int(x) for x in widths.split(",") if x.strip()] or [128]:
        for n in [int(x) for x in layers.split(",") if x.strip()] or [2]:
            suffix = (f"-w{w}" if w != 128 else "") + (f"-l{n}" if n != 2 else "")
            out.append((suffix, (f"model.n_embd={w}", f"model.n_head={max(1, w // 32)}", f"model.n_layer={n}")))
    return out


def _steps(jobs: list[tuple], datas: dict[int, Path], args: argparse.Namespace) -> tuple[dict[str, int], float | None]:
    """The steps of each job: equal bytes, or (--minutes) equal quiet time measured against the anchor, with
    the anchor's quiet tokens/s (given, kept from an earlier invocation, or its fastest round here)."""
    from seqlab.data.tokenizer import load_tokenizer

    if args.minutes is None:
        steps = {}
        for name, family, size, _, bpt in jobs:
            cfg = _config(family, size, 1, args.threads, 259)
            steps[name] = max(1, round(args.bytes / (cfg.train.batch_size * cfg.model.block_size * bpt)))
        return steps, None
    # a model timed by an earlier invocation keeps its step count, so a continued or widened benchmark
    # does not retrain it; the models not yet timed are timed (beside the anchor) here
    path = Path(args.out) / f"rates-{args.minutes:g}min.json"
    kept = json.loads(path.read_text()) if path.exists() else {"rates": {}, "steps": {}}
    rates, steps = kept["rates"], kept["steps"]
    ref_rate = args.ref_tokens_per_s or kept.get("ref_tokens_per_s")
    new = [j for j in jobs if j[0] not in steps]
    if new:
        vocab = {str(d): load_tokenizer(d / "tokenizer.json").vocab_size for d in datas.values()}
        # make demo's attention on bytes, in fp32 as its quiet rate was measured
        configs = {"anchor": _config("attention", (REF_PRECISION,), 1, args.threads, 259)}
        configs |= {j[0]: _config(j[1], j[2], 1, args.threads, vocab[j[3]]) for j in new}
        same = [name for name, c in configs.items() if name != "anchor" and c == configs["anchor"]]
        measured = step_rates({n: c for n, c in configs.items() if n not in same}, args.threads)
        measured |= {name: measured["anchor"] for name in same}  # the anchor itself is not timed twice
        ref_rate = reference_tokens_per_s(measured, "anchor", ref_rate)
        steps |= equal_time_steps(measured, args.minutes, ref_rate, "anchor")
        rates |= measured
    path.write_text(json.dumps({"minutes": args.minutes, "ref_tokens_per_s": ref_rate,
                                "threads": args.threads, "rates": rates, "steps": steps}, indent=2) + "\n")
    for name, r in rates.items():
        print(f"{name:24} {r['steps_per_s']:.3f} steps/s here, {steps[name]} steps for a quiet "
              f"{args.minutes:g} minutes", flush=True)
    return steps, ref_rate


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m seqlab.studies.tokenizer_study", description=__doc__.split("\n")[0])
    ap.add_argument("source", nargs="?", default="spamassassin", help="mail for `seqlab prepare`")
    ap.add_argument("--out", default="out/bench_bpe")
    ap.add_argument("--bytes", type=int, default=2_000_000, help="training bytes each run reads")
    ap.add_argument("--vocabs", default="byte,512,1024,2048", help="'byte' and BPE vocabulary sizes")
    ap.add_argument("--families", default="attention,gru")
    ap.add_argument("--widths", default="128", help="model widths (n_embd) to sweep")
    ap.add_argument("--layers", default="2", help="model depths (n_layer) to sweep")
    ap.add_argument("--variant", action="append", metavar="NAME=OVERRIDES",
                    help="runs with these comma-separated config overrides, named with the suffix -NAME")
    ap.add_argument("--minutes", type=float, default=None,
                    help="equal quiet time instead of equal bytes: the steps a quiet N-minute run reaches")
    ap.add_argument("--ref-tokens-per-s", type=float, default=None,
                    help="the anchor's quiet training tokens/s (make demo's attention model on bytes; default: "
                         "its fastest round measured here)")
    ap.add_argument("--jobs", type=int, default=2, help="runs side by side")
    ap.add_argument("--threads", type=int, default=1, help="torch threads per run")
    return ap.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    """Prepare a DATA_DIR per tokenizer, train every run and write the table (module doc)."""
    args = parse_args(argv)
    out = Path(args.out)
    families = [f.strip() for f in args.families.split(",") if f.strip()]
    if unknown := [f for f in families if f not in RECIPES]:
        raise SystemExit(f"unknown family {', '.join(unknown)}; choose from {', '.join(RECIPES)}")
    vocabs = [0 if v.strip() == "byte" else int(v) for v in args.vocabs.split(",") if v.strip()]
    datas = {v: prepare(args.source, out, v) for v in vocabs}
    bpts = {v: bytes_per_token(d) for v, d in datas.items()}
    # a family's runs queued next to each other, so that they share the same load
    jobs = [(f"{fam}-{'bpe' + str(v) if v else 'byte'}{suffix}{vsuffix}", fam, (*size, *extra), str(datas[v]), bpts[v])
            for fam in families for suffix, size in _sizes(args.widths, args.layers) for v in vocabs
            for vsuffix, extra in _variants(args.variant)]
    steps, ref_rate = _steps(jobs, datas, args)
    tag = str(args.bytes) if args.minutes is None else f"{args.minutes:g}min"
    with mp.get_context("spawn").Pool(args.jobs, maxtasksperchild=1) as pool:
        results = list(pool.imap(run_one, [(*j, str(out), steps[j[0]], tag, args.threads) for j in jobs]))
    if args.minutes is None:
        head = f"{args.bytes:,} training bytes per run"
    else:
        head = (f"the steps a quiet {args.minutes:g}-minute run of each model reaches (speeds relative to make "
                f"demo's attention model on bytes measured interleaved in one process, {args.threads} thread(s), "
                f"anchored at its quiet {ref_rate:,.0f} tokens/s)")
    text = (f"{head}, `small` preset recipes + {' '.join(BASE)}, {args.jobs} runs side by side, {args.threads} "
            f"thread(s) each; val bits per byte on the whole val split.\n\n"
            + table(results, None if args.minutes is None else args.minutes * 60))
    (out / ("table.md" if args.minutes is None else f"table-{tag}.md")).write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
