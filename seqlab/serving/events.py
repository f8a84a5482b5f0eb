"""What happened to the server's suggestions: the event log on disk (`EventLog`) and live counters (`ServingStats`).

The log is `LOG_DIR/events.jsonl`, one JSON object per line, appended and flushed line by line so a
killed server loses at most the line it was writing, and a restarted one adds to the same history:

    {"id": "c41", "kind": "completion", "latency_ms": 18.4, "shown": true, "confidence": 0.62, "words": 3}
    {"id": "c41", "kind": "shown", "accepted_chars": 0, "typed_through_chars": 0}
    {"id": "c41", "kind": "accepted", "accepted_chars": 14, "typed_through_chars": 3}

Lines carry no time unless the log is opened with `timestamps=True` (`serve --learn`, where the person
chose to keep their writing): when each suggestion was asked for is when the person typed, a diary of
their day that nothing here needs. With it, every line starts with `"t"` (seconds since the epoch).

A "completion" line is the server's answer (`shown`: it was non-empty, i.e. above the threshold); "shown",
"accepted" and "dismissed" are what the page reports back about that answer. `replay` reads a log back
into a `ServingStats`, so figures can be recomputed offline from the same lines.

Characters are counted as the evaluation counts them (`seqlab.evaluation.saved_chars`): `accepted_chars`
are those the page inserted for the writer (Tab, Ctrl+Right), the characters a suggestion saved;
`typed_through_chars` are those the writer typed by hand while the suggestion showed them (the ghost
shrank, nothing was saved). A suggestion typed out wholly by hand is therefore "dismissed", not
"accepted": the page reports "accepted" only once all of it is in and some of it was inserted. Lines
written before the split have no `typed_through_chars` and replay with 0.

`ServingStats` counts since start, under a lock: completions, suggestions shown (completions with a
non-empty suggestion), suggestions the page displayed ("shown" events), accepted, dismissed, accepted
characters, typed-through characters, requests refused because the queue was full, and latency
percentiles over the newest `window` completions. The acceptance rate is accepted / shown, the server's
own count of what it offered, which does not depend on the page reporting every display.

Checking an event's fields against the API is the app's job; here an unknown kind, a negative character
count or a non-finite number is a `ValueError`, because a log line that cannot be replayed is lost data.
"""

from __future__ import annotations

import json
import math
import os
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Sequence
from pathlib import Path
from typing import Any

LOG_NAME = "events.jsonl"
EVENT_KINDS = ("shown", "accepted", "dismissed")  # what the page reports; "completion" is the server's own
COMPLETION = "completion"
DEFAULT_WINDOW = 10_000
MAX_LOG_BYTES = 16 * 2**20  # one file's size before it is rotated


