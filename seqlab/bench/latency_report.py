"""The latency benchmark's goals (PASS/MISS per model) and its printed tables."""

from __future__ import annotations

from typing import Any

from seqlab.bench.latency_runs import (
    GATE_US,
    KEPT_P90_MS,
    LEARNING_P90_RATIO,
    MODELS,
    OVERHEAD_P50_MS,
    SPEEDUP_AT,
    SPEEDUP_GOAL,
)


def goals(model_rows: list[dict[str, Any]], http_rows: list[dict[str, Any]],
          gate: dict[str, Any] | None = None, learning: list[dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    out = []
    if gate is not None:
        out.append({"model": "server", "goal": f"access gate per request <= {GATE_US:g} us", "value": gate["gate_us"],
                    "unit": "us", "pass": gate["gate_us"] <= GATE_US})
    for name in MODELS:
        mine = [r for r in model_rows if r["model"] == name]
        worst = max(r["kept"]["p90"] for r in mine)
        out.append({"model": name, "goal": f"kept p90 <= {KEPT_P90_MS:g} ms (worst context)", "value": worst,
                    "unit": "ms", "pass": worst <= KEPT_P90_MS})
        at = [r for r in mine if r["context_bytes"] == SPEEDUP_AT]
        if at:
            s = at[0]["speedup_p50"]
            out.append({"model": name, "goal": f"recompute/kept p50 >= {SPEEDUP_GOAL:g}x at {SPEEDUP_AT} B",
                        "value": s, "unit": "x", "pass": s >= SPEEDUP_GOAL})
        over = [r["overhead"]["p50"] for r in http_rows if r["model"] == name]
        if over:
            out.append({"model": name, "goal": f"server overhead p50 <= {OVERHEAD_P50_MS:g} ms (worst context)",
                        "value": max(over), "unit": "ms", "pass": max(over) <= OVERHEAD_P50_MS})
        for r in learning or []:
            if r["model"] == name:
                out.append({"model": name, "goal": f"learning/plain keystroke p90 <= {LEARNING_P90_RATIO:g}x",
                            "value": r["p90_ratio"], "unit": "x", "pass": r["p90_ratio"] <= LEARNING_P90_RATIO})
    return out


def print_tables(model_rows: list[dict[str, Any]], http_rows: list[dict[str, Any]],
                 goal_rows: list[dict[str, Any]]) -> None:
    print("\nmodel time per keystroke, ms (CompletionEngine, max_words=3, greedy)")
    print(f"{'model':<9} {'ctx B':>5} {'tok':>5} | {'kept p50':>8} {'p90':>6} | {'recomp p50':>10} {'p90':>7} | "
          f"{'speedup p50':>11} {'p90':>6} | {'enc kept p50':>12} {'enc scratch p50':>15} | {'words':>5} "
          f"{'same':>5}  kept p90<={KEPT_P90_MS:g}")
    for r in model_rows:
        print(f"{r['model']:<9} {r['context_bytes']:>5} {r['prompt_tokens']:>5} | {r['kept']['p50']:8.2f} "
              f"{r['kept']['p90']:6.2f} | {r['recompute']['p50']:10.2f} {r['recompute']['p90']:7.2f} | "
              f"{r['speedup_p50']:10.1f}x {r['speedup_p90']:5.1f}x | {r['enc_kept']['p50']:12.2f} "
              f"{r['enc_scratch']['p50']:15.2f} | {r['words_mean']:5.1f} {r['same_suggestion']:>2}/{r['keystrokes']:<2}"
              f"  {'PASS' if r['kept_p90_pass'] else 'MISS'}")
    if http_rows:
        print("\nend to end over HTTP on loopback, ms (POST /v1/complete with a session)")
        print(f"{'model':<9} {'ctx B':>5} | {'round trip p50':>14} {'p90':>6} | {'server model p50':>16} {'p90':>6} | "
              f"{'overhead p50':>12} {'p90':>6} | {'GET /health p50':>15}  overhead p50<={OVERHEAD_P50_MS:g}")
        for r in http_rows:
            print(f"{r['model']:<9} {r['context_bytes']:>5} | {r['round_trip']['p50']:14.2f} "
                  f"{r['round_trip']['p90']:6.2f} | {r['server_model']['p50']:16.2f} {r['server_model']['p90']:6.2f}"
                  f" | {r['overhead']['p50']:12.2f} {r['overhead']['p90']:6.2f} | "
                  f"{r['health_round_trip']['p50']:15.2f}  "
                  f"{'PASS' if r['overhead_pass'] else 'MISS'}")
    print("\ngoals")
    for g in goal_rows:
        print(f"{g['model']:<9} {g['goal']:<46} {g['value']:8.2f} {g['unit']:<2}  {'PASS' if g['pass'] else 'MISS'}")
