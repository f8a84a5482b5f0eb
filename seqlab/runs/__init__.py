"""RUN_DIR: the files of a checkpoint, checkpoint directories, and reading a trained run back (load_run)."""
