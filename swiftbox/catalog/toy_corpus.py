"""The text the toy model is pretrained on, and the held-out text its perplexity is measured on.

Two sources, both bundled under swiftbox/assets/ (no network):
- Shakespeare (public domain; `shakespeare.txt`, provenance in assets/README.md): the first 90% of its
  paragraphs train, the last 10% are held out.
- Generated text from a small fact table: plain sentences, "Q: ... A: ..." lines and ChatML chats (the
  toy's own template) with yes/no and short answers - about animals, colours, places, counting, sizes and
  digits of numbers. It never states the quickstart's rule (whether a number is even or odd), so the
  pretrained model cannot already answer the parity task; it does teach the features a LoRA can reuse
  (where a number ends, which digit is last, the chat format, answering yes or no).

Deterministic: the same seed gives the same text. `python -m swiftbox.catalog.toy --corpus` writes
assets/toy_corpus.txt (training, generated part) and assets/toy_heldout.txt (held-out, both sources).
"""
from __future__ import annotations

import random
from pathlib import Path

ASSETS = Path(__file__).resolve().parent.parent / "assets"
SHAKESPEARE = ASSETS / "shakespeare.txt"
CORPUS = ASSETS / "toy_corpus.txt"
HELDOUT = ASSETS / "toy_heldout.txt"
SYSTEM = "You are a helpful assistant."

ANIMALS = {  # name: (legs, sound, home, food)
    "cat": (4, "meow", "house", "fish"), "dog": (4, "woof", "house", "meat"), "cow": (4, "moo", "farm", "grass"),
    "horse": (4, "neigh", "farm", "hay"), "sheep": (4, "baa", "farm", "grass"), "duck": (2, "quack", "pond", "bread"),
    "hen": (2, "cluck", "farm", "corn"), "owl": (2, "hoot", "forest", "mice"), "frog": (4, "croak", "pond", "flies"),
    "lion": (4, "roar", "savanna", "meat"), "bee": (6, "buzz", "hive", "nectar"),
    "ant": (6, "nothing", "nest", "seeds"),
    "spider": (8, "nothing", "web", "flies"), "snake": (0, "hiss", "grass", "mice"), "pig": (4, "oink", "farm", "corn"),
    "goat": (4, "bleat", "hill", "grass"), "wolf": (4, "howl", "forest", "meat"),
    "mouse": (4, "squeak", "field", "seeds"),
}
COLOURS = {"sky": "blue", "grass": "green", "snow": "white", "coal": "black", "blood": "red", "sun": "yellow",
           "orange": "orange", "banana": "yellow", "leaf": "green", "cloud": "white", "night": "black",
           "sea": "blue", "cherry": "red", "lemon": "yellow", "milk": "white", "plum": "purple"}
CAPITALS = {"France": "Paris", "Italy": "Rome", "Spain": "Madrid", "Japan": "Tokyo", "China": "Beijing",
            "Egypt": "Cairo", "Peru": "Lima", "Kenya": "Nairobi", "Norway": "Oslo", "Greece": "Athens",
            "Canada": "Ottawa", "India": "New Delhi", "Germany": "Berlin", "Poland": "Warsaw", "Chile": "Santiago"}
OPPOSITES = {"hot": "cold", "big": "small", "up": "down", "day": "night", "old": "new", "fast": "slow",
             "open": "closed", "light": "dark", "early": "late", "full": "empty", "wet": "dry", "high": "low"}
DAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"]
MONTHS = ["January", "February", "March", "April", "May", "June", "July", "August", "September", "October",
          "November", "December"]
WORDS = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten"]


def _number(rng: random.Random) -> int:
    return rng.choice([rng.randrange(0, 10), rng.randrange(10, 100), rng.randrange(100, 1000),
                       rng.randrange(1000, 100000), rng.randrange(10000, 100000)])


