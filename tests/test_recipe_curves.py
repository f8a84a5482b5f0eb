"""The recipe chosen by curves: a branch cooled down from the trunk is the run of that length, a curve is read
inside and past its runs with an honest uncertainty, the speed probe measures and caches, and the choice takes
the candidate predicted best at the steps this machine reaches (a slower machine, a smaller model)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from seqlab.studies import recipe_curves
from seqlab.studies.recipe_measure import candidate_config
from seqlab.training.curve_choice import choose_by_curves, family
from seqlab.training.curves import read
from seqlab.training.recipe_table import Machine, load_table
from seqlab.training.speed_probe import probe


def _law(steps: float, floor: float = 1.6, scale: float = 8.0, alpha: float = 0.35) -> float:
    return floor + scale * steps ** -alpha


def test_a_branch_cooled_down_from_the_trunk_is_the_run_of_that_length(tmp_path: Path,
                                                                       tiny_data_dir: Path) -> None:
    """The curve's runs cost one trunk and short cooldowns, and each is exactly the run it stands for."""
    from seqlab.training.trainer import train

    cfg = candidate_config("gru-128", "cpu-fp32", 259, ["train.max_steps=1", "train.threads=1",
                                                        "train.eval_batches=2", "train.warmup_steps=5"])
    recipe_curves.trunk_to(tiny_data_dir, tmp_path / "trunk", cfg, recipe_curves.trunk_stop(25), every=5)
    recipe_curves.branch(tiny_data_dir, tmp_path / "trunk", tmp_path / "branch", 25)
    fresh = cfg.__class__.from_dict({**cfg.to_dict(), "train": {**cfg.to_dict()["train"], "max_steps": 25,
                                                                "eval_every": 7, "ckpt_every": 7}})
    train(tiny_data_dir, tmp_path / "fresh", fresh, progress=False)
    a, b = load_file(tmp_path / "branch" / "model.safetensors"), load_file(tmp_path / "fresh" / "model.safetensors")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    records = [json.loads(line) for line in (tmp_path / "trunk" / "metrics.jsonl").read_text().splitlines()]
    assert [r["lr"] for r in records if "lr" in r][-1] == cfg.train.lr  # the trunk never cooled down


def test_the_study_keeps_each_end_and_continues_where_it_stopped(tmp_path: Path, tiny_data_dir: Path) -> None:
    argv = [str(tiny_data_dir), "--candidate", "gru-128", "--ends", "10,20", "--out", str(tmp_path),
            "--precision", "fp32", "--trunk-eval", "5", "--install", "--table", str(tmp_path / "table.json")]
    (tmp_path / "table.json").write_text(json.dumps({"data": {"label": "tiny"}}))
    assert recipe_curves.main(argv) == 0
    curve = json.loads((tmp_path / "gru-128" / "curve.json").read_text())
    assert [e["steps"] for e in curve["ends"]] == [10, 20] and curve["ends"][1]["val_bpb"] < curve["ends"][0]["val_bpb"]
    assert json.loads((tmp_path / "table.json").read_text())["curves"]["gru-128"]["ends"] == curve["ends"]
    before = (tmp_path / "gru-128" / "curve.json").stat().st_mtime_ns
    assert recipe_curves.main(argv[:4] + ["10"] + argv[5:]) == 0  # done already: nothing trained again
    assert (tmp_path / "gru-128" / "curve.json").stat().st_mtime_ns == before


