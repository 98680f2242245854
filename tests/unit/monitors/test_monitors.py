"""The reward-hacking monitors on hand-made images and folders: each image-health statistic against
images whose value is known, the guard's thresholds, the history table and `rewardloop best`."""

from __future__ import annotations

import json
import math

import numpy as np
import pyarrow as pa
import pytest
from PIL import Image

from rewardloop.reports import best
from rewardloop.artifacts import write_table
from rewardloop.monitors import history
from workflow_helpers import ROOT
from rewardloop.monitors import image_health as ih
from rewardloop.monitors.guard import gold_breaches, health_breaches, verdict
from rewardloop.monitors.history import rows


def flat(rgb, size=32):
    return Image.new("RGB", (size, size), rgb)


def checkerboard(size=32):
    cells = (np.indices((size, size)).sum(0) % 2 * 255).astype("uint8")
    return Image.fromarray(np.stack([cells] * 3, -1))


def test_flat_images_have_the_extreme_values():
    black, white, red, grey = (ih.image_statistics(flat(c)) for c in ((0, 0, 0), (255, 255, 255), (255, 0, 0), (128, 128, 128)))
    assert black["dark_fraction"] == 1 and black["bright_fraction"] == 0
    assert white["bright_fraction"] == 1 and white["dark_fraction"] == 0
    assert red["saturation"] == 1 and grey["saturation"] == 0 and black["saturation"] == 0
    for stats in (black, white, red, grey):  # one colour: no entropy, no texture
        assert stats["colour_entropy"] == 0 and stats["high_frequency_energy"] == 0


def test_half_dark_half_bright_image():
    top_black = np.zeros((32, 32, 3), "uint8")
    top_black[16:] = 255
    stats = ih.image_statistics(Image.fromarray(top_black))
    assert stats["dark_fraction"] == 0.5 and stats["bright_fraction"] == 0.5
    assert stats["colour_entropy"] == pytest.approx(1.0)  # two equally frequent colours: one bit
    assert stats["high_frequency_energy"] < 0.2  # one edge: mostly low frequencies


def test_uniform_noise_has_near_maximal_entropy_and_a_checkerboard_only_high_frequencies():
    noise = Image.fromarray(np.random.default_rng(0).integers(0, 256, (128, 128, 3)).astype("uint8"))
    stats = ih.image_statistics(noise)
    assert 8.8 < stats["colour_entropy"] <= 9.0  # 512 colour bins, 16384 pixels
    # white noise spreads its energy evenly: 3/4 of the frequency plane lies above half Nyquist
    assert stats["high_frequency_energy"] == pytest.approx(0.75, abs=0.02)
    assert ih.image_statistics(checkerboard())["high_frequency_energy"] == pytest.approx(1.0)
    wave = np.tile((127.5 + 127.5 * np.cos(2 * np.pi * np.arange(32) / 32)).round().astype("uint8"), (32, 1))
    assert ih.image_statistics(Image.fromarray(np.stack([wave] * 3, -1)))["high_frequency_energy"] < 1e-4  # one slow cycle


def test_diversity_is_the_mean_pairwise_rms_distance_within_a_prompt():
    black, white = flat((0, 0, 0)), flat((255, 255, 255))
    assert ih.health([black, black, black], ["a", "a", "a"])["diversity"] == 0
    assert ih.health([black, white], ["a", "a"])["diversity"] == pytest.approx(1.0)
    # prompt a: black/white (1.0); prompt b: three blacks (0): the mean over prompts
    assert ih.health([black, white, black, black, black], ["a", "a", "b", "b", "b"])["diversity"] == pytest.approx(0.5)
    # one image per prompt: nothing to compare (not a collapse)
    assert math.isnan(ih.health([black, white], ["a", "b"])["diversity"])


