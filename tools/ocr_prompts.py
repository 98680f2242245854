"""The shipped OCR prompt set (``resources/prompts/ocr_{train,test}.jsonl``), generated, not downloaded.

A tool, not part of the package: nothing imports it at run time (the workflow reads the two files);
it imports nothing of rewardloop, only numpy.

Flow-GRPO's text-rendering task (yifan123/flow_grpo, ``dataset/ocr``: about 20K train and 1K test
prompts written by GPT-4o, one per line, the target text in double quotes) in the same shape and
size class, built here from word lists and scene templates so that ``configs/sd35m_ocr_grpo.yaml``
runs without data from elsewhere:

- targets: short words and phrases (1-4 words: shop names, street names, signage, greetings,
  to-dos, numbers) combined deterministically from the lists below; distinct after the OCR
  reward's normalisation (lower case, whitespace removed), so no two differ only in case/spacing;
- ``TEST_TARGETS`` targets are held out: the test split uses each once, the train split never
  (the templates are shared); each of the ``TRAIN_TARGETS`` others appears in the train split
  ``USES_PER_TRAIN_TARGET`` times, each time in a different template;
- every prompt holds exactly one double-quoted span, the target, which
  ``rewardloop.rewards.ocr.extract_target`` returns unchanged; prompts are ASCII and at most
  ``MAX_WORDS`` words (CLIP's text encoders read 77 tokens; these prompts stay well under);
- one seed (``numpy.random.default_rng(SEED)``) draws everything, so regenerating gives the same
  bytes (``tests/unit/test_ocr_prompts.py`` compares the shipped files with a fresh generation).

Each line is ``{"id": "ocr-train-00000", "prompt": "..."}``. Regenerate with
``python tools/ocr_prompts.py --out-dir resources/prompts``.
"""

from __future__ import annotations

import argparse
import itertools
import json
import re
from pathlib import Path

import numpy as np

SEED = 0
TEST_TARGETS = 1000
TRAIN_TARGETS = 5000
USES_PER_TRAIN_TARGET = 4
MAX_WORDS = 40
FILE_NAMES = {"train": "ocr_train.jsonl", "test": "ocr_test.jsonl"}

# ---------------------------------------------------------------------------------------------
# Scene templates: ``{t}`` is the target (inside the template's only pair of double quotes);
# ``{color}`` and ``{time}`` draw from SLOTS.

