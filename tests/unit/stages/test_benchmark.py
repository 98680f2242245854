"""rewardloop benchmark: the field's prompt sets (stand-ins in each published format) run on the finished tiny
run's base model and checkpoints, per-image tables per (benchmark, checkpoint) and the run's benchmark table
(`rewardloop summary --benchmarks`); reruns keep finished files; bad inputs are refused with clear errors."""

from __future__ import annotations

import json
import shutil

import pandas as pd
import pytest
from remote_servers import running, stand_in, stand_ins_module

from rewardloop import benchmark_sets
from rewardloop.cli import benchmark
from rewardloop.reports import benchmark_table
from rewardloop import results_layout as layout
from rewardloop.artifacts import read_table
from rewardloop.reports.best import choose
from rewardloop.cli.main import main
from rewardloop.prompts import PromptFileError

# color_match scores synthetic captions ("a red circle on a blue background"); jpeg_compressibility any prompt
METRICS = {"color_match": {"weight": 1.0}, "jpeg_compressibility": {"weight": 1.0}}
CAPTIONS = ["a red circle on a blue background", "a green square on a white background",
            "a blue triangle on a red background"]
IMAGES_PER_PROMPT = 2


def write_sets(folder):
    """Stand-ins of DrawBench's CSV, Pick-a-Pic's test captions (repeated, as its image pairs repeat them),
    a plain prompt file and flow_grpo's OCR test.txt."""
    folder.mkdir()
    pd.DataFrame({"Prompts": CAPTIONS, "Category": ["Colors", "Colors", "Shapes"]}).to_csv(
        folder / "drawbench.csv", index=False)
    pd.DataFrame({"caption": [CAPTIONS[0], CAPTIONS[0], CAPTIONS[2]], "image_0_uid": ["a", "b", "c"]}).to_parquet(
        folder / "pickapic.parquet")
    (folder / "plain.txt").write_text("\n".join(CAPTIONS[1:]) + "\n")
    (folder / "ocr.txt").write_text('A poster that says "open"\nA mug with the word "cafe" on it\n')
    return {"drawbench": (folder / "drawbench.csv", "drawbench"), "pickapic": (folder / "pickapic.parquet", "pickapic"),
            "plain": (folder / "plain.txt", "text")}, {"ocr": (folder / "ocr.txt", "ocr")}


@pytest.fixture
def results(finished_run, tmp_path):
    return shutil.copytree(finished_run / "results", tmp_path / "results", symlinks=True)


def run(results, benchmarks, metrics=METRICS, checkpoints="base,last,best", **options):
    return benchmark.run_benchmarks(results, benchmarks, metrics, checkpoints,
                                        images_per_prompt=IMAGES_PER_PROMPT, progress=False, **options)