def _yes_no(rng: random.Random) -> tuple[str, str]:
    """A yes/no question with its answer; yes and no equally often."""
    want = rng.random() < 0.5
    kind = rng.randrange(8)
    if kind == 0:
        a = rng.choice(list(ANIMALS))
        legs = ANIMALS[a][0] if want else rng.choice([n for n in (0, 2, 4, 6, 8) if n != ANIMALS[a][0]])
        return f"Does a {a} have {legs} legs?", "yes" if want else "no"
    if kind == 1:
        thing = rng.choice(list(COLOURS))
        others = [c for c in sorted(set(COLOURS.values())) if c != COLOURS[thing]]
        colour = COLOURS[thing] if want else rng.choice(others)
        return f"Is the {thing} {colour}?", "yes" if want else "no"
    if kind == 2:
        country = rng.choice(list(CAPITALS))
        city = CAPITALS[country] if want else rng.choice([c for k, c in CAPITALS.items() if k != country])
        return f"Is {city} the capital of {country}?", "yes" if want else "no"
    if kind == 3:
        n1, n2 = _number(rng), _number(rng)
        while n1 == n2:
            n2 = _number(rng)
        word = rng.choice(["greater", "smaller"])
        truth = (n1 > n2) == (word == "greater")
        return f"Is {n1} {word} than {n2}?", "yes" if truth else "no"
    if kind == 4:
        n = _number(rng)
        digit = int(str(n)[-1]) if want else rng.choice([d for d in range(10) if d != int(str(n)[-1])])
        return f"Does {n} end in {digit}?", "yes" if want else "no"
    if kind == 5:
        n = _number(rng)
        size = len(str(n)) if want else rng.choice([k for k in range(1, 6) if k != len(str(n))])
        return f"Does {n} have {size} digits?", "yes" if want else "no"
    if kind == 6:
        a = rng.choice(list(ANIMALS))
        other_sounds = [s for s in sorted({v[1] for v in ANIMALS.values()}) if s != ANIMALS[a][1]]
        sound = ANIMALS[a][1] if want else rng.choice(other_sounds)
        return f"Does a {a} say {sound}?", "yes" if want else "no"
    word = rng.choice(list(OPPOSITES))
    other = OPPOSITES[word] if want else rng.choice([o for o in OPPOSITES.values() if o != OPPOSITES[word]])
    return f"Is {other} the opposite of {word}?", "yes" if want else "no"


def _open_question(rng: random.Random) -> tuple[str, str]:
    """A short-answer question with its answer."""
    kind = rng.randrange(9)
    if kind == 0:
        n = _number(rng)
        return f"What is the last digit of {n}?", str(n)[-1]
    if kind == 1:
        n = _number(rng)
        return f"How many digits does {n} have?", str(len(str(n)))
    if kind == 2:
        a, b = rng.randrange(0, 50), rng.randrange(0, 50)
        return f"What is {a} plus {b}?", str(a + b)
    if kind == 3:
        n = _number(rng)
        return f"What number comes after {n}?", str(n + 1)
    if kind == 4:
        country = rng.choice(list(CAPITALS))
        return f"What is the capital of {country}?", CAPITALS[country]
    if kind == 5:
        thing = rng.choice(list(COLOURS))
        return f"What colour is the {thing}?", COLOURS[thing]
    if kind == 6:
        animal = rng.choice(list(ANIMALS))
        return f"How many legs does a {animal} have?", str(ANIMALS[animal][0])
    if kind == 7:
        i = rng.randrange(7)
        return f"What day comes after {DAYS[i]}?", DAYS[(i + 1) % 7]
    word = rng.choice(list(OPPOSITES))
    return f"What is the opposite of {word}?", OPPOSITES[word]


