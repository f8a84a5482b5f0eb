"""`seqlab serve`: the local autocomplete server and its compose page. A pair `add_serve` / `run_serve`."""

from __future__ import annotations

import argparse
import ipaddress
import json
import os
import signal
import socket
import sys
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


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def run_serve(args: argparse.Namespace) -> int:
    from seqlab.private_files import warn_if_open
    from seqlab.serving.app import ServerConfig, create_app
    from seqlab.serving.connections import uvicorn_server
    from seqlab.serving.credentials import SERVER_FILE, write_private
    from seqlab.training.recipe_table import made_by

    if not (args.run_dir / "config.json").exists():
        raise UserError(f"{args.run_dir} is not a run folder (no config.json); train one with `seqlab train`")
    warn_if_open(args.run_dir)  # a RUN_DIR made before seqlab wrote private files: one line and the fix
    if not 0 <= args.port <= 65535:
        raise UserError(f"--port must be between 0 and 65535, not {args.port}")
    if not _is_loopback(args.host):
        if not args.allow_remote:
            raise UserError(f"--host {args.host} can be reached from other machines, and the model is the mail it "
                            "was trained on; add --allow-remote if that is what you want")
        print(f"seqlab: warning: serving on {args.host}: other machines on the network can reach it; every "
              "request needs the token, but it and what is typed cross the network unencrypted", file=sys.stderr)

    def ready(info: dict[str, Any]) -> None:
        gate = ("expected saved characters" if info.get("rule") == "expected-chars" else "confidence")
        print(f"seqlab serve: ready: {info.get('mixer', 'model')} from {args.run_dir} ({made_by(args.run_dir)}), "
              f"suggestions above {gate} "
              f"{info['threshold']:.3f} ({info['threshold_source']})"
              + (f", phrases of {info['phrases']['path']} at weight {info['phrases']['weight']:g}"
                 if info.get("phrases") else "")
              + (f", remembering {info['memory']['emails']} emails you wrote" if info.get("memory", {}).get("emails")
                 else "")
              + (f"; learning from the emails you mark as sent (kept in {args.run_dir / 'personal'})"
                 if args.learn else "")
              + (f" and from new mail in {sent.origin}, read every {args.sent_every:g} s" if sent else ""),
              flush=True)

    if args.sent is not None and not args.learn:
        raise UserError("--sent learns from your Sent folder, which only a learning server does: add --learn")
    phrases = _phrase_file(args)
    if args.memory is not None:  # checked here: a wrong folder stops `serve` with a sentence
        from seqlab.data.tokenizer import load_tokenizer
        from seqlab.serving.remembered import check_data_dir

        check_data_dir(args.memory, load_tokenizer(args.run_dir / "tokenizer.json"))
    # --learn: the run's learning lock, held until this process ends, taken before anything is bound or
    # written (server.json), so a second learner on the run changes nothing and `forget` waits for both
    lock = _learning_lock(args.run_dir) if args.learn else None
    try:  # --sent: logged into now (the password asked once, kept in memory), so a refused login stops here
        sent = _sent_source(args) if args.sent is not None else None
    except BaseException:
        if lock is not None:
            lock.release()
        raise
    sock = _bind(args.host, args.port)  # bound here so a taken port is a plain error, and port 0 is known
    port = sock.getsockname()[1]
    config = ServerConfig(run_dir=args.run_dir, threads=args.threads, max_queue=args.max_queue,
                          min_confidence=args.min_confidence, log_dir=args.log, max_sessions=args.max_sessions,
                          on_ready=ready, phrases=phrases, phrase_weight=args.phrase_weight,
                          host=args.host, port=port, allow_remote=args.allow_remote, learn=args.learn,
                          learn_lock=lock, sent=sent, sent_every_s=args.sent_every, memory=args.memory)
    host = f"[{args.host}]" if ":" in args.host else args.host
    info = args.run_dir / "serve" / SERVER_FILE  # where the person's tools look, whatever --log says

    def record(url: str) -> None:  # server.json: the newest link, and the token for the person's own scripts
        write_private(info, {"url": url, "host": args.host, "port": port, "token": config.token,
                             "pid": os.getpid(), "run_dir": str(args.run_dir.resolve())})

    def fresh_link(code: str) -> None:  # a link was used (its code is spent): the next one, here and in server.json
        url = f"http://{host}:{port}/?code={code}"
        if _is_ours(info, config.token):  # a later server on the same run keeps its own file
            record(url)
        print(f"seqlab serve: that link has been used; the next one is {url}", flush=True)

    if args.allow_remote:  # the page's files carry the token in their URLs there (`routes.page`)
        url = f"http://{host}:{port}/?token={config.token}"
    else:  # a one-time code: the browser's history keeps nothing usable (`serving.login_codes`)
        url = f"http://{host}:{port}/?code={config.login.issue()}"
        config.login.listen(fresh_link)
    record(url)
    print(f"seqlab serve: loading {args.run_dir}; the compose page is {url}", flush=True)
    once = "" if args.allow_remote else "that link works once, and a new one is printed here each time one is used; "
    print(f"seqlab serve: {once}to pair the browser extension, paste it into its options page; the token for your "
          f"own scripts is in {info} (readable by you only)", flush=True)
    server = uvicorn_server(create_app(config))  # what the tests serve too: the flood guards, no access log
    # uvicorn shuts down gracefully on SIGTERM and then raises it again for the handler it found: make
    # that handler an exit, so the finally below still runs (the default one would kill the process)
    previous = signal.signal(signal.SIGTERM, _exit_on_sigterm)
    try:
        server.run(sockets=[sock])
    finally:
        _remove_if_ours(info, config.token)  # the token dies with this launch
        signal.signal(signal.SIGTERM, previous)
        if lock is not None:
            lock.release()  # after the app stopped its learner, which saves and then writes nothing more
    return 0


