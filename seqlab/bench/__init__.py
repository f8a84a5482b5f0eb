"""Benchmarks: every speed goal of seqlab as a row measured side by side (`seqlab bench`, `suite.py`).

Nothing heavy here: the command line reads `SECTIONS` without loading torch."""

SECTIONS = ("layers", "throughput", "bf16", "evaluation", "compile", "threads", "prepare", "latency", "browser",
            "recipe", "gpu")
