"""Writing a DATA_DIR: `seqlab prepare` as a pipeline of stages, each one module (pipeline.py calls them in order)."""
