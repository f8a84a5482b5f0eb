"""Who may use the server: the per-launch token, the file that hands it to the person's own tools, and the
browser extensions the person has paired.

- The launch token is 256 random bits (`new_token`), made when `seqlab serve` starts and printed in the URL
  of the compose page. Whoever holds it is the person: the page reads it from the URL it was opened with,
  and the person's own scripts from `server.json`, written mode 0600 into the run's `serve/` folder (0700).
- A paired extension shares a pairing secret with the server, derived at pairing from the pasted URL's secret
  without either being sent (`signing.py`), and signs each request with it; the server keeps the secret with
  the extension's origin under a public pairing id in `paired.json` in the person's config folder
  (`$SEQLAB_CONFIG_DIR`, else `~/.config/seqlab`), mode 0600, so the pairing outlives this launch and this
  run; a signed request counts only from the origin it was paired with.

Files holding secrets are created with their final mode (never chmod-ed after the fact, which would leave a
moment when another user could open them) and replaced atomically, so a crash leaves the old or the new one.
"""

from __future__ import annotations

import hmac
import json
import os
import secrets
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from seqlab.durable import atomic_write_bytes
from seqlab.serving.signing import SECRET_BYTES, b64, unb64

TOKEN_BYTES = 32  # 256 bits, as Jupyter's token (at least 128 bits against guessing)
SERVER_FILE = "server.json"
PAIRED_FILE = "paired.json"
EXTENSION_SCHEMES = ("chrome-extension://", "moz-extension://", "safari-web-extension://")
MAX_PAIRED = 64  # a person pairs a handful of browsers; a bounded file stays cheap to read on every miss


def new_token() -> str:
    """A fresh random secret, URL-safe (43 characters for 256 bits)."""
    return secrets.token_urlsafe(TOKEN_BYTES)


def same_secret(given: str, expected: str) -> bool:
    """Whether `given` is `expected`, in time that does not depend on where they first differ."""
    return hmac.compare_digest(given.encode("utf-8", "replace"), expected.encode("utf-8"))


def is_extension_origin(origin: str) -> bool:
    """An origin of a browser extension: the scheme and an id, nothing after it."""
    for scheme in EXTENSION_SCHEMES:
        if origin.startswith(scheme):
            ident = origin[len(scheme):]
            return bool(ident) and all(c.isalnum() or c == "-" for c in ident)
    return False


def config_dir() -> Path:
    """The person's seqlab config folder: $SEQLAB_CONFIG_DIR, else ~/.config/seqlab."""
    env = os.environ.get("SEQLAB_CONFIG_DIR")
    return Path(env) if env else Path.home() / ".config" / "seqlab"


def write_private(path: Path, data: dict[str, Any]) -> None:
    """Write `data` as JSON to `path`, readable by this user only, replacing any old file atomically."""
    write_private_bytes(path, json.dumps(data, indent=1).encode("utf-8"))


def write_private_bytes(path: Path, data: bytes) -> None:
    """Write `data` to `path`, readable by this user only (folder 0700, file created 0600), replacing any old
    file atomically (`durable.atomic_write_bytes`: a kill leaves the old file or the new one, never a mix)."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    atomic_write_bytes(path, data, mode=0o600)


@dataclass(frozen=True)
class Pairing:
    """One paired extension: its public id, origin, the label it gave, when, and the shared secret."""

    id: str
    origin: str
    name: str
    created: float
    secret: bytes = field(repr=False)

    def row(self) -> dict[str, Any]:
        return {"id": self.id, "origin": self.origin, "name": self.name, "created": self.created,
                "secret": b64(self.secret)}


def _pairing(row: dict[str, Any]) -> Pairing | None:
    """A row of paired.json, or None for one of an older kind (a hashed bearer key: that extension pairs again)."""
    secret = unb64(row["secret"]) if isinstance(row.get("secret"), str) else None
    if secret is None or len(secret) != SECRET_BYTES or not isinstance(row.get("id"), str):
        return None
    return Pairing(row["id"], str(row["origin"]), str(row.get("name", "")), float(row.get("created", 0)), secret)


class PairingStore:
    """The paired extensions in `path` (paired.json); safe to share between threads.

    Every lookup first checks the file's modification time (one stat, a few microseconds) and rereads it
    when it changed, so a pairing made or removed by another running server, or by editing the file,
    counts at once."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._by_id: dict[str, Pairing] = {}
        self._mtime: tuple[int, int, int] | None = None  # what the table was read from: (mtime, size, inode)
        self._load()

    def _load(self) -> None:
        try:
            stat = self.path.stat()
        except FileNotFoundError:
            self._by_id, self._mtime = {}, None
            return
        if (stat.st_mtime_ns, stat.st_size, stat.st_ino) == self._mtime:
            return
        try:
            rows = json.loads(self.path.read_text(encoding="utf-8")).get("paired", [])
            table = {p.id: p for p in map(_pairing, rows) if p is not None}
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            table = {}  # an unreadable file pairs nothing: refusing is the safe way to fail
        self._by_id, self._mtime = table, (stat.st_mtime_ns, stat.st_size, stat.st_ino)

    def _save(self) -> None:
        rows = [p.row() for p in sorted(self._by_id.values(), key=lambda p: p.created)]
        write_private(self.path, {"paired": rows})
        stat = self.path.stat()
        self._mtime = (stat.st_mtime_ns, stat.st_size, stat.st_ino)

    @property
    def origins(self) -> frozenset[str]:
        with self._lock:
            self._load()
            return frozenset(p.origin for p in self._by_id.values())

    def lookup(self, pairing_id: str) -> Pairing | None:
        """The pairing named `pairing_id`, or None."""
        with self._lock:
            self._load()
            return self._by_id.get(pairing_id)

    def pair(self, origin: str, name: str, derive: Callable[[str], bytes]) -> Pairing:
        """A new pairing for `origin`, under a fresh id, whose secret is `derive(id)`."""
        if not is_extension_origin(origin):
            raise ValueError(f"only a browser extension can be paired, not {origin!r}")
        pairing_id = secrets.token_urlsafe(12)
        pairing = Pairing(pairing_id, origin, name[:200], time.time(), derive(pairing_id))
        with self._lock:
            self._load()
            if len(self._by_id) >= MAX_PAIRED:  # forget the oldest rather than grow without bound
                oldest = min(self._by_id.values(), key=lambda p: p.created)
                del self._by_id[oldest.id]
            self._by_id[pairing_id] = pairing
            self._save()
        return pairing

    def unpair(self, pairing_id: str) -> bool:
        """Forget the pairing `pairing_id`; whether there was one."""
        with self._lock:
            self._load()
            if self._by_id.pop(pairing_id, None) is None:
                return False
            self._save()
            return True

    def entries(self) -> list[Pairing]:
        with self._lock:
            self._load()
            return sorted(self._by_id.values(), key=lambda p: p.created)
