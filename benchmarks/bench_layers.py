"""Thin script: the benchmark lives in `seqlab.bench.layers` (also one section of `seqlab bench`)."""

from seqlab.bench.layers import main

if __name__ == "__main__":
    raise SystemExit(main())
