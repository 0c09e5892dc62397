"""Generated math word problems with exact integer answers, so RLVR runs need no dataset.

`data.source = "bundled:arithmetic"` (the `reward_fn` environment,
`rlsvr.envs.reward_fn.data`) trains on these: GSM8K-style problems of one to
three steps ("Tom has 3 boxes of 12 apples and gives away 7. How many apples
are left?"), drawn from our own templates with a seeded RNG. Like the spy
game's fact sheets (`rlsvr.data.bundled`) they are generated, not shipped as a
file, so a fresh clone trains offline and any count is available.

Each `Problem` keeps its template (`kind`) and the numbers drawn (`values`) next
to the text, so a test can recompute the answer on its own rather than trust
the generator's arithmetic. Every template draws its numbers so that the answer
is a positive integer (no remainders, no negative change): the gold answer is
then exactly what math-verify compares, with no rounding question.
"""
from __future__ import annotations

import dataclasses
import random
from typing import Callable, Iterator

DEFAULT_SEED = 20251204  # The bundled set: the same problems in every run and on every host.
DEFAULT_COUNT = 5000  # Rows when `data.limit` is 0: more than any CPU run draws.

_NAMES = ("Tom", "Maria", "Aiko", "Ben", "Priya", "Lucas", "Fatima", "Noah", "Elena", "Kwame",
          "Sofia", "Omar", "Hannah", "Diego", "Mei", "Jonas", "Amara", "Liam", "Zara", "Ivan")
# (singular, plural, container): plural given because English plurals are irregular.
_ITEMS = (("apple", "apples", "box"), ("pencil", "pencils", "pack"), ("egg", "eggs", "carton"),
          ("marble", "marbles", "bag"), ("cookie", "cookies", "tray"),
          ("sticker", "stickers", "sheet"), ("card", "cards", "deck"),
          ("orange", "oranges", "crate"), ("bead", "beads", "jar"), ("book", "books", "shelf"))
_CONTAINERS = {"box": "boxes", "pack": "packs", "carton": "cartons", "bag": "bags",
               "tray": "trays", "sheet": "sheets", "deck": "decks", "crate": "crates",
               "jar": "jars", "shelf": "shelves"}
_SHOP_ITEMS = ("notebooks", "sandwiches", "tickets", "plants", "mugs", "scarves", "kites")
_VEHICLES = ("train", "bus", "truck", "ferry", "car")


@dataclasses.dataclass(frozen=True)
class Problem:
  """One word problem: its template, the numbers drawn, the text and the integer answer."""

  kind: str
  values: dict[str, int]
  question: str
  answer: int


def _give_away(rng: random.Random, name: str) -> Problem:
  _, items, box = rng.choice(_ITEMS)
  a, b = rng.randint(2, 9), rng.randint(4, 24)
  c = rng.randint(1, a * b - 1)  # Something is left: the answer stays positive.
  return Problem("give_away", dict(a=a, b=b, c=c),
                 f"{name} has {a} {_CONTAINERS[box]} of {b} {items} and gives away {c}. "
                 f"How many {items} are left?", a * b - c)


def _change(rng: random.Random, name: str) -> Problem:
  item = rng.choice(_SHOP_ITEMS)
  a, b = rng.randint(2, 8), rng.randint(2, 12)
  c = next(bill for bill in (20, 50, 100, 200) if bill > a * b)  # The smallest bill that covers it.
  return Problem("change", dict(a=a, b=b, c=c),
                 f"{name} buys {a} {item} at ${b} each and pays with a ${c} bill. How many "
                 f"dollars of change does {name} get?", c - a * b)


