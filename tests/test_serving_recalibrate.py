"""The served threshold, memory weight and model refitted on the person's sent mail (`serving/recalibrate.py`):
the fit is the saved-characters replay's over the newest emails with a memory of the rest, each email typed
by the learned model before it learned from it and by the general model, the model saving more served; it
is kept 0600, applied to the engine, told by /health, and read again at the next start."""

from __future__ import annotations

import shutil
import stat
import time
from pathlib import Path

import httpx
import pytest
import torch
from serving_helpers import auth, running_server

from seqlab.evaluation.saved_chars import type_emails
from seqlab.evaluation.saved_fit import fit_setting
from seqlab.evaluation.typing_sim import Boundary, TypedEmail
from seqlab.generation.complete import MAX_SENTENCE_WORDS, complete
from seqlab.generation.gate import DEFAULT_RULE, EXPECTED_CHARS, word_ends
from seqlab.generation.memory import WritingMemory
from seqlab.runs.load import load_run
from seqlab.serving.app import ServerConfig
from seqlab.serving.engine import prompt_text
from seqlab.serving.learner import Learner, LearnSettings, weights_digest
from seqlab.serving.personal import PERSONAL, PersonalStore, SentEmail
from seqlab.serving.recalibrate import (
    EVERY,
    FIT_GRID,
    GENERAL,
    LEARNED,
    MAX_WRONG_PER_100,
    MIN_EMAILS,
    SERVED,
    TYPED,
    UNFITTED_MODEL,
    UNFITTED_WEIGHTS,
    Recalibrator,
    fit_on_sent,
    load_served,
    load_typed,
)

SILENT = (DEFAULT_RULE, 1000.0)  # a run whose threshold lets hardly a suggestion through: any fit saves more
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
    got = fit_on_sent(model, tok, emails, [], unfitted=SILENT, held=2, words=15)  # no learned typing: a tie
    memory = WritingMemory(max_words=MAX_SENTENCE_WORDS)
    for e in emails[:-2]:  # never the emails being typed
        memory.add_body(e.body)
    typed = type_emails(model, tok, [prompt_text(e.subject, e.body) for e in emails[-2:]], words=15,
                        max_words=MAX_SENTENCE_WORDS, sentence=True, proposers=[memory.propose])
    row = fit_setting(typed, DEFAULT_RULE, MAX_WRONG_PER_100, weight_grid=FIT_GRID)
    assert got["threshold"] == row["threshold"] and got["weights"] == row["weights"]
    assert got["weights"]["reply"] == UNFITTED_WEIGHTS["reply"]  # the memory's weight is fitted, not this one
    assert got["saved"] == pytest.approx(row["saved"]) and got["emails"] == 6 and got["typed"] == 2
    assert got["weights"]["memory"] > 0  # the weekly email is worth remembering
    assert got["model"] == LEARNED and got["held_out"] == 0 and got["fitted"] and got["gain_low"] > 0


def _as_learned(typed: TypedEmail, right: bool) -> TypedEmail:
    """`typed` as a learned model might have typed it: at every asked position the rest of the typed part
    (right) or a word it never has (wrong), sure of every word."""
    found = []
    for b in typed.boundaries:
        text = typed.text[b.offset:typed.end] if right else "zebra "
        found.append(Boundary.model_only(b.offset, text, [0.99] * len(word_ends(text))) if word_ends(text) else b)
    return TypedEmail.from_json(TypedEmail(typed.text, typed.start, typed.end, found).to_json())


@pytest.mark.parametrize("right", [True, False])
def test_the_fit_serves_the_learned_model_only_where_its_held_out_typing_saves_as_much(
        word_run_dir: Path, tmp_path: Path, right: bool) -> None:
    model, tok, _ = load_run(word_run_dir, "cpu")
    store = PersonalStore(tmp_path)
    for subject, body in _mail(3):
        store.append(subject, body)
    # two emails the general model writes itself (greedy, byte tokens: right at every letter) and the
    # memory of the weekly ones does not know
    for subject in ("Hello", "Meeting"):
        store.append(subject, "D" + complete(model, tok, prompt_text(subject, "D"), max_words=12,
                                             stop_at_newline=False).text)
    emails = store.emails()
    typed = type_emails(model, tok, [prompt_text(e.subject, e.body) for e in emails[-2:]], words=15,
                        max_words=MAX_SENTENCE_WORDS, sentence=True)
    learned = {e.key(): _as_learned(t, right) for e, t in zip(emails[-2:], typed)}
    got = fit_on_sent(model, tok, emails, [], unfitted=SILENT, learned=learned, held=2, words=15)
    saved = got["saved_by_model"]
    assert got["held_out"] == 2 and saved[GENERAL] > 0
    if right:
        assert got["model"] == LEARNED and saved[LEARNED] >= saved[GENERAL]
    else:
        assert got["model"] == GENERAL and saved[LEARNED] < saved[GENERAL]


