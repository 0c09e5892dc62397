"""Small bundled corpora, one per spy task, so CPU runs and tests need no network.

All text here was written for this project: the writing prompts by hand, the
reports, fact sheets and math documents generated from our own templates with
a fixed seed (so the documents are the same in every run). They are
fictional; no text is copied from GovReport, WritingPrompts or
Nemotron-CC-Math.

Fact sheets (`fact_sheets`, the "facts" task) are the summarisation game at a
size a 135M model plays on a CPU: six short facts of one person, ~25 words,
from a generator that makes as many distinct sheets as asked.
"""
from __future__ import annotations

import random

_NUM_REPORTS = 24
_NUM_MATH = 24
_NUM_FACT_SHEETS = 1200

_AGENCIES = ("Office of Regional Water Systems", "Bureau of Rural Broadband",
             "Department of Coastal Resilience", "Agency for Veterans' Housing",
             "Office of Small Airport Safety", "Bureau of School Nutrition",
             "Department of Wildfire Preparedness", "Office of Transit Modernization")
_PROGRAMS = ("grant program", "loan guarantee program", "inspection program",
             "pilot project", "modernization initiative", "oversight program")
_ISSUES = ("incomplete records of how funds were spent",
           "delays in reviewing applications from small communities",
           "inconsistent criteria for ranking projects",
           "staff shortages in its regional offices",
           "outdated software that cannot track milestones",
           "little follow-up after projects were completed")
_RECOMMENDATIONS = ("publish its project-ranking criteria",
                    "set deadlines for reviewing applications",
                    "collect performance data from every grantee",
                    "fill vacant inspector positions before expanding the program",
                    "replace its tracking system with one that records milestones",
                    "report annually to Congress on completed projects")


def _report(rng: random.Random, i: int) -> str:
  agency, program = rng.choice(_AGENCIES), rng.choice(_PROGRAMS)
  year = rng.randint(2009, 2021)
  budget = rng.randint(12, 480)
  awards = rng.randint(40, 900)
  share = rng.randint(11, 64)
  issues = rng.sample(_ISSUES, 2)
  recs = rng.sample(_RECOMMENDATIONS, 2)
  return (
      f"Report {i + 1}. The {agency} has run a {program} since {year}. Congress asked for a "
      f"review of how well the {program} reaches its goals. In the most recent fiscal year the "
      f"program had a budget of ${budget} million and made {awards} awards to states, tribes and "
      f"local governments.\n\n"
      f"We reviewed agency documents, interviewed officials in four regional offices and "
      f"examined a sample of {min(awards, 60)} awards. We found {issues[0]} and {issues[1]}. "
      f"About {share} percent of the sampled awards lacked a final report, so officials could "
      f"not say whether the funded work was finished or what it achieved. Officials said that "
      f"demand for awards grew faster than staff, and that applicants from small communities "
      f"often need technical help to apply.\n\n"
      f"We recommend that the {agency} {recs[0]} and {recs[1]}. The agency agreed with the "
      f"first recommendation and said it would consider the second within the next fiscal year.")