def test_the_benchmark_table_of_a_finished_run(results, tmp_path, capsys):
    sets, ocr = write_sets(tmp_path / "sets")
    best = layout.iteration_name(choose(results)["iteration"])
    last = layout.RunLayout(results).iteration_folders()[-1][1].name
    folders = sorted({layout.BASE, best, last}, key=lambda f: layout.parse_folder_name(f))
    written = run(results, sets) + run(results, ocr, metrics={"jpeg_compressibility": {"weight": 1.0}})
    assert len(written) == len(folders) * 4

    table, table_folders = benchmark_table.rows(results)
    assert table_folders == folders
    assert [(r["benchmark"], r["metric"]) for r in table] == [
        ("drawbench", "color_match"), ("drawbench", "jpeg_compressibility"), ("ocr", "jpeg_compressibility"),
        ("pickapic", "color_match"), ("pickapic", "jpeg_compressibility"),
        ("plain", "color_match"), ("plain", "jpeg_compressibility")]
    prompts = {"drawbench": 3, "pickapic": 2, "plain": 2, "ocr": 2}  # pickapic: its unique captions
    for row in table:
        for folder in folders:
            scores = read_table(results / folder / layout.benchmark_name(row["benchmark"])).to_pandas()
            values = scores[f"reward_{row['metric']}"]
            assert row[f"{folder}_n"] == len(values) == prompts[row["benchmark"]] * IMAGES_PER_PROMPT
            assert row[f"{folder}_mean"] == pytest.approx(values.mean(), abs=1e-12)
            half = row[f"{folder}_ci95"]
            assert half >= 0 and row[f"{folder}_mean"] - half <= values.mean() <= row[f"{folder}_mean"] + half
    drawbench = read_table(results / layout.BASE / layout.benchmark_name("drawbench")).to_pandas()
    assert drawbench.category.tolist() == ["Colors"] * 4 + ["Shapes"] * 2
    assert "reward" not in drawbench.columns and (drawbench.iteration == -1).all()
    trained = read_table(results / last / layout.benchmark_name("drawbench")).to_pandas()
    assert (trained.seed == drawbench.seed).all()  # the same noise per prompt for every model
    assert not trained.reward_jpeg_compressibility.equals(drawbench.reward_jpeg_compressibility)

    mtimes = {p: p.stat().st_mtime_ns for p in results.rglob(f"{layout.BENCHMARK_DIR}/*.parquet")}
    assert run(results, sets) == []  # finished: kept, nothing regenerated
    assert {p: p.stat().st_mtime_ns for p in results.rglob(f"{layout.BENCHMARK_DIR}/*.parquet")} == mtimes
    with pytest.raises(ValueError, match="other settings or prompts.*--force"):
        run(results, sets, seed=1)

    capsys.readouterr()
    assert main(["summary", str(results), "--benchmarks"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["benchmark", "metric", "n", *folders]
    assert lines[2].split()[:3] == ["drawbench", "color_match", "6"] and "±" in lines[2]
    assert main(["summary", str(results), "--benchmarks", "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out) == json.loads(json.dumps(table))


def test_prompt_files_in_each_format(tmp_path):
    sets, ocr = write_sets(tmp_path / "sets")
    drawbench = benchmark_sets.load(*sets["drawbench"])
    assert drawbench.prompt_id.tolist() == ["r00002", "r00003", "r00004"] and drawbench.prompt.tolist() == CAPTIONS
    pickapic = benchmark_sets.load(*sets["pickapic"])
    assert pickapic.prompt.tolist() == [CAPTIONS[0], CAPTIONS[2]] and pickapic.category.isna().all()
    assert benchmark_sets.load(*ocr["ocr"]).prompt.tolist()[0] == 'A poster that says "open"'

    bad = tmp_path / "bad.csv"
    bad.write_text("Prompt,Category\na cat,Animals\n")
    with pytest.raises(PromptFileError, match=r"bad.csv: row 1 \(header\): missing column\(s\) Prompts"):
        benchmark_sets.load(bad, "drawbench")
    bad.write_text("Prompts,Category\na cat,Animals\n,Animals\n")
    with pytest.raises(PromptFileError, match="bad.csv: row 3: empty Prompts cell"):
        benchmark_sets.load(bad, "drawbench")
    with pytest.raises(PromptFileError, match=r"bad.csv: row 1 \(header\): missing column\(s\) caption; has Prompts, "
                                              r"Category \(pickapic format"):
        benchmark_sets.load(bad, "pickapic")
    with pytest.raises(PromptFileError, match="sets: a folder, not a prompt file"):
        benchmark_sets.load(tmp_path / "sets", "text")
    (tmp_path / "bad.txt").write_text('A sign that says "yes"\n\nA sign with no quotes\n')
    with pytest.raises(PromptFileError, match=r"bad.txt: line 3: no double-quoted text"):
        benchmark_sets.load(tmp_path / "bad.txt", "ocr")
    (tmp_path / "empty.txt").write_text("\n \n")
    with pytest.raises(PromptFileError, match="empty.txt: no prompts in file"):
        benchmark_sets.load(tmp_path / "empty.txt", "text")
    with pytest.raises(PromptFileError, match="missing.txt: file not found"):
        benchmark_sets.load(tmp_path / "missing.txt", "text")


def test_unknown_checkpoints_metrics_and_specs_are_refused(finished_run, tmp_path):
    results = finished_run / "results"
    assert benchmark.select_checkpoints(results, "base,every:1") == {"base": -1, "iter_000": 0, "iter_001": 1}
    assert benchmark.select_checkpoints(results, "1,every:2,last") == {"iter_001": 1}
    with pytest.raises(ValueError, match=r"--checkpoints 7: no .*iter_007/checkpoint \(iterations with a "
                                         r"checkpoint/: 0, 1\)"):
        benchmark.select_checkpoints(results, "base,7")
    with pytest.raises(ValueError, match="expected base, last, best, every:K or an iteration number"):
        benchmark.select_checkpoints(results, "first")
    with pytest.raises(ValueError, match="--checkpoints every:0: expected every:K"):
        benchmark.select_checkpoints(results, "every:0")
    with pytest.raises(ValueError, match="--metric 'pickscor': not a registered reward; expected one of .*pickscore"):
        benchmark.parse_metrics(["pickscor"], None)
    with pytest.raises(ValueError, match="expected NAME=FILE:FORMAT"):
        benchmark.parse_benchmarks(["drawbench.csv"])
    with pytest.raises(ValueError, match="format 'csv' is not one of drawbench, pickapic, ocr, text"):
        benchmark.parse_benchmarks(["db=drawbench.csv:csv"])
    _, ocr = write_sets(tmp_path / "sets")
    with pytest.raises(ValueError, match=r"--benchmark ocr \(.*ocr.txt\): .*synthetic caption"):
        benchmark.run_benchmarks(results, ocr, METRICS, "base", progress=False)


def test_a_reward_model_is_a_metric(results, tmp_path):
    """PickScore's stand-in (smoke/standins.py: a CLIPModel folder in the published layout) as a metric."""
    from rewardloop.smoke.standins import build_standin

    sets, _ = write_sets(tmp_path / "sets")
    options = build_standin("pickscore", tmp_path / "pickscore")
    run(results, {"drawbench": sets["drawbench"]}, metrics={"pickscore": {"weight": 1.0, **options}},
        checkpoints="base,last")
    table, folders = benchmark_table.rows(results)
    assert [(r["benchmark"], r["metric"]) for r in table] == [("drawbench", "pickscore")]
    row = table[0]
    assert [row[f"{folder}_n"] for folder in folders] == [6, 6] and folders[0] == layout.BASE
    base, last = (read_table(results / f / layout.benchmark_name("drawbench")).to_pandas().reward_pickscore
                  for f in folders)
    assert row[f"{folders[1]}_mean"] == pytest.approx(last.mean(), abs=1e-12) and not base.equals(last)


GENEVAL = [  # GenEval's prompts/evaluation_metadata.jsonl, four lines of different tags
    {"tag": "single_object", "include": [{"class": "bench", "count": 1}], "prompt": "a photo of a bench"},
    {"tag": "counting", "include": [{"class": "cat", "count": 2}], "exclude": [{"class": "cat", "count": 3}],
     "prompt": "a photo of two cats"},
    {"tag": "colors", "include": [{"class": "car", "count": 1, "color": "red"}], "prompt": "a photo of a red car"},
    {"tag": "position", "include": [{"class": "dog", "count": 1},
                                    {"class": "cat", "count": 1, "position": ["left of", 0]}],
     "prompt": "a photo of a cat left of a dog"},
]


def test_geneval_through_a_geneval_server(results, tmp_path):
    """A geneval set scored by the GenEval server's stand-in (stand_in_servers.py): each image's prompt
    metadata reaches the server with it, the per-image scores are the stand-in's rule on that metadata
    and image, and the table row is their mean."""
    path = tmp_path / "evaluation_metadata.jsonl"
    path.write_text("".join(json.dumps(item) + "\n" for item in GENEVAL))
    rule = stand_ins_module()
    with running(stand_in("geneval"), tmp_path / "geneval.log") as (url, _):
        metrics = benchmark.parse_metrics(["geneval"], [f"geneval.remote={{url: {url}}}"])
        written = run(results, {"geneval": (path, "geneval")}, metrics=metrics, checkpoints="base,last")
    assert len(written) == 2
    table, folders = benchmark_table.rows(results)
    assert [(r["benchmark"], r["metric"]) for r in table] == [("geneval", "geneval")]
    by_tag = {item["tag"]: item for item in GENEVAL}
    for folder in folders:
        scores = read_table(results / folder / layout.benchmark_name("geneval")).to_pandas()
        assert scores.category.tolist() == [item["tag"] for item in GENEVAL for _ in range(IMAGES_PER_PROMPT)]
        details = [json.loads(d)["geneval"] for d in scores.reward_details]
        assert [d["tag"] for d in details] == scores.category.tolist()  # each image's own metadata, in order
        assert [d["n_include"] for d in details] == [len(by_tag[t]["include"]) for t in scores.category]
        assert scores.reward_geneval.tolist() == [rule.geneval_score(by_tag[d["tag"]], d["mean_level"])
                                                  for d in details]
        assert set(scores.reward_geneval) == {0.0, 1.0}  # tags the stand-in passes and fails
        assert table[0][f"{folder}_n"] == len(GENEVAL) * IMAGES_PER_PROMPT
        assert table[0][f"{folder}_mean"] == pytest.approx(scores.reward_geneval.mean(), abs=1e-12)
        per_tag = scores.groupby("category").reward_geneval.mean()  # GenEval's per-tag numbers (docs)
        assert per_tag["colors"] == 1.0 and per_tag["counting"] == 0.0


@pytest.mark.parametrize("line, named", [
    ("{not json", r"line 2: not JSON"),
    ('{"tag": "colors", "include": []}', r"line 2: no 'prompt'"),
    ('{"prompt": "a photo of a cat", "include": []}', r"line 2: no 'tag'"),
    ('{"prompt": "a photo of a cat", "tag": "colors", "include": {"class": "cat"}}', r"line 2: 'include' is not a list"),
    ('["a photo of a cat"]', r"line 2: expected a JSON object, got list"),
])
def test_a_malformed_geneval_file_is_refused_naming_file_and_line(tmp_path, line, named):
    path = tmp_path / "evaluation_metadata.jsonl"
    path.write_text(json.dumps(GENEVAL[0]) + "\n" + line + "\n")
    with pytest.raises(PromptFileError, match=rf"evaluation_metadata.jsonl: {named}"):
        benchmark_sets.load(path, "geneval")
    path.write_text("".join(json.dumps(item) + "\n" for item in GENEVAL))
    prompts = benchmark_sets.load(path, "geneval")
    assert prompts.prompt_id.tolist() == ["g00001", "g00002", "g00003", "g00004"]
    assert prompts.category.tolist() == [item["tag"] for item in GENEVAL] and prompts.metadata.tolist() == GENEVAL


# DrawBench's sheet with one quote left open: CSV lets a quoted cell span lines, so the reader merged two rows
# into one prompt ("...background,Colorsa blue square...", category empty), which was sampled and scored
UNCLOSED = 'Prompts,Category\n"a red circle on a blue background,Colors\n"a blue square on a red background",Shapes\n'
HEADER = "Prompts,Category\n"


@pytest.mark.parametrize("fmt, text, named", [
    ("drawbench", UNCLOSED, r"line 2: not valid CSV from there \(',' expected after '\"' by line 3; an unclosed quote"),
    ("drawbench", HEADER + '"a red circle on a blue background,Colors\na cat,Animals\n',
     r"line 2: not valid CSV from there \(unexpected end of data by line 3"),
    ("drawbench", HEADER + '"a red circle\non a blue background",Colors\n', r"line 2: a quoted cell runs on to line 3"),
    ("drawbench", HEADER + "a cat,Animals\na cat, a dog,Animals\n", r"line 3: 3 cell\(s\) where the header has 2"),
    ("pickapic", 'caption\n"a red circle\na blue square"\n', r"line 2: a quoted cell runs on to line 3"),
], ids=["quote-closed-mid-cell", "quote-never-closed", "cell-over-two-lines", "a-cell-too-many", "pickapic-csv"])
def test_a_csv_prompt_sheet_that_csv_would_misread_is_refused_naming_the_line(tmp_path, fmt, text, named):
    path = tmp_path / "sheet.csv"
    path.write_text(text)
    with pytest.raises(PromptFileError, match=rf"sheet.csv: {named}"):
        benchmark_sets.load(path, fmt)


def test_the_benchmark_command_refuses_a_misread_sheet_and_changes_no_file(results, tmp_path, capsys):
    from workflow_helpers import file_digests

    sheet = tmp_path / "drawbench.csv"
    sheet.write_text(UNCLOSED)
    before = file_digests(results)
    assert main(["benchmark", str(results), "--benchmark", f"db={sheet}:drawbench", "--metric", "color_match",
                 "--checkpoints", "base"]) == 1
    assert f"rewardloop benchmark: error: {sheet}: line 2: not valid CSV from there" in capsys.readouterr().err
    assert file_digests(results) == before
    sheet.write_text(UNCLOSED.replace('"a red', "a red"))  # the stray quote removed: two prompts
    assert benchmark_sets.load(sheet, "drawbench").category.tolist() == ["Colors", "Shapes"]
