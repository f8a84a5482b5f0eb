"""The argparse front of seqlab: one module per command group (`main.py` holds the table and `main`).

Nothing here imports them: `cli.main` imports the command modules of this package, so this file importing
`cli.main` would close a circle. The console script and `python -m seqlab` name `seqlab.cli.main:main`."""