TEMPLATES = (
    'A {color} neon sign that says "{t}" glowing on a brick wall {time}',
    'A hand-written note reading "{t}" stuck to a fridge door with a magnet',
    'A wooden shop sign above a small storefront with the words "{t}" painted in {color} letters',
    'A hardcover book cover with the title "{t}" in large serif type',
    'A person wearing a {color} t-shirt printed with "{t}" across the front',
    'A street sign on a metal pole reading "{t}" against a clear sky',
    'A vintage concert poster with the headline "{t}" in bold letters',
    'A birthday cake with "{t}" written in {color} frosting on top',
    'A chalkboard menu outside a cafe with "{t}" written in white chalk',
    'A large billboard beside a highway displaying "{t}" {time}',
    'A paper coffee cup with "{t}" written on the side in black marker',
    'A banner hanging across a busy street with the words "{t}"',
    'Graffiti on a concrete wall spelling "{t}" in {color} spray paint',
    'A ceramic mug printed with the phrase "{t}" on a kitchen table',
    'A doormat in front of a house with "{t}" woven into it',
    'A cereal box on a grocery shelf with the brand name "{t}"',
    'A movie poster with the title "{t}" above a dramatic city skyline',
    'A magazine cover with the headline "{t}" in {color} capital letters',
    'A vinyl record album cover with the text "{t}" in retro lettering',
    'A bumper sticker on the back of a car that says "{t}"',
    'A yellow sticky note on a computer monitor reading "{t}"',
    'A whiteboard in an office with "{t}" written in {color} marker',
    'An engraved brass plaque on a stone wall reading "{t}"',
    'A golden trophy with "{t}" engraved on its base',
    'A greeting card on a wooden table with "{t}" in elegant script',
    'The words "{t}" written in the sand on a beach {time}',
    'A small plane skywriting "{t}" in white smoke across a blue sky',
    'A fortune cookie with a slip of paper that reads "{t}"',
    'A glass jar with a handwritten label that says "{t}"',
    'A canvas tote bag printed with "{t}" in {color} letters',
    'A baseball cap with "{t}" embroidered on the front',
    'A protester holding a cardboard sign that reads "{t}"',
    'A subway station sign reading "{t}" on a white tiled wall',
    'A city bus with "{t}" on its front destination display',
    'An LED scoreboard in a stadium flashing "{t}" {time}',
    'A laptop screen showing the words "{t}" in a large font',
    'A smartwatch on a wrist with "{t}" on its screen',
    'A pizza box with "{t}" printed on the lid',
    'A scented candle in a glass jar labeled "{t}"',
    'An embroidered pillow on a sofa stitched with "{t}"',
    'A letter board on a cafe counter spelling "{t}"',
    'A theater marquee with "{t}" in bright lights {time}',
    'A rusty vintage tin sign that says "{t}"',
    'A name tag sticker on a jacket that says "{t}"',
    'A paper ticket stub with "{t}" printed across it',
    'A bookmark tucked into a novel with "{t}" printed on it',
    'A sidewalk chalk drawing in {color} with the words "{t}"',
    'A sugar cookie decorated with "{t}" in {color} icing',
    'An old typewriter with a sheet of paper reading "{t}"',
    'A newspaper front page with the headline "{t}"',
    'A waving flag with "{t}" printed on it',
    'The words "{t}" written with a finger on a foggy window',
    'A food truck with "{t}" painted on its side {time}',
    'A storefront window with "{t}" in {color} vinyl letters',
    'A wine bottle with a label that reads "{t}"',
    'A classroom blackboard with "{t}" written in chalk',
    'A large mural on the side of a building with the slogan "{t}"',
    'A hot air balloon with "{t}" painted on it floating over green hills',
    'A cardboard shipping box stamped with "{t}" in red ink',
    'A price tag hanging from a jacket that says "{t}"',
    'A hoodie with "{t}" printed across the chest',
    'A road sign on a quiet country road that reads "{t}"',
    'A poster in a school hallway that says "{t}"',
    'An ice cream shop sign reading "{t}" in pastel colors',
    'A restaurant menu cover with "{t}" in gold foil',
    'A wedding welcome sign on an easel that reads "{t}"',
    'A metal key tag with "{t}" stamped into it',
    'A street vendor cart with "{t}" on its striped umbrella',
    'A glowing shop window sign that says "{t}" {time}',
    'A hand-painted wooden board at a farm stand reading "{t}"',
    'A phone screen showing a message that says "{t}"',
    'A tattoo on a forearm with the words "{t}" in {color} ink',
)

SLOTS = {
    "color": ("red", "blue", "pink", "green", "orange", "purple", "yellow", "white", "teal", "gold",
              "black", "silver", "turquoise", "crimson", "navy"),
    "time": ("at night", "at dusk", "at sunset", "in the morning", "on a rainy evening",
             "under a cloudy sky", "at golden hour", "on a snowy day", "in bright sunlight",
             "late at night"),
}

# ---------------------------------------------------------------------------------------------
# Word lists for the targets (lower case; names capitalised).

