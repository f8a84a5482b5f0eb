"""`seqlab serve` from start to stop: the checks before anything starts, the bound socket, server.json, the stop.

In order (`serve`): the run folder, the port and the address (one other machines can reach needs
--allow-remote: `access.is_loopback`), the phrase file and the --memory folder (a bad one stops `serve` with
a sentence instead of a server whose /health says it failed), the run's learning lock under --learn (taken
before anything is bound or written, so a second learner on the run changes nothing and `forget` waits for
both), the Sent folder's login under --sent (the password asked once, kept in memory, so a refused login
stops here), then the socket (bound here so a taken port is a plain error, and port 0 is known).

`ServerFile` is RUN_DIR/serve/server.json, where the person's tools look whatever --log says: the newest
link and the token for the person's own scripts. It dies with the launch, unless a later server on the same
run has written its own there since. uvicorn stops gracefully on SIGTERM and then raises it again for the
handler it found: that handler is an exit here, so the cleanup still runs (the default one would kill the
process).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import sys
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from seqlab.errors import UserError
from seqlab.serving.access import is_loopback
from seqlab.serving.credentials import SERVER_FILE, write_private
from seqlab.serving.state import ServerConfig

if TYPE_CHECKING:
    from seqlab.serving.personal import LearnerLock
    from seqlab.serving.sent_folder import SentSource

__all__ = ["ServerFile", "bind", "check_address", "learning_lock", "serve"]


def serve(config: ServerConfig, open_sent: Callable[[], SentSource] | None = None) -> int:
    """Run the server `config` asks for until it is stopped (Ctrl+C or SIGTERM). `open_sent` logs into
    --sent's folder; `config.port` may be 0 (a free one). The bound port, the lock, the Sent folder and the
    ready line are filled in here."""
    from seqlab.serving.app import create_app
    from seqlab.serving.connections import uvicorn_server

    _check_launch(config, sent_given=open_sent is not None)
    lock = learning_lock(config.run_dir) if config.learn else None
    try:
        sent = open_sent() if open_sent is not None else None
    except BaseException:
        if lock is not None:
            lock.release()
        raise
    sock = bind(config.host, config.port)
    config = replace(config, port=sock.getsockname()[1], learn_lock=lock, sent=sent)
    config.on_ready = lambda info: print(_ready_line(config, info), flush=True)
    info = ServerFile(config.run_dir / "serve" / SERVER_FILE, config)
    url = _first_link(config, info)
    print(f"seqlab serve: loading {config.run_dir}; the compose page is {url}", flush=True)
    once = "" if config.allow_remote else "that link works once, and a new one is printed here each time one is used; "
    print(f"seqlab serve: {once}to pair the browser extension, paste it into its options page; the token for your "
          f"own scripts is in {info.path} (readable by you only)", flush=True)
    server = uvicorn_server(create_app(config))  # what the tests serve too: the flood guards, no access log
    previous = signal.signal(signal.SIGTERM, _exit_on_sigterm)
    try:
        server.run(sockets=[sock])
    finally:
        info.remove_if_ours()  # the token dies with this launch
        signal.signal(signal.SIGTERM, previous)
        if lock is not None:
            lock.release()  # after the app stopped its learner, which saves and then writes nothing more
    return 0


def _check_launch(config: ServerConfig, sent_given: bool) -> None:
    """Everything checked before the lock is taken or anything bound: UserError with one sentence."""
    from seqlab.private_files import warn_if_open

    run_dir = config.run_dir
    if not (run_dir / "config.json").exists():
        raise UserError(f"{run_dir} is not a run folder (no config.json); train one with `seqlab train`")
    warn_if_open(run_dir)  # a RUN_DIR made before seqlab wrote private files: one line and the fix
    if not 0 <= config.port <= 65535:
        raise UserError(f"--port must be between 0 and 65535, not {config.port}")
    check_address(config.host, config.allow_remote)
    if sent_given and not config.learn:
        raise UserError("--sent learns from your Sent folder, which only a learning server does: add --learn")
    if config.phrases is not None:  # missing, unreadable or of another tokenizer: UserError
        from seqlab.data.tokenizer import load_tokenizer
        from seqlab.generation.phrases import PhraseModel

        PhraseModel.load(config.phrases, load_tokenizer(run_dir / "tokenizer.json"))
    if config.memory is not None:
        from seqlab.data.tokenizer import load_tokenizer
        from seqlab.serving.remembered import check_data_dir

        check_data_dir(config.memory, load_tokenizer(run_dir / "tokenizer.json"))


def check_address(host: str, allow_remote: bool) -> None:
    """An address other machines can reach needs --allow-remote (UserError), and is served with a warning."""
    if is_loopback(host):
        return
    if not allow_remote:
        raise UserError(f"--host {host} can be reached from other machines, and the model is the mail it "
                        "was trained on; add --allow-remote if that is what you want")
    print(f"seqlab: warning: serving on {host}: other machines on the network can reach it; every "
          "request needs the token, but it and what is typed cross the network unencrypted", file=sys.stderr)


def learning_lock(run_dir: Path) -> LearnerLock:
    """The run's learning lock (`serving.personal.LearnerLock`), or UserError naming the server that holds it."""
    from seqlab.serving.personal import LearnerLock, LearningElsewhere

    try:
        return LearnerLock(run_dir).acquire()
    except LearningElsewhere as exc:
        who = f"another server (pid {exc.pid})" if exc.pid is not None else "another server"
        raise UserError(f"{who} is already learning on {run_dir}: stop it first, or serve this one without "
                        "--learn") from None


