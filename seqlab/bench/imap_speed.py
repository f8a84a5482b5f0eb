"""`seqlab prepare imaps://...` against the same mail from a local mbox, on loopback: the IMAP rows of
`seqlab bench --only prepare`.

For each size (by default prepare_speed's two smaller ones, 10,000 and 30,000 messages), a throwaway Dovecot
(`seqlab.bench.dovecot`) is started, the corpus's messages (`synthetic_messages`, seed 0: the same ones as
prepare_speed's mbox of that size) are delivered into its INBOX Maildir and indexed by one SELECT, untimed: a
mail server holds its index before a client comes. Then, back to back, each in a fresh child process with the
process tree's memory sampled (`prepare_speed.measure`): `prepare` of the mbox, and `prepare` of the IMAP folder
over TLS with the password from the environment. Rows:

  IMAP / mbox wall time at the largest size       goal <= 2: the network path costs at most the parse again
  IMAP / mbox process-tree peak at the largest    goal <= 1.25: memory bounded as the mbox path's (bodies are
                                                  fetched in batches and streamed, never a folder at once)
  IMAP process-tree peak growth per kept email    beside the mbox path's, between the two sizes: for the eye,
                                                  as 20,000 emails make a few MB, within the sampling's noise

Without Dovecot (or openssl) there is one row, "skipped: dovecot not installed".
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from seqlab.bench import prepare_speed
from seqlab.bench.dovecot import DovecotError, missing_tools, running_dovecot
from seqlab.bench.harness import row
from seqlab.bench.prepare_corpora import corpus_bytes, write_corpus

SECTION = "prepare"
USER, PASSWORD = "bench", "bench password 7 not kept"  # a throwaway server's user, gone with it
GOAL_RATIO = 2.0  # IMAP prepare at most twice the mbox's wall time on loopback
GOAL_MEMORY_RATIO = 1.25  # and its process tree's peak memory about the mbox path's
MB = 1e6


def _messages(n: int) -> list[bytes]:
    """The first `n` synthetic messages (seed 0) as prepare_speed's mbox stores them after the envelope."""
    from seqlab.data.synthetic.generator import synthetic_messages

    return [raw.rstrip(b"\n") + b"\n\n" for _, raw in synthetic_messages(count=n, seed=0)]


def measure_pair(n: int, mbox: Path, workers: int, scratch: Path) -> dict[str, Any]:
    """Deliver `n` messages to a fresh Dovecot, then time `prepare` of the mbox and of the IMAP folder."""
    with running_dovecot({USER: PASSWORD}) as server:
        server.deliver(_messages(n))
        held = server.index_inbox()
        if held != n:
            raise DovecotError(f"the server holds {held} messages, {n} were delivered")
        env = {**os.environ, "SEQLAB_IMAP_PASSWORD": PASSWORD}
        raw = corpus_bytes(mbox)
        local = prepare_speed.measure(f"mbox-byte-{n}", mbox, "byte", workers, n, scratch)
        url = f"imaps://{USER}@127.0.0.1:{server.port}/INBOX"
        imap = prepare_speed.measure(f"imap-byte-{n}", url, "byte", workers, n, scratch, raw_bytes=raw,
                                     ca_file=server.ca_file, env=env)
    if imap["kept"] != local["kept"]:
        raise DovecotError(f"IMAP kept {imap['kept']} emails, the mbox {local['kept']}: not the same mail")
    return {"messages": n, "mbox": local, "imap": imap, "ratio": imap["wall_s"] / local["wall_s"]}


def run(sizes: list[int], workers: int | None = None, cache: Path = Path("out/bench_prepare_cache")
        ) -> dict[str, Any]:
    """The pairs at each size (ascending); {"skipped": why} without Dovecot, {"failed": why} when it fails."""
    from seqlab.data.prepare.workers import default_workers

    why = missing_tools()
    if why is not None:
        return {"skipped": why}
    workers = workers or default_workers()
    paths = write_corpus(cache, sorted(sizes), 0)
    try:
        pairs = [measure_pair(n, paths[f"mbox-{n}"], workers, cache / "runs") for n in sorted(sizes)]
    except DovecotError as exc:  # the server, not prepare: one failed row, the mbox rows beside it stay
        return {"failed": str(exc).splitlines()[0][:300]}
    small, large = pairs[0], pairs[-1]
    emails = max(large["imap"]["kept"] - small["imap"]["kept"], 1)

    def growth(side: str) -> float:
        return (large[side]["tree_peak_rss_bytes"] - small[side]["tree_peak_rss_bytes"]) / emails

    return {"workers": workers, "pairs": pairs, "imap_growth_bytes_per_email": growth("imap"),
            "mbox_growth_bytes_per_email": growth("mbox")}


def report(result: dict[str, Any]) -> str:
    if "skipped" in result or "failed" in result:
        return f"IMAP prepare: {result}"
    lines = [f"{'IMAP against mbox':<22} {'msgs':>7} {'mbox s':>7} {'IMAP s':>7} {'ratio':>6} "
             f"{'mbox tree MB':>12} {'IMAP tree MB':>12}"]
    for p in result["pairs"]:
        lines.append(f"{'':<22} {p['messages']:7d} {p['mbox']['wall_s']:7.2f} {p['imap']['wall_s']:7.2f} "
                     f"{p['ratio']:6.2f} {p['mbox']['tree_peak_rss_bytes'] / MB:12.0f} "
                     f"{p['imap']['tree_peak_rss_bytes'] / MB:12.0f}")
    lines.append(f"process-tree peak growth per kept email: IMAP {result['imap_growth_bytes_per_email']:.0f} B, "
                 f"mbox {result['mbox_growth_bytes_per_email']:.0f} B")
    return "\n".join(lines)


def rows(result: dict[str, Any]) -> list[dict[str, Any]]:
    """The benchmark table's IMAP rows (module docstring), or the one skipped row."""
    if "skipped" in result:
        return [row(SECTION, "IMAP prepare skipped: dovecot not installed", result["skipped"], 0.0, "skipped")]
    if "failed" in result:
        return [row(SECTION, f"IMAP prepare failed: {result['failed']}", "the local Dovecot", 0.0, "failed")]
    large = result["pairs"][-1]
    n = large["messages"]
    detail = {"messages": n, "imap_wall_s": large["imap"]["wall_s"], "mbox_wall_s": large["mbox"]["wall_s"],
              "sizes": [p["messages"] for p in result["pairs"]]}
    return [
        row(SECTION, f"IMAP / mbox prepare wall time, {n:,} msgs on loopback",
            "imaps:// from a local Dovecot against the same mail's mbox, back to back, fresh processes",
            large["ratio"], "x", f"<= {GOAL_RATIO:g}", **detail),
        row(SECTION, f"IMAP / mbox prepare process-tree peak memory, {n:,} msgs", "RSS summed over the tree",
            large["imap"]["tree_peak_rss_bytes"] / large["mbox"]["tree_peak_rss_bytes"], "x",
            f"<= {GOAL_MEMORY_RATIO:g}", **detail),
        row(SECTION, "IMAP prepare process-tree peak growth per kept email",
            f"between {result['pairs'][0]['messages']:,} and {n:,} msgs (mbox path: "
            f"{result['mbox_growth_bytes_per_email']:.0f} B)",
            result["imap_growth_bytes_per_email"], "B", **detail),
    ]
