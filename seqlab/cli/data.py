"""`seqlab prepare`: mail in, DATA_DIR out. A pair `add_prepare(subparsers)` / `run_prepare(args)`; the work is
`seqlab.prepare` (`seqlab/api/data.py`)."""

from __future__ import annotations

import argparse
from pathlib import Path

from seqlab.cli.arguments import positive_int, split_fractions


def add_prepare(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "prepare",
        help="read a mail source, clean, dedupe, split by thread, fit a tokenizer, write DATA_DIR",
        description="Read mail from SOURCE (an mbox file, a Maildir, a folder of message files, an Enron-style "
        "tree, a CSV with a raw-message column, one message file, or the named corpora 'spamassassin' and "
        "'synthetic', an IMAP server's folders: 'imaps://USER@HOST[:PORT]/FOLDER[,FOLDER...]', or a Thunderbird "
        "profile: 'thunderbird' or 'thunderbird:PROFILE'), split it by thread and write token files to DATA_DIR.",
    )
    p.add_argument("source", help="path to mail, or 'spamassassin' / 'synthetic' / 'thunderbird[:PROFILE]' / "
                   "'imaps://USER@HOST/FOLDER'")
    p.add_argument("--out", type=Path, default=None, help="DATA_DIR to write")
    p.add_argument("--update", type=Path, default=None, metavar="DATA_DIR",
                   help="instead of --out: add to DATA_DIR only the mail of SOURCE it does not hold yet, with its "
                   "own tokenizer and settings, old emails and splits kept as they are")
    p.add_argument("--tokenizer", choices=("byte", "bpe"), default=None, help="byte (default) or bpe")
    p.add_argument("--vocab-size", type=positive_int, default=None, help="BPE vocabulary size (default 4096)")
    p.add_argument("--tokenizer-from", type=Path, default=None, metavar="PATH",
                   help="encode with this RUN_DIR's, DATA_DIR's or tokenizer.json's tokenizer instead of fitting "
                   "one (so that `train --init` from that run accepts this data)")
    p.add_argument("--split", type=split_fractions, default=(0.9, 0.05, 0.05), help="train,val,test fractions")
    p.add_argument("--seed", type=int, default=0, help="seed of the thread-to-split hash (default 0)")
    p.add_argument("--split-by", choices=("thread", "date"), default=None,
                   help="thread: a seeded hash of each thread; date: earlier threads train, the latest are held "
                   "out (val and test at least 10 emails). Default: date with --sender (one person's mail), "
                   "else thread")
    p.add_argument("--keep-quotes", action="store_true", help="keep quoted replies and forwarded text")
    p.add_argument("--keep-signatures", action="store_true", help="keep signatures after '-- '")
    p.add_argument("--mask-pii", action="store_true", help="replace email addresses, URLs and phone numbers")
    p.add_argument("--limit", type=positive_int, default=None, help="read at most N messages")
    p.add_argument("--count", type=positive_int, default=2000, help="emails to generate for 'synthetic'")
    p.add_argument("--groups", default=None, help="spamassassin groups, comma-separated (default: the ham groups)")
    p.add_argument("--cache-dir", type=Path, default=None, help="download cache (default ~/.cache/seqlab)")
    p.add_argument("--folders", default=None, metavar="NAMES",
                   help="thunderbird: only these folders, comma-separated, e.g. Inbox,Sent (default: all but Trash "
                   "and Junk)")
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
    p.add_argument("--sender", action="append", default=[], metavar="ADDRESS",
                   help="keep only mail From this address (repeatable); others are counted as other_sender")
    p.add_argument("--exclude-sender", action="append", default=[], metavar="ADDRESS",
                   help="drop mail From this address (repeatable), counted as excluded_sender")
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
    data = prepare(args.source, args.out or args.update, update=args.update is not None,
                   tokenizer=args.tokenizer, vocab_size=args.vocab_size,
                   tokenizer_from=args.tokenizer_from, split=args.split, seed=args.seed, keep_quotes=args.keep_quotes,
                   keep_signatures=args.keep_signatures, mask_pii=args.mask_pii, limit=args.limit, count=args.count,
                   groups=args.groups.split(",") if args.groups else None, cache_dir=args.cache_dir,
                   workers=args.workers, senders=args.sender, exclude_senders=args.exclude_sender,
                   split_by=args.split_by, folders=folders, progress=not args.quiet,
                   password_command=args.password_command, oauth2=args.oauth2, ca_file=args.ca_file,
                   insecure=args.insecure)
    print(data.report())
    print(f"wrote {args.out or args.update}")
    return 0
