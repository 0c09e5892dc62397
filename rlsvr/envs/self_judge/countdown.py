"""Countdown: reach a target from 3-4 numbers with + - * /, each number used once.

Problems come from a seeded generator (targets built from random expression
trees, so every problem is solvable), TinyZero-style JSONL files
(`{"target", "nums"}` per line) or the hub dataset
`Jiayi-Pan/Countdown-Tasks-3to4`. The formal check parses the last
`<answer>` block with a small recursive-descent parser (never `eval`) and
computes with exact fractions.
"""
from __future__ import annotations

import collections
import dataclasses
import json
import os
import re
from fractions import Fraction
from typing import Any, Iterable, Mapping, Sequence

import numpy as np

from rlsvr.envs.self_judge import tasks
from rlsvr.envs.self_judge.tasks import Verdict, extract_answer

HUB_DATASET = "Jiayi-Pan/Countdown-Tasks-3to4"
MAX_ANSWER_CHARS = 1000
MAX_DIGITS = 30
MAX_DEPTH = 50

_TOKEN_RE = re.compile(r"\s*(?:(\d+)|([-+*/()]))")


@dataclasses.dataclass(frozen=True)
class CountdownProblem:
  """Numbers to use, the target, and (for generated problems) one solution."""

  nums: tuple[int, ...]
  target: int
  solution: str | None = None

  @classmethod
  def from_mapping(cls, row: Mapping[str, Any]) -> CountdownProblem:
    return cls(tuple(int(n) for n in row["nums"]), int(row["target"]), row.get("solution"))


# ---------------------------------------------------------------- problems


