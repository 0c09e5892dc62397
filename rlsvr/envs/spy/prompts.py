"""Prompt builders for the spy game: the performing and the detection phase.

Our own wording, structured as DESIGN.md asks: the game and its stakes, the
player's role line, the task's constraints and output format; for detectors
the full reference, what to look for per task, the vote format and the
players' public outputs. Prompts state the run's true mask fraction.
"""
from __future__ import annotations

import dataclasses
from typing import Sequence

from rlsvr.envs.spy.config import SpyGameConfig

NO_ANSWER = "(no answer)"


@dataclasses.dataclass(frozen=True)
class _TaskText:
  doc: str  # what the input is called
  work: str  # what a player writes
  instruction: str
  output_format: str
  look_for: str
  plain_format: str  # The output format outside the game (`plain_prompt`).
  prefill: str = "Answer:"  # A player's forced reply start under `answer_prefill`.
  # The same parts in a sentence each (`_brief_*`): the game as a small model plays it on a
  # CPU, where every prompt token is paid for in each update (docs/results.md, spy game).
  brief: bool = False


_PLAIN_ANSWER_FORMAT = ("You may think first. Then write a line that starts with `Answer:` "
                        "followed by your final {work}.")
_ANSWER_FORMAT = _PLAIN_ANSWER_FORMAT + (" Only the text after `Answer:` is shown to the other "
                                         "players and the judges.")
_MATH_FORMAT = ("You may work it out first. Then put the problem, a short solution and the final "
                "answer inside one `\\boxed{...}`, e.g. `\\boxed{Problem: ... Solution: ... "
                "Answer: ...}`.")


def _answer_task(work: str, **fields) -> _TaskText:
  """A task whose public output is the text after `Answer:` (all but math)."""
  return _TaskText(work=work, output_format=_ANSWER_FORMAT.format(work=work),
                   plain_format=_PLAIN_ANSWER_FORMAT.format(work=work), **fields)


_TASKS = {
    "summarisation": _answer_task(
        doc="report",
        work="summary",
        instruction=("Write a faithful, self-contained summary of the report in about 150 to 300 "
                     "words: its purpose, its main findings and any recommendations. Do not "
                     "invent facts."),
        look_for=("a summary that skips, blurs or guesses at one part of the report while covering "
                  "the rest well; vague wording or invented details exactly where a span of the "
                  "report could have been hidden; facts, numbers or names that the report states "
                  "but one player never uses."),
    ),
    "facts": _TaskText(
        doc="fact sheet",
        work="summary",
        instruction="Restate every fact of the sheet in one line.",
        output_format="Write `Answer:` and then your summary.",
        plain_format="Write `Answer:` and then your summary.",
        look_for="a summary that leaves out a fact, gets one wrong or shows `*`.",
        # The reply starts where every sheet starts: without it SmolLM2-135M restated
        # about a fifth of the sheet's words, with it most (docs/results.md, spy game).
        prefill="Answer: Name:",
        brief=True,
    ),
    "writing": _answer_task(
        doc="writing prompt",
        work="story",
        instruction=("Write a short original story (about 200 to 400 words) that answers the "
                     "writing prompt: follow every element of the prompt and make it vivid."),
        look_for=("a story that ignores or bends one element of the prompt, stays generic where "
                  "the prompt is specific, or works around a detail it seems not to know; "
                  "compare each story with every element of the prompt."),
    ),
    "math": _TaskText(
        doc="document",
        work="math problem with its solution",
        instruction=("Design one well-posed math problem grounded in the document's content and "
                     "solve it. The problem must be answerable from the document's facts and have "
                     "one final answer."),
        output_format=_MATH_FORMAT + (" Only the content of your first complete `\\boxed{...}` "
                                      "is shown to the other players and the judges."),
        plain_format=_MATH_FORMAT,
        prefill="\\boxed{Problem:",
        look_for=("a problem that avoids the document's key quantities or definitions, uses a "
                  "number or relation the document does not support, or is oddly generic; check "
                  "each problem and answer against the document."),
    ),
}


def _pct(fraction: float) -> str:
  return f"{fraction:.0%}"


def _spy_handicap(config: SpyGameConfig) -> str:
  text = _TASKS[config.task]
  if config.spy_view == "none":
    return f"received no {text.doc} at all"
  return (f"received a copy in which one contiguous span of {_pct(config.mask_fraction)} of the "
          "characters is replaced by `*` characters")


def _brief_rules(config: SpyGameConfig) -> str:
  text = _TASKS[config.task]
  spy = ("gets no " + text.doc if config.spy_view == "none" else
         f"has {_pct(config.mask_fraction)} of its characters replaced by `*`")
  order = " Players write in turn; the spy writes last." if config.variant == "sequential" else ""
  return (f"Game: who is the spy, {config.num_players} players. All get the same {text.doc} "
          f"except the spy, whose copy {spy}.{order} Judges compare each {text.work} with the "
          f"full {text.doc} and vote for the spy.")


def _brief_role(config: SpyGameConfig, player: int, is_spy: bool, view: str | None) -> str:
  doc = _TASKS[config.task].doc
  if not is_spy:
    return f"You are Player {player}, not the spy: your {doc} is complete."
  if view is None:
    return f"You are Player {player}, the spy: you got no {doc}. Do not let that show."
  return (f"You are Player {player}, the spy: your {doc} has `*` where "
          f"{_pct(config.mask_fraction)} of it is hidden. Do not let that show.")


