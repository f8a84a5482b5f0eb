"""Remake the recipe table (`seqlab/training/recipe_table.py`): train every candidate recipe at equal quiet time
in each machine class this machine can emulate, score it, and keep the best of each cell.

    python -m seqlab.studies.recipe_measure DATA_DIR [--out out/recipe_table] [--jobs 2]
        [--cell MACHINE:THREADS:MINUTES[:CANDIDATE,...] ...] [--probe-steps 60] [--install]

A cell is a machine class (`cpu-bf16`, `cpu-fp32`), the threads one run gets and a budget in minutes. The
fp32-only class is emulated on any CPU by training in fp32 (`train.precision=fp32`); the bf16 class needs a
CPU with native bf16 (bf16 autocast elsewhere would be converted in software and time nothing real).

Equal quiet time: each candidate trains for the steps a quiet N-minute run of it reaches at the cell's
threads and precision, so the runs themselves may share the machine (`--jobs` side by side, one thread each)
without the load deciding anything. Those step counts come from `studies/equal_time.py`'s interleaved
timing of every candidate (the fastest of several rounds: the closest to a quiet step), scaled by how much
slower the real trainer runs than that bare step (data, clipping, logging), measured once per machine class
and thread count with a short real training run of the first candidate (`--probe-steps`).

Each run is scored on the whole val split (the choice) and the test split (the report). The table, in
OUT/recipe_table.json and OUT/recipe_table.md, keeps per cell each candidate's steps and bits per byte, the
chosen one, and the commit, machine and data it was measured on. Cells it did not measure (a CUDA device;
a thread count it did not run) are added as extrapolated from a measured one, with the reason. `--install`
copies the JSON into the package, where `seqlab train DATA --minutes N` reads it; the cells of the installed
table that this run did not measure are kept, on the same data, each with its own commit. Finished runs are
kept in OUT/cells/ and skipped when the command is run again; a candidate added to a cell measured before is
timed beside that cell's probe candidate and scaled to its recorded rate, so the finished runs stand.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

from seqlab.training.recipe_table import CANDIDATES, MACHINE_CLASSES, PRECISION, TABLE, cell_key
from seqlab.training.speed_probe import cpu_name

DEFAULT_CELLS = ("cpu-bf16:2:3", "cpu-bf16:2:10", "cpu-fp32:2:3", "cpu-fp32:2:10", "cpu-fp32:1:3", "cpu-fp32:1:10")
CPU_CANDIDATES = ("gru-192", "gru-128", "small")


def parse_cell(text: str) -> tuple[str, int, float, tuple[str, ...]]:
    """"cpu-fp32:2:10[:gru-192,small]" -> (machine, threads, minutes, candidates)."""
    parts = text.split(":")
    if len(parts) not in (3, 4) or parts[0] not in MACHINE_CLASSES[:2]:
        raise SystemExit(f"a cell is cpu-bf16|cpu-fp32:THREADS:MINUTES[:CANDIDATE,...], not {text!r}")
    names = tuple(n for n in parts[3].split(",") if n) if len(parts) == 4 else CPU_CANDIDATES
    unknown = [n for n in names if n not in CANDIDATES]
    if unknown:
        raise SystemExit(f"unknown candidate(s) {', '.join(unknown)}; choose from {', '.join(CANDIDATES)}")
    return parts[0], int(parts[1]), float(parts[2]), names


def candidate_config(name: str, machine: str, vocab_size: int, extra: list[str]) -> Any:
    """A candidate's RunConfig in the class's precision, for the data's vocabulary, with `extra` on top."""
    from seqlab.config import apply_overrides
    from seqlab.training.curve_choice import candidate_config as as_trained

    return apply_overrides(as_trained(name, PRECISION[machine], vocab_size), extra)


