"""Hostile mail never crashes a run: every kind of malformed message ends kept or skipped under a named
reason, kept + skipped == seen, every output string is valid UTF-8, and no message takes pathological time."""

from __future__ import annotations

import random
import time
from collections import Counter
from pathlib import Path

import pytest
from hostile_mail import KINDS, write_hostile_corpus, write_many_malformed
from mail_reading import balanced, read_emails

from seqlab.data.mail.reader import SKIP_REASONS, CleanOptions, iter_source_items, parse_message
from seqlab.data.mail.records import Email, SkipReport

# A guard against blow-ups (quadratic parsing, catastrophic regex backtracking), which take seconds to
# minutes on these inputs; ordinary messages take about a millisecond, so this bound is very generous.
MAX_SECONDS_PER_MESSAGE = 1.0
ALL_ON = CleanOptions(keep_quotes=True, keep_signatures=True, mask_pii=True)
# The skip reasons that belong to files, folders and CSV rows rather than to one message's bytes; with
# "unparseable" (which must never happen: the raw-text fallback always gets somewhere) they are the reasons
# no hostile kind can reach. A new per-message reason in SKIP_REASONS needs a kind that reaches it.
FILE_REASONS = frozenset(("hidden_file", "hidden_dir", "not_mail_file", "not_a_file", "unreadable", "csv_error",
                          "csv_short_row"))
MESSAGE_OUTCOMES = (SKIP_REASONS - FILE_REASONS - {"unparseable"}) | {"kept"}


def _strings(email: Email) -> list[str]:
    return [email.id, email.thread, email.subject, email.body, email.sender, email.source, email.date or "",
            email.message_id or "", email.in_reply_to or "", *email.recipients, *email.references]


def _check_utf8(email: Email) -> None:
    for s in _strings(email):
        s.encode("utf-8")  # strict: raises on a lone surrogate


@pytest.fixture(scope="module")
def hostile_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("hostile")
    assert write_hostile_corpus(d) == len(KINDS) + 2
    return d


@pytest.fixture(scope="module")
def outcomes(hostile_dir: Path) -> dict[str, str]:
    """Each kind's outcome with the default options: "kept" or the skip reason."""
    out = {}
    for name in KINDS:
        result = parse_message((hostile_dir / f"{name}.eml").read_bytes(), name, CleanOptions())
        out[name] = "kept" if isinstance(result, Email) else result
    return out


def test_kinds_are_distinct_and_reach_every_way_a_message_can_end(hostile_dir: Path, outcomes: dict[str, str]) -> None:
    raws = [(hostile_dir / f"{name}.eml").read_bytes() for name in KINDS]
    assert len(KINDS) >= 30 and len(set(raws)) == len(KINDS)  # 30+ different inputs, not one under many names
    # every per-message skip reason, and keeping, is reached by at least one kind: a reader that stopped
    # producing a reason, or a kind list that lost the only kind reaching it, fails here
    assert set(outcomes.values()) == MESSAGE_OUTCOMES


@pytest.mark.parametrize("opts", [CleanOptions(), ALL_ON], ids=["default", "all_options"])
def test_each_kind_has_its_expected_outcome(hostile_dir: Path, opts: CleanOptions) -> None:
    worst = 0.0
    for name, (_, expected) in KINDS.items():
        raw = (hostile_dir / f"{name}.eml").read_bytes()
        start = time.perf_counter()
        result = parse_message(raw, name, opts)
        worst = max(worst, time.perf_counter() - start)
        got = result if isinstance(result, str) else "kept"
        assert got == "kept" or got in SKIP_REASONS, name
        assert got != "unparseable", name  # the raw-text fallback always gets somewhere
        if expected is not None and not (opts.keep_quotes and name == "quotes_only_no_subject"):
            assert got == expected, name
        if isinstance(result, Email):
            _check_utf8(result)
    assert worst < MAX_SECONDS_PER_MESSAGE


