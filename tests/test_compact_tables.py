"""The compact tables of a large prepare against the plain computations they replace: the digest set
against a Python set, the thread table against `assign_threads` (tests/slow_threads.py) and `split_for_thread`,
date keys against string order, and the bounded BPE sample (all of train when under the bound, seeded otherwise).
"""

from __future__ import annotations

import json
import random
from datetime import datetime
from pathlib import Path

import pytest
from data_dir_checks import files_of
from hypothesis import given, settings
from hypothesis import strategies as st
from preparing import prepare
from slow_threads import assign_threads

from seqlab.data.prepare import tokenizer_fit
from seqlab.data.prepare.bpe_sample import ByteSample
from seqlab.data.prepare.digests import DigestSet, digest64
from seqlab.data.prepare.thread_keys import ThreadMeta, norm_id, split_for_thread, utc_date
from seqlab.data.prepare.threadtable import ThreadTable, date_key, thread_links


def test_digest_set_equals_a_set() -> None:
    rng = random.Random(0)
    table, plain = DigestSet(buffer=7), set()
    for _ in range(2000):
        key = rng.choice([rng.getrandbits(64), rng.randrange(50), 2**64 - 1 - rng.randrange(5)])
        assert (key in table) == (key in plain)
        if key not in plain:
            table.add(key)
            plain.add(key)
    assert len(table) == len(plain)
    assert digest64("a") != digest64("b") and digest64("\udc80") != digest64("\ufffd")


_DATES = ["2024-01-01T00:00:00", "2024-01-01T00:00:01+00:00", "1999-12-31T23:59:59Z", "0999-06-01T00:00:00",
          "0099-06-01T00:00:00", "0009-06-01T00:00:00", "0100-01-01T00:00:00", "9999-12-31T23:59:59", None, "junk"]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.one_of(st.sampled_from(_DATES), st.datetimes(min_value=datetime(1, 1, 1)).map(datetime.isoformat)),
                min_size=2, max_size=2))
def test_date_key_orders_like_the_date_strings(dates: list[str | None]) -> None:
    a, b = (utc_date(d) or "" for d in dates)
    ka, kb = (date_key(d) for d in dates)
    assert (a < b, a == b) == (ka < kb, ka == kb)


def _random_metas(rng: random.Random) -> list[ThreadMeta]:
    """Small id pools, so that references, cycles, aliases, subject joins and ties all happen."""
    ids = [f"<i{k}>" if rng.random() < 0.5 else f"i{k}" for k in range(rng.randint(1, 25))]
    metas = []
    for k in range(rng.randint(1, 40)):
        mid = rng.choice([*ids, None])
        rid = (rng.choice(ids) if rng.random() < 0.3 else f"r{k}") if mid is not None else f"sha{k}"
        refs = tuple(rng.sample(ids, rng.randint(0, min(3, len(ids))))) if rng.random() < 0.4 else ()
        irt = rng.choice(ids) if rng.random() < 0.3 else None
        people = frozenset(rng.sample(["x", "y", "z"], rng.randint(0, 2)))
        metas.append(ThreadMeta(rid, mid, irt, refs, rng.choice(["", "a", "b"]), people, rng.choice(_DATES)))
    return metas


@pytest.mark.parametrize("trial", range(4))
def test_thread_table_equals_assign_threads(tmp_path: Path, trial: int) -> None:
    rng = random.Random(trial)
    for case in range(60):
        metas = _random_metas(rng)
        fractions = (0.5, 0.3, 0.2)
        table = ThreadTable(tmp_path / f"names-{case}")
        for m in metas:
            table.add(thread_links(m))
        assignment = table.finish(case, fractions)
        want = assign_threads(metas)
        assert list(assignment.threads) == want
        assert list(assignment.splits) == [split_for_thread(k, case, fractions) for k in want]
        counts = assignment.thread_counts()
        assert counts == {s: len({k for k in want if split_for_thread(k, case, fractions) == s})
                          for s in ("train", "val", "test")}
        assignment.close()


def test_byte_sample_is_all_under_the_bound_and_seeded_above_it() -> None:
    sizes = [random.Random(1).randrange(100, 5000) for _ in range(2000)]
    under = ByteSample(sum(sizes), seed=0, limit=sum(sizes))
    assert all(under.take(n) for n in sizes)

    def picks(seed: int) -> list[bool]:
        sample = ByteSample(sum(sizes), seed=seed, limit=sum(sizes) // 10)
        chosen = [sample.take(n) for n in sizes]
        assert sum(n for n, c in zip(sizes, chosen) if c) <= sum(sizes) // 10
        return chosen

    assert picks(0) == picks(0) != picks(1)
    assert 100 < sum(picks(0)) < 300  # about a tenth, spread over the whole stream
    assert any(picks(0)[:200]) and any(picks(0)[-200:])


def test_prepare_fits_bpe_on_a_bounded_seeded_sample(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def run(name: str) -> dict[str, bytes]:
        prepare("synthetic", tmp_path / name, count=300, tokenizer="bpe", vocab_size=400, progress=False,
                workers=1)
        return files_of(tmp_path / name)

    full = run("full")
    monkeypatch.setattr(tokenizer_fit, "ByteSample",
                        lambda total, seed: ByteSample(total, seed, limit=total // 5))
    sampled, again = run("sampled"), run("again")
    assert sampled == again  # deterministic for the input and seed
    assert sampled["tokenizer.json"] != full["tokenizer.json"]  # fitted on a fifth of train

    def rows(files: dict[str, bytes]) -> list[tuple]:
        return [(r["id"], r["thread"], r["split"]) for r in map(json.loads, files["emails.jsonl"].splitlines())]

    assert rows(sampled) == rows(full)  # the same emails, threads and splits; only the tokens differ


def test_thread_parents_from_digests_equal_a_lookup_by_message_id() -> None:
    """Each email's parent (the first email whose node its In-Reply-To names, never itself) found on 64-bit
    digests, as prepare finds it for contexts, equals a dictionary lookup by the ids themselves."""
    import numpy as np

    from seqlab.data.prepare.reply_files import thread_parents

    rng = random.Random(7)
    for _ in range(200):
        metas = _random_metas(rng)
        first: dict[str, int] = {}
        for i, m in enumerate(metas):
            first.setdefault(m.node, i)
        want = [first.get(norm_id(m.in_reply_to), -1) if norm_id(m.in_reply_to) else -1 for m in metas]
        want = [-1 if p == i else p for i, p in enumerate(want)]
        nodes = np.array([thread_links(m).node for m in metas], dtype=np.uint64)
        replies = np.array([digest64("m:" + norm_id(m.in_reply_to)) if norm_id(m.in_reply_to) else 0
                            for m in metas], dtype=np.uint64)
        assert thread_parents(nodes, replies).tolist() == want