def _count(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{name} must be an integer >= 0, not {value!r}")
    return value


def _finite(name: str, value: Any, lo: float = -math.inf, hi: float = math.inf) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not lo <= value <= hi:
        raise ValueError(f"{name} must be a finite number in [{lo}, {hi}], not {value!r}")
    return float(value)


def _check_id(completion_id: Any) -> str | int:
    if isinstance(completion_id, bool) or not isinstance(completion_id, (str, int)):
        raise ValueError(f"a completion id must be a string or an integer, not {completion_id!r}")
    return completion_id


class EventLog:
    """Appends one JSON line per completion or event to `log_dir/events.jsonl`; safe to share between threads.

    The log says how the person used the suggestions (never what they wrote), and it is still theirs: the
    folder is created 0700 and the file 0600. Past `max_bytes` it is moved to `events.jsonl.1` (replacing
    the one before) and a new one begun, so a server left running for months keeps at most twice that. A
    line that cannot be written (a full disk) is dropped and counted in `dropped`: a suggestion already
    computed is still answered. A log deleted under a running server (`seqlab forget`) is begun again at
    the next rotation. `timestamps`: whether lines carry their time (module docstring)."""

    def __init__(self, log_dir: Path | str, max_bytes: int = MAX_LOG_BYTES, timestamps: bool = False) -> None:
        self.path = Path(log_dir) / LOG_NAME
        self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        self.max_bytes = max_bytes
        self.timestamps = timestamps
        self.dropped = 0
        self._lock = threading.Lock()
        self._fd = -1
        self._closed = False
        self._open()

    def _open(self) -> None:
        """Open (or create, 0600) the log for appending, on a fresh line if a killed server left a torn one."""
        self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        os.fchmod(self._fd, 0o600)  # an older log, made before this rule, is narrowed too
        self._size = os.fstat(self._fd).st_size
        # A server killed mid-line leaves a torn last line without its newline; start on a fresh line so
        # the torn one stays alone (and `replay` skips it) instead of swallowing the next record.
        self._torn = self._size > 0 and not self._ends_with_newline()

    def _ends_with_newline(self) -> bool:
        with open(self.path, "rb") as f:
            f.seek(-1, 2)
            return f.read(1) == b"\n"

    def _rotate(self) -> None:
        os.close(self._fd)
        self._fd = -1  # never a closed descriptor kept: its number may name another file by the next write
        try:
            os.replace(self.path, self.path.with_name(LOG_NAME + ".1"))
        except FileNotFoundError:
            pass  # deleted under the server (seqlab forget): nothing to keep
        self._open()

    def _write(self, record: dict[str, Any]) -> dict[str, Any]:
        line = (json.dumps(record, ensure_ascii=False, allow_nan=False) + "\n").encode("utf-8")
        with self._lock:  # one write per line under the lock: lines from threads never interleave
            if self._closed:
                raise ValueError(f"the event log {self.path} is closed")
            try:
                if self._fd < 0:  # a rotation that could not open the new file: try again
                    self._open()
                if self._size + len(line) > self.max_bytes and self._size > 0:
                    self._rotate()
                data = b"\n" + line if self._torn else line
                written = os.write(self._fd, data)
                self._size += written
                self._torn = written < len(data)  # a short write (disk full) left a torn line
                if self._torn:
                    self.dropped += 1
            except OSError:
                self.dropped += 1  # a full disk or a vanished folder costs a log line, never the answer
        return record

    def record_event(self, completion_id: str | int, kind: str, accepted_chars: int = 0,
                     typed_through_chars: int = 0) -> dict[str, Any]:
        """Log what the page did with a suggestion (`kind` in EVENT_KINDS; characters inserted and typed
        through, module docstring); returns the record written."""
        if kind not in EVENT_KINDS:
            raise ValueError(f"event kind must be one of {', '.join(EVENT_KINDS)}, not {kind!r}")
        return self._write({**self._time(), "id": _check_id(completion_id), "kind": kind,
                            "accepted_chars": _count("accepted_chars", accepted_chars),
                            "typed_through_chars": _count("typed_through_chars", typed_through_chars)})

    def _time(self) -> dict[str, float]:
        return {"t": time.time()} if self.timestamps else {}

    def record_completion(self, completion_id: str | int, latency_ms: float, shown: bool, confidence: float,
                          words: int) -> dict[str, Any]:
        """Log the server's answer to one completion request (how many words it suggested, never their text:
        what a person writes stays out of the log); returns the record written."""
        if not isinstance(shown, bool):
            raise ValueError(f"shown must be true or false, not {shown!r}")
        words = _count("words", words)
        return self._write({**self._time(), "id": _check_id(completion_id), "kind": COMPLETION,
                            "latency_ms": _finite("latency_ms", latency_ms, 0.0),
                            "shown": shown, "confidence": _finite("confidence", confidence, 0.0, 1.0),
                            "words": words})

    def close(self) -> None:
        with self._lock:
            self._closed = True
            if self._fd >= 0:
                os.close(self._fd)
                self._fd = -1

    def __enter__(self) -> EventLog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class RecentIds:
    """The completion ids the server gave out lately, each good for a few events: an event must name one,
    so a page cannot fill the log or the counters with made-up suggestions."""

    def __init__(self, keep: int = 4096, events_each: int = 4) -> None:
        self.keep, self.events_each = keep, events_each
        self._left: OrderedDict[str, int] = OrderedDict()
        self._lock = threading.Lock()

    def add(self, completion_id: str) -> None:
        with self._lock:
            self._left[completion_id] = self.events_each
            while len(self._left) > self.keep:
                self._left.popitem(last=False)

    def take(self, completion_id: str) -> bool:
        """Whether `completion_id` was given out lately and has events left (one is used up)."""
        with self._lock:
            left = self._left.get(completion_id, 0)
            if left <= 0:
                return False
            self._left[completion_id] = left - 1
            return True


def percentile(values: Sequence[float], q: float) -> float | None:
    """The q-th percentile (0..100) with linear interpolation between order statistics (numpy's default);
    None for no values."""
    if not 0.0 <= q <= 100.0:
        raise ValueError(f"q must be in [0, 100], not {q}")
    if not values:
        return None
    xs = sorted(values)
    h = (len(xs) - 1) * q / 100.0
    lo = math.floor(h)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (h - lo) * (xs[hi] - xs[lo])


class ServingStats:
    """Counters since start and latency percentiles over the newest `window` completions, thread-safe."""

    def __init__(self, window: int = DEFAULT_WINDOW) -> None:
        if window < 1:
            raise ValueError(f"window must be at least 1, not {window}")
        self._lock = threading.Lock()
        self._started = time.monotonic()
        self._latencies: deque[float] = deque(maxlen=window)  # bounded: memory stays flat over weeks
        self._counts = {"completions": 0, "shown": 0, "displayed": 0, "accepted": 0, "dismissed": 0,
                        "accepted_chars": 0, "typed_through_chars": 0, "rejected": 0, "reused_tokens": 0}

    def record_completion(self, latency_ms: float, shown: bool, reused_tokens: int = 0) -> None:
        """One answered completion request; `shown`: it carried a non-empty suggestion; `reused_tokens`:
        prompt tokens whose state came from the session (the server's own figure, never a caller's)."""
        latency = _finite("latency_ms", latency_ms, 0.0)
        reused = _count("reused_tokens", reused_tokens)
        with self._lock:
            self._counts["completions"] += 1
            self._counts["shown"] += bool(shown)
            self._counts["reused_tokens"] += reused
            self._latencies.append(latency)

    def record_event(self, kind: str, accepted_chars: int = 0, typed_through_chars: int = 0) -> None:
        """What the page reported: "shown" (displayed), "accepted" or "dismissed", with the characters of
        the suggestion it inserted and those the writer typed through (module docstring)."""
        if kind not in EVENT_KINDS:
            raise ValueError(f"event kind must be one of {', '.join(EVENT_KINDS)}, not {kind!r}")
        chars = _count("accepted_chars", accepted_chars)
        typed = _count("typed_through_chars", typed_through_chars)
        with self._lock:
            self._counts["displayed" if kind == "shown" else kind] += 1
            self._counts["accepted_chars"] += chars
            self._counts["typed_through_chars"] += typed

    def incr_rejected(self) -> None:
        """One request refused because the work queue was full."""
        with self._lock:
            self._counts["rejected"] += 1

    def snapshot(self) -> dict[str, Any]:
        """Everything as JSON-able values: the counters, acceptance_rate (accepted / shown, None before
        anything was shown), latency_ms {p50, p90, p99 (None before any completion), window, count} and
        uptime_s."""
        with self._lock:
            counts = dict(self._counts)
            latencies = list(self._latencies)
            window = self._latencies.maxlen
        return {
            **counts,
            "acceptance_rate": counts["accepted"] / counts["shown"] if counts["shown"] else None,
            "latency_ms": {"p50": percentile(latencies, 50), "p90": percentile(latencies, 90),
                           "p99": percentile(latencies, 99), "window": window, "count": len(latencies)},
            "uptime_s": time.monotonic() - self._started,
        }


def replay(path: Path | str, window: int = DEFAULT_WINDOW) -> tuple[ServingStats, int]:
    """A `ServingStats` rebuilt from an event log, and the number of lines skipped as unreadable (a torn
    last line of a killed server, or a line that is not one of ours). Refused requests are not logged."""
    stats, skipped = ServingStats(window), 0
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
                if rec["kind"] == COMPLETION:
                    stats.record_completion(rec["latency_ms"], rec["shown"])
                else:
                    stats.record_event(rec["kind"], rec["accepted_chars"], rec.get("typed_through_chars", 0))
            except (json.JSONDecodeError, KeyError, TypeError, ValueError):
                skipped += 1
    return stats, skipped