def _sent_source(args: argparse.Namespace) -> Any:
    """--sent opened (`serving.sent_folder.open_sent_source`), with the IMAP flags."""
    from seqlab.data.mail.imap_auth import ImapOptions
    from seqlab.serving.sent_folder import open_sent_source

    options = ImapOptions(ca_file=args.ca_file, insecure=args.insecure, password_command=args.password_command,
                          oauth2=args.oauth2)
    return open_sent_source(args.sent, options)


def _learning_lock(run_dir: Path) -> Any:
    """The run's learning lock (`serving.personal.LearnerLock`), or UserError naming the server that holds it."""
    from seqlab.serving.personal import LearnerLock, LearningElsewhere

    try:
        return LearnerLock(run_dir).acquire()
    except LearningElsewhere as exc:
        who = f"another server (pid {exc.pid})" if exc.pid is not None else "another server"
        raise UserError(f"{who} is already learning on {run_dir}: stop it first, or serve this one without "
                        "--learn") from None


def _is_ours(info: Path, token: str) -> bool:
    """Whether server.json is still this launch's (a later server on the same run writes its own)."""
    try:
        return json.loads(info.read_text(encoding="utf-8")).get("token") == token
    except (OSError, ValueError, AttributeError):
        return False


def _remove_if_ours(info: Path, token: str) -> None:
    """Delete server.json unless a later server on the same run has written its own there since."""
    try:
        if json.loads(info.read_text(encoding="utf-8")).get("token") == token:
            info.unlink()
    except (OSError, ValueError, AttributeError):
        pass


def _exit_on_sigterm(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)


def _phrase_file(args: argparse.Namespace) -> Path | None:
    """The --phrases file, checked here (missing, unreadable or of another tokenizer: UserError) so that a
    bad one stops `serve` with a sentence instead of a server whose /health says it failed."""
    if args.phrases is None:
        return None
    from seqlab.data.tokenizer import load_tokenizer
    from seqlab.generation.phrases import PHRASES, PhraseModel

    path = args.run_dir / PHRASES if args.phrases == Path(_RUN_PHRASES) else args.phrases
    PhraseModel.load(path, load_tokenizer(args.run_dir / "tokenizer.json"))
    return path


def _bind(host: str, port: int) -> socket.socket:
    """A listening TCP socket on host:port; UserError when the address is taken or not this machine's."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # IPPROTO_TCP, not 0: asyncio turns Nagle off (TCP_NODELAY) only on sockets that say they are TCP; with it
    # on, the body of every response waits for the client's delayed ACK
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
        sock.listen(128)
    except OSError as exc:
        sock.close()
        raise UserError(f"cannot serve on {host}:{port}: {exc.strerror or exc}") from None
    sock.set_inheritable(True)
    return sock