def trainer_speed(data: Path, out: Path, name: str, machine: str, threads: int, vocab: int, steps: int) -> float:
    """Tokens per second of the real trainer over `steps` steps of candidate `name` (no evaluation)."""
    from seqlab.training.trainer import train

    cfg = candidate_config(name, machine, vocab, [f"train.max_steps={steps}", f"train.threads={threads}",
                                                  f"train.eval_every={steps * 10}", f"train.ckpt_every={steps * 10}"])
    shutil.rmtree(out, ignore_errors=True)
    summary = train(data, out, cfg, progress=False)
    shutil.rmtree(out, ignore_errors=True)
    return summary["tokens_per_s"]


def measure_steps(data: Path, out: Path, machine: str, threads: int, minutes: list[float], names: list[str],
                  vocab: int, probe_steps: int) -> dict[str, Any]:
    """The steps a quiet run of each candidate reaches in each of `minutes` (module doc), with the rates."""
    from seqlab.studies.equal_time import step_rates

    path = out / "rates" / f"{machine}-{threads}.json"
    if path.exists():
        kept = json.loads(path.read_text())
        if missing := [n for n in names if n not in kept["rates"]]:
            kept["rates"] |= added_rates(kept, missing, machine, vocab, threads)
            path.write_text(json.dumps(kept, indent=2) + "\n")
    else:
        rates = step_rates({n: candidate_config(n, machine, vocab, []) for n in names}, threads)
        bare = rates[names[0]]["steps_per_s"] * rates[names[0]]["tokens_per_step"]
        real = trainer_speed(data, out / "probe", names[0], machine, threads, vocab, probe_steps)
        kept = {"rates": rates, "trainer_share": min(1.0, real / bare), "probe": names[0], "probe_tokens_per_s": real}
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(kept, indent=2) + "\n")
    share = kept["trainer_share"]
    kept["steps"] = {f"{m:g}": {n: max(1, round(m * 60 * kept["rates"][n]["steps_per_s"] * share)) for n in names}
                     for m in minutes}
    return kept


def added_rates(kept: dict[str, Any], missing: list[str], machine: str, vocab: int, threads: int
                ) -> dict[str, Any]:
    """Rates of candidates added to a cell after its rates were measured: timed beside the probe candidate
    and scaled by the probe's recorded rate over its rate now, so that they are on the recorded scale (the
    machine's speed may have drifted since) and the runs already trained keep their step counts."""
    from seqlab.studies.equal_time import step_rates

    probe = kept["probe"]
    now = step_rates({n: candidate_config(n, machine, vocab, []) for n in [probe, *missing]}, threads)
    scale = kept["rates"][probe]["steps_per_s"] / now[probe]["steps_per_s"]
    return {n: {**now[n], "steps_per_s": now[n]["steps_per_s"] * scale, "scaled_to": probe} for n in missing}


def run_job(job: tuple[str, str, str, int, str, str, int]) -> dict[str, Any]:
    """Train one candidate for its steps and score it on val and test (in a worker process, one thread)."""
    from seqlab.evaluation.report import evaluate_run
    from seqlab.options import EvalOptions
    from seqlab.studies.recipe_study import train_scored

    cell, name, machine, vocab, data, out, steps = job
    path = Path(out) / "cells" / cell.replace("/", "_") / f"{name}.json"
    if path.exists():
        return json.loads(path.read_text())
    run = path.with_suffix("")
    eval_every = max(1, min(250, steps))
    cfg = candidate_config(name, machine, vocab, [f"train.max_steps={steps}", "train.threads=1",
                                                  f"train.eval_every={eval_every}", f"train.ckpt_every={eval_every}"])
    summary, val = train_scored(Path(data), run, cfg)
    test = evaluate_run(run, EvalOptions(data=Path(data), split="test", completions=False), device="cpu")
    result = {"cell": cell, "name": name, "steps": summary["steps"], "params": summary["params"],
              "val_bpb": round(val["bpb"], 4), "test_bpb": round(test["bpb"], 4), "run": str(run),
              "commit": git_commit()}
    path.write_text(json.dumps(result, indent=2) + "\n")
    print(f"{cell:18} {name:8} {summary['steps']:6} steps  val {val['bpb']:.4f}  test {test['bpb']:.4f}", flush=True)
    return result