def test_a_recipe_run_trained_to_its_clock_becomes_a_point_of_its_curve(tmp_path: Path, tiny_data_dir: Path) -> None:
    from seqlab.training.recipe_table import CANDIDATES
    from seqlab.training.trainer import train

    cfg = candidate_config("gru-128", "cpu-fp32", 259, ["train.max_minutes=0.01", "train.max_steps=10000000",
                                                        "train.threads=1", "train.eval_batches=2"])
    recipe = {"name": "gru-128", "overrides": list(CANDIDATES["gru-128"][1]), "minutes": 0.01}
    summary = train(tiny_data_dir, tmp_path / "run", cfg, progress=False, recipe=recipe)
    table = tmp_path / "table.json"
    table.write_text(json.dumps({"curves": {"gru-128": {"precision": "fp32", "ends": [
        {"steps": 1, "val_bpb": 9.0}, {"steps": 10**6, "val_bpb": 1.0}]}}}))
    argv = [str(tiny_data_dir), "--add-run", str(tmp_path / "run"), "--table", str(table)]
    assert recipe_curves.main(argv) == 0
    ends = json.loads(table.read_text())["curves"]["gru-128"]["ends"]
    added = ends[1]
    assert [e["steps"] for e in ends] == [1, summary["steps"], 10**6] and added["run"] == "0.01-minute recipe run"
    assert {k: added[k] for k in ("val_bpb", "test_bpb")} == recipe_curves.scores(tiny_data_dir, tmp_path / "run")
    assert added["cpu"] and added["date"] == time.strftime("%Y-%m-%d", time.gmtime())
    with pytest.raises(SystemExit, match="already has a run of"):
        recipe_curves.main(argv)
    # a run stopped by its steps, or trained by other settings than the candidate's, is no point of the curve
    train(tiny_data_dir, tmp_path / "steps", candidate_config("gru-128", "cpu-fp32", 259, [
        "train.max_steps=3", "train.threads=1", "train.eval_batches=2"]), progress=False, recipe=recipe)
    with pytest.raises(SystemExit, match="did not train to its clock"):
        recipe_curves.run_end(tiny_data_dir, tmp_path / "steps")
    info = json.loads((tmp_path / "run" / "run.json").read_text())
    info["recipe"]["overrides"].append("model.n_embd=96")
    (tmp_path / "run" / "run.json").write_text(json.dumps(info))
    with pytest.raises(SystemExit, match="not trained by a candidate recipe"):
        recipe_curves.run_end(tiny_data_dir, tmp_path / "run")


def test_a_curve_is_read_inside_its_runs_and_past_them_along_a_power_law() -> None:
    runs = [(s, _law(s)) for s in (1000, 2000, 4000, 8000, 16000)]
    assert read(runs, 8000).how == "measured" and read(runs, 8000).val_bpb == _law(8000)
    inside = read(runs, 6000)
    assert inside.how == "interpolated" and abs(inside.val_bpb - _law(6000)) < inside.plus_minus
    near, far = read(runs, 32000), read(runs, 256000)
    assert near.how == far.how == "extrapolated"
    assert abs(near.val_bpb - _law(32000)) < 1e-3 and abs(far.val_bpb - _law(256000)) < 1e-3
    noisy = [(s, v + (0.02 if i % 2 else -0.02)) for i, (s, v) in enumerate(runs)]
    assert read(noisy, 256000).plus_minus > read(noisy, 32000).plus_minus > 0.01  # unsure, and more so further


def test_a_curve_that_turns_up_is_read_on_rising_and_its_run_stopped_at_its_lowest() -> None:
    """Long runs see a small corpus many times over: the curve rises again, and more steps are worse."""
    from seqlab.training.curves import best_within

    runs = [(1000, 2.14), (2000, 1.99), (4000, 1.90), (8000, 1.88), (16000, 1.89)]
    assert read(runs, 32000).val_bpb > 1.89  # along the last rise, not a law falling on
    best = best_within(runs, 30000)
    assert (best.steps, best.val_bpb, best.how) == (8000, 1.88, "measured")
    # runs a few hundred steps apart differ by noise: a wiggle inside the reading's uncertainty is no rise
    wiggle = [(4000, 1.90), (8000, 1.84), (16000, 1.815), (16544, 1.801), (16864, 1.804), (19407, 1.793)]
    assert best_within(wiggle, 16900).steps == 16900
    table = {"data": {"label": "x"}, "trainer_share": 1.0,
             "curves": {"gru-256": {"ends": [{"steps": s, "val_bpb": v} for s, v in runs]}}}
    choice = choose_by_curves(10, Machine("cpu-fp32", 2), {"gru-256": {"fp32": 50.0}}, 0.0, table)
    assert choice.max_steps == 8000 and choice.prediction["reachable_steps"] == 30000
    assert "stops at 8,000 of the 30,000 steps" in choice.why
    from seqlab.training.recipe_table import recipe_config

    assert recipe_config(choice, "fp32", []).train.max_steps == 8000


