"""The browser latency benchmark's arithmetic (seqlab/bench/latency_browser.py), without a browser: which
drawn suggestion answers which key, against a plain search over every pair, and its rows."""

from __future__ import annotations

import numpy as np

from seqlab.bench.latency_browser import GOAL_P90_MS, bench_rows, key_latencies


def _by_search(keys: list[float], drawn: list[float], through: list[bool]) -> tuple[list[float], int]:
    out, missed = [], 0
    for k, t in enumerate(keys):
        if through[k]:
            continue
        end = keys[k + 1] if k + 1 < len(keys) else np.inf
        after = [d for d in drawn if t <= d < end]
        if after:
            out.append(min(after) - t)
        else:
            missed += 1
    return out, missed


def test_each_asking_key_gets_the_first_ghost_drawn_before_the_next_key() -> None:
    rng = np.random.default_rng(0)
    for _ in range(200):
        keys = np.cumsum(rng.uniform(5, 200, size=rng.integers(1, 30))).tolist()
        drawn = sorted(rng.uniform(0, keys[-1] + 300, size=rng.integers(0, 40)).tolist())
        through = (rng.random(len(keys)) < 0.3).tolist()
        assert key_latencies(keys, drawn, through) == _by_search(keys, drawn, through)


def test_the_goal_is_on_the_rows_of_asking_at_once_only() -> None:
    paced = {"p50_ms": 20.0, "p90_ms": 40.0, "asked_keys": 10, "requests_per_key": 0.5}
    fast = {"requests_per_key": 0.3, "last_key_to_ghost_ms": 25.0}
    payload = {"results": [{"surface": "page", "debounce_ms": 150, "paced": paced, "burst": fast},
                           {"surface": "page", "debounce_ms": 0, "paced": paced, "burst": fast}]}
    rows = bench_rows(payload)
    goals = [r["goal"] for r in rows if "p90" in r["name"]]
    assert goals == ["", f"<= {GOAL_P90_MS:g}"] and rows[2]["pass"] is True
