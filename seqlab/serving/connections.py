"""The server's connections: how `seqlab serve` (and the tests' `running_server`) start uvicorn, so that a
flood of connections from any local user leaves the person's requests answered.

Any user of the machine can connect to the loopback port, and a connection costs the server a file
descriptor whether or not it ever sends a byte: uvicorn times out a connection only between two requests
(`timeout_keep_alive`), never one that has not sent a whole request yet. So a few hundred connections that
send nothing, or half a request line, used to hold the process's descriptors until `accept` failed ("too
many open files") and /health stopped answering. Three things stand against that:

- `raise_fd_limit`: the soft RLIMIT_NOFILE is raised to the hard limit when the server starts (1024, a
  common soft limit, is what an ordinary user can exhaust at once).
- `GuardedHttp`, uvicorn's httptools protocol with a deadline: a connection must deliver a whole request
  (headers and body) within `request_deadline_s` of opening, or of its previous response, and at most
  `max_head_bytes` before its headers end; else it is closed. And at most `max_waiting` connections may
  wait for a request at once: one more closes the one that has waited longest, so however many an
  attacker opens, the descriptors they hold stay bounded and a new connection (the person's) is served.
- uvicorn's `limit_concurrency`: past that many connections and tasks, a request gets 503 at once instead
  of a wait. It is above `max_waiting`, so idle connections alone can never reach it.
"""

from __future__ import annotations

import asyncio
import resource
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import uvicorn
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol


@dataclass(frozen=True)
class ConnectionLimits:
    """What one connection may hold, and for how long (module docstring)."""

    request_deadline_s: float = 10.0  # a browser sends its request at once; a preconnected socket it reopens
    max_head_bytes: int = 128 * 1024  # before a request's headers end: a 64 KiB body and its headers in one read
    max_waiting: int = 256  # connections waiting for a request: a browser opens six per server
    concurrency: int = 512  # uvicorn's limit_concurrency: connections and tasks before a 503
    backlog: int = 128  # uvicorn listens again with its own (2048): bound what one accept burst opens


def raise_fd_limit() -> tuple[int, int]:
    """Raise this process's soft limit of open files to its hard limit; (soft, hard) as they are now."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    # an unlimited hard limit is not a soft one Linux accepts: its ceiling is fs.nr_open
    target = hard if hard != resource.RLIM_INFINITY else _nr_open()
    if soft != resource.RLIM_INFINITY and soft < target:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        except (ValueError, OSError):  # refused: serve with the limit there is
            pass
    return resource.getrlimit(resource.RLIMIT_NOFILE)


def _nr_open() -> int:
    try:
        return int(Path("/proc/sys/fs/nr_open").read_text())
    except (OSError, ValueError):
        return 65536


class GuardedHttp(HttpToolsProtocol):
    """A connection that must deliver each request in time and in bounded size (module docstring). Used
    through `guarded_http`, which gives each server a subclass with its own limits and waiting connections."""

    limits: ClassVar[ConnectionLimits]
    # the connections waiting for a request, in insertion order: the one that has waited longest first
    waiting: ClassVar[dict[GuardedHttp, None]]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._deadline: asyncio.TimerHandle | None = None
        self._head_bytes = 0

    def connection_made(self, transport: asyncio.BaseTransport) -> None:  # type: ignore[override]
        super().connection_made(transport)  # type: ignore[arg-type]
        self._await_request()

    def connection_lost(self, exc: Exception | None) -> None:
        self.waiting.pop(self, None)
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self in self.waiting:
            self._head_bytes += len(data)
            if self._head_bytes > self.limits.max_head_bytes:
                self._drop()
                return
        super().data_received(data)

    def on_headers_complete(self) -> None:
        self.waiting.pop(self, None)  # a request: the deadline now waits for its body only
        super().on_headers_complete()

    def on_response_complete(self) -> None:
        pipelined = bool(self.pipeline)  # a request already read starts now: nothing to wait for
        super().on_response_complete()
        if not pipelined and not self.transport.is_closing():
            self._await_request()

    def _await_request(self) -> None:
        """Wait for the next request: with a deadline, and among the waiting, of which the oldest goes."""
        waiting = self.waiting
        self._head_bytes = 0
        waiting.pop(self, None)
        waiting[self] = None
        while len(waiting) > self.limits.max_waiting:
            oldest = next(iter(waiting))
            waiting.pop(oldest)
            oldest._drop()
        if self._deadline is not None:
            self._deadline.cancel()
        self._deadline = self.loop.call_later(self.limits.request_deadline_s, self._on_deadline)

    def _on_deadline(self) -> None:
        self._deadline = None
        cycle = self.cycle
        unread_body = cycle is not None and cycle.more_body and not cycle.response_started
        if self in self.waiting or unread_body:  # no whole request in time: headers or body still missing
            self.waiting.pop(self, None)
            self._drop()

    def _drop(self) -> None:
        if not self.transport.is_closing():
            self.transport.close()


def guarded_http(limits: ConnectionLimits) -> type[GuardedHttp]:
    """uvicorn's httptools protocol under `limits`: a class of its own per server, whose connections waiting
    for a request are counted together (and apart from another server's in the same process)."""
    class ServerHttp(GuardedHttp):
        pass

    ServerHttp.limits, ServerHttp.waiting = limits, {}
    return ServerHttp


def uvicorn_server(app: Any, limits: ConnectionLimits | None = None) -> uvicorn.Server:
    """The uvicorn server `seqlab serve` runs `app` with (the tests serve the same): the file limit raised, a
    guarded protocol, no access log (it would hold the URLs the person opened) and no Server header (nothing
    to fingerprint). Run it with `server.run(sockets=[a bound socket])`."""
    limits = limits or ConnectionLimits()
    raise_fd_limit()
    config = uvicorn.Config(app, log_level="warning", access_log=False, server_header=False,
                            http=guarded_http(limits), limit_concurrency=limits.concurrency,
                            backlog=limits.backlog)
    return uvicorn.Server(config)
