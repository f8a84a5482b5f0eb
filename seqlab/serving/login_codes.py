"""How the compose page logs in without the launch token ever appearing in a URL: one-time login codes.

`seqlab serve` prints `http://127.0.0.1:PORT/?code=CODE`. The page trades the code, once, for a page
credential (`POST /login`, `routes.login`), keeps that in its tab's sessionStorage and sends it as
`Authorization: Bearer`. The code is spent by then, so the browser's history, a bookmark or anything else that
saw the URL (a service worker left on the origin, say) holds nothing usable. Each time a code is spent a fresh
one is issued and the listener is told (the CLI prints the new link and writes it into server.json), so the
person always has a link to open another tab with. The browser extension's pairing may spend a code too.

Codes and credentials are 256 random bits, kept only in this process's memory, so they die with the launch
(credentials as SHA-256 digests; codes as they are, since pairing computes an HMAC with each); both tables
are bounded, the oldest entry dropped first.
"""

from __future__ import annotations

import hashlib
import secrets
import threading
from collections import OrderedDict
from collections.abc import Callable

from seqlab.serving.credentials import same_secret

CODE_BYTES = 32  # 256 bits: far beyond guessing (at least 128 bits asked), 43 URL-safe characters
MAX_CODES = 8  # outstanding codes: one a time in ordinary use, a few when several listeners ask
MAX_CREDENTIALS = 64  # compose tabs logged in at once; the oldest is logged out past this


def _digest(secret: str) -> str:
    return hashlib.sha256(secret.encode("utf-8", "replace")).hexdigest()


class LoginCodes:
    """The outstanding one-time codes and the page credentials they were traded for; safe across threads."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._codes: OrderedDict[str, None] = OrderedDict()
        self._credentials: OrderedDict[str, None] = OrderedDict()
        self._listeners: list[Callable[[str], None]] = []

    def listen(self, listener: Callable[[str], None]) -> None:
        """Call `listener(code)` with the fresh code issued each time one is spent."""
        self._listeners.append(listener)

    def issue(self) -> str:
        """A new outstanding code (the oldest is forgotten past MAX_CODES)."""
        code = secrets.token_urlsafe(CODE_BYTES)
        with self._lock:
            self._codes[code] = None
            while len(self._codes) > MAX_CODES:
                self._codes.popitem(last=False)
        return code

    def take(self, code: str) -> bool:
        """Spend `code` if it is outstanding (then a fresh one is issued for the listeners); whether it was."""
        return self.take_matching(lambda outstanding: same_secret(code, outstanding)) is not None

    def take_matching(self, matches: Callable[[str], bool]) -> str | None:
        """Spend the outstanding code that `matches` accepts and return it, or None. Pairing uses it: the
        extension proves it holds the pasted code without sending it, so each outstanding code is tried."""
        with self._lock:
            found = next((code for code in self._codes if matches(code)), None)
            if found is None:
                return None
            del self._codes[found]
        if self._listeners:
            fresh = self.issue()
            for listener in self._listeners:
                listener(fresh)
        return found

    def login(self, code: str) -> str | None:
        """Trade an outstanding code for a new page credential; None when the code is not (or no longer) one."""
        if not self.take(code):
            return None
        credential = secrets.token_urlsafe(CODE_BYTES)
        with self._lock:
            self._credentials[_digest(credential)] = None
            while len(self._credentials) > MAX_CREDENTIALS:
                self._credentials.popitem(last=False)
        return credential

    def is_credential(self, secret: str) -> bool:
        """Whether `secret` is a page credential of this launch."""
        if not secret:
            return False
        digest = _digest(secret)
        with self._lock:
            return digest in self._credentials