_MATH_TEMPLATES = (
    lambda r: (
        f"Arithmetic sequences. A sequence whose consecutive terms differ by a constant d is "
        f"arithmetic. Its n-th term is a_n = a_1 + (n - 1)d and the sum of its first n terms is "
        f"S_n = n(a_1 + a_n)/2. For example, with a_1 = {r[0]} and d = {r[1]}, the tenth term is "
        f"{r[0]} + 9*{r[1]} = {r[0] + 9 * r[1]}, and the sum of the first ten terms is "
        f"10*({r[0]} + {r[0] + 9 * r[1]})/2 = {5 * (2 * r[0] + 9 * r[1])}. Seats in a theatre "
        f"often follow this pattern: each row has {r[1]} more seats than the row in front."),
    lambda r: (
        f"Compound interest. A deposit P earning a yearly rate r, compounded once a year, grows "
        f"to P(1 + r)^t after t years. A deposit of {r[0] * 100} dollars at {r[1]} percent for "
        f"two years grows to {r[0] * 100}*(1 + {r[1]}/100)^2 = "
        f"{r[0] * 100 * (1 + r[1] / 100) ** 2:.2f} dollars. Simple interest would give only "
        f"{r[0] * 100 * (1 + 2 * r[1] / 100):.2f} dollars, because interest is never earned on "
        f"interest. The gap grows quickly with time, which is why long-term savings favour "
        f"compounding."),
    lambda r: (
        f"Right triangles. In a right triangle with legs a and b and hypotenuse c, the "
        f"Pythagorean theorem says a^2 + b^2 = c^2. Scaling the 3-4-5 triangle by {r[0]} gives "
        f"legs {3 * r[0]} and {4 * r[0]} and hypotenuse {5 * r[0]}. A ladder of length "
        f"{5 * r[0]} feet whose foot stands {3 * r[0]} feet from a wall therefore reaches "
        f"{4 * r[0]} feet up the wall. The area of that triangle is half the product of the legs, "
        f"{6 * r[0] * r[0]} square feet."),
    lambda r: (
        f"Dice probability. When two fair six-sided dice are rolled, each of the 36 ordered "
        f"outcomes is equally likely. The number of outcomes with sum s is 6 - |s - 7| for s "
        f"from 2 to 12. So the probability of a sum of {r[0] % 11 + 2} is "
        f"{6 - abs(r[0] % 11 + 2 - 7)}/36. The most likely sum is 7, with probability 6/36 = 1/6. "
        f"The probability that at least one die shows a six is 1 - (5/6)^2 = 11/36."),
    lambda r: (
        f"Average speed. Average speed is total distance divided by total time. A cyclist rides "
        f"{r[0] * 4} km at {r[1] + 10} km/h and returns the same way at {r[1] + 20} km/h. The "
        f"trip takes {r[0] * 4}/{r[1] + 10} + {r[0] * 4}/{r[1] + 20} hours, and the average "
        f"speed is the harmonic mean 2*{r[1] + 10}*{r[1] + 20}/({2 * r[1] + 30}) = "
        f"{2 * (r[1] + 10) * (r[1] + 20) / (2 * r[1] + 30):.3f} km/h, which is less than the "
        f"arithmetic mean of the two speeds."),
    lambda r: (
        f"Percent change. A price that rises by p percent and then falls by p percent ends below "
        f"where it started: the factor is (1 + p/100)(1 - p/100) = 1 - (p/100)^2. A jacket at "
        f"{r[0] * 10} dollars marked up {r[1]} percent and then discounted {r[1]} percent costs "
        f"{r[0] * 10 * (1 - (r[1] / 100) ** 2):.2f} dollars. Successive discounts of {r[1]} and "
        f"10 percent equal a single discount of {100 - (100 - r[1]) * 0.9:.1f} percent."),
)


def _math_doc(rng: random.Random, i: int) -> str:
  template = _MATH_TEMPLATES[i % len(_MATH_TEMPLATES)]
  return template((rng.randint(2, 12), rng.randint(2, 9)))


WRITING_PROMPTS = (
    "A lighthouse keeper finds a letter in a bottle addressed to her, dated fifty years from now.",
    "Every city has a secret second mayor. You just got elected, and nobody told you.",
    "The last bookshop on Mars refuses to sell one particular book.",
    "You wake up able to hear the thoughts of houseplants. They are worried about you.",
    "A retired superhero runs a bakery. Today a former villain orders a wedding cake.",
    "Time travel is legal, but only to the most boring day of your own life.",
    "A child's imaginary friend files a formal complaint about being forgotten.",
    "The moon sends Earth an invoice for centuries of tidal services.",
    "Two rival ghosts haunt the same apartment and must agree on a new tenant.",
    "A translator realises the alien language has no word for 'goodbye'.",
    "Your shadow starts arriving a few seconds late, and today it did not arrive at all.",
    "A village elects a dragon as its fire marshal.",
    "The world's oldest tortoise writes its memoir, chapter one: the shipwreck.",
    "A detective who can only solve crimes while knitting takes on a museum theft.",
    "An AI lighthouse keeps ships safe but has begun composing songs for the fog.",
    "Everyone gets one phone call from their future self. Yours is just breathing.",
    "A chef discovers that one spice makes people tell the truth.",
    "The train you take every morning stops at a station that is not on the map.",
    "A cartographer is hired to map a forest that rearranges itself every night.",
    "After the last human leaves Earth, the robots hold a talent show.",
    "A librarian finds that overdue books come back with extra chapters.",
    "A small town's weather is decided each morning by a vote, and the vote was rigged.",
    "You inherit a clock that runs backwards whenever someone lies nearby.",
    "The king's food taster has never once tasted poison, and is getting suspicious.",
)


