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

    python benchmarks/bench_bpe.py [SOURCE] [--out out/bench_bpe] [--bytes 2000000] [--vocabs byte,512,1024,2048]
                                   [--families attention,gru] [--jobs 2] [--threads 1]

Writes DATA_DIRs under OUT/data/, one JSON per run (OUT/results/NAME.json) and the table (OUT/table.md);
a finished run (same name and bytes) is not trained again, so an interrupted benchmark continues where it
stopped. For an equal-time comparison run a BPE vocabulary again with `--bytes` multiplied by its bytes/s
ratio from the first table (`--vocabs 1024 --bytes ...`).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

RECIPES = {"attention": "attn-rope", "gru": "gru"}  # studies/recipes.py names of the small preset's families
BASE = ["train.warmup_steps=30", "train.lr=3e-3"]  # as benchmarks/bench_recipe.py: a short warmup


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


def run_one(job: tuple[str, str, str, float, str, int, int]) -> dict[str, Any]:
    """Train one (family, tokenizer) on `train_bytes` of text and score it on the whole val split."""
    name, family, data, bpt, out, train_bytes, threads = job
    from seqlab.config import get_preset
    from seqlab.evaluation.run import evaluate_run
    from seqlab.studies.recipes import apply_recipe
    from seqlab.training.trainer import train

    result_path = Path(out) / "results" / f"{name}-{train_bytes}.json"
    if result_path.exists():
        return json.loads(result_path.read_text())
    cfg = apply_recipe(get_preset("small"), RECIPES[family], BASE)
    steps = max(1, round(train_bytes / (cfg.train.batch_size * cfg.model.block_size * bpt)))
    budget = [f"train.max_steps={steps}", f"train.eval_every={steps}", f"train.ckpt_every={steps}",
              f"train.threads={threads}", "train.device=cpu"]
    cfg = apply_recipe(get_preset("small"), RECIPES[family], [*BASE, *budget])
    run = Path(out) / "runs" / name
    shutil.rmtree(run, ignore_errors=True)
    summary = train(Path(data), run, cfg, progress=False)
    val = evaluate_run(run, data, "val", device="cpu", completions=False)
    result = {"name": name, "family": family, "train_bytes": train_bytes, "data": data, "bytes_per_token": bpt,
              "params": summary["params"],
              "steps": summary["steps"], "tokens": summary["tokens"], "tokens_per_s": summary["tokens_per_s"],
              "bytes_per_s": summary["tokens_per_s"] * bpt, "elapsed_s": summary["elapsed_s"],
              "val_bpb": val["bpb"], "val_loss": val["loss"]}
    result_path.parent.mkdir(parents=True, exist_ok=True)
    result_path.write_text(json.dumps(result, indent=2) + "\n")
    print(f"{name:18} bpb {val['bpb']:.4f}  {result['bytes_per_s']:8.0f} B/s  {summary['elapsed_s']:.0f} s", flush=True)
    return result


def table(results: list[dict[str, Any]]) -> str:
    lines = ["| family | tokenizer | training bytes | bytes/token | params | steps | val bpb | training bytes/s "
             "| bytes/s vs bytes |", "|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    for family in dict.fromkeys(r["family"] for r in results):
        rows = [r for r in results if r["family"] == family]
        base = next((r for r in rows if r["name"].endswith("-byte")), None)
        for r in rows:
            ratio = f"{r['bytes_per_s'] / base['bytes_per_s']:.2f} x" if base else ""
            lines.append(f"| {family} | {r['name'].split('-', 1)[1]} | {r['train_bytes']:,} | "
                         f"{r['bytes_per_token']:.2f} | {r['params']:,} | {r['steps']} | {r['val_bpb']:.4f} | "
                         f"{r['bytes_per_s']:.0f} | {ratio} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("source", nargs="?", default="spamassassin", help="mail for `seqlab prepare`")
    ap.add_argument("--out", default="out/bench_bpe")
    ap.add_argument("--bytes", type=int, default=2_000_000, help="training bytes each run reads")
    ap.add_argument("--vocabs", default="byte,512,1024,2048", help="'byte' and BPE vocabulary sizes")
    ap.add_argument("--families", default="attention,gru")
    ap.add_argument("--jobs", type=int, default=2, help="runs side by side")
    ap.add_argument("--threads", type=int, default=1, help="torch threads per run")
    args = ap.parse_args()
    out = Path(args.out)
    families = [f.strip() for f in args.families.split(",") if f.strip()]
    if unknown := [f for f in families if f not in RECIPES]:
        raise SystemExit(f"unknown family {', '.join(unknown)}; choose from {', '.join(RECIPES)}")
    vocabs = [0 if v.strip() == "byte" else int(v) for v in args.vocabs.split(",") if v.strip()]
    datas = {v: prepare(args.source, out, v) for v in vocabs}
    bpts = {v: bytes_per_token(d) for v, d in datas.items()}
    # a family's runs queued next to each other, so that they share the same load
    jobs = [(f"{fam}-{'bpe' + str(v) if v else 'byte'}", fam, str(datas[v]), bpts[v], str(out), args.bytes,
             args.threads) for fam in families for v in vocabs]
    with mp.get_context("spawn").Pool(args.jobs, maxtasksperchild=1) as pool:
        results = list(pool.imap(run_one, jobs))
    text = (f"{args.bytes:,} training bytes per run, `small` preset recipes + {' '.join(BASE)}, {args.jobs} runs "
            f"side by side, {args.threads} thread(s) each; val bits per byte on the whole val split.\n\n"
            + table(results))
    (out / "table.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
