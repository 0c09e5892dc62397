"""The spy game as an `Environment`: parallel, sequential and no-spy variants.

One game per source item per step. Sampler calls are batched over games: the
parallel and no-spy variants make one call per round for all players of all
games, the sequential variant one call per turn; then one call for all
detectors of all games, who all judge the same game.

Rewards: `Trajectory.reward` is the raw reward and `Trajectory.baseline` the
role's EMA baseline (roles "spy", "civilian", "detector"), subtracted before
group normalisation; by default the EMA from before this step, option
`baseline_order="released"` the one updated with it (`mechanics.RoleBaselines`). The
EMA takes in a step's rewards once, in `finish_step`, from the rows the step trains
(the trainer calls it after dynamic sampling chose them).
A group whose raw rewards are all equal gets advantage 0 whatever the
baselines. `state_dict` holds the baselines for checkpoints.

Groups: the players of game g (all rounds) form group 2g, its detectors
group 2g + 1; with `detector_groups="prompt"` the detectors of each distinct
prompt (order) form their own group instead. Rows of the phase not trained this
step have `trained=False`.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Mapping, Sequence

import numpy as np

from rlsvr.envs.base import EpisodeBatch, SampleFn, Trajectory
from rlsvr.envs.spy import mechanics, played, prompts, records, scripted
from rlsvr.envs.spy.config import SpyGameConfig
from rlsvr.model.tokenizer import encode_chat

ROLES = ("spy", "civilian", "detector")


@dataclasses.dataclass(frozen=True)
class _PlayerPrompt:
  """A player's prompt, waiting for the sampler call of its turn."""

  game: played.Game
  player: int
  text: str
  ids: list[int]


def item_fields(item: Any, index: int) -> tuple[str, str]:
  """(id, text) of a source item: a str, a mapping with "text", or an object with `.text`."""
  if isinstance(item, str):
    return str(index), item
  if isinstance(item, Mapping):
    return str(item.get("id", index)), str(item["text"])
  return str(getattr(item, "id", index)), str(item.text)


