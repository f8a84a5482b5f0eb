"""The served threshold and memory weight refitted on the person's sent mail (`serving/recalibrate.py`): the
fit is the saved-characters replay's over the newest emails with a memory of the rest, it is kept 0600,
applied to the engine, told by /health, and read again at the next start."""

from __future__ import annotations

import shutil
import stat
import time
from pathlib import Path

import httpx
import pytest
from serving_helpers import auth, running_server

from seqlab.evaluation.saved_chars import type_emails
from seqlab.evaluation.saved_fit import WEIGHT_GRID, fit_setting
from seqlab.generation.complete import MAX_SENTENCE_WORDS
from seqlab.generation.gate import DEFAULT_RULE
from seqlab.generation.memory import WritingMemory
from seqlab.runs.load import load_run
from seqlab.serving.app import ServerConfig
from seqlab.serving.engine import prompt_text
from seqlab.serving.learner import LearnSettings
from seqlab.serving.personal import PERSONAL, PersonalStore
from seqlab.serving.recalibrate import SERVED, Recalibrator, fit_on_sent, load_served

WEEKLY = "Hi team,\n\nThe weekly figures are attached. Please check the totals before Friday.\n\nThanks, Sam"


def _mail(n: int) -> list[tuple[str, str]]:
    """n emails of one person: the weekly one again and again, and one line of their own each."""
    return [(f"Weekly figures {i}", WEEKLY.replace("Thanks", f"Note {i}: the port of call {i} changed.\n\nThanks"))
            for i in range(n)]


def test_the_fit_is_the_replays_over_the_newest_emails_with_a_memory_of_the_rest(word_run_dir: Path,
                                                                                   tmp_path: Path) -> None:
    model, tok, _ = load_run(word_run_dir, "cpu")
    store = PersonalStore(tmp_path)
    for subject, body in _mail(6):
        store.append(subject, body)
    emails = store.emails()
    got = fit_on_sent(model, tok, emails, [], held=2, words=15)
    memory = WritingMemory(max_words=MAX_SENTENCE_WORDS)
    for e in emails[:-2]:  # never the emails being typed
        memory.add_body(e.body)
    typed = type_emails(model, tok, [prompt_text(e.subject, e.body) for e in emails[-2:]], words=15,
                        max_words=MAX_SENTENCE_WORDS, sentence=True, proposers=[memory.propose])
    row = fit_setting(typed, DEFAULT_RULE, 3.0, weight_grid={"memory": WEIGHT_GRID})
    assert got["threshold"] == row["threshold"] and got["weights"] == row["weights"]
    assert got["saved"] == pytest.approx(row["saved"]) and got["emails"] == 6 and got["typed"] == 2
    assert got["weights"]["memory"] > 0  # the weekly email is worth remembering


def test_due_after_enough_mail_then_after_enough_new_mail(word_run_dir: Path, tmp_path: Path) -> None:
    model, tok, _ = load_run(word_run_dir, "cpu")
    store = PersonalStore(tmp_path)
    fitted: list[dict] = []
    rec = Recalibrator(lambda: model, tok, store, [], fitted.append, min_emails=4, every=2, held=2, words=10)
    mail = _mail(7)
    for subject, body in mail[:3]:
        store.append(subject, body)
    assert not rec.due()
    store.append(*mail[3])
    assert rec.due()
    setting = rec.run()
    assert setting is not None and fitted == [setting] and not rec.due()
    assert load_served(store) == setting  # kept, and read back the same
    assert stat.S_IMODE((store.folder / SERVED).stat().st_mode) == 0o600
    store.append(*mail[4])
    assert not rec.due()
    store.append(*mail[5])
    assert rec.due()
    assert Recalibrator(lambda: model, tok, store, [], fitted.append, min_emails=4, every=2).last == setting


def test_the_server_refits_on_sent_mail_and_serves_it_again_after_a_restart(word_run_dir: Path,
                                                                             tmp_path: Path) -> None:
    run = tmp_path / "run"
    shutil.copytree(word_run_dir, run, ignore=shutil.ignore_patterns("serve", PERSONAL))
    settings = LearnSettings(idle_s=0.05, passes=1, swap_every=4)
    config = ServerConfig(run, log_dir=tmp_path / "log", learn=True, learn_settings=settings)
    with running_server(config) as url:
        health = httpx.get(f"{url}/health", headers=auth(config), timeout=30).json()
        assert "personal_setting" not in health["model"]
        for subject, body in _mail(10):
            r = httpx.post(f"{url}/v1/sent", json={"subject": subject, "body": body}, headers=auth(config), timeout=30)
            assert r.status_code == 200
        deadline = time.monotonic() + 300  # a loaded machine: the fit waits for idle time
        while "personal_setting" not in (health := httpx.get(f"{url}/health", headers=auth(config),
                                                             timeout=30).json())["model"]:
            assert time.monotonic() < deadline, health
            assert not health["learning"]["failed"] and not health["learning"]["idle_task_failed"], health["learning"]
            time.sleep(0.2)
        setting = health["model"]["personal_setting"]
        assert health["model"]["threshold"] == setting["threshold"] and setting["emails"] == 10
        assert health["model"]["memory"]["weights"]["memory"] == setting["weights"]["memory"]
        assert "sent emails" in health["model"]["threshold_source"]
    assert load_served(PersonalStore(run)) == setting
    config2 = ServerConfig(run, log_dir=tmp_path / "log2", learn=True, learn_settings=settings)
    with running_server(config2) as url:
        again = httpx.get(f"{url}/health", headers=auth(config2), timeout=30).json()["model"]
        assert again["personal_setting"] == setting and again["threshold"] == setting["threshold"]