def extrapolated(cells: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The cells not measured, each from the nearest measured one (module doc), with the reason."""
    have = {(c["machine"], c["threads"], c["minutes"]): c for c in cells}
    out = []
    for m in sorted({c["minutes"] for c in cells}):
        for kind in MACHINE_CLASSES:
            for threads in (1, 2) if kind != "cuda" else (1,):
                if (kind, threads, m) in have:
                    continue
                if kind == "cuda":
                    out.append({"machine": kind, "threads": threads, "minutes": m, "choice": "base", "measured": False,
                                "from": "none", "reason": "no CUDA device measured; the base preset is the one "
                                "sized for a GPU"})
                    continue
                other = "cpu-fp32" if kind == "cpu-bf16" else "cpu-bf16"
                source = have.get((kind, 3 - threads, m)) or have.get((other, threads, m)) \
                    or have.get((other, 3 - threads, m))
                if source is None:
                    continue
                out.append({"machine": kind, "threads": threads, "minutes": m, "choice": source["choice"],
                            "measured": False, "from": cell_key(source["machine"], source["threads"], m),
                            "reason": "the nearest measured cell: same budget"})
    return out


def git_commit() -> str:
    try:
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True,
                             cwd=Path(__file__).parent)
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], capture_output=True,
                               text=True, cwd=Path(__file__).parent).stdout.strip()
        return out.stdout.strip() + ("+changes" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def markdown(table: dict[str, Any]) -> str:
    """The table for people: one row per cell and candidate."""
    lines = [f"Recipe table: {table['data']['label']}, commit {table['commit']}, {table['machine']['cpu']}.", "",
             "| cell | candidate | steps | val bpb | test bpb | chosen | measured at |",
             "|---|---|---:|---:|---:|---|---|"]
    for c in table["cells"]:
        key = cell_key(c["machine"], c["threads"], c["minutes"])
        if not c["measured"]:
            lines.append(f"| {key} | {c['choice']} | | | | extrapolated from {c['from']}: {c['reason']} | |")
            continue
        for name, r in c["results"].items():
            mark = "**chosen**" if name == c["choice"] else ""
            at = f"{c.get('commit', table['commit'])}, {c.get('date', table['date'])}"
            lines.append(f"| {key} | {name} | {r['steps']} | {r['val_bpb']:.4f} | {r['test_bpb']:.4f} | {mark} "
                         f"| {at} |")
    return "\n".join(lines) + "\n"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m seqlab.studies.recipe_measure", description=__doc__.split("\n")[0])
    ap.add_argument("data_dir", type=Path)
    ap.add_argument("--out", type=Path, default=Path("out/recipe_table"))
    ap.add_argument("--cell", action="append", default=None,
                    help=f"MACHINE:THREADS:MINUTES[:CANDIDATE,...] (default: {' '.join(DEFAULT_CELLS)})")
    ap.add_argument("--jobs", type=int, default=2, help="training runs side by side, one thread each")
    ap.add_argument("--probe-steps", type=int, default=60, help="steps of the real-trainer speed probe")
    ap.add_argument("--install", action="store_true", help="copy the table into the package")
    ap.add_argument("--table", type=Path, default=TABLE, help=argparse.SUPPRESS)  # where --install writes
    return ap.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    from seqlab.data.layout import load_meta
    from seqlab.runs.precision import cpu_has_native_bf16

    args = parse_args(argv)
    cells = [parse_cell(c) for c in (args.cell or DEFAULT_CELLS)]
    if any(m == "cpu-bf16" for m, *_ in cells) and not cpu_has_native_bf16():
        raise SystemExit("this CPU has no native bf16: measure only cpu-fp32 cells here (--cell cpu-fp32:...)")
    meta = load_meta(args.data_dir)
    vocab = meta["tokenizer"]["vocab_size"]
    jobs, steps = [], {}
    for machine, threads in sorted({(m, t) for m, t, *_ in cells}):
        mine = [c for c in cells if c[:2] == (machine, threads)]
        names = list(dict.fromkeys(n for c in mine for n in c[3]))
        steps[(machine, threads)] = measure_steps(args.data_dir, args.out, machine, threads,
                                                  [c[2] for c in mine], names, vocab, args.probe_steps)
        for _, _, minutes, cands in mine:
            for n in cands:
                jobs.append((cell_key(machine, threads, minutes), n, machine, vocab, str(args.data_dir), str(args.out),
                             steps[(machine, threads)]["steps"][f"{minutes:g}"][n]))
    jobs.sort(key=lambda j: -j[-1])  # the longest first, so the last runs finish together
    with mp.get_context("spawn").Pool(args.jobs, maxtasksperchild=1) as pool:
        results = list(pool.imap_unordered(run_job, jobs))
    measured, commit = [], git_commit()
    for machine, threads, minutes, cands in cells:
        key = cell_key(machine, threads, minutes)
        mine = {r["name"]: r for r in results if r["cell"] == key}
        scores = {n: {k: mine[n][k] for k in ("steps", "params", "val_bpb", "test_bpb")} for n in cands}
        measured.append({"machine": machine, "threads": threads, "minutes": minutes, "measured": True,
                         "choice": min(scores, key=lambda n: scores[n]["val_bpb"]), "results": scores,
                         "trainer_share": round(steps[(machine, threads)]["trainer_share"], 3),
                         # the commits the runs were trained at (a candidate added later may differ)
                         "commit": ", ".join(sorted({mine[n].get("commit", commit) for n in cands})),
                         "date": time.strftime("%Y-%m-%d"), "cpu": cpu_name()})
    tok = meta["tokenizer"]
    table = {"made_by": "python -m seqlab.studies.recipe_measure " + " ".join(f"--cell {c}" for c in args.cell or
                                                                             DEFAULT_CELLS),
             "commit": commit, "date": time.strftime("%Y-%m-%d"),
             "machine": {"cpu": cpu_name(), "native_bf16": cpu_has_native_bf16()},
             "data": {"label": f"{meta.get('source')}, {tok['kind']} {vocab}", "source": meta.get("source"),
                      "tokenizer": tok["kind"], "vocab_size": vocab,
                      "train_tokens": meta["splits"]["train"]["tokens"]},
             "candidates": {n: {"preset": p, "overrides": list(o)} for n, (p, o) in CANDIDATES.items()},
             "cells": measured + extrapolated(measured)}
    if args.install:
        table = merged(table, args.table)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "recipe_table.json").write_text(json.dumps(table, indent=2) + "\n")
    (args.out / "recipe_table.md").write_text(markdown(table))
    print(markdown(table))
    if args.install:
        shutil.copyfile(args.out / "recipe_table.json", args.table)
        print(f"installed the table as {args.table}")
    return 0


def merged(table: dict[str, Any], installed: Path) -> dict[str, Any]:
    """`table` with the measured cells of the installed table that this run did not measure, when both were
    measured on the same data: each cell keeps the commit, date and CPU it was measured on (older tables
    kept them once, for all), and the extrapolated cells are made again from all the measured ones."""
    try:
        old = json.loads(installed.read_text())
    except (OSError, ValueError):
        return table
    if old.get("data", {}).get("label") != table["data"]["label"]:
        print(f"the installed table was measured on {old.get('data', {}).get('label')}: replaced, not merged")
        return table
    key = lambda c: (c["machine"], c["threads"], c["minutes"])  # noqa: E731
    fresh = {key(c) for c in table["cells"] if c["measured"]}
    provenance = {"commit": old.get("commit"), "date": old.get("date"), "cpu": old.get("machine", {}).get("cpu")}
    kept = [provenance | c for c in old["cells"] if c["measured"] and key(c) not in fresh]
    cells = sorted([c for c in table["cells"] if c["measured"]] + kept, key=key)
    earlier = [*old.get("earlier", []), f"{old.get('made_by')} (commit {old.get('commit')})"]
    return table | {"earlier": earlier, "cells": cells + extrapolated(cells)}


if __name__ == "__main__":
    raise SystemExit(main())