def test_a_family_shares_its_exponent() -> None:
    """Two runs alone pin no exponent; the family's other widths do."""
    short = [(s, _law(s, floor=1.7, scale=9.0)) for s in (1000, 2000, 4000)]
    wide = [(s, _law(s)) for s in (2000, 4000, 8000, 16000, 32000)]
    alone, with_family = read(short, 64000), read(short, 64000, family=[wide])
    truth = _law(64000, floor=1.7, scale=9.0)
    assert abs(with_family.val_bpb - truth) < 1e-3 < abs(alone.val_bpb - truth)
    assert family("gru-256") == family("gru-384") == "gru" and family("small") == "attention"


ENDS = (1000, 2000, 4000, 8000, 16000)
TABLE = {"data": {"label": "spamassassin, bpe 1024"}, "trainer_share": 0.9,
         "curves": {"gru-128": {"ends": [{"steps": s, "val_bpb": _law(s, floor=1.75)} for s in ENDS]},
                    "gru-256": {"ends": [{"steps": s, "val_bpb": _law(s, floor=1.5, scale=11.0)} for s in ENDS]}}}


def test_the_choice_is_the_candidate_predicted_best_at_the_steps_reached_here() -> None:
    fast = {"gru-128": {"bf16": 30.0, "fp32": 20.0}, "gru-256": {"bf16": 12.0, "fp32": 14.0}}
    choice = choose_by_curves(20, Machine("cpu-bf16", 2), fast, probe_seconds=12.0, table=TABLE)
    assert choice.name == "gru-256" and choice.precision == "fp32"  # bf16 only where it measures faster
    steps = round(14.0 * (20 * 60 - 12.0) * 0.9)
    assert choice.prediction["steps"] == steps and choice.train_minutes == pytest.approx(20 - 0.2)
    assert choice.prediction["candidates"]["gru-128"]["precision"] == "bf16"
    assert f"{steps:,} steps in 19.8 min here, predicted" in choice.why and "next gru-128" in choice.why
    slow = {n: {p: r / 4 for p, r in by.items()} for n, by in fast.items()}  # a machine a quarter as fast
    assert choose_by_curves(20, Machine("cpu-bf16", 2), slow, 12.0, TABLE).name == "gru-128"