SIGN_WORDS = (
    "open", "closed", "exit", "entrance", "stop", "sale", "push", "pull", "danger", "caution",
    "welcome", "hello", "goodbye", "love", "hope", "peace", "dream", "believe", "relax", "smile",
    "coffee", "bakery", "pizza", "tacos", "sushi", "noodles", "burgers", "books", "music", "jazz",
    "blues", "hotel", "motel", "diner", "pharmacy", "garage", "library", "museum", "theater",
    "cinema", "arcade", "barber", "florist", "laundry", "tailor", "bistro", "deli", "gelato",
    "donuts", "bagels", "tea", "juice", "smoothies", "vinyl", "records", "antiques", "vintage",
    "gallery", "studio", "market", "pottery", "bicycles", "repairs", "tickets", "parking",
    "elevator", "stairs", "restrooms", "information", "reception", "lobby", "quiet", "private",
    "staff", "office", "kitchen", "pantry", "garden", "greenhouse", "workshop", "storage",
    "fragile", "urgent", "confidential", "approved", "rejected", "sold", "reserved", "available",
    "vacancy", "karaoke", "bingo", "dance", "yoga", "pilates", "boxing", "fitness", "swim",
    "surf", "skate", "camp", "trail", "summit", "harbor", "ferry", "airport", "station",
    "platform", "terminal", "customs", "arrivals", "departures", "gate", "taxi", "detour",
    "yield", "slow", "school", "hospital", "police", "fire", "rescue", "shelter", "bakehouse",
    "creamery", "brewery", "winery", "distillery", "roastery", "pizzeria", "taqueria", "cantina",
    "trattoria", "brasserie", "patisserie", "chocolatier", "cheese", "butcher", "fishmonger",
    "bookshop", "toys", "games", "comics", "candy", "flowers", "plants", "hardware", "lumber",
    "paint", "tires", "mechanic", "carwash", "pawnshop", "jewelry", "watches", "optician",
    "dentist", "clinic", "vet", "bank", "post", "courier", "printing", "copies", "framing",
    "tattoo", "piercing", "nails", "salon", "spa", "sauna", "massage", "wellness", "pets",
    "grooming", "aquarium", "zoo", "planetarium", "observatory", "lighthouse", "boathouse",
    "marina", "pier", "boardwalk", "carousel", "funhouse", "ballroom", "chapel", "cathedral",
    "abbey", "castle", "manor", "cottage", "cabin", "lodge", "inn", "hostel", "campground",
)

ADJECTIVES = (
    "fresh", "golden", "quiet", "wild", "lucky", "happy", "cozy", "sunny", "silver", "midnight",
    "rustic", "urban", "little", "big", "royal", "secret", "hidden", "electric", "cosmic",
    "blue", "red", "green", "crimson", "velvet", "copper", "iron", "wooden", "paper", "glass",
    "crystal", "frozen", "burning", "rolling", "flying", "sleepy", "hungry", "salty", "sweet",
    "spicy", "smoky", "honey", "maple", "cherry", "lemon", "mint", "olive", "coral", "amber",
    "northern", "southern", "eastern", "western", "ancient", "modern", "classic", "grand",
    "humble", "brave", "gentle", "jolly", "merry", "noble", "rapid", "rusty", "shiny", "tiny",
    "mighty", "lazy", "busy", "early", "late", "endless", "open", "broken", "lonely", "lost",
)

NOUNS = (
    "bread", "coffee", "garden", "river", "dream", "moon", "star", "sun", "ocean", "forest",
    "mountain", "valley", "meadow", "harbor", "island", "bridge", "tower", "castle", "lantern",
    "compass", "anchor", "feather", "pebble", "acorn", "maple", "willow", "oak", "pine", "cedar",
    "rose", "tulip", "daisy", "lily", "poppy", "fern", "clover", "thistle", "cactus", "orchid",
    "fox", "owl", "bear", "wolf", "rabbit", "otter", "falcon", "sparrow", "raven", "whale",
    "dolphin", "turtle", "tiger", "lion", "panda", "koala", "penguin", "zebra", "horse", "goat",
    "kettle", "spoon", "fork", "teapot", "skillet", "oven", "apron", "basket", "barrel", "bottle",
    "candle", "clock", "mirror", "window", "door", "ladder", "wagon", "bicycle", "rocket", "comet",
    "thunder", "rain", "snow", "cloud", "breeze", "storm", "rainbow", "sunrise", "sunset", "tide",
    "wave", "shell", "pearl", "diamond", "ruby", "emerald", "velvet", "ribbon", "button", "thread",
)

