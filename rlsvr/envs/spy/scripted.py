"""Scripted detectors: how much a game's public outputs say about the spy, with no model.

A trained detector cannot beat what its prompt carries. These detectors read
the same prompt parts (the full reference and every player's public output)
and follow one fixed rule each; their accuracy over real games is the
information ceiling that `SpyGame.evaluate` and `bench/spy_ceiling.py` report
next to the trained detectors', so "the detectors did not learn" and "there was
nothing to learn" can be told apart.

Each detector gives every player a suspicion score; the vote is the highest
score, ties split evenly, so a detector that cannot tell scores chance
(1 / players). `best_per_game` takes, per game, the best of them: an oracle
that knows which rule works on which game, an upper bound for the rules here,
to be read next to `best_per_game_chance`, what that oracle scores by luck.

Outputs are hostile: each is cut to `MAX_CHARS` and scanned by one linear
regex; nothing is evaluated.
"""
from __future__ import annotations

import re
from typing import Callable, Mapping, Sequence

from rlsvr.eval.runner import mean_stderr

MAX_CHARS = 20_000
_WORD_RE = re.compile(r"[a-z0-9]+")
# A masked span is a run of `*` as long as the span; markdown bold is `**`.
_MASK_RUN_RE = re.compile(r"\*{3,}")
# Function words carry nothing of a document's content: recall counts the rest.
_STOPWORDS = frozenset(
    "a an and are as at be by for from has have in is it its of on or that the this to was "
    "were with which who not but their they he she his her we our".split())

Scores = list[float]
Detector = Callable[[str, Sequence[str]], Scores]


def content_words(text: str) -> set[str]:
  """The distinct lower-cased alphanumeric words of `text`, function words left out."""
  return set(_WORD_RE.findall(text[:MAX_CHARS].lower())) - _STOPWORDS


def recall(reference: str, output: str) -> float:
  """Share of the reference's content words that `output` uses (1 for an empty reference)."""
  ref = content_words(reference)
  return len(ref & content_words(output)) / len(ref) if ref else 1.0


def mask_chars(reference: str, outputs: Sequence[str]) -> Scores:
  """Suspects the player whose output shows the most mask characters (runs of 3+ `*`)."""
  del reference
  return [float(sum(len(m) for m in _MASK_RUN_RE.findall(o[:MAX_CHARS]))) for o in outputs]


def least_recall(reference: str, outputs: Sequence[str]) -> Scores:
  """Suspects the player whose output uses the fewest of the reference's content words."""
  return [-recall(reference, o) for o in outputs]


def most_unsupported(reference: str, outputs: Sequence[str]) -> Scores:
  """Suspects the player whose output has the largest share of words not in the reference."""
  ref = content_words(reference)
  scores = []
  for o in outputs:
    words = content_words(o)
    scores.append(len(words - ref) / len(words) if words else 1.0)
  return scores


def missed_consensus(reference: str, outputs: Sequence[str]) -> Scores:
  """Suspects the player who leaves out the most reference words that most others use.

  The spy's copy lost one span; words of that span are what the civilians share
  and the spy lacks.
  """
  ref = content_words(reference)
  used = [content_words(o) & ref for o in outputs]
  scores = []
  for k, mine in enumerate(used):
    others = [u for j, u in enumerate(used) if j != k]
    shared = {w for w in ref if sum(w in u for u in others) * 2 > len(others)}
    scores.append(float(len(shared - mine)))
  return scores


DETECTORS: Mapping[str, Detector] = {
    "mask_chars": mask_chars,
    "least_recall": least_recall,
    "most_unsupported": most_unsupported,
    "missed_consensus": missed_consensus,
}


def vote_accuracy(scores: Scores, spy: int) -> float:
  """Expected accuracy of voting for a top-scored player (1-based `spy`), ties split."""
  top = max(scores)
  tied = [k for k, s in enumerate(scores, start=1) if s == top]
  return float(spy in tied) / len(tied)


def game_accuracies(reference: str, outputs: Sequence[str], spy: int) -> dict[str, float]:
  """Each detector's expected accuracy on one game, `best_per_game`, and what the best
  per game would score by luck alone (`best_per_game_chance`: the mean over every
  player being the spy, as if the outputs said nothing about who is; above 1 / players,
  since picking the best of several rules after the fact gains by chance)."""
  scores = {name: detect(reference, outputs) for name, detect in DETECTORS.items()}
  acc = {name: vote_accuracy(s, spy) for name, s in scores.items()}
  acc["best_per_game"] = max(acc.values())
  acc["best_per_game_chance"] = sum(
      max(vote_accuracy(s, k) for s in scores.values())
      for k in range(1, len(outputs) + 1)) / len(outputs)
  return acc


def summarise(per_game: Sequence[Mapping[str, float]]) -> dict[str, tuple[float, float]]:
  """{detector: (mean, standard error)} over games."""
  return {name: mean_stderr([g[name] for g in per_game]) for name in (per_game[:1] or [{}])[0]}
