"""rewardloop.monitors.plot: report/health.png from a run's folders (health tables written by the health
stage, eval metrics, a guard verdict): a PNG of the figure's size, on which a breach shows."""

from __future__ import annotations

from PIL import Image, ImageChops

from rewardloop.artifacts import write_json
from rewardloop.monitors.guard import Breach, verdict
from rewardloop.monitors.plot import plot_health
from rewardloop.stages import health

from image_tables import image_frame, write_images


def run_folder(results):
    """base/ and iter_000..001/, each with its eval images' health, eval metrics and (iterations) a passed guard."""
    for iteration, name, colours in ((-1, "base", ["red", "white"]), (0, "iter_000", ["blue", "grey"]),
                                     (1, "iter_001", ["black", "black"])):
        folder = results / name
        folder.mkdir(parents=True)
        write_images(image_frame(colours), folder / "eval.parquet", iteration=iteration if iteration >= 0 else None)
        health.run({"eval": folder / "eval.parquet"}, iteration, folder / "health.parquet")
        write_json({"eval/reward/mean": 1.0 + iteration}, folder / "eval_metrics.json")
        if iteration >= 0:
            write_json(verdict(iteration, [], False), folder / "guard.json")
    return results


def test_the_figure_is_written_as_a_png_and_a_breach_shows_on_it(tmp_path):
    results = run_folder(tmp_path / "run")
    plot_health(results, tmp_path / "ok.png")
    breach = Breach("dark_fraction_rise", 1.0, 0.0, 0.3, "dark_fraction rose")
    write_json(verdict(1, [breach], False), results / "iter_001/guard.json")
    plot_health(results, tmp_path / "breach.png")
    ok, breached = Image.open(tmp_path / "ok.png"), Image.open(tmp_path / "breach.png")
    assert ok.format == "PNG" and ok.size == (16 * 90, 7 * 90)  # figsize x dpi
    assert breached.size == ok.size
    assert ImageChops.difference(ok.convert("RGB"), breached.convert("RGB")).getbbox() is not None
    assert sorted(p.name for p in tmp_path.iterdir()) == ["breach.png", "ok.png", "run"]  # atomic: no temp left
