"""The recipe table: `seqlab train DATA --minutes N` without a preset picks the candidate measured best for this
machine's class, threads and minutes; the packaged table is whole and consistent; the command that remakes it
runs end to end on a tiny corpus; the choice is printed, kept in run.json and said by `seqlab serve`."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from serving_helpers import served

from seqlab.errors import UserError
from seqlab.training.recipe_table import (
    CANDIDATES,
    MACHINE_CLASSES,
    Machine,
    choose_recipe,
    load_table,
    made_by,
    recipe_config,
)

META = {"tokenizer": {"kind": "bpe", "vocab_size": 1024}, "splits": {"train": {"tokens": 2_000_000}}}


def _cell(machine: str, threads: int, minutes: float, scores: dict[str, float]) -> dict:
    return {"machine": machine, "threads": threads, "minutes": minutes, "measured": True,
            "choice": min(scores, key=scores.get),
            "results": {n: {"steps": 10, "params": 1, "val_bpb": v, "test_bpb": v} for n, v in scores.items()}}


TABLE = {"data": {"label": "spamassassin, bpe 1024", "tokenizer": "bpe", "vocab_size": 1024, "train_tokens": 2_000_000},
         "cells": [_cell("cpu-fp32", 2, 3, {"gru-128": 2.1, "small": 2.2}),
                   _cell("cpu-fp32", 2, 10, {"gru-192": 1.95, "gru-128": 1.97}),
                   _cell("cpu-fp32", 1, 3, {"gru-128": 2.2, "small": 2.3}),
                   _cell("cpu-bf16", 2, 10, {"gru-192": 1.9, "small": 2.0}),
                   {"machine": "cuda", "threads": 1, "minutes": 10, "measured": False, "choice": "base",
                    "from": "none", "reason": "no CUDA device measured"}]}


def test_the_nearest_cell_of_the_machine_class_on_a_log_scale_of_minutes() -> None:
    assert choose_recipe(10, Machine("cpu-fp32", 2), META, TABLE).name == "gru-192"
    assert choose_recipe(4, Machine("cpu-fp32", 2), META, TABLE).name == "gru-128"  # 4 is nearer 3 than 10
    assert choose_recipe(6, Machine("cpu-fp32", 2), META, TABLE).name == "gru-192"  # log(6/3) > log(10/6)
    assert choose_recipe(10, Machine("cpu-bf16", 2), META, TABLE).cell == "cpu-bf16/2/10"
    assert choose_recipe(3, Machine("cuda", 1), META, TABLE).name == "base"


def test_threads_cap_at_the_tables_and_a_one_core_machine_takes_the_one_thread_cell() -> None:
    many = choose_recipe(3, Machine("cpu-fp32", 16), META, TABLE)
    assert many.cell == "cpu-fp32/2/3" and "16 cores here" in many.why
    one = choose_recipe(10, Machine("cpu-fp32", 1), META, TABLE)
    assert one.cell == "cpu-fp32/1/3" and "10 min asked" in one.why


def test_the_reason_says_measured_or_extrapolated_and_where_the_data_differs() -> None:
    measured = choose_recipe(10, Machine("cpu-fp32", 2), META, TABLE)
    assert measured.measured and "best of 2 measured (1.950 val bits per byte" in measured.why
    cuda = choose_recipe(10, Machine("cuda", 1), META, TABLE)
    assert not cuda.measured and "extrapolated from none (no CUDA device measured)" in cuda.why
    small_bytes = {"tokenizer": {"kind": "byte", "vocab_size": 259}, "splits": {"train": {"tokens": 50_000}}}
    why = choose_recipe(10, Machine("cpu-fp32", 2), small_bytes, TABLE).why
    assert "data tokenized byte 259, the table's bpe 1024" in why and "a tenth the table's or less" in why


def test_refusals_are_user_errors() -> None:
    with pytest.raises(UserError, match="more than 0"):
        choose_recipe(0, Machine("cpu-fp32", 2), META, TABLE)
    with pytest.raises(UserError, match="no recipe for a cpu-bf16"):
        choose_recipe(3, Machine("cpu-bf16", 2), META, {**TABLE, "cells": TABLE["cells"][:3]})


def test_the_config_is_the_candidate_trained_for_the_minutes_with_the_users_settings_on_top() -> None:
    choice = choose_recipe(10, Machine("cpu-fp32", 2), META, TABLE)
    cfg = recipe_config(choice, "fp32", ["train.lr=0.001"])
    assert (cfg.model.mixer, cfg.model.n_embd, cfg.model.block_size, cfg.train.batch_size) == ("gru", 192, 64, 32)
    assert cfg.train.max_minutes == 10 and cfg.train.precision == "fp32" and cfg.train.lr == 0.001


def test_the_packaged_table_is_whole_and_each_measured_cell_keeps_its_best() -> None:
    table = load_table()
    assert table["commit"] and table["made_by"].startswith("python -m seqlab.studies.recipe_measure")
    for cell in table["cells"]:
        assert cell["choice"] in CANDIDATES
        if cell["measured"]:
            scores = {n: r["val_bpb"] for n, r in cell["results"].items()}
            assert cell["choice"] == min(scores, key=scores.get)
            assert "small" in scores  # so the choice is never one that lost to the preset
        else:
            assert cell["reason"]
    for name, curve in table["curves"].items():  # each curve: runs of a candidate, longer and lower
        steps = [e["steps"] for e in curve["ends"]]
        assert name in CANDIDATES and steps == sorted(steps) and len(steps) >= 4, name
        assert curve["ends"][-1]["val_bpb"] < curve["ends"][0]["val_bpb"] and curve["commit"] and curve["cpu"]
    assert "small" in table["curves"]  # so the choice is never one that lost to the preset
    minutes = {c["minutes"] for c in table["cells"]}
    for kind in MACHINE_CLASSES:
        for m in minutes:
            threads = {c["threads"] for c in table["cells"] if c["machine"] == kind and c["minutes"] == m}
            assert threads == ({1} if kind == "cuda" else {1, 2}), (kind, m, threads)


def test_the_measuring_command_remakes_a_table_that_picks(tmp_path: Path, tiny_data_dir: Path) -> None:
    from seqlab.studies import recipe_measure

    installed = tmp_path / "installed.json"
    argv = [str(tiny_data_dir), "--out", str(tmp_path / "out"), "--cell", "cpu-fp32:1:0.01:gru-128,small",
            "--probe-steps", "3", "--jobs", "1", "--install", "--table", str(installed)]
    assert recipe_measure.main(argv) == 0
    table = json.loads(installed.read_text())
    cell = next(c for c in table["cells"] if c["measured"])
    assert set(cell["results"]) == {"gru-128", "small"} and all(r["steps"] >= 1 for r in cell["results"].values())
    assert {(c["machine"], c["threads"]) for c in table["cells"] if not c["measured"]} == \
        {("cpu-fp32", 2), ("cpu-bf16", 1), ("cpu-bf16", 2), ("cuda", 1)}
    assert choose_recipe(0.01, Machine("cpu-fp32", 1), {}, table).name == cell["choice"]
    assert (tmp_path / "out" / "recipe_table.md").read_text().count("**chosen**") == 1


def _seqlab(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "seqlab", *args], capture_output=True, text=True)


def test_train_minutes_without_a_preset_prints_and_records_the_recipe(tmp_path: Path, tiny_data_dir: Path) -> None:
    run = tmp_path / "run"
    done = _seqlab("train", str(tiny_data_dir), "--out", str(run), "--minutes", "0.01", "--quiet",
                   "train.eval_batches=2", "train.threads=1")
    assert done.returncode == 0, done.stderr
    first = done.stdout.splitlines()[0]
    assert first.startswith("recipe ") and "predicted" in first and "speed probe" in first
    recipe = json.loads((run / "run.json").read_text())["recipe"]
    assert recipe["name"] in CANDIDATES and recipe["minutes"] == 0.01 and recipe["why"] == first
    assert set(recipe["prediction"]["probe"]["rates"]) == set(load_table()["curves"])
    cfg = json.loads((run / "config.json").read_text())
    # the probe is paid from the budget, and the precision is the one that measured faster here
    assert 0.005 <= cfg["train"]["max_minutes"] <= 0.01 and cfg["train"]["eval_batches"] == 2
    assert cfg["train"]["precision"] == recipe["precision"]
    assert made_by(run).startswith(f"trained by recipe {recipe['name']} for 0.01 minutes (chosen by the table's curves")
    with served(run, tmp_path / "log") as server:  # the person sees which recipe made the model it serves
        deadline = time.monotonic() + 60
        while "ready:" not in server.log.read_text() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert f"(trained by recipe {recipe['name']} for 0.01 minutes (chosen by the table's curves" in \
            server.log.read_text()


def test_a_preset_with_minutes_is_that_preset_on_the_clock(tmp_path: Path, tiny_data_dir: Path) -> None:
    run = tmp_path / "run"
    done = _seqlab("train", str(tiny_data_dir), "--out", str(run), "--preset", "tiny", "--minutes", "0.01", "--quiet")
    assert done.returncode == 0, done.stderr
    assert not done.stdout.startswith("recipe ")
    info = json.loads((run / "run.json").read_text())
    assert info["recipe"] is None and json.loads((run / "config.json").read_text())["train"]["max_minutes"] == 0.01
    assert made_by(run).startswith("trained with named settings")
    refused = _seqlab("train", str(tiny_data_dir), "--out", str(run), "--resume", "--minutes", "1")
    assert refused.returncode == 2 and "a resumed run keeps its own" in refused.stderr


def test_settings_that_change_the_class_choose_its_cell(tiny_data_dir: Path) -> None:
    """fp32 on any CPU trains as the fp32-only class does, and a thread count is the cores the run gets."""
    from seqlab.api.training import recipe_choice

    choice = recipe_choice(tiny_data_dir, 3, ["train.precision=fp32", "train.threads=1", "train.device=cpu"])
    assert choice.machine == "cpu-fp32" and choice.cell == "curves/cpu-fp32/1" and choice.precision == "fp32"
    assert all(set(by) == {"fp32"} for by in choice.prediction["probe"]["rates"].values())


def test_the_demo_trains_the_tables_choice_beside_attention(tmp_path: Path, tiny_data_dir: Path, capsys) -> None:
    from seqlab.studies import demo

    demo._train("recipe", tiny_data_dir, tmp_path / "recipe", 0.01, False)
    assert capsys.readouterr().out.lstrip().startswith("recipe ")
    assert json.loads((tmp_path / "recipe" / "run.json").read_text())["recipe"]["minutes"] == 0.01
    demo._train("attention", tiny_data_dir, tmp_path / "attention", 0.01, False)
    info = json.loads((tmp_path / "attention" / "run.json").read_text())
    cfg = json.loads((tmp_path / "attention" / "config.json").read_text())
    assert info["recipe"] is None and cfg["model"]["mixer"] == "attention"


def test_installing_keeps_the_cells_this_run_did_not_measure(tmp_path: Path, tiny_data_dir: Path) -> None:
    from seqlab.studies import recipe_measure

    installed = tmp_path / "installed.json"
    for cell in ("cpu-fp32:1:0.01:gru-128,small", "cpu-fp32:2:0.01:small,gru-128"):
        argv = [str(tiny_data_dir), "--out", str(tmp_path / "out"), "--cell", cell, "--probe-steps", "3",
                "--jobs", "1", "--install", "--table", str(installed)]
        assert recipe_measure.main(argv) == 0
    table = json.loads(installed.read_text())
    measured = {(c["machine"], c["threads"]): c for c in table["cells"] if c["measured"]}
    assert set(measured) == {("cpu-fp32", 1), ("cpu-fp32", 2)}  # the first run's cell stayed
    assert all(c["commit"] and c["cpu"] for c in measured.values())
    assert {(c["machine"], c["threads"]) for c in table["cells"] if not c["measured"]} == \
        {("cpu-bf16", 1), ("cpu-bf16", 2), ("cuda", 1)}  # made again from both
    assert table["earlier"] and table["made_by"].endswith("cpu-fp32:2:0.01:small,gru-128")
