"""Single-turn RLVR: each prompt answered `group_size` times, rewarded by Python functions.

Per step: one policy call samples every prompt `group_size` times (one GRPO
group per prompt, group id = the prompt's index in the batch); the reward
functions score all completions at once (`rlsvr.rewards.calling.RewardSet`, TRL's
convention); the reward of a completion is the weighted sum of its functions'
rewards. An unscorable row (every function said None) is in a group of its own,
so it moves no baseline: with `unscorable = "zero_advantage"` (TRL 1.16's
behaviour) it is trained with advantage 0 (its tokens count in the loss
normaliser, its KL term applies; its reward counts as 0 in `reward/mean`), with
"drop" it is played but not trained. A step where every row is unscorable
fails (it would have nothing to learn from).
"""
from __future__ import annotations

import math
from typing import Any, Mapping, Sequence

from rlsvr.envs.base import Completion, EpisodeBatch, SampleFn, Trajectory
from rlsvr.envs.reward_fn import data
from rlsvr.envs.reward_fn.config import RewardFnConfig
from rlsvr.rewards.calling import RewardFunctionError, RewardSet, Scores, TrainerState

_RULE, _THIN = "=" * 100, "-" * 100
_SHOWN_CHARS = 2000  # A gold column in rollouts.txt is cut here (the JSONL keeps it whole).


class RewardFnEnv:
  """Plays reward-function steps; implements `rlsvr.envs.base.Environment`."""

  def __init__(self, config: RewardFnConfig, tokenizer: Any, max_steps: int = 0, *,
               chat_template_kwargs: Mapping[str, Any] | None = None):
    self.config = config
    self.tokenizer = tokenizer
    self.rewards = RewardSet(config.paths(), config.weights(), config.reward_timeout_s)
    self.rewards.start()  # The worker imports the functions' modules while the model loads.
    self.prompts = data.Prompts(config, tokenizer, chat_template_kwargs)
    self.max_steps = max_steps

  def state_dict(self) -> dict[str, Any]:
    return {}  # Stateless: the item stream's position is the experiment's.

  def load_state_dict(self, state: Mapping[str, Any]) -> None:
    del state

  def play_episodes(self, items: Sequence[Mapping[str, Any]], sample: SampleFn, rng: Any,
                    step: int) -> EpisodeBatch:
    del rng  # Sampling randomness lives in the sampler; prompts come in stream order.
    cfg, g = self.config, self.config.group_size
    prompts = [self.prompts.prompt(row) for row in items]
    prompt_ids = [self.prompts.encode(p) for p in prompts]
    completions = list(sample([ids for ids in prompt_ids for _ in range(g)],
                              max_new_tokens=cfg.max_new_tokens, **cfg.sampling))
    if len(completions) != len(items) * g:
      raise ValueError(f"sample returned {len(completions)} completions for "
                       f"{len(items) * g} prompts")
    texts = [cfg.answer_prefill + self.tokenizer.decode(list(c.ids), skip_special_tokens=True)
             for c in completions]
    row_prompts = [p for p in prompts for _ in range(g)]
    scores = self.rewards.score(
        prompts=row_prompts,
        completions=[t if isinstance(p, str) else [{"role": "assistant", "content": t}]
                     for p, t in zip(row_prompts, texts)],
        completion_ids=[c.ids for c in completions],
        columns=data.columns_of(items, g),
        trainer_state=TrainerState(global_step=step - 1, max_steps=self.max_steps))
    if scores.unscorable.all():
      raise RewardFunctionError(
          f"step {step}: every reward function returned None for every completion, so there "
          f"is nothing to train on; do the rows hold the columns {self.rewards.paths} read?")

    rows = []
    for k, c in enumerate(completions):
      unscorable = bool(scores.unscorable[k])
      rows.append(Trajectory(
          prompt_ids=list(prompt_ids[k // g]), completion_ids=list(c.ids),
          logprobs=list(c.logprobs), reward=float(scores.total[k]),
          # An unscorable row is alone in its group, so it moves no group's baseline.
          group_id=len(items) + k if unscorable else k // g, role="policy",
          trained=not (unscorable and cfg.unscorable == "drop"), finish_reason=c.finish_reason,
          max_new_tokens=cfg.max_new_tokens))
    records = [self._record(step, i, items[i], prompts[i], completions, texts, scores,
                            range(i * g, (i + 1) * g)) for i in range(len(items))]
    return EpisodeBatch(trajectories=rows, metrics=dict(scores.metrics),
                        record_text=format_record(records[0]) if records else "",
                        records=records)

  def _record(self, step: int, index: int, row: Mapping[str, Any], prompt: Any,
              completions: Sequence[Completion], texts: Sequence[str], scores: Scores,
              group: range) -> dict[str, Any]:
    answers = [dict(text=texts[r], reward=float(scores.total[r]),
                    rewards={n: None if math.isnan(v) else float(v)
                             for n, v in zip(scores.names, scores.per_func[r])},
                    unscorable=bool(scores.unscorable[r]), num_tokens=len(completions[r].ids),
                    finish_reason=completions[r].finish_reason,
                    extra=data.json_safe(scores.extra[r]))
               for r in group]
    gold = {k: v for k, v in row.items() if k != self.config.prompt_field}
    return dict(step=step, prompt_index=index, prompt=data.json_safe(prompt),
                columns=data.json_safe(gold), completions=answers)


def _prompt_text(prompt: Any) -> str:
  if isinstance(prompt, str):
    return prompt
  return "\n".join(f"[{m.get('role')}] {m.get('content')}" for m in prompt)


def format_record(record: Mapping[str, Any]) -> str:
  """The human-readable rollouts.txt block of one prompt's group."""
  lines = [_RULE, f"step {record['step']} | prompt {record['prompt_index']}", _THIN, "prompt:",
           _prompt_text(record["prompt"])]
  for name, value in record["columns"].items():
    shown = str(value)
    lines.append(f"{name}: {shown[:_SHOWN_CHARS]}{' ...' if len(shown) > _SHOWN_CHARS else ''}")
  for k, a in enumerate(record["completions"], 1):
    parts = " ".join(f"{n}={'None' if v is None else f'{v:.3g}'}" for n, v in a["rewards"].items())
    lines += [_THIN, f"completion {k}: reward={a['reward']:.3f} ({parts}) "
              f"tokens={a['num_tokens']} finish={a['finish_reason']}"
              + (" UNSCORABLE" if a["unscorable"] else ""), a["text"]]
  return "\n".join(lines + [_RULE]) + "\n"
