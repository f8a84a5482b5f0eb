"""`torch.compile` on CPU for every family ("compile" rows): compile seconds, steady tokens/s, and whether
it pays over a 10-minute run.

For each family's `small` preset a training step (as in `seqlab.bench.throughput`) runs eagerly and
through `torch.compile(model)` (what `train.compile=true` does). Compile seconds = the first compiled
step (tracing, code generation, the C++ build, with an empty inductor cache) minus a steady compiled
step. The value of a row is the tokens a 10-minute run would train compiled, counting the compile time,
over the tokens eagerly:

    ((600 - compile_s) * compiled tokens/s) / (600 * eager tokens/s)

`train.compile` is on by default only for a family where this is >= 1.2 (the rows are informative: the
decision is the one kept in `seqlab.config`).
"""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

from seqlab.bench.harness import row, time_steps
from seqlab.bench.throughput import FAMILIES, batch_pool, family_config, lm_step
from seqlab.models import build_model
from seqlab.training.optim import make_optimizer

RUN_S = 600.0


def family_row(family: str, repeats: int, cache: Path) -> dict[str, Any]:
    # a fresh inductor cache per family: compiled kernels kept from an earlier run would hide the compile time
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(cache / family)
    torch._dynamo.reset()
    cfg, batch = family_config(family)
    torch.manual_seed(0)
    model = build_model(cfg)
    opt = make_optimizer(model, 1e-3, 0.1, (0.9, 0.95), torch.device("cpu"))
    compiled = torch.compile(model)
    batches = batch_pool(cfg, batch)
    eager = lm_step(model, lambda t: model(t)[0], opt, batches)
    fast = lm_step(model, lambda t: compiled(t)[0], opt, batches)
    t0 = time.perf_counter()
    fast()  # the first call compiles the forward and the backward graphs
    first = time.perf_counter() - t0
    s_eager, s_fast = time_steps([eager, fast], repeats, 1)
    compile_s = max(first - s_fast, 0.0)
    tokens = batch * cfg.block_size
    r_eager, r_fast = tokens / s_eager, tokens / s_fast
    gain = max(RUN_S - compile_s, 0.0) * r_fast / (RUN_S * r_eager)
    return row("compile", f"{family} small: 10-min gain", "tokens in a 10-minute run, torch.compile (compile time "
               "included) over eager; on by default only at >= 1.2", gain, "x", compile_s=compile_s,
               tokens_per_s_eager=r_eager, tokens_per_s_compiled=r_fast, steady_speedup=r_fast / r_eager)


def rows(quick: bool, threads: int) -> list[dict[str, Any]]:
    """One row per family (quick: attention only, the family most likely to gain)."""
    before, cache_before = torch.get_num_threads(), os.environ.get("TORCHINDUCTOR_CACHE_DIR")
    torch.set_num_threads(threads)
    try:
        with tempfile.TemporaryDirectory(prefix="seqlab-bench-inductor-") as cache:
            return [family_row(f, 3 if quick else 5, Path(cache)) for f in (("attention",) if quick else FAMILIES)]
    finally:
        torch.set_num_threads(before)
        if cache_before is None:
            os.environ.pop("TORCHINDUCTOR_CACHE_DIR", None)
        else:
            os.environ["TORCHINDUCTOR_CACHE_DIR"] = cache_before
