"""`seqlab train`: DATA_DIR in, RUN_DIR out. A pair `add_train(subparsers)` / `run_train(args)`."""

from __future__ import annotations

import argparse
from pathlib import Path

from seqlab.errors import UserError


def add_train(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "train",
        help="train a model on a prepared DATA_DIR",
        description="Train a model on DATA_DIR and write RUN_DIR. Any config field can be set as "
        "section.field=value, e.g. model.mixer=gru model.pos=none train.lr=3e-3 train.max_steps=500.",
    )
    p.add_argument("data_dir", type=Path, help="a folder written by `seqlab prepare`")
    p.add_argument("--out", required=True, type=Path, help="RUN_DIR to write")
    p.add_argument("--preset", default=None, help="tiny | small | base (default small)")
    p.add_argument("--init", type=Path, default=None, metavar="RUN_DIR0",
                   help="start from this trained run's weights, tokenizer and model settings (fresh optimizer "
                   "and schedule), e.g. to adapt a general model to one mailbox")
    p.add_argument("--resume", action="store_true",
                   help="continue the run in RUN_DIR from its last good checkpoint, with its saved config")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.add_argument("overrides", nargs="*", metavar="key=value", help="config overrides")


def run_train(args: argparse.Namespace) -> int:
    from seqlab.config import get_preset
    from seqlab.runs.init import init_config
    from seqlab.training.distributed import launched_rank
    from seqlab.training.trainer import train

    if args.init is not None and (args.resume or args.preset is not None):
        raise UserError("--init starts a new run with the init run's settings; it cannot be combined with "
                        f"--{'resume' if args.resume else 'preset'}.")
    try:
        base = None if args.resume else init_config(args.init) if args.init else get_preset(args.preset or "small")
    except ValueError as exc:
        raise UserError(str(exc)) from None
    summary = train(args.data_dir, args.out, base, resume=args.resume, overrides=args.overrides,
                    progress=not args.quiet, init=args.init)
    if summary["failed"]:  # halted on non-finite steps or weights: the reason says which checkpoint is good
        raise UserError(summary["stopped"])
    if launched_rank() != 0:  # under torchrun rank 0 alone reports
        return 0
    print(f"{summary['stopped']}: {summary['steps']} steps, best val loss {summary['best_val_loss']:.4f} "
          f"at step {summary['best_step']}, {summary['tokens_per_s']:.0f} tokens/s; wrote {args.out}")
    return 0
