"""seqlab's public API, re-exported by `seqlab/__init__.py` (`seqlab.prepare`, `seqlab.train`, `seqlab.load`, ...).

One module per role: `data` (prepare, DataDir), `training` (train), `runs` (load, Run), `views` (what a Run's
reading methods return), `lessons` (the lecture's experiments and attention by hand), `config` (preset). The
CLI (`seqlab.cli`) is a thin layer over these functions; docs/api.md is generated from their docstrings
(`python -m seqlab.api.reference`). Nothing is imported here, so `import seqlab` stays instant and torch-free.
"""