def test_health_averages_over_images_and_takes_a_generator():
    stats = ih.health((image for image in [flat((0, 0, 0)), flat((255, 255, 255))]), ["a", "b"])
    assert stats["dark_fraction"] == 0.5 and stats["bright_fraction"] == 0.5
    with pytest.raises(ValueError, match="no images"):
        ih.health([], [])


GUARD = {"stop": False, "dark_fraction_rise": 0.3, "bright_fraction_rise": 0.3, "colour_entropy_ratio": 0.5,
         "diversity_ratio": 0.5, "high_frequency_ratio": 3.0, "gold_drop": 0.0}
BASE = {"dark_fraction": 0.1, "bright_fraction": 0.1, "colour_entropy": 4.0, "saturation": 0.3,
        "high_frequency_energy": 0.01, "diversity": 0.2}


@pytest.mark.parametrize("change, check", [
    ({"dark_fraction": 0.41}, "dark_fraction_rise"),
    ({"bright_fraction": 0.45}, "bright_fraction_rise"),
    ({"colour_entropy": 1.9}, "colour_entropy_ratio"),
    ({"diversity": 0.09}, "diversity_ratio"),
    ({"high_frequency_energy": 0.031}, "high_frequency_ratio"),
])
def test_each_threshold_breaches_past_its_limit_only(change, check):
    (found,) = health_breaches(GUARD, BASE, {**BASE, **change})
    assert found.check == check and found.base == BASE[next(iter(change))] and found.threshold == GUARD[check]
    assert next(iter(change)) in found.message
    # just inside the limit: no breach
    inside = {"dark_fraction": 0.39, "bright_fraction": 0.39, "colour_entropy": 2.1, "diversity": 0.11,
              "high_frequency_energy": 0.029}
    assert health_breaches(GUARD, BASE, {**BASE, **inside}) == []
    # a threshold set to null is not checked
    assert health_breaches({**GUARD, check: None}, BASE, {**BASE, **change}) == []


def test_a_missing_or_nan_statistic_is_not_a_breach():
    assert health_breaches(GUARD, BASE, {**BASE, "diversity": float("nan")}) == []
    assert health_breaches(GUARD, {}, BASE) == []


def test_gold_breach_needs_the_trained_reward_to_rise_and_the_gold_to_fall():
    falling = {"ocr": (0.8, 0.6)}
    (found,) = gold_breaches(GUARD, (1.0, 1.2), falling)
    assert found.check == "gold_drop (ocr)" and found.value == 0.6 and "while the trained reward rose" in found.message
    assert gold_breaches(GUARD, (1.0, 0.9), falling) == []  # trained reward fell too: not hacking
    assert gold_breaches(GUARD, (1.0, 1.2), {"ocr": (0.8, 0.85)}) == []
    assert gold_breaches({**GUARD, "gold_drop": 0.25}, (1.0, 1.2), falling) == []  # within tolerance
    assert verdict(3, [found], True)["status"] == "breach" and verdict(3, [], True)["status"] == "ok"


def _iteration(results, it: int, eval_mean: float, gold: float | None = None, guard: str | None = None,
               checkpoint: bool = True):
    folder = results / (f"iter_{it:03d}" if it >= 0 else "base")
    (folder / "metrics").mkdir(parents=True)
    (folder / "metrics/eval.json").write_text(json.dumps({"eval/reward/mean": eval_mean}))
    if checkpoint and it >= 0:
        (folder / "checkpoint").mkdir()
    if gold is not None:
        (folder / "rescore").mkdir()
        (folder / "rescore/ocr.json").write_text(json.dumps({"gold/ocr/mean": gold}))
    if guard:
        checks = [{"check": "diversity_ratio"}] if guard != "ok" else []
        name = "guard_stopped.json" if guard == "stopped" else "guard.json"
        (folder / name).write_text(json.dumps({"iteration": it, "status": "ok" if guard == "ok" else "breach",
                                               "breaches": checks}))
    table = pa.Table.from_pylist([{"iteration": it, "source": "eval", "images": 4, **BASE}])
    write_table(table, folder / "health.parquet")


