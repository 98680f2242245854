import pytest

from rewardloop.models.tiny import synthetic
from rewardloop.models.tiny.clip_tokenizer import MAX_LENGTH, _bpe, build_merges, build_tokenizer, caption_words


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    return build_tokenizer(tmp_path_factory.mktemp("tok"))


def test_caption_words_are_single_tokens(tokenizer):
    for word in caption_words():
        assert tokenizer.tokenize(word) == [word + "</w>"]
        assert tokenizer.convert_tokens_to_ids(word + "</w>") != tokenizer.unk_token_id


def test_caption_encoding(tokenizer):
    prompt = synthetic.caption("triangle", "purple", "yellow")
    ids = tokenizer(prompt, padding="max_length", max_length=tokenizer.model_max_length).input_ids
    assert len(ids) == tokenizer.model_max_length == MAX_LENGTH
    assert ids[0] == tokenizer.bos_token_id and ids[8] == tokenizer.eos_token_id
    assert tokenizer.decode(ids, skip_special_tokens=True).strip() == prompt


def test_unknown_text_still_tokenizes(tokenizer):
    pieces = tokenizer.tokenize("Zebra café 42!")
    assert len(pieces) > 4
    ids = tokenizer.convert_tokens_to_ids(pieces)
    assert tokenizer.unk_token_id not in ids  # byte-level pieces are all in the vocabulary
    assert all(i is not None and i < len(tokenizer) for i in ids)
    assert tokenizer.decode(tokenizer("zebra").input_ids, skip_special_tokens=True).strip() == "zebra"


def test_merges_do_not_interfere():
    # "gr" of "green" occurs inside "background": each word must still end as one token
    words = ["green", "background", "grass", "ground"]
    merges = build_merges(words)
    ranks = {pair: i for i, pair in enumerate(merges)}
    assert len(ranks) == len(merges)
    for word in words:
        assert _bpe(word, ranks) == (word + "</w>",)
