"""What the server's routes share: its configuration, its state, and the one model worker they queue on.

Model work runs on one worker thread with a fixed torch thread count (`run_unless_gone`): requests queue
in order, and a request whose client has gone before its turn is dropped without running.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fastapi import Request

from seqlab.serving.credentials import PAIRED_FILE, PairingStore, config_dir, new_token
from seqlab.serving.engine import CompletionEngine
from seqlab.serving.events import EventLog, RecentIds, ServingStats
from seqlab.serving.learner import Learner, LearnSettings
from seqlab.serving.limits import RateLimit
from seqlab.serving.login_codes import LoginCodes
from seqlab.serving.personal import LearnerLock, PersonalStore
from seqlab.serving.sessions import MAX_SESSION_BYTES

if TYPE_CHECKING:  # the mail reader loads only for a server given --sent
    from seqlab.serving.sent_folder import SentFolder, SentSource


@dataclass
class ServerConfig:
    """Everything `seqlab serve` passes to the app.

    `host` and `port` are where the server listens: the gate admits only requests addressed to them
    (`access.AccessPolicy`). `token` is this launch's secret; `pairing_file` the paired extensions (default
    `$SEQLAB_CONFIG_DIR/paired.json`)."""

    run_dir: Path
    threads: int = 1
    max_queue: int = 8
    min_confidence: float | None = None
    log_dir: Path | None = None
    max_sessions: int = 256
    max_session_bytes: int = MAX_SESSION_BYTES
    host: str = "127.0.0.1"
    port: int = 8000
    token: str = field(default_factory=new_token, repr=False)
    login: LoginCodes = field(default_factory=LoginCodes, repr=False)  # the page's one-time codes and credentials
    allow_remote: bool = False
    pairing_file: Path | None = None
    learn: bool = False  # keep the person's sent emails and learn from them while idle (`learner.py`)
    learn_settings: LearnSettings = field(default_factory=LearnSettings)
    # the run's learning lock, already held (`seqlab serve` takes it before it binds, so a second learning
    # server is refused with a sentence); None: the app takes it itself when it starts learning
    learn_lock: LearnerLock | None = field(default=None, repr=False)
    # --sent: the person's Sent folder, opened (logged into) by `seqlab serve`, read every `sent_every_s`
    # seconds while learning (`sent_folder.py`)
    sent: SentSource | None = field(default=None, repr=False)
    sent_every_s: float = 30.0
    phrases: Path | None = None  # a phrase cache (`seqlab phrases`) blended into every suggestion
    phrase_weight: float = 0.3
    # --memory: the person's prepared mail, whose train split fills the memory of their writing (with the
    # personal store's emails under --learn; `remembered.py`)
    memory: Path | None = None
    on_ready: Callable[[dict[str, Any]], None] | None = None  # told the model's description once loaded

    def pairings(self) -> PairingStore:
        return PairingStore(self.pairing_file or config_dir() / PAIRED_FILE)


@dataclass
class ServerState:
    """What the routes share; `engine` is None while the run loads, `failed` says why loading failed."""

    config: ServerConfig
    worker: ThreadPoolExecutor
    stats: ServingStats = field(default_factory=ServingStats)
    engine: CompletionEngine | None = None
    info: dict[str, Any] = field(default_factory=dict)
    failed: str | None = None
    waiting: int = 0
    events: EventLog | None = None
    pairings: PairingStore | None = None
    issued: RecentIds = field(default_factory=RecentIds)  # completion ids an event may name
    learner: Learner | None = None
    personal: PersonalStore | None = None
    sent_rate: RateLimit | None = None  # /v1/sent's per-caller rate (under --learn)
    sent_folder: SentFolder | None = None  # what reads the Sent folder (with --sent)
    learn_lock: LearnerLock | None = None  # the learning lock this app took itself (released when it stops)
    last_request: float = field(default_factory=time.monotonic)  # when a model request last came in

    def idle(self) -> bool:
        """No request waiting, and none for the learner's quiet time: learning may take a step."""
        quiet = self.config.learn_settings.idle_s
        return self.waiting == 0 and time.monotonic() - self.last_request >= quiet


async def run_unless_gone(s: ServerState, request: Request, work: Callable[[], Any]) -> Any:
    """Run `work` on the model thread in turn; None if the client disconnected before it started.

    With nothing else waiting, the idle worker starts the work at once and nobody can leave before their
    turn: the future is awaited alone, without the disconnect watcher (two more tasks and a wait on
    both, paid at every keystroke otherwise)."""
    s.last_request = time.monotonic()
    if s.waiting == 0:
        s.waiting += 1
        try:
            return await asyncio.wrap_future(s.worker.submit(work))
        finally:
            s.waiting -= 1
    gone = threading.Event()
    started = threading.Event()

    def guarded() -> Any:
        if gone.is_set():
            return None
        started.set()
        return work()

    s.waiting += 1
    future: Awaitable[Any] = asyncio.wrap_future(s.worker.submit(guarded))
    try:
        watcher = asyncio.ensure_future(_disconnected(request))
        done, _ = await asyncio.wait({asyncio.ensure_future(future), watcher}, return_when=asyncio.FIRST_COMPLETED)
        if watcher in done and not started.is_set():
            gone.set()  # not started yet: the worker will skip it
        watcher.cancel()
        return await future
    finally:
        s.waiting -= 1


async def _disconnected(request: Request) -> None:
    """Return once the client has closed the connection (the body has already been read)."""
    while True:
        message = await request.receive()
        if message["type"] == "http.disconnect":
            return
