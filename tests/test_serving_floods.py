"""Connection floods against a real server on loopback, as any local user could send them: connections that
send nothing, half a request line, headers without end or a body that never comes. The person's /health and
/v1/complete are still answered, and no such connection is kept for long (`seqlab.serving.connections`)."""

from __future__ import annotations

import resource
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
from serving_helpers import auth, running_server, served

from seqlab.serving.app import ServerConfig
from seqlab.serving.connections import ConnectionLimits

FLOOD = 1_100  # idle connections: more than the soft limit of open files most systems give (1024)
WAIT_S = 60.0  # what the test waits for any one answer (not a measurement)


@contextmanager
def _own_fd_limit(at_least: int) -> Iterator[None]:
    """The test (the attacker) raises its own soft limit of open files to hold the flood, then restores it."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    assert hard == resource.RLIM_INFINITY or hard >= at_least, f"the flood needs {at_least} open files, not {hard}"
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, at_least), hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def _connect(port: int) -> socket.socket:
    return socket.create_connection(("127.0.0.1", port), timeout=WAIT_S)


def _closed_by_server(sock: socket.socket) -> bool:
    """Whether the server has closed `sock` (waits up to WAIT_S for it)."""
    sock.settimeout(WAIT_S)
    try:
        return sock.recv(65536) == b""
    except (ConnectionResetError, BrokenPipeError):
        return True
    except TimeoutError:
        return False


def _still_open(sock: socket.socket) -> bool:
    """Whether `sock` is open now, nothing received (no wait)."""
    sock.setblocking(False)
    try:
        sock.recv(1)
    except BlockingIOError:
        return True
    except OSError:
        return False
    return False


def test_serve_raises_its_file_limit(word_run_dir: Path, tmp_path: Path) -> None:
    """Started with the common soft limit of 1024, `seqlab serve` runs with its soft limit at the hard one."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(1024, hard), hard))
    try:
        with served(word_run_dir, tmp_path / "log", "--min-confidence", "0") as s:
            raised, same_hard = resource.prlimit(s.proc.pid, resource.RLIMIT_NOFILE)
            assert same_hard == hard and (raised == hard or hard == resource.RLIM_INFINITY and raised > 1024)
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_a_flood_of_idle_and_half_open_connections_leaves_the_server_answering(word_run_dir: Path,
                                                                               tmp_path: Path) -> None:
    """1,100 idle connections and 100 with half a request, to `seqlab serve` held to 1024 open files (as on
    a system whose hard limit is that): /health and the person's /v1/complete are answered meanwhile."""
    with served(word_run_dir, tmp_path / "log", "--min-confidence", "0") as s, _own_fd_limit(FLOOD + 400):
        resource.prlimit(s.proc.pid, resource.RLIMIT_NOFILE, (1024, 1024))
        port = int(s.url.rsplit(":", 1)[1])
        flood: list[socket.socket] = []
        try:
            for i in range(FLOOD + 100):
                sock = _connect(port)
                flood.append(sock)
                if i >= FLOOD:  # half a request line, or a request line and part of its headers
                    sock.sendall(b"GET /hea" if i % 2 else b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n")
            health = httpx.get(f"{s.url}/health", timeout=WAIT_S)
            assert health.status_code == 200 and health.json()["status"] == "ok"
            answer = httpx.post(f"{s.url}/v1/complete", headers=s.headers(), timeout=WAIT_S,
                                json={"prefix": "Hi Dana, the"})
            assert answer.status_code == 200 and "text" in answer.json()
            assert sum(_closed_by_server(sock) for sock in flood[:100]) == 100  # the oldest were let go
        finally:
            for sock in flood:
                sock.close()
        assert s.proc.poll() is None and httpx.get(f"{s.url}/health", timeout=WAIT_S).status_code == 200


def test_a_connection_without_a_whole_request_in_time_is_closed(word_run_dir: Path, tmp_path: Path) -> None:
    config = ServerConfig(word_run_dir, min_confidence=0.0, log_dir=tmp_path)
    with running_server(config, limits=ConnectionLimits(request_deadline_s=0.5)) as url:
        port = config.port
        silent = _connect(port)
        half_line = _connect(port)
        half_line.sendall(b"GET /heal")
        no_body = _connect(port)  # a whole head, then 10 of the 100 bytes it promised
        token = auth(config)["Authorization"]
        no_body.sendall(f"POST /v1/complete HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nAuthorization: {token}\r\n"
                        "Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"prefix\":".encode())
        endless = _connect(port)  # headers that never end: closed past 128 KiB, long before the deadline
        try:
            endless.sendall(b"GET / HTTP/1.1\r\nX-Pad: " + b"a" * (512 * 1024))
        except (ConnectionResetError, BrokenPipeError):
            pass
        for sock in (silent, half_line, no_body, endless):
            assert _closed_by_server(sock)
            sock.close()
        # a keep-alive connection that answered one request and then sends half of the next
        with socket.create_connection(("127.0.0.1", port), timeout=WAIT_S) as again:
            again.sendall(f"GET /health HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n".encode())
            answer = b""
            while not answer.endswith(b'{"status":"ok"}'):  # the head and the body may come apart
                answer += again.recv(65536)
            assert answer.startswith(b"HTTP/1.1 200")
            again.sendall(b"GET /hea")
            assert _closed_by_server(again)
        assert httpx.get(f"{url}/health", timeout=WAIT_S).status_code == 200


def test_past_max_waiting_the_longest_waiting_connection_goes(word_run_dir: Path, tmp_path: Path) -> None:
    config = ServerConfig(word_run_dir, min_confidence=0.0, log_dir=tmp_path)
    with running_server(config, limits=ConnectionLimits(max_waiting=8, request_deadline_s=600)) as url:
        idle = [_connect(config.port) for _ in range(20)]
        try:
            health = httpx.get(f"{url}/health", headers={"Connection": "close"}, timeout=WAIT_S)
            assert health.status_code == 200  # the newest connection is served
            assert all(_closed_by_server(sock) for sock in idle[:12])  # the oldest were closed to make room
            assert all(_still_open(sock) for sock in idle[-6:])  # the newest still wait
        finally:
            for sock in idle:
                sock.close()
