import itertools

import numpy as np
import pytest

from rewardloop import shape_domain
from rewardloop.models.tiny import synthetic


def test_captions_parse_back():
    for shape, fg, bg in synthetic.all_combos():
        assert shape_domain.parse_caption(shape_domain.caption(shape, fg, bg)) == (shape, fg, bg)
    assert shape_domain.parse_caption("  A Red circle on  blue background. ") == ("circle", "red", "blue")


@pytest.mark.parametrize("bad", ["a red circle", "a pink circle on a blue background",
                                 "a red circle on a red background", "a red star on a blue background", ""])
def test_parse_rejects_and_names_prompt(bad):
    with pytest.raises(ValueError, match="prompt"):
        shape_domain.parse_caption(bad)


def test_drawn_shapes_cover_the_area_fractions_the_domain_states():
    """color_match's presence term reads the shapes' area range from shape_domain: the renders keep to it."""
    rng = np.random.default_rng(0)
    for shape in shape_domain.SHAPES:
        a_min, a_max = shape_domain.area_fraction_range(shape)
        for _ in range(20):
            image = np.asarray(synthetic.render(shape, "red", "blue", size=64, rng=rng))
            fraction = (image == shape_domain.PALETTE["red"]).all(axis=-1).mean()
            assert a_min - 0.03 <= fraction <= a_max + 0.03, (shape, fraction)


def test_split_holds_out_combinations():
    train, held = synthetic.split_prompts(0)
    train_triples = {synthetic.parse_caption(p) for p in train}
    eval_triples = {synthetic.parse_caption(p) for p in held}
    assert len(train_triples) == 112 and len(eval_triples) == 56 and not eval_triples & train_triples
    # every colour pair is evaluated (once) and trained (with the two other shapes)
    assert sorted(t[1:] for t in eval_triples) == sorted(itertools.permutations(synthetic.COLORS, 2))
    for shape, fg, bg in eval_triples:
        assert {s for s, f, b in train_triples if (f, b) == (fg, bg)} == set(synthetic.SHAPES) - {shape}
    counts = [sum(t[0] == s for t in eval_triples) for s in synthetic.SHAPES]
    assert sorted(counts) == [18, 19, 19]
    assert synthetic.split_prompts(0) == (train, held)
    assert synthetic.split_prompts(1) != (train, held)


def test_committed_prompt_files_match_split(tmp_path):
    train_path, eval_path = synthetic.write_prompt_files(tmp_path, seed=0)
    for path in (train_path, eval_path):
        assert path.read_text() == (synthetic.PROMPT_DIR / path.name).read_text()


def test_render_colours():
    img = np.asarray(synthetic.render("square", "red", "blue", size=32, rng=np.random.default_rng(0)))
    assert img.shape == (32, 32, 3) and img.dtype == np.uint8
    colours, counts = np.unique(img.reshape(-1, 3), axis=0, return_counts=True)
    found = {tuple(c): n for c, n in zip(colours, counts)}
    assert set(found) == {synthetic.PALETTE["red"], synthetic.PALETTE["blue"]}
    assert found[synthetic.PALETTE["blue"]] > found[synthetic.PALETTE["red"]] > 0
    # corners are background for every shape
    for shape in synthetic.SHAPES:
        img = np.asarray(synthetic.render(shape, "white", "black", rng=np.random.default_rng(3)))
        assert tuple(img[0, 0]) == synthetic.PALETTE["black"]


def test_seeded_determinism():
    a = synthetic.make_batch(np.random.default_rng(5), 8, synthetic.split_prompts(0)[0])
    b = synthetic.make_batch(np.random.default_rng(5), 8, synthetic.split_prompts(0)[0])
    assert a[1] == b[1] and np.array_equal(a[0], b[0])
    c = next(synthetic.iter_batches(8, seed=6))
    assert not np.array_equal(a[0], c[0])
