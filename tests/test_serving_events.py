"""The suggestion event log and live stats: percentiles against numpy, the acceptance rate, many threads
writing one log (every line whole, none lost), appending across restarts, and a log replayed into the same
stats as were counted live."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest
from disk_faults import FullDisk
from serving_helpers import ready_client

from seqlab.serving.app import ServerConfig
from seqlab.serving.events import LOG_NAME, EventLog, ServingStats, percentile, replay


def _lines(log_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (log_dir / LOG_NAME).read_text(encoding="utf-8").splitlines()]


@pytest.mark.parametrize("n", [1, 2, 7, 100, 1001])
def test_percentiles_match_numpy(n: int) -> None:
    values = np.random.default_rng(n).lognormal(3.0, 1.0, size=n).tolist()
    for q in (0, 50, 90, 99, 100):
        assert percentile(values, q) == pytest.approx(float(np.percentile(values, q)), rel=1e-12)
    assert percentile([], 50) is None
    with pytest.raises(ValueError):
        percentile(values, 101)


def test_latency_percentiles_cover_the_newest_window_only() -> None:
    stats = ServingStats(window=100)
    latencies = np.random.default_rng(0).exponential(20.0, size=350).tolist()
    for i, ms in enumerate(latencies):
        stats.record_completion(ms, shown=i % 3 == 0)
    snap = stats.snapshot()
    newest = latencies[-100:]
    for name, q in (("p50", 50), ("p90", 90), ("p99", 99)):
        assert snap["latency_ms"][name] == pytest.approx(float(np.percentile(newest, q)), rel=1e-12)
    assert snap["latency_ms"]["count"] == snap["latency_ms"]["window"] == 100
    assert snap["completions"] == 350 and snap["shown"] == 117


def test_counters_and_acceptance_rate() -> None:
    stats = ServingStats()
    empty = stats.snapshot()
    assert empty["acceptance_rate"] is None and empty["latency_ms"]["p50"] is None
    for shown in (True, True, True, True, False):
        stats.record_completion(10.0, shown)
    stats.record_event("shown")
    stats.record_event("accepted", accepted_chars=12)
    stats.record_event("accepted", accepted_chars=5)
    stats.record_event("dismissed")
    stats.incr_rejected()
    snap = stats.snapshot()
    assert snap["acceptance_rate"] == pytest.approx(2 / 4)
    assert (snap["completions"], snap["shown"], snap["displayed"], snap["accepted"], snap["dismissed"],
            snap["accepted_chars"], snap["rejected"]) == (5, 4, 1, 2, 1, 17, 1)
    json.dumps(snap, allow_nan=False)  # JSON-able as it is
    with pytest.raises(ValueError):
        stats.record_event("clicked")


@pytest.mark.parametrize("timestamps", [False, True])
def test_event_log_lines(tmp_path: Path, timestamps: bool) -> None:
    log_dir = tmp_path / "new" / "logs"  # created on open
    with EventLog(log_dir, timestamps=timestamps) as log:
        log.record_completion("c1", 18.5, True, 0.62, 3)
        log.record_event("c1", "accepted", accepted_chars=14)
    first, second = _lines(log_dir)
    assert first["kind"] == "completion" and first["words"] == 3 and first["shown"] is True
    assert {k: second[k] for k in ("id", "kind", "accepted_chars")} == {"id": "c1", "kind": "accepted",
                                                                        "accepted_chars": 14}
    if timestamps:
        assert isinstance(second["t"], float) and second["t"] >= first["t"]
    else:  # when the person typed is kept nowhere
        assert "t" not in first and "t" not in second


@pytest.mark.parametrize("learn", [False, True])
def test_a_server_keeps_completion_times_only_when_it_learns(word_run_dir: Path, tmp_path: Path,
                                                           learn: bool) -> None:
    run = tmp_path / "run"
    shutil.copytree(word_run_dir, run, ignore=shutil.ignore_patterns("serve", "personal"))
    with ready_client(ServerConfig(run, min_confidence=0.0, log_dir=tmp_path / "log", learn=learn)) as client:
        answer = client.post("/v1/complete", json={"prefix": "Hi Dana, the"}).json()
        assert client.post("/v1/events", json={"id": answer["id"], "kind": "shown"}).status_code == 200
        stats = client.get("/v1/stats").json()
        assert stats["completions"] == 1 and stats["displayed"] == 1  # the counters need no time
    lines = _lines(tmp_path / "log")
    assert [r["kind"] for r in lines] == ["completion", "shown"]
    assert all(("t" in r) == learn for r in lines)


def test_forget_clears_the_event_log_and_its_rotation(word_run_dir: Path, tmp_path: Path) -> None:
    run = tmp_path / "run"
    shutil.copytree(word_run_dir, run, ignore=shutil.ignore_patterns("serve", "personal"))
    with EventLog(run / "serve", max_bytes=300) as log:  # where `seqlab serve` keeps it without --log
        for i in range(10):
            log.record_event(f"c{i}", "shown")
    assert (run / "serve" / LOG_NAME).stat().st_size and (run / "serve" / (LOG_NAME + ".1")).stat().st_size
    done = subprocess.run([sys.executable, "-m", "seqlab", "forget", str(run)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert "serve/events.jsonl" in done.stdout and "serve/events.jsonl.1" in done.stdout
    assert not (run / "serve" / LOG_NAME).exists() and not (run / "serve" / (LOG_NAME + ".1")).exists()


def test_a_log_deleted_under_the_server_is_begun_again_at_rotation(tmp_path: Path) -> None:
    with EventLog(tmp_path, max_bytes=300) as log:
        log.record_event("a", "shown")
        (tmp_path / LOG_NAME).unlink()  # `seqlab forget` while a plain server runs
        for i in range(10):
            log.record_event(f"b{i}", "shown")
        assert log.dropped == 0
    assert [r["id"] for r in _lines(tmp_path)][-1] == "b9"  # a new log, written to


@pytest.mark.parametrize("call", [
    lambda log: log.record_event("c1", "clicked"),
    lambda log: log.record_event("c1", "completion"),  # the server's own kind, not an event
    lambda log: log.record_event("c1", "accepted", accepted_chars=-1),
    lambda log: log.record_event(None, "shown"),
    lambda log: log.record_completion("c1", float("nan"), True, 0.5, 0),
    lambda log: log.record_completion("c1", 3.0, True, 1.5, 0),
    lambda log: log.record_completion("c1", 3.0, True, 0.5, -1),
])
def test_event_log_refuses_bad_records(tmp_path: Path, call) -> None:
    with EventLog(tmp_path) as log, pytest.raises(ValueError):
        call(log)
    assert (tmp_path / LOG_NAME).read_text() == ""  # nothing half-written


def test_many_threads_share_one_log(tmp_path: Path) -> None:
    threads, per_thread = 16, 200
    stats = ServingStats()
    with EventLog(tmp_path) as log:
        def work(t: int) -> None:
            for i in range(per_thread):
                cid = f"t{t}-{i}"
                log.record_completion(cid, float(i), i % 2 == 0, 0.5, i % 4 + 3000 * (i % 25 == 0))
                stats.record_completion(float(i), i % 2 == 0)
                kind, chars = ("accepted", 3) if i % 4 == 0 else ("dismissed", 0)
                log.record_event(cid, kind, accepted_chars=chars)
                stats.record_event(kind, accepted_chars=chars)

        workers = [threading.Thread(target=work, args=(t,)) for t in range(threads)]
        for w in workers:
            w.start()
        for w in workers:
            w.join()
    lines = _lines(tmp_path)  # every line parses: no two writes interleaved
    assert len(lines) == 2 * threads * per_thread
    assert len({(r["id"], r["kind"]) for r in lines}) == len(lines)
    snap = stats.snapshot()
    assert snap["completions"] == threads * per_thread and snap["shown"] == threads * per_thread // 2
    assert snap["accepted"] == threads * per_thread // 4 and snap["accepted_chars"] == 3 * snap["accepted"]
    assert snap["dismissed"] == threads * per_thread - snap["accepted"]


def test_reopening_appends(tmp_path: Path) -> None:
    with EventLog(tmp_path) as log:
        log.record_event("a", "shown")
    with EventLog(tmp_path) as log:
        log.record_event("b", "dismissed")
    assert [r["id"] for r in _lines(tmp_path)] == ["a", "b"]


def test_a_torn_last_line_stays_alone(tmp_path: Path) -> None:
    with EventLog(tmp_path) as log:
        log.record_completion("a", 5.0, True, 0.9, 1)
    with open(tmp_path / LOG_NAME, "a", encoding="utf-8") as f:
        f.write('{"t": 1.0, "id": "b", "ki')  # a server killed mid-line
    with EventLog(tmp_path) as log:
        log.record_event("a", "accepted", accepted_chars=2)
    stats, skipped = replay(tmp_path / LOG_NAME)
    assert skipped == 1
    snap = stats.snapshot()
    assert (snap["completions"], snap["accepted"], snap["accepted_chars"]) == (1, 1, 2)


def test_replay_gives_the_live_stats(tmp_path: Path) -> None:
    rng = np.random.default_rng(1)
    live = ServingStats(window=50)
    with EventLog(tmp_path) as log:
        for i in range(120):
            ms, shown = float(rng.exponential(15.0)), bool(rng.random() < 0.6)
            log.record_completion(i, ms, shown, float(rng.random()), 1 if shown else 0)
            live.record_completion(ms, shown)
            if shown:
                kind = ("accepted", "dismissed", "shown")[int(rng.integers(3))]
                chars = int(rng.integers(1, 20)) if kind == "accepted" else 0
                log.record_event(i, kind, accepted_chars=chars)
                live.record_event(kind, chars)
    replayed, skipped = replay(tmp_path / LOG_NAME, window=50)
    a, b = live.snapshot(), replayed.snapshot()
    assert skipped == 0
    assert {k: v for k, v in a.items() if k != "uptime_s"} == {k: v for k, v in b.items() if k != "uptime_s"}


def test_the_log_is_private_and_rotated_by_size(tmp_path: Path) -> None:
    log_dir = tmp_path / "serve"
    with EventLog(log_dir, max_bytes=2000) as log:
        for i in range(60):
            log.record_event(f"c{i}", "shown")
    path = log_dir / LOG_NAME
    old = log_dir / (LOG_NAME + ".1")
    assert stat.S_IMODE(path.stat().st_mode) == 0o600 and stat.S_IMODE(log_dir.stat().st_mode) == 0o700
    assert path.stat().st_size <= 2000 and old.stat().st_size <= 2000 and stat.S_IMODE(old.stat().st_mode) == 0o600
    ids = [json.loads(line)["id"] for f in (old, path) for line in f.read_text().splitlines()]
    assert ids == [f"c{i}" for i in range(60 - len(ids), 60)]  # the newest lines, in order, none torn
    # an older log made with a wider mode is narrowed when the server opens it
    path.chmod(0o644)
    EventLog(log_dir).close()
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_a_full_disk_drops_lines_and_counts_them(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    log = EventLog(tmp_path)
    log.record_event("c1", "shown")
    full = FullDisk(tmp_path, f"*/{LOG_NAME}")  # the next write comes out half, then nothing fits
    monkeypatch.setattr(os, "write", full)
    log.record_event("c2", "shown")
    log.record_completion("c3", 3.0, True, 0.5, 2)
    assert log.dropped == 2
    monkeypatch.setattr(os, "write", full.real)  # space again: the next line starts on a line of its own
    log.record_event("c4", "accepted", 3)
    log.close()
    stats, skipped = replay(tmp_path / LOG_NAME)
    assert skipped == 1 and stats.snapshot()["displayed"] == 1 and stats.snapshot()["accepted"] == 1


def test_a_full_disk_never_turns_a_suggestion_into_an_error(word_run_dir: Path, tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    with ready_client(ServerConfig(word_run_dir, min_confidence=0.0, log_dir=tmp_path / "log")) as client:
        monkeypatch.setattr(os, "write", FullDisk(tmp_path / "log", f"*/{LOG_NAME}", nth=1))
        answers = [client.post("/v1/complete", json={"prefix": f"Hi Dana, {i}"}) for i in range(3)]
        assert [a.status_code for a in answers] == [200, 200, 200]
        assert client.post("/v1/events", json={"id": answers[0].json()["id"], "kind": "shown"}).status_code == 200
        stats = client.get("/v1/stats").json()
        assert stats["log_dropped"] == 4 and stats["completions"] == 3 and stats["displayed"] == 1
