"""CPU time per MB of one `prepare` worker, by stage, on a fixed sample of mail (cProfile + process time).

The machine may be shared, so this measures CPU seconds of this one process (`time.process_time`), not
wall time: the worker path (`workers.parse_chunk`: envelope strip, prescan, the simple.py fast path or the
stdlib feed parser, the MIME walk and decoding, cleaning, contexts, dedupe digests, thread links, the spool
record) and the main process's share per message (reading the files, unpickling a worker's results,
dedupe checks and spool writes are measured by bench_prepare.py). Samples:

  enron   N messages in the Enron layout (bench_prepare.enron_message: CRLF, X- headers, no threading headers)
  mbox    the same synthetic messages as bench_prepare's mbox rows
  mime    the same messages made multipart/alternative (text/plain quoted-printable + text/html), as many
          mail clients send them

    python benchmarks/profile_prepare.py [--messages N] [--sample enron|mbox|mime] [--top K] [--repeat R]
"""

from __future__ import annotations

import argparse
import cProfile
import pickle
import pstats
import quopri
import re
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_prepare import enron_message  # noqa: E402

from seqlab.data.mail.reader import CleanOptions  # noqa: E402
from seqlab.data.prepare.workers import parse_chunk  # noqa: E402
from seqlab.data.synthetic.generator import synthetic_messages  # noqa: E402

# Functions whose cumulative time is a stage of the worker path (cProfile's cumulative time per function).
STAGES = {
    "strip envelope": ("extract.py", "strip_envelope"),
    "prescan": ("mime.py", "prescan"),
    "simple.py fast path": ("simple.py", "simple_message"),
    "stdlib feed parser": ("parser.py", "parsebytes"),
    "headers collected": ("extract.py", "collect_headers"),
    "MIME walk + decode": ("extract.py", "body_from_message"),
    "build (all below)": ("reader.py", "_build"),
    "  clean body": ("clean.py", "clean_body"),
    "  quoted context": ("quoted.py", "_context_of"),
    "  addresses": ("mime.py", "parse_addresses"),
    "  header decode": ("mime.py", "decode_header_text"),
    "  date": ("reader.py", "_date"),
    "dedupe digests": ("dedupe.py", "keys"),
    "thread meta": ("thread_keys.py", "from_email"),
    "thread links": ("threadtable.py", "thread_links"),
    "spool record": ("spool.py", "pack_record"),
}


_MIME_HEADERS = re.compile(rb"^(?:MIME-Version|Content-[A-Za-z-]+):.*\n(?:[ \t].*\n)*", re.M | re.I)


def mime_message(raw: bytes) -> bytes:
    """`raw` as multipart/alternative: its body as quoted-printable text/plain and as HTML."""
    head, _, body = raw.partition(b"\n\n")
    head = _MIME_HEADERS.sub(b"", head + b"\n").rstrip(b"\n")
    html = b"<html><body><p>" + body.replace(b"\n\n", b"</p><p>").replace(b"\n", b"<br>\n") + b"</p></body></html>\n"
    parts = [(b"text/plain; charset=\"utf-8\"", quopri.encodestring(body)), (b"text/html; charset=\"utf-8\"",
                                                                            quopri.encodestring(html))]
    out = [head, b"\nMIME-Version: 1.0\nContent-Type: multipart/alternative; boundary=\"=_alt_b0undary\"\n\n"
           b"This is a multi-part message in MIME format.\n"]
    for ctype, data in parts:
        out.append(b"--=_alt_b0undary\nContent-Type: " + ctype + b"\nContent-Transfer-Encoding: quoted-printable\n\n"
                   + data + b"\n")
    out.append(b"--=_alt_b0undary--\n")
    return b"".join(out)


def sample(kind: str, n: int) -> list[tuple[str, bytes]]:
    """`n` (label, raw) items of the named sample."""
    msgs = synthetic_messages(count=n, seed=0)
    if kind == "enron":
        return [(f"maildir/u/inbox/{i}.", enron_message(raw, i)) for i, (_, raw) in enumerate(msgs)]
    if kind == "mime":
        return [(f"m:{i}", mime_message(raw)) for i, (_, raw) in enumerate(msgs)]
    return [(f"m:{i}", raw) for i, (_, raw) in enumerate(msgs)]


def chunks(items: list[tuple[str, bytes]], size: int = 128) -> list[list[tuple[str, bytes]]]:
    return [items[i:i + size] for i in range(0, len(items), size)]


def cpu_per_mb(items: list[tuple[str, bytes]], repeat: int) -> dict[str, float]:
    """CPU seconds per MB of raw mail: parsing, and pickling the results and the raw chunk both ways.

    Each chunk's time is its fastest of `repeat` passes (the least disturbed by other processes on a
    shared machine: process time still grows when a neighbour thrashes the caches), summed over chunks.
    """
    mb = sum(len(raw) for _, raw in items) / 1e6
    opts = CleanOptions()
    parts = chunks(items)
    parse = [float("inf")] * len(parts)
    pickling = [float("inf")] * len(parts)
    for _ in range(repeat):
        for i, c in enumerate(parts):
            t0 = time.process_time()
            r = parse_chunk(c, opts)
            t1 = time.process_time()
            pickle.loads(pickle.dumps(r, protocol=pickle.HIGHEST_PROTOCOL))
            pickle.loads(pickle.dumps(c, protocol=pickle.HIGHEST_PROTOCOL))
            t2 = time.process_time()
            parse[i], pickling[i] = min(parse[i], t1 - t0), min(pickling[i], t2 - t1)
    return {"MB": mb, "parse_s_per_MB": sum(parse) / mb, "pickle_s_per_MB": sum(pickling) / mb,
            "worker_MB_per_cpu_s": mb / sum(parse)}


def profile(items: list[tuple[str, bytes]], top: int) -> None:
    opts = CleanOptions()
    prof = cProfile.Profile()
    prof.enable()
    for c in chunks(items):
        parse_chunk(c, opts)
    prof.disable()
    st = pstats.Stats(prof)
    total = sum(v[3] for k, v in st.stats.items() if k[2] == "parse_chunk")
    mb = sum(len(raw) for _, raw in items) / 1e6
    print(f"\nstages (cumulative seconds under cProfile; parse_chunk total {total:.2f} s for {mb:.1f} MB)")
    for name, (file, func) in STAGES.items():
        cum = sum(v[3] for k, v in st.stats.items() if k[0].endswith(file) and k[2] == func)
        print(f"  {name:<22} {cum:7.3f} s  {100 * cum / max(total, 1e-9):5.1f}%")
    print()
    st.sort_stats("tottime").print_stats(top)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--messages", type=int, default=3000)
    p.add_argument("--sample", choices=("enron", "mbox", "mime"), default="enron")
    p.add_argument("--top", type=int, default=25, help="functions listed by own time")
    p.add_argument("--repeat", type=int, default=5, help="timed passes; each chunk's fastest counts")
    p.add_argument("--no-profile", action="store_true", help="only the CPU time per MB")
    args = p.parse_args(argv)
    items = sample(args.sample, args.messages)
    rate = cpu_per_mb(items, args.repeat)
    print(f"{args.sample}, {args.messages} messages, {rate['MB']:.2f} MB: parse {rate['parse_s_per_MB']:.3f} "
          f"CPU s/MB ({rate['worker_MB_per_cpu_s']:.2f} MB per CPU second of one worker), pickling in+out "
          f"{rate['pickle_s_per_MB']:.3f} CPU s/MB")
    if not args.no_profile:
        profile(items, args.top)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
