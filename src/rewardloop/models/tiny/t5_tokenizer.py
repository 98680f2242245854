"""An offline T5-style SentencePiece tokenizer (for SD3's ``tokenizer_3``), trained here.

T5's own ``spiece.model`` (32,000 Unigram pieces) cannot be fetched offline, so this trains a
small SentencePiece Unigram model on a fixed corpus in this module (the synthetic captions, the
style of the repository's general prompts: a few hundred common English words, their inflected
forms, caption templates, and every printable ASCII character), deterministically: the same corpus and options give the
same bytes. The layout is T5's: ``<pad>`` = 0, ``</s>`` = 1, ``<unk>`` = 2, no BOS, ``</s>``
appended to every sequence, and the 100 sentinels ``<extra_id_0..99>`` above the pieces
(``<extra_id_0>`` has the highest id). The folder holds what the published ``tokenizer_3`` holds:
``spiece.model``, ``tokenizer.json``, ``tokenizer_config.json``, ``special_tokens_map.json``;
load it with ``T5TokenizerFast.from_pretrained(dir)``.
"""

from __future__ import annotations

import functools
import io
import json
import tempfile
from pathlib import Path
from typing import Mapping

from rewardloop.models.tiny import synthetic

VOCAB_SIZE = 3000  # asked of SentencePiece; the corpus supports fewer (1193 pieces with pad/eos/unk); +100 sentinels
EXTRA_IDS = 100
PAD, EOS, UNK = "<pad>", "</s>", "<unk>"

# Common English words of image prompts (nouns, adjectives, verbs, function words).
WORDS = """
a an the of and or in on at by for to from with without into onto over under above below behind beside
between near inside outside through across along around after before during while is are was were be
being been has have had it its this that these those there here very more most less some many few all
each every one two three four five six seven eight nine ten first last next other same new old young
photo photograph picture image painting drawing sketch illustration render rendering portrait landscape
closeup close up view shot scene style art artwork poster logo sign text word letter book page cover
digital oil watercolor acrylic pencil ink charcoal pastel cartoon anime comic pixel vector flat minimal
realistic photorealistic detailed intricate cinematic dramatic soft hard warm cold bright dark light
shadow sunlight moonlight candlelight studio natural lighting color colorful vivid pale muted neon
red green blue yellow purple cyan white black orange pink brown gray grey gold golden silver violet
circle square triangle rectangle star heart line dot stripe pattern shape background foreground
cat dog horse bird fish fox wolf bear lion tiger rabbit deer owl eagle duck cow sheep goat pig mouse
raccoon squirrel frog turtle snake dragon unicorn butterfly bee spider whale dolphin shark octopus
man woman person people child children girl boy baby family friend king queen knight wizard robot
astronaut soldier farmer chef doctor teacher student artist musician dancer player crowd face hand eye
hair smile head body dress shirt hat coat shoes glasses crown armor sword shield helmet mask
house home building castle tower bridge church temple palace cabin hut barn city town village street
road path alley market shop cafe restaurant kitchen room bedroom library office school garden park
forest jungle tree trees flower flowers grass leaf leaves plant rose tulip sunflower mushroom cactus
mountain mountains hill valley river lake sea ocean beach coast island desert field meadow cave
waterfall volcano glacier sky cloud clouds rain snow storm fog mist wind sun moon stars planet space
galaxy night day morning evening sunset sunrise dawn dusk winter spring summer autumn fall season
car bus train truck bicycle motorcycle boat ship plane airplane rocket spaceship lighthouse windmill
table chair bed sofa lamp window door wall floor roof stairs mirror clock vase bowl cup plate bottle
glass box bag basket candle fire smoke water ice stone rock wood metal paper cloth sand dust
apple banana orange cake bread cheese pizza sandwich soup ramen egg coffee tea wine fruit vegetable
eating drinking sitting standing walking running flying swimming riding reading writing playing
holding wearing looking smiling sleeping dancing singing jumping falling floating glowing burning
big small large tiny huge little tall short long wide narrow round sharp smooth rough shiny wet dry
happy sad angry calm quiet busy empty full open closed broken ancient modern futuristic vintage
retro medieval magical mysterious beautiful cute scary elegant simple complex abstract surreal
high quality resolution sharp focus bokeh depth lens wide angle macro aerial top side front back
""".split()
TEMPLATES = (
    "a {adj} {noun}",
    "a photo of a {noun} in the {place}",
    "an {adj} painting of a {noun} near a {place}",
    "{Adj} {noun} and a {noun2}, digital art",
    "The {noun} is {adj}.",
    "a {noun} holding a sign that says \"{noun2}\"",
)
ADJECTIVES = ("red", "old", "tiny", "bright", "ancient", "cozy", "misty", "golden", "dark", "colorful")
SUFFIXES = ("s", "es", "ed", "ing", "er", "ers", "est", "ly", "y", "ness", "ful", "less")
PREFIXES = ("un", "re", "over", "sub")
PLACES = ("forest", "city", "park", "desert", "kitchen", "garden", "ocean", "library", "mountain", "street")


