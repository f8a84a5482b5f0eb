"""`python -m seqlab` is the same program as the `seqlab` console script."""

from seqlab.cli.main import main

if __name__ == "__main__":
    raise SystemExit(main())
