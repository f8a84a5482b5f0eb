"""The argparse front of seqlab: one module per command group; nothing else in the package imports it."""

from seqlab.cli.main import main

__all__ = ["main"]