def test_decoded_content_of_tricky_kinds(hostile_dir: Path) -> None:
    def body(name: str) -> str:
        result = parse_message((hostile_dir / f"{name}.eml").read_bytes(), name, CleanOptions())
        assert isinstance(result, Email), (name, result)
        return result.body

    assert body("lying_charset") == "Café crème"  # labelled UTF-8, really Latin-1
    assert body("utf16_body") == "Grüße aus Köln"
    assert body("utf16_undeclared") == "plain words in utf-16"
    assert body("html_only") == "Hello & bye"
    assert body("multipart_alternative") == "café"  # text/plain preferred over the HTML alternative
    assert body("nul_bytes") == "hello world\nsecond line"
    assert body("crlf_line_endings") == body("cr_line_endings") == "line one\nline two"
    assert "\ufffd" in body("utf7_surrogates") and "日本語" in body("utf7_surrogates")
    assert "see attached" == body("message_rfc822_nested")  # the attached message is forwarded text
    assert body("deep_nesting_20") == "deep text"
    assert body("boundary_never_closed") == "open part text"


def test_hostile_directory_is_fully_accounted_for(hostile_dir: Path, outcomes: dict[str, str]) -> None:
    report = SkipReport()
    kept = list(read_emails(hostile_dir, CleanOptions(), report))
    assert report.seen == len(KINDS) + 2  # one message per file, plus the hidden file and the picture
    assert report.kept == len(kept) and balanced(report)
    # read as a folder, every kind lands in the count its own outcome says: kept, or its skip reason
    expected = Counter(outcomes.values())
    assert len(kept) == expected.pop("kept")
    assert report.skipped == expected + Counter(hidden_file=1, not_mail_file=1)
    for email in kept:
        _check_utf8(email)


def test_thousand_malformed_messages_all_accounted_for(tmp_path: Path) -> None:
    assert write_many_malformed(tmp_path, n=1000, seed=0) == 1000
    files = sorted(tmp_path.iterdir())
    messages = [(str(p), p.read_bytes()) for p in files]
    worst = 0.0
    for opts in (CleanOptions(), ALL_ON):
        report = SkipReport()
        stream = read_emails(messages, opts, report)
        while True:
            start = time.perf_counter()
            email = next(stream, None)  # time per kept email includes the skipped ones before it
            worst = max(worst, time.perf_counter() - start)
            if email is None:
                break
            _check_utf8(email)
        assert report.seen == 1000 and balanced(report)
        assert report.kept > 100 and report.total_skipped > 100  # the mix really is mixed
        assert "unparseable" not in report.skipped
    assert worst < MAX_SECONDS_PER_MESSAGE

    # The same files read as a directory: every file shows up (an mbox-like file may split into several).
    labels = [label for label, _ in iter_source_items(tmp_path)]
    assert {label.split(".eml")[0] + ".eml" for label in labels} == {str(p) for p in files}
    report = SkipReport()
    kept = sum(1 for _ in read_emails(tmp_path, CleanOptions(), report))
    assert report.seen == len(labels) and report.kept == kept and balanced(report)


def test_limit_stops_reading_and_stays_balanced(hostile_dir: Path) -> None:
    report = SkipReport()
    kept = list(read_emails(hostile_dir, CleanOptions(), report, limit=7))
    assert report.seen == 7 and report.kept == len(kept) and balanced(report)


def test_random_byte_soup_is_handled() -> None:
    rng = random.Random(1)
    fragments = [b"Content-Type: multipart/mixed; boundary=z\n", b"--z\n", b"--z--\n", b"\n", b"Subject: =?utf-8?q?x",
                 b"Content-Transfer-Encoding: base64\n", b"\xff\xfe", b"\0", b"=?=", b"<p>", b"<!--", b"From x\n",
                 b"Content-Type: text/html; charset=uft-8\n", b"> quoted\n", b"-- \n",
                 b"Content-Type: message/rfc822\n"]
    report = SkipReport()
    messages = [(f"soup{i}", b"".join(rng.choice(fragments) for _ in range(rng.randint(1, 60)))) for i in range(300)]
    for email in read_emails(messages, ALL_ON, report):
        _check_utf8(email)
    assert report.seen == 300 and balanced(report)
    assert "unparseable" not in report.skipped
