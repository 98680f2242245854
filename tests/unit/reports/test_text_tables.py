"""rewardloop.reports.text_tables: the aligned console table and the CSV of `rewardloop summary` / `compare`."""

from __future__ import annotations

import argparse
import csv
import io

from rewardloop.reports.text_tables import add_table_command, aligned, csv_text


def test_aligned_left_aligns_the_labels_and_right_aligns_the_other_columns_to_their_widest_cell():
    text = aligned(["name", "reward", "n"], [["a", "0.5", "3"], ["longer", "12.25", ""]])
    assert text.splitlines() == [
        "name    reward  n",
        "------  ------  -",
        "a          0.5  3",
        "longer   12.25",  # no trailing blanks
    ]


def test_aligned_with_no_rows_is_the_header_and_its_rule():
    assert aligned(["iteration", "x"], []).splitlines() == ["iteration  x", "---------  -"]


def test_csv_text_writes_the_header_and_none_as_an_empty_cell():
    text = csv_text([{"a": 1, "b": None}, {"a": "x,y", "b": 2.5}], ["a", "b"])
    assert text == 'a,b\n1,\n"x,y",2.5\n'
    assert list(csv.DictReader(io.StringIO(text))) == [{"a": "1", "b": ""}, {"a": "x,y", "b": "2.5"}]


def test_add_table_command_prints_the_render_of_the_folder_and_format(capsys):
    parser = argparse.ArgumentParser()
    commands = parser.add_subparsers()
    add_table_command(commands, "summary", lambda results, fmt: f"{results}|{fmt}", help="h", results_help="r")
    for argv, expected in ([["summary"], "results|table"], [["summary", "runs/x", "--format", "csv"], "runs/x|csv"]):
        args = parser.parse_args(argv)
        args.func(args)
        assert capsys.readouterr().out == expected + "\n"
