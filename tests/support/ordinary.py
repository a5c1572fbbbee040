"""A large markdown of ordinary words: plain sentences of common English words, seeded."""

from __future__ import annotations

import random

COMMON = (
    "the a of to and in that it is was for on with as be at by this from or have an they which one "
    "you were all we her she there would their will when who him been has more if no out so said what up "
    "its about than into them can only other new some could time these two may first then do any like my "
    "now over such our man me even most made after also did many before must through back years where "
    "much your way well down should because each just those people how too little state good very make "
    "world still own see men work long get here between both life being under never day same another know "
    "while last might us great old year off come since against go came right used take three"
)
WORDS = COMMON.split()


def ordinary_markdown(size: int, seed: int = 7) -> str:
    """Sections of plain sentences of common words, about `size` bytes."""
    rng = random.Random(seed)
    parts: list[str] = []
    length, section = 0, 0
    while length < size:
        section += 1
        paragraphs = [" ".join(sentence(rng) for _ in range(5)) for _ in range(4)]
        part = f"## Section {section}\n\n" + "\n\n".join(paragraphs) + "\n\n"
        parts.append(part)
        length += len(part)
    return "# A long handbook\n\n" + "".join(parts)


def sentence(rng: random.Random) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(rng.randint(8, 18))).capitalize() + "."
