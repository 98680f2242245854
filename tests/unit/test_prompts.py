import json

import pytest

from rewardloop.prompts import PromptFileError, load_prompts, select_prompts


def test_plain_text_prompts_get_line_ids(tmp_path):
    path = tmp_path / "p.txt"
    path.write_text("a red circle\n\n  a blue square  \n")
    table = load_prompts(path)
    assert table.prompt.tolist() == ["a red circle", "a blue square"]
    assert table.prompt_id.tolist() == ["p00001", "p00003"]


def test_jsonl_prompts_use_id_field(tmp_path):
    path = tmp_path / "p.jsonl"
    path.write_text(json.dumps({"prompt": "x", "id": "a"}) + "\n" + json.dumps({"prompt": "y"}) + "\n")
    table = load_prompts(path)
    assert table.prompt_id.tolist() == ["a", "p00002"]


@pytest.mark.parametrize(
    "name, content, message",
    [
        ("empty.txt", "\n\n", "no prompts"),
        ("bad.jsonl", '{"text": "x"}\n', "line 1 has no string field 'prompt'"),
        ("broken.jsonl", "{not json\n", "line 1 is not valid JSON"),
        ("dup.jsonl", '{"prompt": "x", "id": 1}\n{"prompt": "y", "id": 1}\n', "duplicate prompt id '1'"),
    ],
)
def test_bad_prompt_files_name_file_and_cause(tmp_path, name, content, message):
    path = tmp_path / name
    path.write_text(content)
    with pytest.raises(PromptFileError) as info:
        load_prompts(path, key="prompts.train")
    assert message in str(info.value) and "prompts.train" in str(info.value) and name in str(info.value)


def test_non_utf8_prompt_file(tmp_path):
    path = tmp_path / "latin1.txt"
    path.write_bytes("caf\xe9\n".encode("latin-1"))
    with pytest.raises(PromptFileError, match="not UTF-8"):
        load_prompts(path)


def test_select_prompts_is_seeded_and_differs_per_iteration(tmp_path):
    path = tmp_path / "p.txt"
    path.write_text("\n".join(f"prompt {i}" for i in range(50)))
    table = load_prompts(path)
    first = select_prompts(table, 10, seed=0, iteration=0).prompt_id.tolist()
    assert first == select_prompts(table, 10, seed=0, iteration=0).prompt_id.tolist()
    assert first != select_prompts(table, 10, seed=0, iteration=1).prompt_id.tolist()
    assert len(set(first)) == 10
    assert len(select_prompts(table, None, seed=0, iteration=0)) == 50