VERBS_OBJECTS = (
    ("call", ("mom", "dad", "grandma", "the dentist", "the plumber", "the bank", "back later")),
    ("buy", ("milk", "eggs", "bread", "flowers", "stamps", "batteries", "coffee", "a gift")),
    ("feed", ("the cat", "the dog", "the fish", "the birds", "the chickens")),
    ("water", ("the plants", "the garden", "the roses", "the lawn")),
    ("walk", ("the dog", "to school", "with me", "this way")),
    ("pay", ("rent", "the bills", "here", "at the counter")),
    ("take", ("out the trash", "a break", "one", "a number", "it easy", "your time")),
    ("clean", ("the kitchen", "your room", "the garage", "up")),
    ("pick up", ("the kids", "laundry", "groceries", "the cake")),
    ("fix", ("the sink", "the bike", "the fence", "the door")),
    ("book", ("flights", "a table", "the hotel", "tickets")),
    ("send", ("the letter", "the package", "the invoice", "love")),
    ("bake", ("cookies", "a pie", "bread", "muffins")),
    ("stay", ("calm", "curious", "hydrated", "kind", "focused", "wild", "humble", "positive")),
    ("keep", ("going", "smiling", "out", "left", "right", "calm", "it simple", "the change")),
    ("think", ("big", "different", "twice", "green", "happy thoughts")),
    ("read", ("more books", "the manual", "the signs", "before signing")),
    ("drink", ("more water", "local", "responsibly", "coffee")),
    ("eat", ("local", "your greens", "more pie", "here")),
    ("mind", ("the gap", "the step", "your head", "the dog")),
    ("watch", ("your step", "for falling rocks", "this space", "the birds")),
    ("follow", ("your dreams", "the signs", "the river", "me")),
    ("shop", ("local", "small", "here", "online")),
    ("enjoy", ("the ride", "the view", "your stay", "the little things", "life")),
    ("remember", ("the milk", "your keys", "to smile", "to breathe")),
    ("do not", ("disturb", "enter", "touch", "feed the animals", "litter")),
    ("please", ("knock", "wait here", "ring bell", "be quiet", "come in", "recycle")),
    ("meet", ("me here", "the team", "at noon", "at the fountain")),
    ("save", ("the date", "the bees", "water", "energy", "the whales")),
    ("plant", ("trees", "more flowers", "seeds", "hope")),
)

FIRST_NAMES = (
    "Rosa", "Sam", "Ana", "Leo", "Maya", "Omar", "Nina", "Ivan", "Lucy", "Raj", "Mei", "Tom",
    "Zoe", "Ben", "Ava", "Eli", "Ines", "Kofi", "Lena", "Marco", "Nora", "Oscar", "Priya",
    "Quinn", "Ruth", "Sofia", "Theo", "Uma", "Vera", "Wade", "Yara", "Zane", "Hugo", "Iris",
    "Jack", "Kira", "Luis", "Mila", "Noah", "Olga", "Pablo", "Rita", "Sven", "Tara", "Ugo",
    "Vic", "Wendy", "Xavi", "Yuki", "Zara", "Amir", "Bella", "Carlos", "Dina", "Emil", "Fatima",
    "Gus", "Hana", "Igor", "Jade",
)

BUSINESSES = (
    "bakery", "diner", "cafe", "garage", "books", "pizza", "tacos", "kitchen", "deli", "grill",
    "barber shop", "flower shop", "tea house", "bike shop", "bar", "salon", "market", "noodles",
    "donuts", "ice cream", "laundry", "hardware", "pet shop", "tailor", "records", "gym",
    "bistro", "pantry", "workshop", "studio", "corner store", "coffee", "pies", "bagels",
    "dumplings", "burgers", "candy shop", "toy shop", "bookstore", "motel",
)

STREETS = (
    "oak", "maple", "elm", "cedar", "willow", "main", "harbor", "pine", "birch", "cherry",
    "park", "lake", "river", "hill", "mill", "church", "market", "station", "bridge", "orchard",
    "sunset", "ocean", "meadow", "forest", "spring", "king", "queen", "union", "liberty",
    "franklin", "lincoln", "madison", "jefferson", "washington", "grove", "ash", "chestnut",
    "walnut", "hickory", "magnolia", "juniper", "aspen", "sycamore", "poplar", "laurel", "holly",
    "ivy", "rose", "lilac", "violet",
)
STREET_SUFFIXES = ("st", "street", "ave", "avenue", "road", "lane", "blvd", "way", "drive", "court",
                   "place", "terrace")

NUMBER_PATTERNS = (
    ("open {h} hours", (24, 12, 10, 8)),
    ("{p}% off", tuple(range(5, 95, 5))),
    ("route {n}", tuple(range(1, 100))),
    ("since {y}", tuple(range(1890, 2025, 3))),
    ("est. {y}", tuple(range(1901, 2025, 4))),
    ("room {n}", tuple(range(100, 520, 7))),
    ("exit {n}", tuple(range(1, 80, 2))),
    ("platform {n}", tuple(range(1, 21))),
    ("aisle {n}", tuple(range(1, 30))),
    ("gate b{n}", tuple(range(1, 40))),
    ("{n} miles", tuple(range(2, 200, 9))),
    ("class of {y}", tuple(range(1970, 2031))),
    ("table {n}", tuple(range(1, 41))),
    ("speed limit {n}", (15, 20, 25, 30, 35, 40, 45, 50, 55, 60, 65, 70, 75)),
    ("no. {n}", tuple(range(1, 100, 3))),
    ("level {n}", tuple(range(1, 12))),
    ("area {n}", tuple(range(11, 99, 6))),
    ("apartment {n}", tuple(range(1, 60, 2))),
    ("sector {n}", tuple(range(1, 30))),
    ("{n} main street", tuple(range(10, 990, 23))),
)