def _game_rules(config: SpyGameConfig, speaker: str) -> str:
  text = _TASKS[config.task]
  if text.brief:
    return _brief_rules(config)
  order = ("Players write one after another and see the earlier players' outputs; the spy "
           "writes last. " if config.variant == "sequential" else "")
  rounds = (f"Every player writes {config.rounds} times; later rounds see earlier outputs. "
            if config.rounds > 1 else "")
  return (
      f"{speaker} a game of \"who is the spy\" with {config.num_players} players. Every player "
      f"received the same {text.doc}, except one player, the spy, who {_spy_handicap(config)}. "
      f"Each player writes a {text.work}. {order}{rounds}Then judges read every player's "
      f"output next to the full {text.doc} and vote for the player they think is the spy. "
      "Civilians win when the judges find the spy and do not suspect them; the spy wins by "
      "blending in.")


def format_outputs(outputs: Sequence[tuple[int, int, str]], rounds: int) -> str:
  """`Player k: ...` lines for (round, player, public text) triples."""
  lines = []
  for round_, player, public in outputs:
    label = f"Player {player}" + (f" (round {round_})" if rounds > 1 else "")
    lines.append(f"{label}: {public or NO_ANSWER}")
  return "\n\n".join(lines)


def player_prompt(
    config: SpyGameConfig,
    *,
    player: int,
    is_spy: bool,
    view: str | None,
    earlier: Sequence[tuple[int, int, str]] = (),
) -> str:
  """The performing-phase prompt for one player.

  Args:
    config: the game.
    player: the player's number (1-based).
    is_spy: whether this prompt tells the player it is the spy.
    view: the player's copy of the input (masked for the spy), or None when
      the player gets no input.
    earlier: (round, player, public output) of the outputs this player sees.
  """
  text = _TASKS[config.task]
  if text.brief:
    role = _brief_role(config, player, is_spy, view)
  elif is_spy:
    if view is None:
      role = (f"You are Player {player} and you are the spy: you did not receive the {text.doc}. "
              f"Write a {text.work} that looks as if you had read it.")
    else:
      role = (f"You are Player {player} and you are the spy: your copy of the {text.doc} has one "
              f"contiguous span of {_pct(config.mask_fraction)} of its characters replaced by `*`. "
              f"Write a {text.work} that does not reveal that anything was missing.")
  else:
    role = (f"You are Player {player}. You are not the spy: your copy of the {text.doc} is "
            f"complete. Write a {text.work} that shows you know the whole {text.doc}, so the "
            "judges can tell you apart from the spy.")
  parts = [_game_rules(config, "You are playing"), role, f"Task: {text.instruction}"]
  if view is not None:
    parts.append(f"<{text.doc}>\n{view}\n</{text.doc}>")
  if earlier:
    parts.append("Outputs of the players so far:\n\n" + format_outputs(earlier, config.rounds))
  parts.append(f"Format: {text.output_format}")
  return "\n\n".join(parts)


def player_prefill(config: SpyGameConfig) -> str:
  """The start of a player's reply under `answer_prefill` (the task's format marker)."""
  return _TASKS[config.task].prefill


def plain_prompt(config: SpyGameConfig, document: str) -> str:
  """The task alone, outside the game: instruction, document, output format (no rules, no
  role), to measure the task skill the game trains."""
  text = _TASKS[config.task]
  return "\n\n".join([f"Task: {text.instruction}", f"<{text.doc}>\n{document}\n</{text.doc}>",
                       f"Format: {text.plain_format}"])


def detector_prompt(
    config: SpyGameConfig,
    *,
    reference: str,
    outputs: Sequence[tuple[int, int, str]],
) -> str:
  """The detection-phase prompt: the full reference and every public output."""
  text = _TASKS[config.task]
  if text.brief:
    return "\n\n".join([
        _brief_rules(config),
        f"The full {text.doc}:\n<{text.doc}>\n{reference}\n</{text.doc}>",
        f"Look for: {text.look_for}",
        format_outputs(outputs, config.rounds),
        _vote_instruction(config),
    ])
  return "\n\n".join([
      _game_rules(config, "You are the judge of"),
      f"The full, unmasked {text.doc}:\n<{text.doc}>\n{reference}\n</{text.doc}>",
      f"What to look for: {text.look_for}",
      "The players' outputs:\n\n" + format_outputs(outputs, config.rounds),
      _vote_instruction(config),
  ])


def vote_answers(num_players: int, abstain: bool = True) -> list[str]:
  """The box contents of every valid vote: the player numbers, then N/A (with `abstain`)."""
  return [str(k) for k in range(1, num_players + 1)] + (["N/A"] if abstain else [])


def _vote_instruction(config: SpyGameConfig) -> str:
  if _TASKS[config.task].brief:
    # Every box spelled out: with "`\\boxed{k}`, k from 1 to n" SmolLM2-135M abstained in
    # nine votes of ten, with the list in about one in five (docs/results.md, spy game).
    players = [f"`\\boxed{{{a}}}`" for a in vote_answers(config.num_players, abstain=False)]
    abstain = " (`\\boxed{N/A}` if you cannot tell)" if config.vote_abstain else ""
    return (f"Which player is the spy? Reply {', '.join(players[:-1])} or {players[-1]}"
            f"{abstain}.")
  if config.constrained_vote:  # The reply is the box alone: say so, with every answer.
    answers = ", ".join(f"`\\boxed{{{a}}}`"
                        for a in vote_answers(config.num_players, config.vote_abstain))
    return (f"Reply with your vote only, one of: {answers}. A number names the player you think "
            "is the spy" + ("; N/A means you cannot tell." if config.vote_abstain else "."))
  return (f"Reason briefly, then give your vote as `\\boxed{{k}}` with k the number (1 to "
          f"{config.num_players}) of the player you think is the spy, or `\\boxed{{N/A}}` if you "
          "cannot tell. Write exactly one `\\boxed{}`.")