def test_the_probe_measures_each_candidate_in_each_precision_and_caches_it(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("SEQLAB_CACHE", str(tmp_path))
    from seqlab.config import get_preset

    configs = {"a": {"fp32": get_preset("tiny")}, "b": {"fp32": get_preset("small"), "bf16": get_preset("base")}}
    pause = {id(configs["a"]["fp32"]): 0.002, id(configs["b"]["fp32"]): 0.02, id(configs["b"]["bf16"]): 0.01}

    def stand_in(cfg):  # a step of a known length for each config
        return lambda: time.sleep(pause[id(cfg)])

    first = probe(configs, 1, 0.3, step_fn=stand_in)
    assert not first.cached and 0.2 < first.seconds <= 0.3 + 0.05 and first.path.is_file()  # within its share
    assert first.rates["a"]["fp32"] > first.rates["b"]["bf16"] > first.rates["b"]["fp32"]
    assert 30 < first.rates["b"]["fp32"] <= 50
    again = probe(configs, 1, 0.3, step_fn=stand_in)
    assert again.cached and again.seconds == 0 and again.rates == first.rates
    assert probe(configs, 2, 0.05, step_fn=stand_in).path != first.path  # another thread count is measured anew


def test_the_packaged_curves_rank_the_candidates_as_the_measured_cells_do() -> None:
    """Each measured cell's candidates, read on the curves at the steps each ran, come out in the cell's order."""
    table = load_table()
    families = {n: family(n) for n in table["curves"]}
    from seqlab.training.curves import read_table_curve

    checked = 0
    for cell in table["cells"]:
        results = {n: r for n, r in cell.get("results", {}).items() if n in table["curves"]}
        if not cell["measured"] or len(results) < 2:
            continue
        measured = sorted(results, key=lambda n: results[n]["val_bpb"])
        predicted = sorted(results, key=lambda n: read_table_curve(table["curves"], n, results[n]["steps"],
                                                                   families).val_bpb)
        assert predicted == measured, (cell["machine"], cell["threads"], cell["minutes"])
        checked += 1
    assert checked >= 4


def test_the_plan_prints_each_budgets_choice_and_draws_the_curves(tmp_path: Path) -> None:
    from seqlab.studies.recipe_plan import markdown, plan, plot

    table = {**TABLE, "cells": [{"measured": True, "results": {"gru-128": {"steps": 3000, "val_bpb": 2.2}}}]}
    machine = Machine("cpu-fp32", 1)
    rows = plan([1, 600], machine, 259, table, probe_seconds=0.1)
    assert [r["minutes"] for r in rows] == [1, 600] and set(rows[0]["candidates"]) == {"gru-128", "gru-256"}
    assert rows[1]["candidates"]["gru-256"]["how"] == "extrapolated"  # ten hours: past every run
    assert rows[1]["steps"] > 100 * rows[0]["steps"]
    text = markdown(rows, machine)
    assert "| 600 |" in text and "**" in text.splitlines()[-3]
    plot(table, tmp_path / "curves.png", 1e6)
    assert (tmp_path / "curves.png").stat().st_size > 10_000


def test_the_bench_rows_say_what_the_probe_costs_and_what_the_trainer_keeps(tmp_path: Path, tiny_data_dir: Path,
                                                                           monkeypatch) -> None:
    from seqlab.bench import recipe_probe

    monkeypatch.setattr(recipe_probe, "bench_data", lambda cache: tiny_data_dir)
    monkeypatch.setattr("seqlab.training.speed_probe.PROBE_SHARE", 0.0005)  # a 0.3 s share: the shape, not speed
    rows = recipe_probe.rows(tmp_path, quick=True, threads=1)
    cost, share = rows
    table = load_table()
    assert cost["unit"] == "%" and cost["goal"] == "< 2" and set(cost["detail"]["rates"]) == set(table["curves"])
    assert share["unit"] == "x" and share["value"] > 0 and share["detail"]["table_share"] == table["trainer_share"]


def test_a_run_far_from_the_probe_s_prediction_drops_the_cached_rates(tmp_path: Path, monkeypatch) -> None:
    from seqlab.config import get_preset
    from seqlab.training.curve_choice import RATE_TOLERANCE, check_probe

    monkeypatch.setenv("SEQLAB_CACHE", str(tmp_path))
    configs = {"a": {"fp32": get_preset("tiny")}}
    kept = probe(configs, 1, 0.05, step_fn=lambda cfg: lambda: time.sleep(0.005))
    recipe = {"max_steps": 0, "prediction": {"reachable_steps": 1000, "probe": kept.as_dict()}}
    ended = {"stopped": "reached train.max_minutes", "failed": False}
    near = round(1000 * (1 + RATE_TOLERANCE / 2))
    assert check_probe(recipe, {**ended, "steps": near}) is None and kept.path.is_file()
    # stopped by a step budget or by failure: nothing to compare
    assert check_probe({**recipe, "max_steps": 900}, {**ended, "steps": 400}) is None
    assert check_probe(recipe, {**ended, "steps": 400, "failed": True}) is None and kept.path.is_file()
    note = check_probe(recipe, {**ended, "steps": 1360})
    assert note is not None and "1,360 steps" in note and "1,000 (+36%)" in note and "dropped" in note
    assert not kept.path.exists() and not probe(configs, 1, 0.05, step_fn=lambda cfg: lambda: None).cached
    odd = {**recipe, "prediction": {"reachable_steps": 1000, "probe": {"key": "../x"}}}  # never a path
    assert check_probe(odd, {**ended, "steps": 10}) == ("this run took 10 steps where the speed probe's rates "
                                                          "gave 1,000 (-99%)")
