"""What `seqlab train --minutes N` would choose on this machine for budgets from minutes to a night, and the
recipe table's curves drawn.

    python -m seqlab.studies.recipe_plan [--minutes 3,10,30,60,120,240,480] [--threads N] [--precision fp32]
        [--vocab 1024] [--plot FILE]

For each budget: every candidate with a curve, the steps it reaches here (the speed probe's rate in its faster
precision, `training/speed_probe.py`, cached) and its predicted validation bits per byte with the uncertainty
(`training/curves.py`), and the choice, exactly as `seqlab train` makes it (`training/curve_choice.py`).
Nothing is trained. `--plot` draws each candidate's curve (its runs as dots, the reading past them dashed up to
the longest budget's steps) with the table's measured cells as crosses.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from seqlab.training.curve_choice import choose_by_curves, curve_names, family, probe_configs
from seqlab.training.curves import read_table_curve
from seqlab.training.recipe_table import Machine, load_table, this_machine
from seqlab.training.speed_probe import PROBE_MAX_S, probe


def plan(minutes: list[float], machine: Machine, vocab: int, table: dict[str, Any],
         probe_seconds: float = PROBE_MAX_S) -> list[dict[str, Any]]:
    """The choice for each budget in `minutes` on `machine`, from one probe (cached, or `probe_seconds` long)."""
    measured = probe(probe_configs(table, machine, vocab), machine.threads, probe_seconds)
    rows = []
    for m in minutes:
        # a run pays its own probe only when no earlier one is cached: plan for the cached case
        choice = choose_by_curves(m, machine, measured.rates, 0.0, table)
        rows.append({"minutes": m, "choice": choice.name, **(choice.prediction or {})})
    return rows


def markdown(rows: list[dict[str, Any]], machine: Machine) -> str:
    names = sorted({n for r in rows for n in r["candidates"]})
    lines = [f"Predicted val bits per byte at the steps each candidate reaches on this machine ({machine.kind}, "
             f"{machine.threads} thread{'s' * (machine.threads > 1)}):", "",
             "| minutes | " + " | ".join(names) + " | chosen |", "|---:|" + "---:|" * len(names) + "---|"]
    for r in rows:
        cells = []
        for n in names:
            c = r["candidates"][n]
            mark = {"measured": "", "interpolated": "", "extrapolated": "*"}[c["how"]]
            cells.append(f"{c['val_bpb']:.3f} ± {c['plus_minus']:.3f}{mark} ({c['steps']:,})")
        lines.append(f"| {r['minutes']:g} | " + " | ".join(cells) + f" | **{r['choice']}** |")
    lines += ["", "(steps reached in brackets; * read past the candidate's longest run, on its fitted power law)"]
    return "\n".join(lines) + "\n"


def plot(table: dict[str, Any], path: Path, up_to: float) -> None:
    """Each curve with its runs, its reading past them, and the table's measured cells."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    curves = table["curves"]
    families = {n: family(n) for n in curves}
    fig, ax = plt.subplots(figsize=(8, 5))
    for i, name in enumerate(curve_names(table)):
        color = f"C{i}"
        ends = curves[name]["ends"]
        xs = [e["steps"] for e in ends]
        ax.plot(xs, [e["val_bpb"] for e in ends], "o-", color=color, label=name)
        past = np.geomspace(xs[-1], max(up_to, xs[-1] * 1.01), 30)
        readings = [read_table_curve(curves, name, s, families) for s in past]
        mid = np.array([r.val_bpb for r in readings])
        band = np.array([r.plus_minus for r in readings])
        ax.plot(past, mid, "--", color=color)
        ax.fill_between(past, mid - band, mid + band, color=color, alpha=0.15)
        cells = [(r["steps"], r["val_bpb"]) for c in table["cells"] if c["measured"]
                 for n, r in c["results"].items() if n == name]
        if cells:
            ax.plot(*zip(*cells, strict=True), "x", color=color, markersize=8)
    ax.set_xscale("log")
    ax.set_xlabel("training steps (each point a whole run, cooled down at its end)")
    ax.set_ylabel("val bits per byte")
    ax.set_title(f"Recipe curves, {table['data']['label']} (x: a measured cell's run)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m seqlab.studies.recipe_plan", description=__doc__.split("\n")[0])
    ap.add_argument("--minutes", default="3,10,30,60,120,240,480", help="budgets, comma-separated")
    ap.add_argument("--threads", type=int, default=None, help="the threads a run gets (default: this machine's)")
    ap.add_argument("--precision", choices=("fp32",), default=None, help="plan as the fp32-only class")
    ap.add_argument("--vocab", type=int, default=None, help="the data's vocabulary (default: the table's)")
    ap.add_argument("--plot", type=Path, default=None, help="draw the curves into this PNG")
    args = ap.parse_args(argv)
    table = load_table()
    if not table.get("curves"):
        raise SystemExit("the recipe table has no curves: measure some with python -m seqlab.studies.recipe_curves")
    try:
        minutes = sorted(float(m) for m in args.minutes.split(",") if m.strip())
    except ValueError:
        raise SystemExit(f"--minutes takes numbers separated by commas, not {args.minutes!r}") from None
    machine = this_machine("cpu")
    if args.precision == "fp32":
        machine = Machine("cpu-fp32", machine.threads)
    if args.threads:
        machine = Machine(machine.kind, args.threads)
    rows = plan(minutes, machine, args.vocab or table["data"]["vocab_size"], table)
    print(markdown(rows, machine))
    if args.plot:
        longest = max(r["steps"] for r in rows)  # as far as the longest budget's choice reaches
        plot(table, args.plot, longest)
        print(f"wrote {args.plot}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