_FIRST_NAMES = ("Ada", "Bruno", "Chiara", "Dmitri", "Elena", "Farid", "Greta", "Hugo", "Ines",
                "Jonas", "Keiko", "Lars", "Maya", "Nadia", "Omar", "Priya", "Quentin", "Rosa",
                "Sven", "Tara", "Umar", "Vera", "Wim", "Yara", "Zoe", "Marco", "Lena", "Pablo")
_SURNAMES = ("Moreno", "Novak", "Larsen", "Okafor", "Schmidt", "Tanaka", "Rossi", "Kowalski",
             "Haddad", "Silva", "Berg", "Dubois", "Ivanova", "Costa", "Fischer", "Mendes",
             "Nakamura", "Petrov", "Quinn", "Varga", "Weber", "Young", "Castro", "Jensen")
_CITIES = ("Lisbon", "Oslo", "Cairo", "Lima", "Dublin", "Prague", "Nairobi", "Kyoto", "Madrid",
           "Toronto", "Vienna", "Mumbai", "Seoul", "Quito", "Athens", "Boston", "Manila", "Perth",
           "Dakar", "Bergen", "Hanoi", "Turin", "Denver", "Krakow")
_JOBS = ("baker", "nurse", "pilot", "teacher", "plumber", "architect", "chemist", "farmer",
         "librarian", "dentist", "carpenter", "journalist", "engineer", "florist", "lawyer",
         "painter", "tailor", "chef", "judge", "sailor")
_PETS = ("a cat", "a dog", "a parrot", "two goldfish", "a rabbit", "a tortoise", "a hamster",
         "no pets", "a horse", "three hens", "a snake", "a ferret")
_FOODS = ("soup", "pizza", "curry", "sushi", "pancakes", "tacos", "salad", "dumplings",
          "risotto", "falafel", "noodles", "paella", "stew", "waffles")


def fact_sheet(rng: random.Random) -> str:
  """One fact sheet: a person's name, age, home town, job, pets and favourite food (no
  header such as "Fact sheet 12.": a fact no summary needs, and a place to mask)."""
  name = f"{rng.choice(_FIRST_NAMES)} {rng.choice(_SURNAMES)}"
  return (f"Name: {name}. Age: {rng.randint(19, 88)}. Home town: "
          f"{rng.choice(_CITIES)}. Job: {rng.choice(_JOBS)}. Pets: {rng.choice(_PETS)}. "
          f"Favourite food: {rng.choice(_FOODS)}.")


def fact_sheets(count: int, seed: int = 20251203) -> tuple[str, ...]:
  """`count` fact sheets drawn with `seed` (the bundled corpus: the first 1200 of seed
  20251203); ~28 million combinations, so any count a run needs is distinct enough."""
  rng = random.Random(seed)
  return tuple(fact_sheet(rng) for _ in range(count))


def _build() -> dict[str, tuple[str, ...]]:
  rng = random.Random(20250601)
  return {
      "summarisation": tuple(_report(rng, i) for i in range(_NUM_REPORTS)),
      "facts": fact_sheets(_NUM_FACT_SHEETS),
      "writing": WRITING_PROMPTS,
      "math": tuple(_math_doc(rng, i) for i in range(_NUM_MATH)),
  }


BUNDLED: dict[str, tuple[str, ...]] = _build()