GREETINGS = ("happy birthday", "welcome home", "congrats", "thank you", "get well soon", "go",
             "we love you", "good luck", "bon voyage", "happy retirement", "well done", "marry me",
             "miss you")

PAIR_NOUNS = ("salt", "pepper", "bread", "butter", "rock", "roll", "fish", "chips", "sun", "moon",
              "milk", "honey", "rose", "thorn", "oak", "iron", "ink", "paper", "fire", "ice",
              "bow", "arrow", "pen", "sword", "needle", "thread", "smoke", "mirrors", "wine",
              "cheese", "coffee", "donuts", "tea", "toast")

INFO_PATTERNS = ("no {ns}", "{n} only", "{ns} ahead", "beware of the {n}", "{n} crossing",
                 "{n} zone", "{n} parking", "{n} club", "the {n} inn", "save the {ns}",
                 "{n} of the day", "i love my {n}")

INFO_NOUNS = ("dog", "cat", "duck", "deer", "moose", "bike", "truck", "horse", "goat", "frog",
              "owl", "fox", "bear", "skater", "hiker", "bus", "tractor", "cow", "sheep", "turtle",
              "student", "pedestrian", "golfer", "surfer", "drone", "robot", "ghost", "dragon",
              "wizard", "pirate", "pizza", "taco", "bagel", "cookie", "kitten", "puppy", "pony",
              "squirrel", "raccoon", "penguin")
_PLURALS = {"bus": "buses", "fox": "foxes", "deer": "deer", "moose": "moose", "sheep": "sheep",
            "puppy": "puppies", "pony": "ponies"}

# ---------------------------------------------------------------------------------------------

_WHITESPACE = re.compile(r"\s+")


def _norm(text: str) -> str:
    # the OCR reward's normalisation (rewardloop.rewards.ocr.normalise), kept here so this module
    # does not import the reward; tests check the result with the reward's own functions
    return _WHITESPACE.sub("", text).lower()


_SMALL_WORDS = {"a", "and", "at", "for", "in", "my", "of", "on", "the", "to", "with"}


def _title(text: str) -> str:
    words = text.split(" ")
    return " ".join(w if i and w in _SMALL_WORDS else w[:1].upper() + w[1:] for i, w in enumerate(words))


def _sample(rng: np.random.Generator, items: list[str], count: int) -> list[str]:
    """``count`` of ``items`` (all when fewer), in the order the draw picks them."""
    if count >= len(items):
        return list(items)
    return [items[i] for i in rng.permutation(len(items))[:count]]


def _cased(rng: np.random.Generator, phrases: list[str], weights: tuple[float, float, float]) -> list[str]:
    """Each phrase as Title Case, UPPER CASE or lower case (weights in that order); names keep
    their capitals in lower case."""
    styles = rng.choice(3, size=len(phrases), p=np.array(weights) / sum(weights))
    out = []
    for phrase, style in zip(phrases, styles):
        if style == 0:
            out.append(_title(phrase))
        elif style == 1:
            out.append(phrase.upper())
        else:
            out.append(phrase)
    return out


