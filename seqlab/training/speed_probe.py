"""How fast each candidate recipe trains on this machine: a probe of a few seconds, cached per machine.

`seqlab train DATA --minutes N` chooses the candidate whose curve is lowest at the steps it reaches here
(`training/recipe_table.py`), so it needs each candidate's step rate here, in each precision the CPU offers:
whether bf16 pays is a property of the machine and the model's shapes (on a CPU without AMX it can be slower
than fp32 for narrow models), so it is measured, not assumed from the instruction set.

The probe builds every candidate and runs its training step (forward, backward, optimizer, as the trainer
does, on random tokens of the candidate's batch shape) in rounds, one step of each per round, after one
unmeasured warm-up step, until its share of the budget is spent; each rate is its fastest step, the one
least slowed by anything else on the machine. Interleaving puts every candidate under the same load.

The rates are cached in the seqlab cache folder (`$SEQLAB_CACHE`, else ~/.cache/seqlab) under speed/, keyed by
the CPU, the threads, the torch and seqlab versions and the candidates' configs, so only the first run on a
machine pays; the probe's seconds are taken off the training budget by the caller.
"""

from __future__ import annotations

import hashlib
import json
import platform
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from seqlab.training.cpu_allocator import keep_freed_memory

PROBE_SHARE = 0.015  # of the budget: under the 2% a probe may cost
PROBE_MAX_S = 30.0  # enough rounds for a steady rate whatever the budget


@dataclass(frozen=True)
class Probe:
    """Steps per second per (candidate, precision), how long measuring took here (0 when cached), where kept."""

    rates: dict[str, dict[str, float]]  # candidate -> precision -> steps per second
    seconds: float
    cached: bool
    path: Path | None

    def as_dict(self) -> dict[str, Any]:
        """As run.json keeps it: the rates, what measuring cost, the cache entry's name (`forget`) and the CPU
        they were measured on (a run's curve point records where it trained, `studies/recipe_curves.py`)."""
        return {"rates": {n: {p: round(r, 3) for p, r in by.items()} for n, by in self.rates.items()},
                "seconds": round(self.seconds, 2), "cached": self.cached,
                "key": self.path.stem if self.path is not None else None, "cpu": cpu_name()}


def cpu_name() -> str:
    """The CPU's model name, as /proc/cpuinfo gives it."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.partition(":")[2].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def cache_path(configs: Mapping[str, Mapping[str, Any]], threads: int) -> Path:
    """Where the rates of `configs` (candidate -> precision -> RunConfig) at `threads` are kept."""
    import torch

    from seqlab.data.mail.sources import default_cache_dir
    from seqlab.version import __version__

    key = json.dumps({"cpu": cpu_name(), "threads": threads, "torch": torch.__version__, "seqlab": __version__,
                      "configs": {n: {p: c.to_json() for p, c in by.items()}
                                  for n, by in sorted(configs.items())}}, sort_keys=True)
    return default_cache_dir() / "speed" / f"{hashlib.sha256(key.encode()).hexdigest()[:20]}.json"


def forget(key: str) -> bool:
    """Drop the cached rates named `key` (`Probe.as_dict`'s "key"), so the next run measures them again;
    whether there were any."""
    from seqlab.data.mail.sources import default_cache_dir

    if not key.isalnum():  # a name this module wrote, never a path
        return False
    try:
        (default_cache_dir() / "speed" / f"{key}.json").unlink()
    except OSError:
        return False
    return True


def probe(configs: Mapping[str, Mapping[str, Any]], threads: int, seconds: float,
          step_fn: Callable[[Any], Callable[[], None]] | None = None, use_cache: bool = True) -> Probe:
    """The rates of `configs` (candidate -> precision -> RunConfig) at `threads`: cached, else measured for
    about `seconds` in all (module doc) and cached. `step_fn` builds a candidate's step (tests time a stand-in)."""
    path = cache_path(configs, threads) if use_cache else None
    if path is not None and path.is_file():
        try:
            kept = json.loads(path.read_text())
            return Probe({n: dict(by) for n, by in kept["rates"].items()}, 0.0, True, path)
        except (OSError, ValueError, KeyError):
            pass  # a damaged cache is measured again and rewritten
    start = time.perf_counter()
    rates = _measure(configs, threads, seconds, step_fn or training_step)
    took = time.perf_counter() - start
    if path is not None:
        _keep(path, rates, took)
    return Probe(rates, took, False, path)


def _keep(path: Path, rates: dict[str, dict[str, float]], took: float) -> None:
    from seqlab.durable import atomic_write_text
    from seqlab.private_files import make_private_dirs

    try:
        make_private_dirs(path.parent)
        atomic_write_text(path, json.dumps({"rates": rates, "seconds": took, "cpu": cpu_name(),
                                            "date": time.strftime("%Y-%m-%d %H:%M")}, indent=2) + "\n")
    except OSError:
        pass  # an unwritable cache costs the next run another probe, nothing else


def _measure(configs: Mapping[str, Mapping[str, Any]], threads: int, seconds: float,
             step_fn: Callable[[Any], Callable[[], None]]) -> dict[str, dict[str, float]]:
    import torch

    deadline = time.perf_counter() + seconds  # building and warming up are inside the probe's share
    torch.set_num_threads(threads)
    steps = {(n, p): step_fn(cfg) for n, by in configs.items() for p, cfg in by.items()}
    best = {k: float("inf") for k in steps}
    # the steps run as the trainer runs them, with the memory a step frees kept for the next
    # (training/cpu_allocator.py): without it every step maps and faults in its large blocks again
    with keep_freed_memory():
        for step in steps.values():  # the warm-up step: allocations and kernel choice, not counted
            step()
        while True:  # at least one measured round, however short the share, and none begun that would overrun it
            begun = time.perf_counter()
            for k, step in steps.items():
                t0 = time.perf_counter()
                step()
                best[k] = min(best[k], time.perf_counter() - t0)
            now = time.perf_counter()
            if now + (now - begun) > deadline:
                break
    out: dict[str, dict[str, float]] = {}
    for (n, p), t in best.items():
        out.setdefault(n, {})[p] = 1.0 / t
    return out


def training_step(cfg: Any) -> Callable[[], None]:
    """One training step of `cfg` as the trainer takes it (its precision's autocast, its optimizer), on a fixed
    batch of random tokens of its shape."""
    import torch
    import torch.nn.functional as F

    from seqlab.models import build_model
    from seqlab.runs.precision import autocast_for
    from seqlab.training.optim import make_optimizer

    torch.manual_seed(0)
    model = build_model(cfg.model).train()
    t = cfg.train
    opt = make_optimizer(model, t.lr, t.weight_decay, (t.beta1, t.beta2), torch.device("cpu"), t.optimizer)
    x = torch.randint(0, cfg.model.vocab_size, (t.batch_size, cfg.model.block_size + 1))  # (B, T+1)
    autocast = autocast_for(t.precision, torch.device("cpu"))

    def step() -> None:
        with autocast():
            logits, _ = model(x[:, :-1])  # (B, T, V)
        loss = F.cross_entropy(logits.flatten(0, 1).float(), x[:, 1:].flatten())
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    return step
