"""The files a benchmark writes: its JSON (`write_json`, shared by every benchmark) and the Markdown table
of `seqlab bench` (`markdown`). No torch here: `prepare_speed.py` uses it without loading torch."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def write_json(path: Path, payload: dict[str, Any]) -> Path:
    """Write a benchmark's results as indented JSON (parent folders made), say where, return the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(payload, indent=2) + "\n")
    print(f"wrote {path}")
    return path


def _value(v: float, unit: str) -> str:
    if unit in ("MFU", "share"):
        return f"{100 * v:.1f}%"
    if unit in ("skipped", "failed"):  # a row that says a part did not run (`seqlab.bench.gpu`)
        return unit
    if abs(v) >= 1000:
        return f"{v:,.0f} {unit}".strip()
    return f"{v:.3g} {unit}".strip()


def markdown(payload: dict[str, Any]) -> str:
    """bench.md: the machine in one paragraph, then one table line per row with its goal and PASS/MISS."""
    m = payload["machine"]
    bf16 = (f", bf16 {m['bf16_matmul_peak_gflops']:.0f} GFLOP/s" if "bf16_matmul_peak_gflops" in m
            else ", no bf16 instructions")
    lines = [
        f"# seqlab bench{' --quick' if payload.get('quick') else ''}",
        "",
        f"torch {m['torch']}, {m['threads']} threads of {m['cpus']} CPUs ({m['cpu']}), fp32 matmul peak "
        f"{m.get('fp32_matmul_peak_gflops', float('nan')):.0f} GFLOP/s{bf16} (2048 x 2048, measured at start), load "
        f"{m['load_1min']:.1f} at start, OMP_WAIT_POLICY={m['omp_wait_policy'] or '(unset)'}; "
        f"{payload['wall_s']:.0f} s in all.",
        "",
        "| section | row | value | goal | result |",
        "|---|---|---:|---|---|",
    ]
    for r in payload["rows"]:
        result = "" if r["pass"] is None else ("PASS" if r["pass"] else "**MISS**")
        lines.append(f"| {r['section']} | {r['name']} | {_value(r['value'], r['unit'])} | {r['goal']} | {result} |")
    for name, error in payload.get("errors", {}).items():
        lines.append(f"| {name} | failed: {error} | | | **MISS** |")
    lines.append("")
    lines.append("Each row is measured side by side in this run (see `seqlab/bench/`); `what` in bench.json says "
                 "what was compared. Ratios are robust to a shared machine, absolute rates are not.")
    return "\n".join(lines) + "\n"