def corpus() -> list[str]:
    """The fixed training text: synthetic captions, the word list, template sentences, ASCII."""
    lines = [synthetic.caption(*combo) for combo in synthetic.all_combos()]
    lines += [" ".join(WORDS[i : i + 12]) for i in range(0, len(WORDS), 12)]
    for i, noun in enumerate(WORDS):
        adj, place = ADJECTIVES[i % len(ADJECTIVES)], PLACES[(i * 7) % len(PLACES)]
        noun2 = WORDS[(i * 31 + 5) % len(WORDS)]
        template = TEMPLATES[i % len(TEMPLATES)]
        lines.append(template.format(adj=adj, Adj=adj.capitalize(), noun=noun, noun2=noun2, place=place))
    lines += [f"{n} {w}s" for n, w in zip(range(10, 100, 7), WORDS[200:])]
    # Inflected and derived forms (and word sequences) widen the pieces the vocabulary can hold.
    lines += [" ".join(w + suffix for w in WORDS) for suffix in SUFFIXES]
    lines += [" ".join(prefix + w for w in WORDS) for prefix in PREFIXES]
    lines += [" ".join(WORDS[(i * k) % len(WORDS)] for k in range(1, 15)) for i in range(len(WORDS))]
    lines.append("".join(chr(c) for c in range(33, 127)))  # every printable ASCII character
    return lines


def train_spiece(vocab_size: int = VOCAB_SIZE) -> bytes:
    """The serialized SentencePiece Unigram model (``spiece.model``), trained on :func:`corpus`.

    One thread and no sentence sampling: training is deterministic (same bytes every run).
    """
    import sentencepiece as spm

    model = io.BytesIO()
    spm.set_random_generator_seed(0)
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(corpus()),
        model_writer=model,
        model_type="unigram",
        vocab_size=vocab_size,
        hard_vocab_limit=False,  # the corpus bounds the vocabulary: take what it supports
        pad_id=0, eos_id=1, unk_id=2, bos_id=-1,
        pad_piece=PAD, eos_piece=EOS, unk_piece=UNK,
        character_coverage=1.0,
        normalization_rule_name="nmt_nfkc",
        num_threads=1,
        input_sentence_size=0,
        shuffle_input_sentence=False,
        minloglevel=2,
    )
    return model.getvalue()


def _added(content: str) -> dict:
    return {"content": content, "lstrip": False, "normalized": False, "rstrip": False, "single_word": False,
            "special": True}


def build_t5_tokenizer(out_dir: str | Path, tokenizer_config: Mapping | None = None):
    """Write the T5 tokenizer folder at ``out_dir`` and return it loaded (``T5TokenizerFast``).

    ``tokenizer_config``: the published tokenizer_config.json keys (default
    ``published.SD3_TOKENIZER_3_CONFIG``); the entries that depend on the vocabulary
    (added_tokens_decoder, additional_special_tokens) are filled in here.
    """
    from transformers import T5TokenizerFast

    from rewardloop.models.published import SD3_TOKENIZER_3_CONFIG

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    spiece, tokenizer_json = _model_files()
    (out_dir / "spiece.model").write_bytes(spiece)
    (out_dir / "tokenizer.json").write_bytes(tokenizer_json)
    pieces = _piece_count(spiece)
    sentinels = [f"<extra_id_{i}>" for i in range(EXTRA_IDS)]
    decoder = {str(i): _added(t) for i, t in enumerate((PAD, EOS, UNK))}
    decoder |= {str(pieces + EXTRA_IDS - 1 - i): _added(t) for i, t in enumerate(sentinels)}
    config = dict(tokenizer_config if tokenizer_config is not None else SD3_TOKENIZER_3_CONFIG)
    config = {"added_tokens_decoder": dict(sorted(decoder.items(), key=lambda kv: int(kv[0]))),
              "additional_special_tokens": sentinels, **config}
    _write_json(out_dir / "tokenizer_config.json", dict(sorted(config.items())))
    specials = {"additional_special_tokens": sentinels, "eos_token": EOS, "pad_token": PAD, "unk_token": UNK}
    _write_json(out_dir / "special_tokens_map.json", specials)
    return T5TokenizerFast.from_pretrained(out_dir)


@functools.lru_cache(maxsize=1)
def _model_files() -> tuple[bytes, bytes]:
    """(spiece.model, tokenizer.json converted from it by transformers), computed once a process."""
    from transformers import T5TokenizerFast

    spiece = train_spiece()
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "spiece.model").write_bytes(spiece)
        T5TokenizerFast.from_pretrained(tmp, extra_ids=EXTRA_IDS).save_pretrained(tmp)
        return spiece, (Path(tmp) / "tokenizer.json").read_bytes()


def _piece_count(spiece: bytes) -> int:
    import sentencepiece as spm

    return spm.SentencePieceProcessor(model_proto=spiece).get_piece_size()


def _write_json(path: Path, data) -> None:
    path.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