def build_targets(rng: np.random.Generator) -> list[str]:
    """The target vocabulary: distinct (after normalisation) short phrases, in a seeded order."""
    names = list(FIRST_NAMES)
    verb_phrases = [f"{v} {o}" for v, objs in VERBS_OBJECTS for o in objs]
    info = [p.format(n=n, ns=_PLURALS.get(n, n + "s")) for p, n in itertools.product(INFO_PATTERNS, INFO_NOUNS)]
    # (phrases, how many to draw, weights of Title / UPPER / lower case)
    groups = [
        (list(SIGN_WORDS), len(SIGN_WORDS), (4, 4, 2)),
        ([f"{a} {n}" for a, n in itertools.product(ADJECTIVES, NOUNS) if a != n], 1800, (5, 3, 2)),
        (verb_phrases, len(verb_phrases), (3, 2, 5)),
        ([f"{n}'s {b}" for n, b in itertools.product(names, BUSINESSES)], 900, (6, 3, 1)),
        ([f"the {a} {n}" for a, n in itertools.product(ADJECTIVES, NOUNS) if a != n], 700, (6, 3, 1)),
        ([f"{s} {x}" for s, x in itertools.product(STREETS, STREET_SUFFIXES)], 450, (7, 3, 0)),
        ([p.format(h=v, p=v, n=v, y=v) for p, values in NUMBER_PATTERNS for v in values], 700, (5, 4, 1)),
        ([f"{g} {n}!" if i % 2 == 0 else f"{g} {n}" for i, (g, n) in enumerate(itertools.product(GREETINGS, names))],
         500, (5, 4, 1)),
        ([f"{a} & {b}" for a, b in itertools.product(PAIR_NOUNS, PAIR_NOUNS) if a != b], 450, (6, 3, 1)),
        (info, 450, (4, 5, 1)),
    ]
    targets: list[str] = []
    seen: set[str] = set()
    for phrases, count, weights in groups:
        for target in _cased(rng, _sample(rng, phrases, count), weights):
            key = _norm(target)
            if key not in seen:
                seen.add(key)
                targets.append(target)
    return [targets[i] for i in rng.permutation(len(targets))]


def _render(rng: np.random.Generator, template: str, target: str) -> str:
    fills = {name: values[int(rng.integers(len(values)))] for name, values in SLOTS.items()
             if "{" + name + "}" in template}
    return template.format(t=target, **fills)


def generate(seed: int = SEED) -> dict[str, list[dict[str, str]]]:
    """``{"train": [...], "test": [...]}``: records ``{"id", "prompt"}`` in file order."""
    rng = np.random.default_rng(seed)
    targets = build_targets(rng)
    needed = TEST_TARGETS + TRAIN_TARGETS
    if len(targets) < needed:
        raise RuntimeError(f"only {len(targets)} distinct targets, {needed} needed")
    test_targets, train_targets = targets[:TEST_TARGETS], targets[TEST_TARGETS:needed]
    n = len(TEMPLATES)
    test = [_render(rng, TEMPLATES[int(rng.integers(n))], t) for t in test_targets]
    train = []
    for target in train_targets:
        for index in rng.permutation(n)[:USES_PER_TRAIN_TARGET]:
            train.append(_render(rng, TEMPLATES[int(index)], target))
    train = [train[i] for i in rng.permutation(len(train))]
    splits = {"train": train, "test": test}
    for name, prompts in splits.items():
        for prompt in prompts:
            words = len(prompt.split())
            if words > MAX_WORDS or not prompt.isascii() or prompt.count('"') != 2:
                raise RuntimeError(f"{name}: bad generated prompt ({words} words): {prompt!r}")
    return {name: [{"id": f"ocr-{name}-{i:05d}", "prompt": p} for i, p in enumerate(prompts)]
            for name, prompts in splits.items()}


def to_jsonl(records: list[dict[str, str]]) -> str:
    return "".join(json.dumps(r, ensure_ascii=True) + "\n" for r in records)


def write(out_dir: str | Path, seed: int = SEED) -> dict[str, Path]:
    """Write ``ocr_train.jsonl`` and ``ocr_test.jsonl`` into ``out_dir``; return their paths."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = {}
    for name, records in generate(seed).items():
        path = out / FILE_NAMES[name]
        path.write_bytes(to_jsonl(records).encode("ascii"))
        paths[name] = path
    return paths


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python tools/ocr_prompts.py",
        description="Write the generated OCR prompt set (ocr_train.jsonl, ocr_test.jsonl).")
    parser.add_argument("--out-dir", default="resources/prompts", help="folder for the two files")
    parser.add_argument("--seed", type=int, default=SEED, help="numpy default_rng seed (the shipped set: 0)")
    args = parser.parse_args(argv)
    for name, path in write(args.out_dir, args.seed).items():
        lines = path.read_bytes().count(b"\n")
        print(f"{name}: {lines} prompts -> {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
