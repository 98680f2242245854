"""results_layout: the run folder's names, parsed back where they are read, and its stage lists."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from rewardloop import results_layout as layout
from rewardloop.results_layout import GuidanceEval, RunLayout


def test_iteration_names_pad_numbers_and_keep_wildcards():
    assert layout.iteration_name(3) == "iter_003"
    assert layout.iteration_name("7") == "iter_007"
    assert layout.iteration_name("{it}") == "iter_{it}"
    assert layout.folder_name(-1) == "base"
    assert layout.folder_name(12) == "iter_012"
    with pytest.raises(ValueError, match="iteration -2"):
        layout.iteration_name(-2)


def test_folder_names_parse_back():
    for iteration in (-1, 0, 5, 999):
        assert layout.parse_folder_name(layout.folder_name(iteration)) == iteration
    for other in ("iter_12", "iter_0001", "report", "iter_abc", "basement"):
        assert layout.parse_folder_name(other) is None
    with pytest.raises(ValueError, match="'report'.*base or iter_NNN"):
        layout.folder_iteration("report")


def test_wildcard_regexes_match_the_names_made_here():
    assert re.fullmatch(layout.ITERATION_REGEX, "004")
    assert not re.fullmatch(layout.ITERATION_REGEX, "4")
    assert re.fullmatch(layout.FOLDER_REGEX, "base") and re.fullmatch(layout.FOLDER_REGEX, "iter_004")
    assert not re.fullmatch(layout.FOLDER_REGEX, "report")


def test_training_path_per_signal():
    assert layout.training_path("pairs") == ("generate", "score", "pairs", "train", "export")
    assert layout.iteration_stages("advantages")[-1] == "eval"
    assert "eval" not in layout.training_path("advantages")
    assert layout.training_path_stages() == ("generate", "score", "advantages", "pairs", "train", "export")
    with pytest.raises(ValueError, match="'rewards'.*advantages, pairs"):
        layout.training_path("rewards")


def test_jobs_on_the_training_path_by_benchmark_name():
    on = ["generate", "generate_01", "score_00", "pairs", "advantages", "train", "export"]
    off = ["eval", "eval_cfg4.5", "grids", "tracking", "health", "guard", "rescore_jpeg", "rescore_jpeg_01",
           "monitors_tracking", "preflight", "preflight_gate", "train_state"]
    assert [layout.on_training_path(job) for job in on] == [True] * len(on)
    assert [layout.on_training_path(job) for job in off] == [False] * len(off)


def test_the_objectives_signals_are_the_layouts():
    from rewardloop.objectives import OBJECTIVES

    assert {objective.signal for objective in OBJECTIVES.values()} == set(layout.SIGNALS)


def test_names_within_a_folder():
    assert layout.metrics_name("train") == "metrics/train.json"
    assert layout.signal_table("pairs") == "pairs.parquet"
    assert layout.rescore_name("jpeg", "parquet") == "rescore/jpeg.parquet"
    assert layout.shard_name("generate", 1) == "shards/generate_01"
    assert layout.shard_name("score", "{shard}") == "shards/score_{shard}"


def test_guidance_eval_names_round_trip():
    half = GuidanceEval(4.5)
    assert (half.name, half.table, half.metrics, half.metric_prefix) == (
        "eval_cfg4.5", "eval_cfg4.5.parquet", "metrics/eval_cfg4.5.json", "eval_cfg4.5")
    assert GuidanceEval(1).name == "eval_cfg1"  # an integer scale names no decimals
    assert GuidanceEval.from_name("eval_cfg4.5") == half
    assert GuidanceEval.from_name("eval_cfg1") == GuidanceEval(1.0)
    assert not GuidanceEval.is_name("eval") and not GuidanceEval.is_name("eval_cfg")
    with pytest.raises(ValueError, match="'eval_cfgx'.*eval_cfg4.5"):
        GuidanceEval.from_name("eval_cfgx")


def test_guidance_wildcard_regex_matches_exactly_the_configured_names():
    evals = layout.guidance_evals([1, 4.5])
    regex = layout.guidance_wildcard_regex(evals)
    assert [bool(re.fullmatch(regex, name)) for name in ("eval_cfg1", "eval_cfg4.5", "eval_cfg4x5", "eval_cfg2")] == [
        True, True, False, False]
    nothing = layout.guidance_wildcard_regex(layout.guidance_evals(None))
    assert not re.fullmatch(nothing, "") and not re.fullmatch(nothing, "eval_cfg1")


def test_run_layout_paths():
    run = RunLayout("results/exp/seed_0")
    assert run.iteration("{it}") == "results/exp/seed_0/iter_{it}"
    assert run.iteration(2) == "results/exp/seed_0/iter_002"
    assert run.base == "results/exp/seed_0/base"
    assert run.log("iter_{it}", "train") == "results/exp/seed_0/logs/iter_{it}/train.log"
    assert run.benchmark("base", "eval") == "results/exp/seed_0/benchmarks/base/eval.tsv"
    assert run.report("curves.png") == "results/exp/seed_0/report/curves.png"
    assert run.tracking_run == "results/exp/seed_0/tracking/run.json"


def test_folders_on_disk_in_order(tmp_path):
    for name in ("iter_010", "iter_002", "iter_2", "base", "report", "iter_xyz"):
        (tmp_path / name).mkdir()
    (tmp_path / "iter_003").write_text("a file, not a folder")
    run = RunLayout(tmp_path)
    assert run.iteration_folders() == [(2, tmp_path / "iter_002"), (10, tmp_path / "iter_010")]
    assert [it for it, _ in run.folders()] == [-1, 2, 10]
    (tmp_path / "base").rmdir()
    assert [it for it, _ in run.folders()] == [2, 10]


def test_guidance_evals_in_a_folder(tmp_path):
    (tmp_path / "metrics").mkdir()
    for stem in ("eval", "eval_cfg4.5", "eval_cfg1", "eval_cfgnone"):
        (tmp_path / "metrics" / f"{stem}.json").write_text("{}")
    (tmp_path / "metrics" / "eval_cfg10.json").write_text("{}")
    assert layout.guidance_evals_in(tmp_path) == (GuidanceEval(1), GuidanceEval(10), GuidanceEval(4.5))  # by name


def test_run_roots_are_the_folders_with_evaluated_iterations(tmp_path):
    for run in ("exp/seed_0", "exp/seed_1"):
        (tmp_path / run / "iter_000").mkdir(parents=True)
        (tmp_path / run / "iter_000" / "eval.parquet").write_bytes(b"")
    (tmp_path / "base").mkdir()
    (tmp_path / "base" / "eval.parquet").write_bytes(b"")
    assert layout.run_roots(tmp_path) == [tmp_path / "exp/seed_0", tmp_path / "exp/seed_1"]


def test_importing_it_is_cheap():
    """The rules import it at planning time: no torch, no pandas."""
    code = ("import sys, rewardloop.results_layout; "
            "print(sorted(m for m in ('torch', 'pandas', 'pyarrow', 'numpy') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


# ------------------------------------------------------------------ the layout module owns the paths

ROOT = Path(__file__).resolve().parents[2]
# A run folder's names: a code string that holds one (without spaces, so not a message) spells a path of
# results/ outside the layout module. (The folder prefixes not followed by a letter: iter_dir is a name.)
ARTIFACT_NAMES = (layout.SAMPLES, layout.LATENTS, layout.SCORES, layout.EVAL_TABLE, layout.GRID, layout.EVAL_GRID,
                  layout.HEALTH, layout.GUARD_VERDICT, layout.GUARD_STOPPED, layout.TRACKING_MARKER,
                  layout.PREFLIGHT_FIGURES, layout.PREFLIGHT_REPORT, layout.CURVES, layout.HEALTH_FIGURE,
                  layout.COMPARE_TABLE, layout.COMPARE_FIGURE, layout.BENCHMARK_REPORT, *map(layout.signal_table,
                  layout.SIGNALS))
FOLDER_PREFIXES = (layout.ITERATION_PREFIX, layout.GuidanceEval(1).name.rstrip("1"))
# Names that are not paths of results/: an image's name inside an MLflow child run; what a user passes
# to `rewardloop score` (its metavars).
NOT_RESULTS_PATHS = {("src/rewardloop/tracking/runs.py", '"eval_grid.png"'),
                     ("src/rewardloop/tracking/runs.py", '"rollout_grid.png"'),
                     ("src/rewardloop/cli/score.py", '"DIR|samples.parquet"'),
                     ("src/rewardloop/cli/score.py", '"scores.parquet"')}


def code_strings(path: Path):
    """(line, literal) of every string in ``path``'s code (Python, or Snakemake's rules, which Python's
    tokenizer reads too), without docstrings and comments; an f-string without its {expressions}."""
    import io
    import tokenize

    for token in tokenize.generate_tokens(io.StringIO(path.read_text()).readline):
        if token.type == tokenize.STRING and not re.match(r"[rbfuRBFU]*('''|\"\"\")", token.string):
            yield token.start[0], re.sub(r"\{[^{}]*\}", "", token.string)


def test_no_path_of_a_run_folder_is_spelled_outside_the_layout_module():
    sources = [*ROOT.glob("rules/*.smk"), ROOT / "Snakefile", *ROOT.glob("scripts/*.py"),
               *(p for p in (ROOT / "src/rewardloop").rglob("*.py") if p.name != "results_layout.py")]
    names = re.compile("|".join([*map(re.escape, ARTIFACT_NAMES), *(f"{re.escape(p)}(?![a-z])" for p in FOLDER_PREFIXES)]))
    spelled = [f"{path.relative_to(ROOT)}:{line}: {literal}" for path in sources
               for line, literal in code_strings(path)
               if names.search(literal) and not re.search(r"\s", literal)
               and (str(path.relative_to(ROOT)), literal) not in NOT_RESULTS_PATHS]
    assert not spelled, "\n".join(spelled)


def test_the_path_check_finds_a_spelled_path(tmp_path):
    rules = tmp_path / "rules.smk"
    rules.write_text('rule x:\n    """iter_ in a docstring"""\n    # results/iter_000 in a comment\n'
                     '    output: f"{RESULTS}/iter_{{it}}/samples.parquet"\n')
    assert [literal for _, literal in code_strings(rules)] == ['f"/iter_{}/samples.parquet"']
