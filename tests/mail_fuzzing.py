"""The mail reader's fuzz target: one input -> one message read as `prepare`'s workers read it, then checked.

Shared by the atheris script (`tests/fuzz_mail.py`, `make fuzz`), the hypothesis tests and the replay of the
regression corpus (`tests/test_fuzz_mail.py`). `run_input(data)` raises `FuzzFailure` (or the reader's own
exception) when the message

- crashes: the worker path (`workers.parse_chunk`) raises, or `parse_message` falls back to "unparseable"
  (which it does only when our code raised: the exception is surfaced by reading the message again);
- breaks an invariant: a skip reason that is not a per-message reason, text that is not UTF-8 or holds
  control characters, a body that is not normalized, a subject over one line, or a worker record that
  differs from the in-process one;
- is slow: one parse takes over MAX_SECONDS_PER_MESSAGE;
- grows super-linearly: doubling the repeated part of a pumped input (below) takes over SUPERLINEAR_RATIO
  times as long, measured only when the larger message takes at least MIN_TIMED_SECONDS.

A pumped input is first read at its small size (PUMP_BYTES, 4-32 KB); the pair is read again LARGE_FACTOR
times larger (32-256 KB, and twice that) only when the small pair already grew faster than SUPERLINEAR_RATIO
(too fast to be a verdict there) or for one input in SAMPLE_EVERY (chosen by a digest of the input, so a
replay repeats it). Quadratic work shows its ratio at any size, so the small pair finds it; the sample keeps
costs that only dominate at hundreds of KB in view. This keeps a pumped input near the cost of a dozen plain
ones instead of about a hundred, so a run of 1M executions fits in under an hour on one core.

Times are CPU seconds of this process (`time.process_time`), not wall-clock, with the garbage collector
paused: the machines running the tests are shared, and neither another process holding the CPU nor a full
collection of whatever else this process holds (a fuzzer's heap) may make a message look slow.

Input format, so that a few bytes can describe a large message:

    byte 0   flags: bit 0 keep_quotes, bit 1 keep_signatures, bit 2 mask_pii; values 8-15 mean pumped
             (rare among random bytes: a pumped input costs about a dozen plain ones)
    plain    the rest is the raw message
    pumped   2 + 2 bytes (big-endian): lengths of a prefix and a pump; 1 byte: scale (its top two bits s);
             then prefix, pump, and the rest as suffix. The message is prefix + pump * k + suffix, with k
             giving about PUMP_BYTES * 2**s bytes, and then the same with 2k.
"""

from __future__ import annotations

import gc
import random
import struct
import time
import zlib
from pathlib import Path

from seqlab.data.mail import extract, reader
from seqlab.data.mail.clean import normalize_text
from seqlab.data.mail.mime import MAX_SUBJECT_CHARS
from seqlab.data.mail.reader import SKIP_REASONS, CleanOptions, parse_message
from seqlab.data.mail.records import Email
from seqlab.data.prepare.spool import pack_record
from seqlab.data.prepare.workers import Kept, parse_chunk

MAX_SECONDS_PER_MESSAGE = 2.0  # ordinary mail takes about a millisecond; blow-ups take seconds to minutes
# Linear work doubles; a quadratic part tends to 4x. Above 3x on the best of three timings, the repeated
# part costs more than linear time (cache effects on linear code stay near 2-2.5x).
SUPERLINEAR_RATIO = 3.0
MIN_TIMED_SECONDS = 0.005  # below this, timer resolution and scheduling noise swamp the ratio
PUMP_BYTES = 4 * 1024  # the smaller pumped message at scale 0; at most 8x this, and the larger twice that
LARGE_FACTOR = 8  # the larger pair: 32 KB to 256 KB, and twice that, both below the 2 MiB cap
SAMPLE_EVERY = 16  # one pumped input in this many also reads the larger pair, whatever the small one showed
_PUMPED = 8
_PUMP_HEADER = struct.Struct(">HHB")
FILE_REASONS = frozenset(("hidden_file", "hidden_dir", "not_mail_file", "not_a_file", "unreadable", "csv_error",
                          "csv_short_row"))
MESSAGE_REASONS = SKIP_REASONS - FILE_REASONS - {"unparseable"}
_CONTROL = frozenset(chr(c) for c in [*range(0x00, 0x09), *range(0x0B, 0x20), *range(0x7F, 0xA0)])
LABEL = "fuzz"
DEFAULT = CleanOptions()


