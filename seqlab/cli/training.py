"""`seqlab train`: DATA_DIR in, RUN_DIR out. A pair `add_train(subparsers)` / `run_train(args)`; the work is
`seqlab.train` (`seqlab/api/training.py`)."""

from __future__ import annotations

import argparse
from pathlib import Path


def add_train(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "train",
        help="train a model on a prepared DATA_DIR",
        description="Train a model on DATA_DIR and write RUN_DIR. Any config field can be set as "
        "section.field=value, e.g. model.mixer=gru model.pos=none train.lr=3e-3 train.max_steps=500.",
    )
    p.add_argument("data_dir", type=Path, help="a folder written by `seqlab prepare`")
    p.add_argument("--out", required=True, type=Path, help="RUN_DIR to write")
    p.add_argument("--minutes", type=float, default=None, metavar="N",
                   help="train for N minutes; without --preset the recipe table picks the model and its training "
                   "measured best for this machine's class, cores and N, and says why")
    p.add_argument("--preset", default=None, help="tiny | small | base (default small; with --minutes, the recipe "
                   "table's choice)")
    p.add_argument("--init", type=Path, default=None, metavar="RUN_DIR0",
                   help="start from this trained run's weights, tokenizer and model settings (fresh optimizer "
                   "and schedule), e.g. to adapt a general model to one mailbox")
    p.add_argument("--resume", action="store_true",
                   help="continue the run in RUN_DIR from its last good checkpoint, with its saved config")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.add_argument("overrides", nargs="*", metavar="key=value", help="config overrides")


def run_train(args: argparse.Namespace) -> int:
    from seqlab.api.training import train
    from seqlab.training.distributed import launched_rank

    # said before training starts: what the recipe table chose and why, in one line (run.json records it too)
    say = (lambda line: print(line, flush=True)) if launched_rank() == 0 else None
    run = train(args.data_dir, args.out, args.preset, minutes=args.minutes, resume=args.resume, init=args.init,
                settings=args.overrides, progress=not args.quiet, say=say)
    if launched_rank() != 0:  # under torchrun rank 0 alone reports
        return 0
    summary = run.summary
    for note in summary.get("derived_settings") or []:  # what an override of model.mixer set besides
        print(f"set {note}")
    if summary.get("resumed_at") is not None:
        print(f"resumed {args.out} at step {summary['resumed_at']}")
    print(f"{summary['stopped']}: {summary['steps']} steps, best val loss {summary['best_val_loss']:.4f} "
          f"at step {summary['best_step']}, {summary['tokens_per_s']:.0f} tokens/s; wrote {args.out}")
    return 0
