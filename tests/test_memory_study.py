"""The memory study (`seqlab.studies.memory_study`): its confidence formula is the memory's own, and the
fit picks the grid point of least log loss."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from seqlab.data.store import TokenStore
from seqlab.data.tokenizer import load_tokenizer
from seqlab.evaluation.compressors import split_texts
from seqlab.generation.memory import ALPHA, WritingMemory
from seqlab.studies import memory_study as ms


def test_the_studied_confidence_is_the_memorys(tiny_data_dir: Path) -> None:
    rows, seconds, memory = ms.type_mailbox(tiny_data_dir, step=7, emails=5)
    assert rows and len(seconds) >= len(rows) and all(o.matches >= o.agree >= 1 for o in rows)
    # the same typing with the served alpha: each proposal's first confidence is the study's formula
    tok = load_tokenizer(tiny_data_dir / "tokenizer.json")
    served = WritingMemory()
    for text in split_texts(TokenStore(tiny_data_dir, "train"), tok):
        served.add(text)
    checked = 0
    for text in split_texts(TokenStore(tiny_data_dir, "test"), tok)[:5]:
        subject, _, body = text.partition("\n\n")
        for i in range(0, len(body), 7):
            c = served.propose(text[: len(subject) + 2 + i])
            if c is not None:
                assert c.word_confidences[0] == pytest.approx(ms.confidence(rows[checked], ALPHA, 2.0))
                checked += 1
        served.add(text)
    assert checked == len(rows)


def test_the_fit_is_the_grid_point_of_least_log_loss() -> None:
    rows = [ms.Observed("a", length, 1, 1, 0, right) for length, right in
            [(1, False)] * 8 + [(1, True)] * 2 + [(6, True)] * 9 + [(6, False)]]
    alpha, power = ms.fit(rows)
    best = ms.log_loss(rows, lambda o: ms.confidence(o, alpha, power))
    assert all(best <= ms.log_loss(rows, lambda o, a=a, p=p: ms.confidence(o, a, p)) + 1e-12
               for a in ms.ALPHAS for p in ms.POWERS)
    assert power > 0  # long matches are surer here: the plain shrinkage cannot say so


def test_the_command_writes_its_json(tiny_data_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "memory.json"
    assert ms.main([str(tiny_data_dir), "--step", "9", "--emails", "3", "--json", str(out)]) == 0
    result = json.loads(out.read_text())
    assert result["lookups"][0]["emails"] > 0 and result["fit"]["leave_one_person_out"] is None


def test_later_words_are_scored_by_the_memorys_chain(tiny_data_dir: Path) -> None:
    rows, _, _ = ms.type_mailbox(tiny_data_dir, step=7, emails=5)
    assert all(len(o.counts) >= 1 and list(o.counts) == sorted(o.counts, reverse=True) for o in rows)
    assert all(0 <= o.words_right <= len(o.counts) and (o.words_right >= 1) == o.right for o in rows)
    table = ms.by_words(rows, ALPHA, 8.0)
    assert table[0]["prefixes"] == len(rows)  # every proposal has a first word
    chained_first = [o.counts[0] / (o.matches + ALPHA / (o.length + min(o.letters, 3)) ** 2) for o in rows]
    assert table[0]["confidence"] == pytest.approx(sum(chained_first) / len(rows))