def _sentence(rng: random.Random) -> str:
    kind = rng.randrange(8)
    if kind == 0:
        a = rng.choice(list(ANIMALS))
        legs, sound, home, food = ANIMALS[a]
        return f"The {a} has {WORDS[legs]} legs, lives in the {home}, eats {food} and says {sound}."
    if kind == 1:
        thing = rng.choice(list(COLOURS))
        return f"The {thing} is {COLOURS[thing]}."
    if kind == 2:
        country = rng.choice(list(CAPITALS))
        return f"{CAPITALS[country]} is the capital of {country}."
    if kind == 3:
        n = _number(rng)
        return f"The number {n} has {WORDS[len(str(n))]} digits and ends in {str(n)[-1]}."
    if kind == 4:
        start = rng.randrange(0, 1000)
        return "Counting: " + ", ".join(str(start + k) for k in range(rng.randrange(3, 8))) + "."
    if kind == 5:
        i = rng.randrange(12)
        return f"{MONTHS[i]} comes before {MONTHS[(i + 1) % 12]}, and {DAYS[i % 7]} before {DAYS[(i + 1) % 7]}."
    if kind == 6:
        n1, n2 = rng.randrange(0, 50), rng.randrange(0, 50)
        return f"{n1} plus {n2} makes {n1 + n2}."
    word = rng.choice(list(OPPOSITES))
    return f"The opposite of {word} is {OPPOSITES[word]}."


def chatml(turns: list[tuple[str, str]]) -> str:
    """The toy's chat template rendered as text (default system prompt), for pretraining."""
    out = f"<|im_start|>system\n{SYSTEM}<|im_end|>\n"
    for question, answer in turns:
        out += f"<|im_start|>user\n{question}<|im_end|>\n<|im_start|>assistant\n{answer}<|im_end|>\n"
    return out.rstrip("\n")


def generated_documents(count: int, seed: int) -> list[str]:
    """`count` documents: prose paragraphs, Q/A lines and chats (about a third each)."""
    rng = random.Random(seed)
    docs = []
    for _ in range(count):
        kind = rng.randrange(3)
        ask = (lambda: _yes_no(rng)) if rng.random() < 0.5 else (lambda: _open_question(rng))
        if kind == 0:
            docs.append(" ".join(_sentence(rng) for _ in range(rng.randrange(2, 6))))
        elif kind == 1:
            docs.append("\n".join("Q: {}\nA: {}".format(*ask()) for _ in range(rng.randrange(1, 4))))
        else:
            docs.append(chatml([ask() for _ in range(rng.randrange(1, 3))]))
    return docs


def shakespeare_paragraphs() -> tuple[list[str], list[str]]:
    """(training, held-out) paragraphs: the first 90% and the last 10% of the bundled text."""
    paragraphs = [p.strip() for p in SHAKESPEARE.read_text(encoding="utf-8").split("\n\n") if p.strip()]
    cut = len(paragraphs) * 9 // 10
    return paragraphs[:cut], paragraphs[cut:]


TRAIN_DOCS, HELDOUT_DOCS = 3000, 300


def corpus_texts() -> tuple[str, str]:
    """(training text, held-out text) as the files hold them; the same bytes every time."""
    corpus = "\n\n".join(generated_documents(TRAIN_DOCS, seed=0)) + "\n"
    _, held = shakespeare_paragraphs()
    mixed = held + generated_documents(HELDOUT_DOCS, seed=1)
    random.Random(2).shuffle(mixed)
    return corpus, "\n\n".join(mixed) + "\n"


def write_corpus() -> None:
    """Rewrite assets/toy_corpus.txt and assets/toy_heldout.txt."""
    corpus, held = corpus_texts()
    CORPUS.write_text(corpus, encoding="utf-8")
    HELDOUT.write_text(held, encoding="utf-8")


def training_documents() -> list[str]:
    """Every training document: Shakespeare's first 90% and the generated corpus."""
    train, _ = shakespeare_paragraphs()
    generated = [d.strip() for d in CORPUS.read_text(encoding="utf-8").split("\n\n") if d.strip()]
    return train + generated