class FuzzFailure(AssertionError):
    """An input the reader mishandles; `kind` is crash, invariant, slow or superlinear."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(f"{kind}: {message}")
        self.kind = kind


# ---------------------------------------------------------------- the input format


def options_of(flags: int) -> CleanOptions:
    return CleanOptions(keep_quotes=bool(flags & 1), keep_signatures=bool(flags & 2), mask_pii=bool(flags & 4))


def flags_of(opts: CleanOptions) -> int:
    return opts.keep_quotes | opts.keep_signatures << 1 | opts.mask_pii << 2


def plain_input(raw: bytes, opts: CleanOptions = DEFAULT) -> bytes:
    return bytes([flags_of(opts)]) + raw


def pumped_input(prefix: bytes, pump: bytes, suffix: bytes, opts: CleanOptions = DEFAULT, scale: int = 0) -> bytes:
    """A pumped input; `scale` 0-3 doubles the message size that many times."""
    prefix, pump = prefix[:0xFFFF], pump[:0xFFFF]
    header = _PUMP_HEADER.pack(len(prefix), len(pump), (scale & 3) << 6)
    return bytes([flags_of(opts) | _PUMPED]) + header + prefix + pump + suffix


def pump_reps(prefix: bytes, pump: bytes, suffix: bytes, scale: int = 0, factor: int = 1) -> int:
    return max(1, ((PUMP_BYTES * factor << scale) - len(prefix) - len(suffix)) // max(1, len(pump)))


def sampled(data: bytes) -> bool:
    """Whether this pumped input is one of the SAMPLE_EVERY whose larger pair is always read."""
    return zlib.crc32(data) % SAMPLE_EVERY == 0


# ---------------------------------------------------------------- checks


def _check_text(name: str, text: str) -> None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise FuzzFailure("invariant", f"{name} is not UTF-8: {exc}") from None
    bad = _CONTROL.intersection(text)
    if bad:
        raise FuzzFailure("invariant", f"{name} holds control characters {sorted(bad)!r}")


def check_email(email: Email, opts: CleanOptions) -> None:
    """What every kept email promises the rest of the pipeline."""
    fields = {"id": email.id, "thread": email.thread, "subject": email.subject, "body": email.body,
              "sender": email.sender, "source": email.source, "date": email.date or "",
              "message_id": email.message_id or "", "in_reply_to": email.in_reply_to or ""}
    fields.update({f"recipients[{i}]": r for i, r in enumerate(email.recipients)})
    fields.update({f"references[{i}]": r for i, r in enumerate(email.references)})
    for name, text in fields.items():
        _check_text(name, text)
    if not email.id or not email.thread:
        raise FuzzFailure("invariant", "a kept email without an id or thread")
    if not email.subject and not email.body:
        raise FuzzFailure("invariant", "a kept email with neither subject nor body")
    if "\n" in email.subject or email.subject != email.subject.strip():
        raise FuzzFailure("invariant", f"subject is not one stripped line: {email.subject[:200]!r}")
    if len(email.subject) > MAX_SUBJECT_CHARS and not opts.mask_pii:  # "<EMAIL>" may be longer than "a@b.c"
        raise FuzzFailure("invariant", f"subject of {len(email.subject)} characters")
    if normalize_text(email.body) != email.body:
        raise FuzzFailure("invariant", f"body is not normalized: {email.body[:200]!r}")
    if len(set(email.recipients)) != len(email.recipients):
        raise FuzzFailure("invariant", "duplicate recipients")


def _surface_exception(raw: bytes, opts: CleanOptions) -> FuzzFailure:
    """parse_message said "unparseable", i.e. our code raised: read again without its net to show where."""
    try:
        reader._parse(raw, LABEL, opts)
    except extract.Skip as skip:
        return FuzzFailure("crash", f"unparseable, but a second read skips it as {skip.reason}")
    except Exception as exc:  # noqa: BLE001  the point: whatever it is, it becomes the failure's cause
        failure = FuzzFailure("crash", f"parse_message hid {type(exc).__name__}: {exc}")
        failure.__cause__ = exc
        return failure
    return FuzzFailure("crash", "unparseable, but a second read succeeds")


def _timed_parse(raw: bytes, opts: CleanOptions) -> tuple[float, Email | str]:
    enabled = gc.isenabled()
    gc.disable()
    try:
        start = time.process_time()
        result = parse_message(raw, LABEL, opts)
        return time.process_time() - start, result
    finally:
        if enabled:
            gc.enable()


def check_message(raw: bytes, opts: CleanOptions, worker: bool = True) -> tuple[float, str]:
    """Read one raw message in-process (and through the worker path unless `worker` is false); check it;
    return the CPU seconds of the in-process parse and the outcome ("kept" or the skip reason)."""
    seconds, result = _timed_parse(raw, opts)
    if seconds > MAX_SECONDS_PER_MESSAGE:
        raise FuzzFailure("slow", f"{seconds:.2f} s for one message of {len(raw)} bytes")
    if result == "unparseable":
        raise _surface_exception(raw, opts)
    if isinstance(result, str):
        if result not in MESSAGE_REASONS:
            raise FuzzFailure("invariant", f"skip reason {result!r} is not a per-message reason")
    else:
        check_email(result, opts)
    if worker:
        (kept,) = parse_chunk([(LABEL, raw)], opts)
        if isinstance(result, Email):
            if not isinstance(kept, Kept) or kept.record != pack_record(result):
                raise FuzzFailure("invariant", "the worker path's record differs from the in-process email")
        elif kept != result:
            raise FuzzFailure("invariant", f"the worker path says {kept!r}, in-process says {result!r}")
    return seconds, result if isinstance(result, str) else "kept"


def _best_time(raw: bytes, opts: CleanOptions, tries: int = 3) -> float:
    return min(_timed_parse(raw, opts)[0] for _ in range(tries))


def check_pumped(prefix: bytes, pump: bytes, suffix: bytes, opts: CleanOptions, scale: int = 0,
                 sample: bool = False) -> None:
    """The pumped messages at the small size; at LARGE_FACTOR times that too when the small pair grew too
    fast to be linear but too quickly to time, or when `sample` is set (module docstring)."""
    if not pump:
        check_message(prefix + suffix, opts)
        return
    if _check_pair(prefix, pump, suffix, opts, pump_reps(prefix, pump, suffix, scale)) or sample:
        _check_pair(prefix, pump, suffix, opts, pump_reps(prefix, pump, suffix, scale, LARGE_FACTOR))


def _check_pair(prefix: bytes, pump: bytes, suffix: bytes, opts: CleanOptions, k: int) -> bool:
    """prefix + pump * k + suffix and the same with 2k (2k and 4k when their outcomes differ): all checked, and
    the larger at most SUPERLINEAR_RATIO times slower when it is large enough to time; a pair that is slower
    fails only if 4k is also more than SUPERLINEAR_RATIO times slower than 2k (`_still_superlinear`).
    Returns whether the pair grew faster than SUPERLINEAR_RATIO while too quick to time (a hint to look larger)."""
    small, big = prefix + pump * k + suffix, prefix + pump * (2 * k) + suffix
    (t_small, small_outcome), (t_big, big_outcome) = (check_message(m, opts, worker=False) for m in (small, big))
    if small_outcome != big_outcome:  # a threshold lies between them (a cap, a heuristic): compare the next pair
        k, small, t_small = 2 * k, big, t_big
        big = prefix + pump * (2 * k) + suffix
        t_big, outcome = check_message(big, opts, worker=False)
        if outcome != big_outcome:
            return False
    if t_big <= SUPERLINEAR_RATIO * t_small:
        return False
    if t_big < MIN_TIMED_SECONDS:
        return True
    # One slow timing can be a hiccup (a cold cache, an interrupt): decide on the best of three each.
    t_small, t_big = min(t_small, _best_time(small, opts)), min(t_big, _best_time(big, opts))
    if t_big >= MIN_TIMED_SECONDS and t_big > SUPERLINEAR_RATIO * t_small and _still_superlinear(
            prefix + pump * (4 * k) + suffix, big_outcome, t_big, opts):
        raise FuzzFailure("superlinear", f"{len(small)} bytes took {t_small * 1e3:.1f} ms, {len(big)} bytes took "
                          f"{t_big * 1e3:.1f} ms (pump {pump[:40]!r} x {k} -> x {2 * k})")
    return False


def _still_superlinear(huge: bytes, outcome: str, t_big: float, opts: CleanOptions) -> bool:
    """Confirm a 2x verdict on the next doubling: quadratic work takes over SUPERLINEAR_RATIO times as long again
    (4x), while a one-off step (a size threshold between k and 2k, the outcome unchanged) and a loaded machine's
    noise do not repeat. A 4x message whose outcome differs (a cap lies between) cannot be compared, so the 2x
    verdict stands."""
    t_huge, huge_outcome = check_message(huge, opts, worker=False)
    if huge_outcome != outcome:
        return True
    return min(t_huge, _best_time(huge, opts)) > SUPERLINEAR_RATIO * t_big


def run_input(data: bytes) -> None:
    """The fuzz target: decode the input format above and check the message(s) it describes."""
    if not data:
        return
    flags, rest = data[0], data[1:]
    opts = options_of(flags)
    if flags & 0xF8 != _PUMPED or len(rest) < _PUMP_HEADER.size:
        check_message(rest, opts)
        return
    n_prefix, n_pump, scale = _PUMP_HEADER.unpack_from(rest)
    body = rest[_PUMP_HEADER.size:]
    check_pumped(body[:n_prefix], body[n_prefix:n_prefix + n_pump], body[n_prefix + n_pump:], opts, scale >> 6,
                 sampled(data))


# ---------------------------------------------------------------- seeds and the regression corpus

REGRESSION_DIR = Path(__file__).resolve().parent / "fuzz_corpus" / "mail"
_HEAD = b"From: Alice <alice@example.com>\nTo: bob@example.org\nSubject: pumped\n"
# (prefix, pump, suffix) shapes of the hostile kinds that are large only by repetition, so the fuzzer can
# vary the repeated part cheaply; each is checked for super-linear growth.
PUMP_SEEDS: dict[str, tuple[bytes, bytes, bytes]] = {
    "lines": (_HEAD + b"\n", b"a line of text\n", b"end\n"),
    "quotes": (_HEAD + b"\n", b"> quoted\nOn Monday Bob wrote:\n\n", b"reply\n"),
    "html_comments": (_HEAD + b"Content-Type: text/html\n\n<p>start</p>", b"<!--", b""),
    "html_tags": (_HEAD + b"Content-Type: text/html\n\ntext ", b"</<a ", b""),
    "entities": (_HEAD + b"Content-Type: text/html\n\n", b"<p>&#", b""),
    "pii": (_HEAD + b"\n", b"aaaa@bbb.cc 1-800-555-0100 http://x.org/ ", b"x\n"),
    "header_fold": (_HEAD + b"X-Folded: x\n", b" abc def ghi\n", b"\nbody\n"),
    "content_type_params": (_HEAD + b"Content-Type: text/plain", b";a", b"\n\nbody\n"),
    "parts": (_HEAD + b'MIME-Version: 1.0\nContent-Type: multipart/mixed; boundary="zz"\n\n',
              b"--zz\nContent-Type: text/plain\n\npart\n", b"--zz--\n"),
    "subject_words": (b"From: a@b.c\nSubject: ", b"=?utf-8?q?caf=C3=A9?= ", b"\n\nbody\n"),
    "addresses": (b"From: a@b.c\nSubject: to many\nCc: ", b'"Name (x)" <u@example.com>, ', b"\n\nhi\n"),
    "signature_dashes": (_HEAD + b"\n", b"-- \nline\n", b"end\n"),
}


def seed_inputs() -> dict[str, bytes]:
    """Named fuzz inputs to start from: the light hostile kinds and damaged mixes (tests/hostile_mail.py)
    in every option combination's first byte, and the pump shapes."""
    from hostile_mail import HEAVY, KINDS, _damage

    rng = random.Random(0)
    seeds: dict[str, bytes] = {}
    light = [name for name in KINDS if name not in HEAVY]
    for i, name in enumerate(light):
        seeds[f"kind_{name}"] = plain_input(KINDS[name][0](rng), options_of(i % 8))
    for i in range(40):
        a, b = rng.choice(light), rng.choice(light)
        seeds[f"damaged_{i:02d}"] = plain_input(_damage(KINDS[a][0](rng), rng, KINDS[b][0](rng)), options_of(i % 8))
    for i, (name, parts) in enumerate(PUMP_SEEDS.items()):
        seeds[f"pump_{name}"] = pumped_input(*parts, opts=options_of(i % 8))
    return seeds


def write_inputs(directory: Path, inputs: dict[str, bytes]) -> int:
    """Write `inputs` into `directory` (one file each, named by its key); return how many."""
    directory.mkdir(parents=True, exist_ok=True)
    for name, data in inputs.items():
        (directory / name).write_bytes(data)
    return len(inputs)


def kept_files(directory: Path) -> list[Path]:
    """The inputs kept in a fuzz corpus folder of the repo (hidden files aside), in name order."""
    return sorted(p for p in directory.iterdir() if p.is_file() and not p.name.startswith("."))


def write_seeds(directory: Path) -> int:
    """Write `seed_inputs()` into `directory` (one file each); return how many."""
    return write_inputs(directory, seed_inputs())


def regression_files() -> list[Path]:
    return kept_files(REGRESSION_DIR)
