"""A person's mail split by date: earlier threads train, the latest are held out, with enough of them to
choose a step from (`prepare --split-by date`, the default with `--sender`)."""

from __future__ import annotations

import json
import random
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from pathlib import Path

import numpy as np
import pytest
from preparing import prepare

from seqlab.data.layout import SPLITS
from seqlab.data.prepare.meta_report import format_report
from seqlab.data.prepare.threadtable import MIN_HELD_EMAILS, split_by_date

PERSON = "Dana Whitfield <dana@harbourline.example>"


def _codes(split: np.ndarray) -> list[str]:
    return [SPLITS[c] for c in split]


def test_the_latest_threads_are_held_out_with_at_least_min_held_emails() -> None:
    first = np.array([50, 10, 40, 20, 30, 60, -1])  # -1: undated, counted as the oldest
    emails = np.array([1, 5, 2, 1, 3, 1, 4])
    # 17 emails: 10% is 2, but min_held asks for 3 in test and in val
    got = _codes(split_by_date(first, emails, (0.8, 0.1, 0.1), min_held=3))
    # from the latest back: 60 (1 email) and 50 (1) and 40 (2) -> test has 4; then 30 (3) -> val; rest train
    assert got == ["test", "train", "test", "train", "val", "test", "train"]
    # nothing held out when the fractions hold nothing out
    assert set(_codes(split_by_date(first, emails, (1.0, 0.0, 0.0), min_held=3))) == {"train"}
    # a single thread always trains
    assert _codes(split_by_date(np.array([5]), np.array([9]), (0.9, 0.05, 0.05), min_held=3)) == ["train"]


@pytest.fixture
def person_mail(tmp_path: Path) -> tuple[Path, dict[str, datetime]]:
    """60 emails from one person (and 5 from someone else), one thread each, files in shuffled order."""
    box = tmp_path / "mail"
    box.mkdir()
    start = datetime(2024, 1, 1, 9, 0, tzinfo=UTC)
    dates: dict[str, datetime] = {}
    order = list(range(65))
    random.Random(0).shuffle(order)
    for n, i in enumerate(order):
        sender = PERSON if i < 60 else "Someone Else <else@example.org>"
        when = start + timedelta(days=i)
        dates[f"{i}@example.org"] = when
        (box / f"{n:03d}.eml").write_text(
            f"From: {sender}\nTo: team@example.org\nSubject: update number {i}\nMessage-ID: <{i}@example.org>\n"
            f"Date: {format_datetime(when)}\n\nHello team, this is update {i} about the freight schedule.\n")
    return box, dates


def test_one_persons_mail_is_split_by_date(person_mail: tuple[Path, dict[str, datetime]], tmp_path: Path) -> None:
    box, dates = person_mail
    meta = prepare(str(box), tmp_path / "dana", senders=[PERSON], progress=False, workers=1)
    assert meta["split_by"] == "date" and meta["kept"] == 60
    rows = [json.loads(line) for line in (tmp_path / "dana" / "emails.jsonl").read_text().splitlines()]
    when = {s: [dates[r["id"]] for r in rows if r["split"] == s] for s in SPLITS}
    assert len(when["val"]) == len(when["test"]) == MIN_HELD_EMAILS  # 5% of 60 is 3: the minimum wins
    assert max(when["train"]) < min(when["val"]) and max(when["val"]) < min(when["test"])
    said = format_report(meta)
    assert "split by date" in said and "too few to adapt" in said  # 40 train emails
    # the whole mailbox keeps the hashed split unless asked: its meta.json has no split_by
    everyone = prepare(str(box), tmp_path / "all", progress=False, workers=1)
    assert "split_by" not in everyone
    by_date = prepare(str(box), tmp_path / "all-dated", split_by="date", progress=False, workers=1)
    assert by_date["split_by"] == "date" and by_date["splits"]["test"]["emails"] == MIN_HELD_EMAILS