def test_a_fit_not_sure_to_save_more_than_the_run_leaves_the_run_served(word_run_dir: Path, tmp_path: Path) -> None:
    model, tok, _ = load_run(word_run_dir, "cpu")
    store = PersonalStore(tmp_path)
    for subject, body in _mail(3):
        store.append(subject, body)
    for subject in ("Hello", "Meeting"):  # emails the general model writes itself, the memory does not know
        store.append(subject, "D" + complete(model, tok, prompt_text(subject, "D"), max_words=12,
                                             stop_at_newline=False).text)
    # the run shows every suggestion of its model: no fitted threshold or memory weight saves more
    got = fit_on_sent(model, tok, store.emails(), [], unfitted=(EXPECTED_CHARS, 0.0), held=2, words=15)
    assert not got["fitted"] and got["gain_low"] is not None and got["gain_low"] <= 0
    assert (got["rule"], got["threshold"]) == (EXPECTED_CHARS, 0.0)
    assert got["model"] == UNFITTED_MODEL and got["weights"] == UNFITTED_WEIGHTS
    assert got["saved_by_model"][GENERAL] > 0 and got["saved"] >= got["saved_by_model"][GENERAL]


def test_due_after_enough_mail_then_after_enough_new_mail(word_run_dir: Path, tmp_path: Path) -> None:
    model, tok, _ = load_run(word_run_dir, "cpu")
    store = PersonalStore(tmp_path)
    fitted: list[dict] = []
    rec = Recalibrator(model, tok, store, [], fitted.append, unfitted=SILENT, min_emails=4, every=2, held=2,
                       words=10)
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
    assert Recalibrator(model, tok, store, [], fitted.append, unfitted=SILENT, min_emails=4, every=2).last == setting


def test_each_email_is_typed_before_the_learner_learns_from_it_and_the_typings_are_kept(
        word_run_dir: Path, tmp_path: Path) -> None:
    model, tok, _ = load_run(word_run_dir, "cpu")
    store = PersonalStore(tmp_path)
    for subject, body in _mail(3):
        store.append(subject, body)
    rec = Recalibrator(model, tok, store, [], lambda s: None, unfitted=SILENT, held=2, words=10)
    seen: list[tuple[str, str, bool]] = []
    learner = Learner(model, tok, store, idle=lambda: True, on_swap=lambda m: None,
                      settings=LearnSettings(passes=2, swap_every=2))

    def observe(email: SentEmail, typing_model: torch.nn.Module) -> None:
        seen.append((email.key(), weights_digest(typing_model), typing_model.training))
        rec.observe(email, typing_model)

    learner.before_learning = observe
    learner.start()
    deadline = time.monotonic() + 120
    while learner.describe()["learned_emails"] < 3:
        assert time.monotonic() < deadline and learner.failed is None, learner.describe()
        time.sleep(0.05)
    learner.stop()
    keys = [e.key() for e in store.emails()]
    assert sorted(k for k, _, _ in seen) == sorted(keys)  # each once, before its first step
    assert seen[0][1] == weights_digest(model)  # the first one by the weights as loaded: nothing learned yet
    assert not any(training for _, _, training in seen)
    assert learner.model.training  # and back to training after
    assert rec.failed is None and list(rec.typed) == [k for k, _, _ in seen][-4:]
    assert stat.S_IMODE((store.folder / TYPED).stat().st_mode) == 0o600
    again = load_typed(store, 10, MAX_SENTENCE_WORDS)
    assert {k: t.to_json() for k, t in again.items()} == {k: t.to_json() for k, t in rec.typed.items()}
    assert load_typed(store, 11, MAX_SENTENCE_WORDS) == {}  # typed otherwise: not used


def test_the_server_refits_on_sent_mail_and_serves_it_again_after_a_restart(word_run_dir: Path,
                                                                             tmp_path: Path) -> None:
    run = tmp_path / "run"
    shutil.copytree(word_run_dir, run, ignore=shutil.ignore_patterns("serve", PERSONAL))
    settings = LearnSettings(idle_s=0.05, passes=1, swap_every=4)
    config = ServerConfig(run, log_dir=tmp_path / "log", learn=True, learn_settings=settings)
    with running_server(config) as url:
        health = httpx.get(f"{url}/health", headers=auth(config), timeout=30).json()
        assert "personal_setting" not in health["model"]
        assert health["model"]["memory"]["weights"] == UNFITTED_WEIGHTS  # the unfitted setting until a fit
        for subject, body in _mail(10):
            r = httpx.post(f"{url}/v1/sent", json={"subject": subject, "body": body}, headers=auth(config), timeout=30)
            assert r.status_code == 200
        deadline = time.monotonic() + 300  # a loaded machine: the fit waits for idle time
        # until the last fit due: one on more than 10 - EVERY emails (a fit on 5 is followed by one on 10)
        while (health := httpx.get(f"{url}/health", headers=auth(config), timeout=30).json())["model"].get(
                "personal_setting", {}).get("emails", 0) <= 10 - EVERY:
            assert time.monotonic() < deadline, health
            assert not health["learning"]["failed"] and not health["learning"]["idle_task_failed"], health["learning"]
            time.sleep(0.2)
        setting = health["model"]["personal_setting"]
        assert health["model"]["threshold"] == setting["threshold"] and MIN_EMAILS <= setting["emails"] <= 10
        assert health["model"]["memory"]["weights"]["memory"] == setting["weights"]["memory"]
        assert "sent emails" in health["model"]["threshold_source"]
        assert setting["model"] in (LEARNED, GENERAL) and setting["held_out"] >= 1
    assert load_served(PersonalStore(run)) == setting
    config2 = ServerConfig(run, log_dir=tmp_path / "log2", learn=True, learn_settings=settings)
    with running_server(config2) as url:
        again = httpx.get(f"{url}/health", headers=auth(config2), timeout=30).json()["model"]
        assert again["personal_setting"] == setting and again["threshold"] == setting["threshold"]
