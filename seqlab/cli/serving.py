"""`seqlab serve`: the local autocomplete server and its compose page. A pair `add_serve` / `run_serve`."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path
from typing import Any

from seqlab.cli.arguments import add_run_reader, positive_float, positive_int, unit_float
from seqlab.errors import UserError
from seqlab.printed_command import printed_command

_RUN_PHRASES = "RUN_DIR/phrases.npz"  # --phrases without FILE: the run's own phrase cache


def add_serve(sub: argparse._SubParsersAction) -> None:
    p = add_run_reader(sub, "serve", help="serve suggestions over HTTP and a compose page with ghost text",
                       description="Serve RUN_DIR's model on this machine: a compose page that shows "
                       "suggestions as ghost text while you type (Tab accepts), and a JSON API "
                       "(POST /v1/complete, POST /v1/events, GET /v1/stats, GET /health). Nothing leaves the "
                       "machine. Only the person is served: open the link it prints (it works once and each use "
                       "prints the next; RUN_DIR/serve/server.json holds the newest, and the token for your own "
                       "scripts), or pair the browser extension with it.")
    p.add_argument("--host", default="127.0.0.1",
                   help="address to bind (default 127.0.0.1: this machine only; another needs --allow-remote)")
    p.add_argument("--allow-remote", action="store_true",
                   help="allow a --host other machines can reach; every route, the page included, then needs "
                   "the token")
    p.add_argument("--port", type=int, default=8000, help="port (default 8000; 0 picks a free one)")
    p.add_argument("--threads", type=positive_int, default=1, help="torch threads for the model (default 1)")
    p.add_argument("--max-queue", type=positive_int, default=8,
                   help="requests that may wait for the model before new ones get 503 (default 8)")
    p.add_argument("--min-confidence", type=unit_float, default=None,
                   help="show a suggestion only above this confidence (default: the run's calibration.json, "
                   "written by `seqlab calibrate`, else 0)")
    p.add_argument("--max-sessions", type=positive_int, default=256,
                   help="writers whose model state is kept (least recently used dropped first; default 256)")
    p.add_argument("--log", type=Path, default=None, help="folder of events.jsonl (default RUN_DIR/serve)")
    p.add_argument("--phrases", nargs="?", type=Path, const=_RUN_PHRASES, default=None, metavar="FILE",
                   help="blend a person's phrase cache (`seqlab phrases`; default FILE RUN_DIR/phrases.npz) into "
                   "every suggestion, as `complete --phrases` does")
    p.add_argument("--phrase-weight", type=unit_float, default=0.3,
                   help="largest share of the phrase model in the blend (default 0.3)")
    p.add_argument("--memory", type=Path, default=None, metavar="DATA_DIR",
                   help="offer again what you wrote before: remember the train split of your prepared mail (in "
                   "memory only; with --learn, every email you send joins it)")
    p.add_argument("--learn", action="store_true",
                   help="keep the emails you mark as sent (RUN_DIR/personal, readable by you only) and fine-tune "
                   "a copy of the model on them while the server is idle; `seqlab forget RUN_DIR` undoes it "
                   "(default: off, and the server stores no text)")
    p.add_argument("--sent", default=None, metavar="SOURCE",
                   help="with --learn: also learn each email you send from any client, read from your Sent folder: "
                   "imaps://USER@HOST/FOLDER, or a local Sent mbox or Maildir (only mail sent from the first start "
                   "on; the password is asked once and never stored)")
    p.add_argument("--sent-every", type=positive_float, default=30.0, metavar="SECONDS",
                   help="how often --sent reads the folder for new mail (default 30)")
    p.add_argument("--password-command", default=None, metavar="COMMAND",
                   help="--sent imaps://: a command printing the password (or token) on its first line, e.g. "
                   "'pass show mail'; else SEQLAB_IMAP_PASSWORD (SEQLAB_IMAP_TOKEN with --oauth2), else a prompt")
    p.add_argument("--oauth2", action="store_true", help="--sent imaps://: log in with XOAUTH2 and an access token")
    p.add_argument("--ca-file", default=None, metavar="PEM",
                   help="--sent imaps://: trust the certificates in this file (a private CA) instead of the system's")
    p.add_argument("--insecure", action="store_true",
                   help="--sent imap:// without TLS, for a server on this machine only")


def add_forget(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("forget", help="delete what `serve --learn` kept and learned, back to the trained model",
                       description="Delete RUN_DIR/personal (the sent emails `seqlab serve --learn` kept and the "
                       "weights it learned from them) and RUN_DIR/serve/events.jsonl (what was done with each "
                       "suggestion). Refused while a server learns on RUN_DIR. The next `seqlab serve` serves "
                       "the trained model again.")
    p.add_argument("run_dir", type=Path, metavar="RUN_DIR")


def run_forget(args: argparse.Namespace) -> int:
    from seqlab.serving.events import LOG_NAME
    from seqlab.serving.personal import LearningElsewhere, forget

    if not (args.run_dir / "config.json").exists():
        raise UserError(f"{args.run_dir} is not a run folder (no config.json)")
    try:  # under the run's learning lock, which every learning server holds while it runs (not server.json)
        removed = forget(args.run_dir, logs=(LOG_NAME, LOG_NAME + ".1"))
    except LearningElsewhere as exc:
        who = f"a server (pid {exc.pid})" if exc.pid is not None else "a server"
        raise UserError(f"{who} is learning on {args.run_dir} and would write back what it learned: stop it, "
                        f"then run `{printed_command('forget', args.run_dir)}` again") from None
    if removed:
        print(f"seqlab forget: deleted {', '.join(removed)} in {args.run_dir}; the trained model is served again")
    else:
        print(f"seqlab forget: {args.run_dir} has nothing learned (no personal/ folder) and no event log")
    return 0


def run_serve(args: argparse.Namespace) -> int:
    from seqlab.serving.lifecycle import serve
    from seqlab.serving.state import ServerConfig

    config = ServerConfig(run_dir=args.run_dir, threads=args.threads, max_queue=args.max_queue,
                          min_confidence=args.min_confidence, log_dir=args.log, max_sessions=args.max_sessions,
                          phrases=_phrase_path(args), phrase_weight=args.phrase_weight, host=args.host,
                          port=args.port, allow_remote=args.allow_remote, learn=args.learn,
                          sent_every_s=args.sent_every, memory=args.memory)
    return serve(config, _sent_opener(args) if args.sent is not None else None)


def _sent_opener(args: argparse.Namespace) -> Callable[[], Any]:
    """--sent's folder, to be opened (`serving.sent_folder.open_sent_source`) with the IMAP flags."""
    from seqlab.data.mail.imap_auth import ImapOptions
    from seqlab.serving.sent_folder import open_sent_source

    options = ImapOptions(ca_file=args.ca_file, insecure=args.insecure, password_command=args.password_command,
                          oauth2=args.oauth2)
    return lambda: open_sent_source(args.sent, options)


def _phrase_path(args: argparse.Namespace) -> Path | None:
    """The --phrases file: FILE, or the run's own phrase cache when --phrases is given alone."""
    if args.phrases is None:
        return None
    from seqlab.generation.phrases import PHRASES

    return args.run_dir / PHRASES if args.phrases == Path(_RUN_PHRASES) else args.phrases