def _share(rng: random.Random, name: str) -> Problem:
  _, items, box = rng.choice(_ITEMS)
  a, c, k = rng.randint(2, 9), rng.randint(2, 6), rng.randint(1, 5)
  b = c * k  # Each container splits evenly: no remainder to round.
  return Problem("share", dict(a=a, b=b, c=c),
                 f"{name} has {a} {_CONTAINERS[box]} with {b} {items} in each and shares all "
                 f"of them equally among {c} friends. How many {items} does each friend get?",
                 a * b // c)


def _wages(rng: random.Random, name: str) -> Problem:
  a, b, c = rng.randint(8, 30), rng.randint(2, 8), rng.randint(2, 6)
  return Problem("wages", dict(a=a, b=b, c=c),
                 f"{name} earns ${a} an hour and works {b} hours a day for {c} days. How many "
                 f"dollars does {name} earn in all?", a * b * c)


def _ages(rng: random.Random, name: str) -> Problem:
  # A brother of 10 or more: his father, 2-3 times his age, is then a plausible 20 or more.
  a, b, c = rng.randint(8, 15), rng.randint(2, 9), rng.randint(2, 3)
  return Problem("ages", dict(a=a, b=b, c=c),
                 f"{name} is {a} years old. {name}'s brother is {b} years older, and their "
                 f"father is {c} times as old as the brother. How old is their father?",
                 (a + b) * c)


def _pages(rng: random.Random, name: str) -> Problem:
  b, c = rng.randint(5, 30), rng.randint(2, 7)
  a = b * c + rng.randint(1, 120)  # Pages remain after the reading days.
  return Problem("pages", dict(a=a, b=b, c=c),
                 f"A book has {a} pages. {name} reads {b} pages a day for {c} days. How many "
                 f"pages are left to read?", a - b * c)


def _distance(rng: random.Random, name: str) -> Problem:
  del name
  vehicle = rng.choice(_VEHICLES)
  a, b, c, d = rng.randint(20, 90), rng.randint(1, 5), rng.randint(20, 90), rng.randint(1, 5)
  return Problem("distance", dict(a=a, b=b, c=c, d=d),
                 f"A {vehicle} travels at {a} km per hour for {b} hours, then at {c} km per "
                 f"hour for {d} hours. How many km does it travel in all?", a * b + c * d)


def _half_then_more(rng: random.Random, name: str) -> Problem:
  _, items, _ = rng.choice(_ITEMS)
  a, b = 2 * rng.randint(3, 40), rng.randint(1, 30)  # `a` even: half of it is whole.
  return Problem("half_then_more", dict(a=a, b=b),
                 f"{name} has {a} {items}, gives half of them to a cousin, then gets {b} more. "
                 f"How many {items} does {name} have now?", a // 2 + b)


TEMPLATES: dict[str, Callable[[random.Random, str], Problem]] = {
    "give_away": _give_away, "change": _change, "share": _share, "wages": _wages,
    "ages": _ages, "pages": _pages, "distance": _distance, "half_then_more": _half_then_more,
}


def problem(rng: random.Random) -> Problem:
  """One problem of a template drawn uniformly (every kind equally often)."""
  kind = rng.choice(sorted(TEMPLATES))
  return TEMPLATES[kind](rng, rng.choice(_NAMES))


def stream(seed: int = DEFAULT_SEED) -> Iterator[Problem]:
  """Endless problems drawn with `seed`: the same sequence for the same seed."""
  rng = random.Random(seed)
  while True:
    yield problem(rng)


def problems(count: int, seed: int = DEFAULT_SEED) -> list[Problem]:
  """The first `count` problems of `stream(seed)`."""
  it = stream(seed)
  return [next(it) for _ in range(count)]


def rows(count: int = 0, seed: int = DEFAULT_SEED) -> list[dict[str, str]]:
  """Rows as the reward functions read them: `question`, `answer` (the integer as text, the
  gold column `rlsvr.rewards.math.accuracy` reads) and `id`; `count` 0: DEFAULT_COUNT."""
  return [dict(question=p.question, answer=str(p.answer), id=f"arithmetic-{seed}-{k}")
          for k, p in enumerate(problems(count or DEFAULT_COUNT, seed))]