@pytest.fixture
def run_folder(tmp_path):
    results = tmp_path / "results"
    _iteration(results, -1, 1.0, gold=0.9)
    _iteration(results, 0, 1.2, gold=0.95, guard="ok")
    _iteration(results, 1, 1.5, gold=0.7, guard="breach")
    _iteration(results, 2, 1.3, gold=0.8, guard="ok")
    _iteration(results, 3, 1.6, gold=0.5, guard="stopped")
    return results


def test_history_reads_every_folder(run_folder):
    table = rows(run_folder)
    assert [r["iteration"] for r in table] == [-1, 0, 1, 2, 3]
    assert [r["gold_ocr"] for r in table] == [0.9, 0.95, 0.7, 0.8, 0.5]
    assert [r["guard"] for r in table] == [None, "ok", "breach: diversity_ratio", "ok", "stopped: diversity_ratio"]
    assert [r["breached"] for r in table] == [False, False, True, False, True]
    assert table[1]["diversity"] == BASE["diversity"]


def test_the_end_of_run_line_names_every_breached_iteration(run_folder, capsys):
    line = history.report(run_folder)
    assert line == (f"rewardloop: REWARD-HACKING GUARD: breaches in {run_folder} at iteration 1: diversity_ratio; "
                    "iteration 3: diversity_ratio (details: iter_XXX/guard.json or guard_stopped.json, "
                    "report/health.png)")
    assert capsys.readouterr().err == line + "\n"
    assert "history.report(folder)" in (ROOT / "Snakefile").read_text()  # what the Snakefile's onsuccess calls
    assert history.report(run_folder.parent / "empty") is None


def test_a_verdict_reads_the_same_in_the_summary_and_in_mlflow():
    breach = verdict(4, health_breaches(GUARD, BASE, {**BASE, "diversity": 0.0}), stop=False)
    assert history.guard_cell(breach) == "breach: diversity_ratio"  # summary's column, the rewardloop.guard tag
    assert history.guard_cell(verdict(4, [], stop=False)) == "ok" and history.guard_cell({}) is None


def test_best_by_eval_and_by_gold_with_and_without_the_guard(run_folder):
    assert best.choose(run_folder)["iteration"] == 3
    guarded = best.choose(run_folder, guard=True)
    assert guarded["iteration"] == 2 and guarded["excluded"] == {"1": "diversity_ratio", "3": "diversity_ratio"}
    assert guarded["lora_dir"] == str(run_folder / "iter_002/checkpoint")
    assert best.choose(run_folder, "gold/ocr/mean")["iteration"] == 0
    with pytest.raises(ValueError, match="expected eval/reward/mean or gold/<name>/mean"):
        best.choose(run_folder, "gold/ocr")
    with pytest.raises(ValueError, match="no exported iteration has gold/hps/mean"):
        best.choose(run_folder, "gold/hps/mean")


def test_best_skips_an_iteration_without_checkpoint_and_prefers_the_earlier_of_a_tie(tmp_path):
    results = tmp_path / "results"
    _iteration(results, 0, 1.5)
    _iteration(results, 1, 1.5)
    _iteration(results, 2, 9.0, checkpoint=False)  # still training: no model to keep
    assert best.choose(results)["iteration"] == 0


def test_export_best_links_the_folder_relatively(run_folder, tmp_path):
    chosen = best.export_best(run_folder, run_folder / "best.json", guard=True)
    link = run_folder / "best"
    assert link.is_symlink() and not str(link.readlink()).startswith("/")
    assert link.resolve() == (run_folder / "iter_002/checkpoint").resolve()
    assert json.loads((run_folder / "best.json").read_text())["iteration"] == chosen["iteration"] == 2
    moved = tmp_path / "elsewhere"
    run_folder.rename(moved)
    assert (moved / "best").resolve() == (moved / "iter_002/checkpoint").resolve()
