"""The spy game's records: one dict per game (JSONL) and the rollouts.txt text.

A record holds every fact of a game: step, phase, item, spy, the mask, each
player's prompt, output, public output and what went wrong with it, the
detection prompt, each detector's response, parsed vote (or why it is
invalid), correctness and reward, the vote counts and the performance
rewards. Rewards appear raw and after the role baseline ("reward").
"""
from __future__ import annotations

import json
from typing import Any, Mapping, Sequence

from rlsvr.envs.spy import played

_RULE = "=" * 100
_THIN = "-" * 100


def game_record(
    game: played.Game,
    step: int,
    phase: str,
    config: Any,
    perf_rewards: Sequence[float],
    baselines: Mapping[str, float],
    rows: Sequence[played.Row],
) -> dict[str, Any]:
  """The JSON-serialisable record of one played game; `config` is its `SpyGameConfig`,
  `rows` the game's rows, their rewards and baselines set."""
  players, detectors = [], []
  for r in rows:
    row, source = r.trajectory, r.source
    common = dict(role=row.role, finish_reason=row.finish_reason,
                  num_tokens=len(row.completion_ids), trained=row.trained,
                  reward_raw=r.raw_reward, reward=row.reward - row.baseline)
    if isinstance(source, played.Detector):
      parsed = source.parsed
      detectors.append(dict(detector=len(detectors) + 1, response=source.response,
                            vote=source.vote, status=parsed.status, box=parsed.box,
                            order=list(source.order), correct=source.vote == game.spy,
                            **common))
    else:
      players.append(dict(player=source.player, round=source.round, prompt=source.prompt,
                          output=source.text, public=source.public.text,
                          public_status=source.public.status, **common))
  votes = [d["vote"] for d in detectors]
  return dict(
      step=step, phase=phase, game=game.index, item_id=game.item_id, task=config.task,
      variant=config.variant, num_players=config.num_players, spy=game.spy,
      spy_view=config.spy_view,
      mask=None if game.mask is None else dict(start=game.mask.start, length=game.mask.length),
      reference=game.reference, players=players, detection_prompt=game.detection_prompt,
      detectors=detectors,
      vote_counts=[sum(v == k for v in votes if isinstance(v, int))
                   for k in range(1, config.num_players + 1)],
      perf_rewards=list(perf_rewards), baselines=dict(baselines))


def without_prompts(record: Mapping[str, Any]) -> dict[str, Any]:
  """A copy of `record` without the (large, rebuildable) prompts."""
  out = dict(record)
  out["players"] = [{k: v for k, v in p.items() if k != "prompt"} for p in record["players"]]
  out.pop("detection_prompt", None)
  return out


def _vote_text(vote) -> str:
  return "invalid" if vote is None else str(vote)


def format_game(record: Mapping[str, Any]) -> str:
  """The human-readable rollouts.txt block of one game."""
  mask = record["mask"]
  mask_text = (f"chars [{mask['start']}, {mask['start'] + mask['length']}) masked"
               if mask else f"spy view: {record['spy_view']}")
  lines = [
      _RULE,
      f"step {record['step']} | phase {record['phase']} | game {record['game']} "
      f"(item {record['item_id']}) | task {record['task']} | variant {record['variant']}",
      f"spy: Player {record['spy']} | {mask_text}",
      _RULE,
  ]
  for p in record["players"]:
    lines += [
        f"### Player {p['player']} (round {p['round']}, {p['role']}) prompt:",
        p.get("prompt", "(not recorded)"),
        f"### Player {p['player']} output ({p['num_tokens']} tokens, {p['finish_reason']}):",
        p["output"],
        f"### Player {p['player']} public output [{p['public_status']}]:",
        p["public"] or "(empty)",
        _THIN,
    ]
  lines += ["### Detection prompt (detector 1's order):",
            record.get("detection_prompt", "(not recorded)"), _THIN]
  for d in record["detectors"]:
    order = d.get("order") or []
    shown = (f", reads players {order} as 1..{len(order)}"
             if order != sorted(order) else "")
    lines += [
        f"### Detector {d['detector']} response ({d['num_tokens']} tokens, "
        f"{d['finish_reason']}{shown}):",
        d["response"],
        f">>> vote {_vote_text(d['vote'])} [{d['status']}] | correct {d['correct']} | "
        f"reward {d['reward_raw']:.4f} (after baseline {d['reward']:.4f})",
        _THIN,
    ]
  lines.append(f"vote counts: {record['vote_counts']}")
  for k, reward in enumerate(record["perf_rewards"], start=1):
    role = "spy" if k == record["spy"] else "civilian"
    lines.append(f"Player {k} ({role}): performance reward {reward:+.4f}")
  lines.append(f"baselines: {json.dumps(record['baselines'], sort_keys=True)}")
  return "\n".join(lines) + "\n"