class SpyGame:
  """Plays spy games; implements `rlsvr.envs.base.Environment`."""

  def __init__(
      self,
      config: SpyGameConfig,
      tokenizer: Any,
      *,
      chat_template_kwargs: Mapping[str, Any] | None = None,
      record_prompts: bool = False,
  ):
    """Args:
      config: the game.
      tokenizer: HF-like tokenizer with `apply_chat_template` and `decode`.
      chat_template_kwargs: extra arguments for `apply_chat_template`.
      record_prompts: keep every prompt in the JSONL records (large for long
        documents: prompts can be rebuilt from a record with `prompts`).
        The text record always shows its game's prompts.
    """
    self.config = config
    self.tokenizer = tokenizer
    self.chat_template_kwargs = dict(chat_template_kwargs or {})
    self.record_prompts = record_prompts
    self.baselines = mechanics.RoleBaselines(config.baseline_momentum, config.baseline_order)

  def state_dict(self) -> dict[str, Any]:
    return {"baselines": self.baselines.state_dict()}

  def load_state_dict(self, state: Mapping[str, Any]) -> None:
    self.baselines.load_state_dict(dict(state["baselines"]))

  def encode(self, text: str, prefill: str = "") -> list[int]:
    """Prompt ids: `text` as one user message through the chat template, then the
    start of the reply (`prefill`) after the assistant header."""
    ids = encode_chat(self.tokenizer, text, chat_template_kwargs=self.chat_template_kwargs)
    if prefill:
      ids += self.tokenizer.encode(prefill, add_special_tokens=False)
    return [int(t) for t in ids]

  def prefill(self, role: str) -> str:
    """The reply's forced start for "player" or "detector" (empty unless answer_prefill,
    or constrained_vote for detectors)."""
    if role == "detector" and (self.config.answer_prefill or self.config.constrained_vote):
      return "\\boxed{"
    return prompts.player_prefill(self.config) if self.config.answer_prefill else ""

  def decode(self, ids: Sequence[int]) -> str:
    return self.tokenizer.decode(list(ids), skip_special_tokens=True)

  def vote_choices(self) -> list[list[int]] | None:
    """Token ids of every valid vote's box end (`3}`, `N/A}`) under constrained_vote."""
    if not self.config.constrained_vote:
      return None
    return [self.tokenizer.encode(a + "}", add_special_tokens=False)
            for a in prompts.vote_answers(self.config.num_players, self.config.vote_abstain)]

  def detector_max_new_tokens(self) -> int:
    choices = self.vote_choices()
    return max(map(len, choices)) if choices else self.config.detector_max_new_tokens

  def _sample(self, sample: SampleFn, prompt_ids: list[list[int]], max_new_tokens: int,
              role: str = "player", **kwargs):
    completions = list(sample(prompt_ids, max_new_tokens=max_new_tokens,
                              **self.config.sampling_of(role), **kwargs))
    if len(completions) != len(prompt_ids):
      raise ValueError(f"sample returned {len(completions)} completions for {len(prompt_ids)} "
                       "prompts")
    return completions

  def _new_game(self, index: int, item: Any, rng: np.random.Generator,
                seat: int | None = None) -> played.Game:
    cfg = self.config
    item_id, text = item_fields(item, index)
    reference = mechanics.truncate_words(text, cfg.truncate_words)
    views: list[str | None] = [reference] * cfg.num_players
    if cfg.variant == "no_spy":
      return played.Game(index=index, item_id=item_id, reference=reference, spy=None,
                         views=views, mask=None)
    if cfg.variant == "sequential":
      spy = cfg.num_players
    elif seat is not None:
      spy = seat
    else:
      spy = int(rng.integers(1, cfg.num_players + 1))
    mask = None
    if cfg.spy_view == "masked":
      mask = mechanics.mask_span(reference, cfg.mask_fraction, rng)
      views[spy - 1] = mask.text
    else:
      views[spy - 1] = None
    return played.Game(index=index, item_id=item_id, reference=reference, spy=spy, views=views,
                       mask=mask)

  def _turn_order(self) -> list[list[int]]:
    """Players per sampler call, in order, over all rounds."""
    cfg = self.config
    players = list(range(1, cfg.num_players + 1))
    per_round = [[p] for p in players] if cfg.variant == "sequential" else [players]
    return [slot for _ in range(cfg.rounds) for slot in per_round]

  def _perform(self, games: list[played.Game], sample: SampleFn) -> None:
    cfg = self.config
    for call, slot in enumerate(self._turn_order()):
      round_ = call // (cfg.num_players if cfg.variant == "sequential" else 1) + 1
      pending = []
      for game in games:
        earlier = game.public_outputs()
        for player in slot:
          text = prompts.player_prompt(
              cfg, player=player, is_spy=game.spy == player, view=game.views[player - 1],
              earlier=earlier)
          pending.append(_PlayerPrompt(game=game, player=player, text=text,
                                       ids=self.encode(text, self.prefill("player"))))
      completions = self._sample(sample, [p.ids for p in pending], cfg.player_max_new_tokens)
      for p, completion in zip(pending, completions):
        output = self.prefill("player") + self.decode(completion.ids)
        p.game.turns.append(played.Turn(
            round=round_, player=p.player, prompt=p.text, prompt_ids=p.ids,
            completion=completion, text=output, public=mechanics.public_output(output, cfg.task)))

  def detector_orders(self) -> list[tuple[int, ...]]:
    """The players' order each detector of a game reads (`SpyGameConfig.detector_orders`)."""
    shifts = (range(self.config.rollout_n) if self.config.detector_orders == "rotated"
              else [0] * self.config.rollout_n)
    return [mechanics.rotated_order(self.config.num_players, shift) for shift in shifts]

  def _detector_group(self, game: int, num_games: int, order: int) -> int:
    """The group id of game `game`'s detectors reading its `order`-th distinct order; ids
    past the players' 2g (`SpyGameConfig.detector_groups`)."""
    if self.config.detector_groups == "game":
      return 2 * game + 1
    return 2 * num_games + game * self.config.num_players + order

  def _detect(self, games: list[played.Game], sample: SampleFn) -> None:
    cfg = self.config
    orders = self.detector_orders()
    prompt_ids = []
    for game in games:
      ids_of = {}
      for order in dict.fromkeys(orders):
        text = prompts.detector_prompt(cfg, reference=game.reference,
                                       outputs=game.public_outputs(order))
        ids_of[order] = self.encode(text, self.prefill("detector"))
        if not game.detection_prompt:  # The record shows the first detector's prompt.
          game.detection_prompt = text
      prompt_ids += [ids_of[order] for order in orders]
    choices = self.vote_choices()
    completions = self._sample(sample, prompt_ids, self.detector_max_new_tokens(), "detector",
                               **({"choices": choices} if choices else {}))
    for i, completion in enumerate(completions):
      game = games[i // cfg.rollout_n]
      response = self.prefill("detector") + self.decode(completion.ids)
      parsed = mechanics.parse_vote_detail(response, cfg.num_players, cfg.vote_pick)
      game.detectors.append(played.Detector(completion=completion, response=response,
                                            parsed=parsed, prompt_ids=prompt_ids[i],
                                            order=orders[i % cfg.rollout_n]))

  def play_episodes(
      self,
      items: Sequence[Any],
      sample: SampleFn,
      rng: np.random.Generator,
      step: int,
  ) -> EpisodeBatch:
    """Plays one game per item; see the module docstring for rewards and groups."""
    cfg = self.config
    phase = "clue" if cfg.variant == "no_spy" else mechanics.phase_at(
        step, cfg.training_phase, cfg.cycle_length)
    games = self._play_games(items, sample, rng)

    rows: list[played.Row] = []
    perf: list[list[float]] = []
    detector_budget = self.detector_max_new_tokens()
    player_temperature = cfg.sampling_of("player").get("temperature")
    detector_temperature = cfg.sampling_of("detector").get("temperature")
    order_index = {order: i for i, order in enumerate(dict.fromkeys(self.detector_orders()))}
    for game in games:
      rewards = mechanics.performance_rewards(game.votes(), game.spy, cfg.num_players, cfg.beta,
                                              cfg.lam)
      perf.append(rewards)
      for turn in game.turns:
        trajectory = played.trajectory(
            prompt_ids=turn.prompt_ids, completion=turn.completion, group=2 * game.index,
            role="spy" if turn.player == game.spy else "civilian",
            trained=phase == "clue" or cfg.joint, max_new_tokens=cfg.player_max_new_tokens,
            temperature=player_temperature)
        rows.append(played.Row(game=game, source=turn, trajectory=trajectory,
                               raw_reward=rewards[turn.player - 1]))
      for detector in game.detectors:
        trajectory = played.trajectory(
            prompt_ids=detector.prompt_ids, completion=detector.completion,
            group=self._detector_group(game.index, len(games), order_index[detector.order]),
            role="detector", trained=phase == "decision" or cfg.joint,
            max_new_tokens=detector_budget,
            temperature=detector_temperature)
        raw = mechanics.detection_reward(detector.vote, game.spy, cfg.detection_reward)
        rows.append(played.Row(game=game, source=detector, trajectory=trajectory, raw_reward=raw))

    # The EMA from before this step. It folds in once per step, from the rows the step
    # trains (`finish_step`), however many rounds dynamic sampling plays (DESIGN.md).
    baselines = self.baselines.current([r.trajectory.role for r in rows])
    for r in rows:
      r.trajectory.reward = r.raw_reward
      r.trajectory.baseline = baselines[r.trajectory.role]

    recs = [records.game_record(game, step, phase, cfg, perf[game.index], baselines,
                                [r for r in rows if r.game is game])
            for game in games]
    record_text = records.format_game(recs[0]) if recs else ""
    if not self.record_prompts:
      recs = [records.without_prompts(rec) for rec in recs]
    return EpisodeBatch(
        trajectories=[r.trajectory for r in rows],
        metrics=self._metrics(games, rows, phase, baselines),
        record_text=record_text,
        records=recs,
        labels={"phase": phase},
    )

  def finish_step(self, trained: Sequence[Trajectory]) -> None:
    """Folds the raw rewards of the rows the step trains into the role baselines, once per
    step; with order `released` their baselines become the updated EMA (update first,
    then subtract). The game records keep the EMA each game was played under."""
    baselines = self.baselines.for_batch([t.reward for t in trained], [t.role for t in trained])
    for t in trained:  # Unchanged under `pre_update`: the EMA they were played with.
      t.baseline = baselines[t.role]

  def perform(self, items: Sequence[Any], sample: SampleFn,
              rng: np.random.Generator) -> list[played.Game]:
    """One game per item with its players' turns played and no vote yet (what the
    detectors will read; `bench/spy_readout.py` trains the vote on such games)."""
    seats = (mechanics.stratified_seats(len(items), self.config.num_players, rng)
             if self.config.spy_seats == "stratified" else [None] * len(items))
    games = [self._new_game(i, item, rng, seat)
             for i, (item, seat) in enumerate(zip(items, seats))]
    self._perform(games, sample)
    return games

  def _play_games(self, items: Sequence[Any], sample: SampleFn,
                  rng: np.random.Generator) -> list[played.Game]:
    """Plays one game per item: players perform, detectors vote; the spy is known after."""
    games = self.perform(items, sample, rng)
    self._detect(games, sample)
    for game in games:
      if game.spy is None:
        game.spy = mechanics.most_voted(game.votes(),
                                        self.config.num_players)
    return games

  def evaluate(self, items: Sequence[Any], sample: SampleFn, rng: np.random.Generator,
               games_per_call: int = 0) -> dict[str, float]:
    """Plays one game per item and scores it without touching the training state.

    `games_per_call` > 0 plays the games that many at a time (a training step's
    count reuses its compiled sampler shapes); 0: all at once.

    Per game: the detectors' accuracy (votes for the spy / votes), their
    invalid and abstention rates, the share of the game's valid votes that
    went to the spy and to the average civilian (chance: 1 / num_players each),
    and the vote's verdict: whether the spy got strictly the most valid votes
    (`caught`; chance 1 / num_players when the votes are spread at random).
    Next to them, what the game's outputs carry: the scripted detectors'
    accuracy on the same games (`ceiling/*`, `rlsvr.envs.spy.scripted`; not for
    the no-spy variant, which has no spy to find), and the share of the
    document's content words the spy's and the civilians' outputs use
    (`recall/*`). Then the task outside the game: every document with the
    plain task prompt (no game, no role), `num_players` samples each, and the
    share of its content words they use (`plain_recall`). Means over games (or
    samples) with their standard errors (`k/se`).
    """
    from rlsvr import heldout  # noqa: PLC0415

    n = self.config.num_players
    acc, invalid, abstain, spy_share, civ_share, caught = [], [], [], [], [], []
    chunk = games_per_call or max(len(items), 1)
    games = [g for i in range(0, len(items), chunk)
             for g in self._play_games(items[i:i + chunk], sample, rng)]
    for game in games:
      votes = game.votes()
      acc.append(float(np.mean([v == game.spy for v in votes])))
      invalid.append(float(np.mean([v is None for v in votes])))
      abstain.append(float(np.mean([v == mechanics.ABSTAIN for v in votes])))
      counts = mechanics.vote_counts(votes, n)
      caught.append(float(mechanics.spy_caught(votes, game.spy, n)))
      if sum(counts):
        spy_share.append(counts[game.spy - 1] / sum(counts))
        civ_share.append((1 - spy_share[-1]) / (n - 1))
    out = {**heldout.with_se("detect_acc", acc), **heldout.with_se("invalid_vote_rate", invalid),
           **heldout.with_se("abstain_rate", abstain),
           **heldout.with_se("vote_share_spy", spy_share),
           **heldout.with_se("vote_share_civilian", civ_share),
           "chance_detect_acc": 1.0 / n}
    if games and self.config.variant != "no_spy":  # Its "spy" is the most voted by rule.
      out.update(heldout.with_se("caught", caught))
      per_game = [scripted.game_accuracies(g.reference, g.player_texts(n), g.spy) for g in games]
      for name in per_game[0]:
        out.update(heldout.with_se(f"ceiling/{name}", [a[name] for a in per_game]))
    for role in ("spy", "civilian"):
      values = [scripted.recall(g.reference, t.public.text) for g in games for t in g.turns
                if (t.player == g.spy) == (role == "spy")]
      if values:
        out.update(heldout.with_se(f"recall/{role}", values))
    plain = self.plain_outputs([g.reference for g in games], sample, chunk)
    out.update(heldout.with_se("plain_recall", [scripted.recall(ref, text) for ref, text in plain]))
    return out

  def plain_outputs(self, references: Sequence[str], sample: SampleFn,
                    documents_per_call: int) -> list[tuple[str, str]]:
    """(reference, public output) of `num_players` samples per reference with the plain
    task prompt (`prompts.plain_prompt`), `documents_per_call` references per call (rows
    as in a players' call)."""
    n, prefill = self.config.num_players, self.prefill("player")
    out = []
    for i in range(0, len(references), max(documents_per_call, 1)):
      chunk = references[i:i + documents_per_call]
      ids = [self.encode(prompts.plain_prompt(self.config, r), prefill) for r in chunk]
      completions = self._sample(sample, [p for p in ids for _ in range(n)],
                                 self.config.player_max_new_tokens)
      for j, completion in enumerate(completions):
        text = prefill + self.decode(completion.ids)
        out.append((chunk[j // n], mechanics.public_output(text, self.config.task).text))
    return out

  def _metrics(self, games: list[played.Game], rows: list[played.Row], phase: str,
               baselines: Mapping[str, float]) -> dict[str, float]:
    votes = [(d.vote, game.spy) for game in games for d in game.detectors]
    valid = [(v, s) for v, s in votes if isinstance(v, int)]
    # The numbers as written: a detector stuck on one position shows here (docs/results.md).
    shown = [d.parsed.vote for game in games for d in game.detectors
             if isinstance(d.parsed.vote, int)]
    n_votes = max(len(votes), 1)
    metrics = {
        "spy/games": float(len(games)),
        "spy/phase_decision": float(phase == "decision"),
        "spy/detect_acc": sum(v == s for v, s in votes) / n_votes,
        "spy/abstain_rate": sum(v == mechanics.ABSTAIN for v, _ in votes) / n_votes,
        "spy/invalid_vote_rate": sum(v is None for v, _ in votes) / n_votes,
        # Among valid votes only; 0 when a step has none.
        "spy/votes_for_spy": sum(v == s for v, s in valid) / max(len(valid), 1),
        "spy/top_position_share": float(max(np.bincount(shown)) / len(shown)) if shown else 0.0,
        "spy/spy_most_voted": float(np.mean([_spy_strictly_most_voted(g, self.config.num_players)
                                             for g in games])) if games else 0.0,
        "spy/player_format_ok": float(np.mean([t.public.ok for g in games for t in g.turns]))
                                if games else 0.0,
    }
    for role in ROLES:
      role_rows = [r for r in rows if r.trajectory.role == role]
      if not role_rows:
        continue
      name = "detection_reward" if role == "detector" else f"perf_reward_{role}"
      metrics[f"spy/{name}"] = float(np.mean([r.raw_reward for r in role_rows]))
      metrics[f"spy/baseline/{role}"] = baselines[role]
      metrics[f"spy/response_length/{role}"] = float(np.mean(
          [len(r.trajectory.completion_ids) for r in role_rows]))
      metrics[f"spy/clip_ratio/{role}"] = float(np.mean(
          [r.trajectory.finish_reason == "length" for r in role_rows]))
    return metrics


def _spy_strictly_most_voted(game: played.Game, num_players: int) -> bool:
  counts = mechanics.vote_counts(game.votes(), num_players)
  spy_count = counts[game.spy - 1]
  return spy_count > 0 and all(c < spy_count for k, c in enumerate(counts) if k != game.spy - 1)