def generate(
    count: int,
    seed: int = 0,
    num_counts: Sequence[int] = (3, 4),
    num_range: tuple[int, int] = (1, 99),
    target_range: tuple[int, int] = (1, 100),
) -> list[CountdownProblem]:
  """`count` solvable problems; same seed, same problems.

  Each combines its numbers pairwise in random order with random operations
  (exact divisions and non-negative differences only), so the target is
  reachable; problems whose target falls outside `target_range` are redrawn.
  """
  rng = np.random.default_rng(seed)
  problems = []
  while len(problems) < count:
    nums = [int(n) for n in rng.integers(num_range[0], num_range[1] + 1,
                                          size=int(rng.choice(num_counts)))]
    pool = [(n, str(n)) for n in nums]
    while len(pool) > 1:
      i, j = rng.choice(len(pool), size=2, replace=False)
      (a, ea), (b, eb) = pool[i], pool[j]
      options = [("+", a + b), ("*", a * b)]
      if a >= b:
        options.append(("-", a - b))
      if b and a % b == 0:
        options.append(("/", a // b))
      op, value = options[int(rng.integers(len(options)))]
      pool = [p for k, p in enumerate(pool) if k not in (i, j)] + [(value, f"({ea} {op} {eb})")]
    value, expr = pool[0]
    if target_range[0] <= value <= target_range[1]:
      problems.append(CountdownProblem(tuple(nums), value, expr[1:-1]))
  return problems


def load_jsonl(path: str) -> list[CountdownProblem]:
  """Problems from a TinyZero-style JSONL file: one `{"target", "nums"}` per line."""
  with open(path, encoding="utf-8") as f:
    return [CountdownProblem.from_mapping(json.loads(line)) for line in f if line.strip()]


def load_hub(name: str = HUB_DATASET, split: str = "train",
             limit: int | None = None) -> list[CountdownProblem]:
  """Problems from a hub dataset with `target` and `nums` columns (needs network or cache)."""
  import datasets  # pylint: disable=g-import-not-at-top  -- heavy, optional

  rows: Iterable[Mapping[str, Any]] = datasets.load_dataset(name, split=split)
  problems = []
  for row in rows:
    if limit is not None and len(problems) >= limit:
      break
    problems.append(CountdownProblem.from_mapping(row))
  return problems


def prompt(problem: CountdownProblem) -> str:
  """The policy prompt (TinyZero's wording, as one chat message)."""
  nums = ", ".join(str(n) for n in problem.nums)
  return (f"Using the numbers [{nums}], create an equation that equals {problem.target}. "
          "You can use basic arithmetic operations (+, -, *, /) and each number can only be "
          "used once. Show your work in <think> </think> tags. And return the final answer "
          "in <answer> </answer> tags, for example <answer> (1 + 2) / 3 </answer>.")


# ---------------------------------------------------------------- formal check


class _SyntaxError(ValueError):
  pass


def _tokenize(text: str) -> list[str]:
  tokens, pos, end = [], 0, len(text.rstrip())
  while pos < end:
    match = _TOKEN_RE.match(text, pos)
    if not match:
      char = text[pos:].lstrip()[:1]
      raise _SyntaxError(f"illegal character {char!r}")
    number, op = match.groups()
    if number is not None and len(number) > MAX_DIGITS:
      raise _SyntaxError(f"number longer than {MAX_DIGITS} digits")
    tokens.append(number if number is not None else op)
    pos = match.end()
  return tokens


def parse(text: str) -> tuple[Any, list[int]]:
  """Parses a Countdown expression: (tree, integer literals in order).

  Grammar: `expr := term (('+'|'-') term)*`, `term := atom (('*'|'/') atom)*`,
  `atom := INT | '(' expr ')'`; no unary signs. Trees are ints or
  `(op, left, right)` tuples.

  Raises:
    ValueError: text outside the grammar.
  """
  if "**" in text:
    raise _SyntaxError("'**' is not allowed")
  if "=" in text:
    raise _SyntaxError("'=' is not allowed")
  tokens = _tokenize(text)
  if not tokens:
    raise _SyntaxError("empty expression")
  pos, literals = 0, []

  def peek():
    return tokens[pos] if pos < len(tokens) else None

  def binary(operand, ops, depth):
    nonlocal pos
    left = operand(depth)
    while peek() in ops:
      op = tokens[pos]
      pos += 1
      left = (op, left, operand(depth))
    return left

  def expr(depth):
    return binary(term, ("+", "-"), depth)

  def term(depth):
    return binary(atom, ("*", "/"), depth)

  def atom(depth):
    nonlocal pos
    token = peek()
    if token is None:
      raise _SyntaxError("expression ends early")
    pos += 1
    if token.isdigit():
      literals.append(int(token))
      return int(token)
    if token == "(":
      if depth >= MAX_DEPTH:
        raise _SyntaxError(f"parentheses nested deeper than {MAX_DEPTH}")
      inner = expr(depth + 1)
      if peek() != ")":
        raise _SyntaxError("unbalanced parentheses")
      pos += 1
      return inner
    if token in "+-":
      raise _SyntaxError("unary signs are not allowed")
    raise _SyntaxError(f"unexpected {token!r}")

  tree = expr(0)
  if peek() is not None:
    raise _SyntaxError(f"unexpected {peek()!r}")
  return tree, literals


def evaluate(tree: Any) -> Fraction:
  """Exact value of a parsed tree; ZeroDivisionError on division by zero."""
  if isinstance(tree, int):
    return Fraction(tree)
  op, left, right = tree
  a, b = evaluate(left), evaluate(right)
  if op == "+":
    return a + b
  if op == "-":
    return a - b
  if op == "*":
    return a * b
  return a / b


def check(response: str, nums: Sequence[int], target: int | Fraction) -> Verdict:
  """The formal verifier: is the last `<answer>` block a correct Countdown solution?"""
  answer = extract_answer(response)
  if answer is None:
    return Verdict(False, False, "no <answer> block")
  if len(answer) > MAX_ANSWER_CHARS:
    return Verdict(False, False, f"answer longer than {MAX_ANSWER_CHARS} characters")
  expression = answer.strip()
  try:
    tree, literals = parse(expression)
  except ValueError as e:
    return Verdict(False, False, str(e), expression)
  if collections.Counter(literals) != collections.Counter(int(n) for n in nums):
    return Verdict(True, False, f"numbers used {sorted(literals)} != given {sorted(nums)}",
                   expression)
  try:
    value = evaluate(tree)
  except ZeroDivisionError:
    return Verdict(True, False, "division by zero", expression)
  if value != Fraction(target):
    return Verdict(True, False, f"value {value} != target {target}", expression)
  return Verdict(True, True, "ok", expression)


# ---------------------------------------------------------------- the RLSR task


class CountdownTask:
  """Countdown as an RLSR task (`tasks.Task`).

  The default judge prompt is the RLSR paper's final, stable one, template 4
  (every condition listed, all must hold, "not an equation"); with the lax
  template 1 the paper's policy was reward-hacked first (answers the judge
  accepts and the formal check rejects). Templates 1-3 remain for ablations.
  """

  name = "countdown"
  default_judge_template = "countdown_4"
  judge_placeholders = ("nums", "target")
  judge_sections = ()

  def load_problems(self, source: str, *, split: str, limit: int | None,
                    seed: int) -> list[CountdownProblem]:
    """"generate" (seeded, `limit` or 1000 problems), "hub" or a TinyZero JSONL file."""
    if source == "generate":
      return generate(limit or 1000, seed=seed)
    if source == "hub":
      return load_hub(split=split, limit=limit)
    if os.path.isfile(source):
      return load_jsonl(source)[:limit]
    raise ValueError(f"data.source={source!r}: use 'generate', 'hub' or a TinyZero JSONL file")

  def as_problem(self, item: CountdownProblem | Mapping[str, Any]) -> CountdownProblem:
    return item if isinstance(item, CountdownProblem) else CountdownProblem.from_mapping(item)

  def policy_prompt(self, problem: CountdownProblem) -> str:
    return prompt(problem)

  def extract_answer(self, response: str) -> str | None:
    return extract_answer(response)

  def verify(self, problems: Sequence[CountdownProblem], responses: Sequence[str], *,
             config: Any, pool: Any) -> list[Verdict]:
    del config, pool  # exact arithmetic on a bounded parse: nothing to time out
    return [check(r, p.nums, p.target) for p, r in zip(problems, responses)]

  def judge_fields(self, problem: CountdownProblem) -> tuple[str, dict[str, str]]:
    return "", dict(nums=", ".join(str(n) for n in problem.nums), target=str(problem.target))

  def record_facts(self, problem: CountdownProblem) -> dict[str, Any]:
    return dict(nums=list(problem.nums), target=problem.target)

  def describe(self, problem: CountdownProblem) -> str:
    return f"nums={list(problem.nums)} target={problem.target}"


tasks.register_task(CountdownTask())
