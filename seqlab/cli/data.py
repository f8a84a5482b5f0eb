"""`seqlab prepare`: mail in, DATA_DIR out. A pair `add_prepare(subparsers)` / `run_prepare(args)`; the work is
`seqlab.prepare` (`seqlab/api/data.py`). The flags of what decides the DATA_DIR's bytes are built from
`PrepareConfig`'s fields; the rest (--out, --update, --cache-dir, --workers, --quiet and the IMAP login) say only
where and how the work is done."""

from __future__ import annotations

import argparse
from pathlib import Path

from seqlab.cli.arguments import positive_int
from seqlab.cli.options import add_options
from seqlab.data.prepare.options import PrepareConfig
from seqlab.options import cli_fields


def add_prepare(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "prepare",
        help="read a mail source, clean, dedupe, split by thread, fit a tokenizer, write DATA_DIR",
        description="Read mail from SOURCE (an mbox file, a Maildir, a folder of message files, an Enron-style "
        "tree, a CSV with a raw-message column, one message file, or the named corpora 'spamassassin' and "
        "'synthetic', an IMAP server's folders: 'imaps://USER@HOST[:PORT]/FOLDER[,FOLDER...]', or a Thunderbird "
        "profile: 'thunderbird' or 'thunderbird:PROFILE'), split it by thread and write token files to DATA_DIR.",
    )
    add_options(p, PrepareConfig, ["source"])
    p.add_argument("--out", type=Path, default=None, help="DATA_DIR to write")
    p.add_argument("--update", type=Path, default=None, metavar="DATA_DIR",
                   help="instead of --out: add to DATA_DIR only the mail of SOURCE it does not hold yet, with its "
                   "own tokenizer and settings, old emails and splits kept as they are")
    add_options(p, PrepareConfig, ["tokenizer", "vocab_size", "tokenizer_from", "split", "seed", "split_by",
                                   "keep_quotes", "keep_signatures", "mask_pii", "limit", "count", "groups"])
    # the settings below change how the work is done, never what is written: they are not PrepareConfig's
    p.add_argument("--cache-dir", type=Path, default=None, help="download cache (default ~/.cache/seqlab)")
    add_options(p, PrepareConfig, ["folders"])
    p.add_argument("--password-command", default=None, metavar="COMMAND",
                   help="imaps:// sources: a command printing the password (or token) on its first line, e.g. "
                   "'pass show mail'; else SEQLAB_IMAP_PASSWORD (SEQLAB_IMAP_TOKEN with --oauth2), else a prompt")
    p.add_argument("--oauth2", action="store_true", help="imaps:// sources: log in with XOAUTH2 and an access token "
                   "(Gmail, Outlook) instead of a password")
    p.add_argument("--ca-file", default=None, metavar="PEM",
                   help="imaps:// sources: trust the certificates in this file (a private CA) instead of the system's")
    p.add_argument("--insecure", action="store_true",
                   help="imap:// without TLS, for a server on this machine only (refused for any other host)")
    p.add_argument("--workers", type=positive_int, default=None,
                   help="processes that parse mail (default: one per CPU; 1 parses in-process)")
    add_options(p, PrepareConfig, ["senders", "exclude_senders"])
    p.add_argument("--quiet", action="store_true", help="no progress bar")


def run_prepare(args: argparse.Namespace) -> int:
    from seqlab.api.data import is_thunderbird_source, prepare, thunderbird
    from seqlab.errors import UserError

    folders = [f for f in args.folders.split(",") if f.strip()] if args.folders else None
    if is_thunderbird_source(args.source):  # what will be read, before the reading starts
        print(thunderbird(args.source, folders).listing(), flush=True)
    if (args.out is None) == (args.update is None):
        raise UserError("prepare needs --out DATA_DIR (a new data folder) or --update DATA_DIR (one to grow), not "
                        f"{'both' if args.out is not None else 'neither'}.")
    # the PrepareConfig fields, as flags read them (groups and folders are one comma-separated text each)
    config = {f.name: getattr(args, f.name) for f in cli_fields(PrepareConfig) if f.init and f.name != "source"}
    config.update(groups=args.groups.split(",") if args.groups else None, folders=folders)
    data = prepare(args.source, args.out or args.update, update=args.update is not None, **config,
                   cache_dir=args.cache_dir, workers=args.workers, progress=not args.quiet,
                   password_command=args.password_command, oauth2=args.oauth2, ca_file=args.ca_file,
                   insecure=args.insecure)
    print(data.report())
    print(f"wrote {args.out or args.update}")
    return 0
