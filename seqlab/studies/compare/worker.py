"""The child process `seqlab compare` trains each model in, so that each model's peak memory is its own.

    python -m seqlab.studies.compare.worker DATA_DIR RUN_DIR [--resume] [--quiet]

reads RUN_DIR/compare_request.json (the full RunConfig), calls the one trainer (`seqlab.training.trainer.train`) and
writes RUN_DIR/compare_memory.json:

- on CUDA: `torch.cuda.max_memory_allocated()`, the peak of tensors torch allocated on the GPU;
- on the CPU: the peak resident set size of the process during training minus its resident size just
  before (after Python, torch and seqlab were imported). On Linux the kernel's high-water mark is reset
  to the current size first (writing 5 to /proc/self/clear_refs), so the import's own transient peak is
  not counted; elsewhere `getrusage(RUSAGE_SELF).ru_maxrss` before and after is used, which reads 0 when
  training never rose above the import's peak. In one long-lived process the peak only grows, so it
  could not tell models apart; a fresh process per model can. It counts everything training touched:
  weights, optimizer state, activations, allocator caches, the pages of the memory-mapped token files
  that were read, and torch's lazily loaded kernels (about the same for every model, so compare
  differences between models rather than read small values as the model's size).

A user error in training is written to the same file as {"error": "..."} and the process exits with 2.
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
from collections.abc import Sequence
from pathlib import Path

REQUEST = "compare_request.json"
MEMORY = "compare_memory.json"


def _status_mb(field: str) -> float | None:
    """A `VmRSS`/`VmHWM` line of /proc/self/status in MiB, or None where there is no such file."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024  # the kernel reports kB
    except (OSError, ValueError, IndexError):
        pass
    return None


def _reset_peak_rss() -> float | None:
    """Reset the kernel's peak-RSS mark to the current RSS (Linux >= 4.0); the current RSS, or None."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        return None
    return _status_mb("VmRSS")


def _peak_rss_mb() -> float:
    """Peak resident set size of this process so far, in MiB (the rusage unit is KiB on Linux, bytes on macOS)."""
    hwm = _status_mb("VmHWM")
    if hwm is not None:
        return hwm
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / (1024 * 1024) if sys.platform == "darwin" else peak / 1024


def _train(data_dir: Path, run_dir: Path, resume: bool, progress: bool) -> dict:
    import torch

    from seqlab.config import RunConfig
    from seqlab.training.trainer import train

    cfg = RunConfig.from_dict(json.loads((run_dir / REQUEST).read_text()))
    baseline = _reset_peak_rss()
    cpu_measure = "peak RSS during training above the RSS before it"
    if baseline is None:
        baseline, cpu_measure = _peak_rss_mb(), "peak RSS (getrusage) during training above the peak before it"
    if torch.cuda.is_available():
        torch.cuda.reset_peak_memory_stats()
    summary = train(data_dir, run_dir, cfg, resume=resume, progress=progress)
    info = json.loads((run_dir / "run.json").read_text())
    if info.get("device", "cpu").startswith("cuda"):
        peak, measure = torch.cuda.max_memory_allocated() / 2**20, "CUDA max_memory_allocated"
    else:
        peak, measure = _peak_rss_mb() - baseline, cpu_measure
    return {"peak_mem_mb": round(peak, 2), "measure": measure, "baseline_rss_mb": round(baseline, 2),
            "peak_rss_mb": round(_peak_rss_mb(), 2), "resumed": resume, "stopped": summary["stopped"]}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m seqlab.studies.compare.worker")
    parser.add_argument("data_dir", type=Path)
    parser.add_argument("run_dir", type=Path)
    parser.add_argument("--resume", action="store_true")
    parser.add_argument("--quiet", action="store_true")
    args = parser.parse_args(argv)
    from seqlab.errors import UserError

    try:
        result = _train(args.data_dir, args.run_dir, args.resume, not args.quiet)
        code = 0
    except (UserError, ValueError) as exc:
        result, code = {"error": str(exc)}, 2
    (args.run_dir / MEMORY).write_text(json.dumps(result, indent=2) + "\n")
    return code


if __name__ == "__main__":
    raise SystemExit(main())
