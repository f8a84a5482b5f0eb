"""A real Dovecot IMAP server for the tests: `dovecot_server()` starts one on free loopback ports, in a temp folder.

The launcher is `seqlab.bench.dovecot` (the IMAP benchmark starts the same server): its own config file, a
throwaway TLS certificate the tests trust through `--ca-file`, passwd-file users (USER and UTF8_USER here) and
Maildir mail under a temp folder. This module adds what only the tests need: skipping without the `dovecot`
binary (or failing when SEQLAB_REQUIRE_IMAP=1, set by .ci/run, which installs Debian's dovecot-imapd), an OAuth2
introspection endpoint for XOAUTH2, and `TcpCutter`, a tiny TCP proxy in front of the server that forwards a
connection's first N server bytes, then closes it: a connection dropped mid-fetch, as a flaky network or a
server restart drops one.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs

import pytest

from seqlab.bench.dovecot import Dovecot, DovecotError, dovecot_binary, free_port, missing_tools, running_dovecot

USER, PASSWORD = "tester", "correct horse 7 battery"
UTF8_USER, UTF8_PASSWORD = "zoe", "Zoë's pässwörd ☃"  # LOGIN takes ASCII only: this one needs SASL PLAIN


def require_dovecot() -> str:
    """The dovecot binary; skip without one, or fail when SEQLAB_REQUIRE_IMAP=1 (CI)."""
    found = dovecot_binary()
    if found is None:
        reason = "dovecot is not installed (Debian: apt-get install dovecot-imapd)"
        if os.environ.get("SEQLAB_REQUIRE_IMAP") == "1":
            pytest.fail(f"SEQLAB_REQUIRE_IMAP=1 but {reason}", pytrace=False)
        pytest.skip(reason)
    why = missing_tools()
    if why is not None:
        pytest.fail(why, pytrace=False)
    return found


@contextlib.contextmanager
def dovecot_server(introspection: str | None = None) -> Iterator[Dovecot]:
    """A running Dovecot with the test users and an empty INBOX; stopped (and its folder removed) after.
    With `introspection` (an http:// URL), XOAUTH2 is offered too, each token checked by a POST there."""
    require_dovecot()
    with contextlib.ExitStack() as stack:
        try:
            server = stack.enter_context(running_dovecot({USER: PASSWORD, UTF8_USER: UTF8_PASSWORD}, introspection))
        except DovecotError as exc:
            pytest.fail(str(exc), pytrace=False)
        yield server


class Introspection:
    """An OAuth2 token introspection endpoint (RFC 7662) on loopback that Dovecot asks about each XOAUTH2
    token: `token` is active for the test user, anything else is not."""

    def __init__(self, token: str) -> None:
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", 0))).decode()
                asked = parse_qs(body).get("token", [""])[0]
                owner.asked.append(asked)
                answer = {"active": "true", "username": USER} if asked == owner.token else {"active": "false"}
                data = json.dumps(answer).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: object) -> None:
                pass

        self.token, self.asked = token, []
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/introspect"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


class TcpCutter:
    """A loopback TCP proxy to `port` that closes each connection after forwarding `cut_after` server bytes.

    `cut_after=None` forwards everything (so a test can switch the cut off and rerun through the same port).
    """

    def __init__(self, port: int, cut_after: int | None) -> None:
        self.target, self.cut_after = port, cut_after
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.port = self.sock.getsockname()[1]
        self.cuts = 0
        self._stop = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self._stop:
            try:
                client, _ = self.sock.accept()
            except OSError:
                return
            upstream = socket.create_connection(("127.0.0.1", self.target))
            limit = self.cut_after
            threading.Thread(target=self._pipe, args=(client, upstream, None), daemon=True).start()
            threading.Thread(target=self._pipe, args=(upstream, client, limit), daemon=True).start()

    def _pipe(self, src: socket.socket, dst: socket.socket, limit: int | None) -> None:
        sent = 0
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                if limit is not None and sent + len(data) >= limit:
                    dst.sendall(data[: limit - sent])
                    self.cuts += 1
                    break
                dst.sendall(data)
                sent += len(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)
                s.close()

    def close(self) -> None:
        self._stop = True
        self.sock.close()


__all__ = ["PASSWORD", "USER", "UTF8_PASSWORD", "UTF8_USER", "Dovecot", "Introspection", "TcpCutter", "dovecot_server",
           "free_port"]