def bind(host: str, port: int) -> socket.socket:
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


class ServerFile:
    """RUN_DIR/serve/server.json for one launch: the newest link, and the token for the person's own scripts."""

    def __init__(self, path: Path, config: ServerConfig) -> None:
        self.path, self.config = path, config

    def record(self, url: str) -> None:
        c = self.config
        write_private(self.path, {"url": url, "host": c.host, "port": c.port, "token": c.token,
                                  "pid": os.getpid(), "run_dir": str(c.run_dir.resolve())})

    def is_ours(self) -> bool:
        """Whether server.json is still this launch's (a later server on the same run writes its own)."""
        try:
            return json.loads(self.path.read_text(encoding="utf-8")).get("token") == self.config.token
        except (OSError, ValueError, AttributeError):
            return False

    def remove_if_ours(self) -> None:
        """Delete server.json unless a later server on the same run has written its own there since."""
        try:
            if json.loads(self.path.read_text(encoding="utf-8")).get("token") == self.config.token:
                self.path.unlink()
        except (OSError, ValueError, AttributeError):
            pass


def _first_link(config: ServerConfig, info: ServerFile) -> str:
    """The compose page's link, recorded in server.json; a one-time code's successors are printed and recorded
    as each is used."""
    host = f"[{config.host}]" if ":" in config.host else config.host
    port = config.port

    def fresh_link(code: str) -> None:  # a link was used (its code is spent): the next one, here and in server.json
        url = f"http://{host}:{port}/?code={code}"
        if info.is_ours():  # a later server on the same run keeps its own file
            info.record(url)
        print(f"seqlab serve: that link has been used; the next one is {url}", flush=True)

    if config.allow_remote:  # the page's files carry the token in their URLs there (`routes.page`)
        url = f"http://{host}:{port}/?token={config.token}"
    else:  # a one-time code: the browser's history keeps nothing usable (`serving.login_codes`)
        url = f"http://{host}:{port}/?code={config.login.issue()}"
        config.login.listen(fresh_link)
    info.record(url)
    return url


def _ready_line(config: ServerConfig, info: dict[str, Any]) -> str:
    """What `serve` prints once the model is loaded: what is served, from where, and above which gate."""
    from seqlab.training.recipe_table import made_by

    gate = ("expected saved characters" if info.get("rule") == "expected-chars" else "confidence")
    sent = config.sent
    return (f"seqlab serve: ready: {info.get('mixer', 'model')} from {config.run_dir} ({made_by(config.run_dir)}), "
            f"suggestions above {gate} "
            f"{info['threshold']:.3f} ({info['threshold_source']})"
            + (f", phrases of {info['phrases']['path']} at weight {info['phrases']['weight']:g}"
               if info.get("phrases") else "")
            + (f", remembering {info['memory']['emails']} emails you wrote" if info.get("memory", {}).get("emails")
               else "")
            + (f"; learning from the emails you mark as sent (kept in {config.run_dir / 'personal'})"
               if config.learn else "")
            + (f" and from new mail in {sent.origin}, read every {config.sent_every_s:g} s" if sent else ""))


def _exit_on_sigterm(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)
