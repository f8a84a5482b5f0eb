"""Thin script: the benchmark lives in `seqlab.bench.latency` (also one section of `seqlab bench`)."""

from seqlab.bench.latency import main

if __name__ == "__main__":
    raise SystemExit(main())
